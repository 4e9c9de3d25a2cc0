//! A box-filtered mip pyramid of an 8-bit RGB image and its footprint sampler (the filter of
//! [`super`]'s module doc).

use rayon::prelude::*;

/// Most samples one footprint averages (its longest axis over its shortest, capped). Near a
/// panorama's poles a view pixel's footprint spans hundreds of times more longitude than
/// latitude (a whole turn at the pole itself); so many samples there keep the latitude sharp
/// (a 256th of a turn is 1.4°), and the few pixels that need them cost little.
const MAX_SAMPLES: usize = 256;

/// One level: `width x height` RGB pixels, row-major, and its size over the full
/// resolution's (the factor a full-resolution position is scaled by).
#[derive(Debug, Clone)]
struct Level {
    width: usize,
    height: usize,
    scale: [f32; 2],
    data: Vec<u8>,
}

/// How one footprint is sampled ([`Pyramid::footprint_taps`]): `count` trilinear samples at
/// `level`, spread evenly over `step` (the footprint's longer axis, full-resolution pixels)
/// about its centre.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FootprintTaps {
    /// The longer axis, full-resolution pixels.
    pub step: [f32; 2],
    /// The mip level (fractional: trilinear).
    pub level: f32,
    /// Samples along `step`.
    pub count: u32,
}

/// An 8-bit RGB image and its box-filtered halvings down to one pixel. Level `k + 1` averages
/// 2x2 pixels of level `k` (a pixel past an odd edge repeats the edge, or the first column
/// when the image wraps around horizontally).
#[derive(Debug, Clone)]
pub struct Pyramid {
    levels: Vec<Level>,
    /// Whether x wraps around (a panorama's longitude); else it stops at the edge.
    wrap_x: bool,
}

impl Pyramid {
    /// The pyramid of `data` (`height * width * 3` bytes, RGB, top row first).
    ///
    /// # Panics
    /// When `data` is not `width * height * 3` bytes or the image is empty (callers check both).
    pub fn new(width: usize, height: usize, data: Vec<u8>, wrap_x: bool) -> Pyramid {
        assert!(width > 0 && height > 0 && data.len() == width * height * 3);
        let mut levels = vec![Level {
            width,
            height,
            scale: [1.0, 1.0],
            data,
        }];
        while let Some(last) = levels.last().filter(|l| l.width > 1 || l.height > 1) {
            let mut next = halve(last, wrap_x);
            next.scale = [
                next.width as f32 / width as f32,
                next.height as f32 / height as f32,
            ];
            levels.push(next);
        }
        Pyramid { levels, wrap_x }
    }

    /// The full-resolution width, pixels.
    pub fn width(&self) -> usize {
        self.levels[0].width
    }

    /// The full-resolution height, pixels.
    pub fn height(&self) -> usize {
        self.levels[0].height
    }

    /// The full-resolution pixels.
    pub fn pixels(&self) -> &[u8] {
        &self.levels[0].data
    }

    /// Bytes held by every level.
    pub fn byte_len(&self) -> usize {
        self.levels.iter().map(|l| l.data.len()).sum()
    }

    /// The average colour (0-255 per channel) over the footprint centred at `(u, v)` and
    /// spanned by `a` and `b` (full-resolution pixel units: the image positions one output
    /// pixel to the right and one down move by `a` and `b`): samples along the footprint's
    /// longer principal axis, at the level of its shorter one.
    pub fn sample_footprint(&self, u: f32, v: f32, a: [f32; 2], b: [f32; 2]) -> [f32; 3] {
        self.sample_taps(u, v, &self.footprint_taps(a, b))
    }

    /// How [`Pyramid::sample_footprint`] samples a footprint spanned by `a` and `b`, wherever
    /// it lies (for a caller that samples many images through the same footprints).
    pub fn footprint_taps(&self, a: [f32; 2], b: [f32; 2]) -> FootprintTaps {
        footprint_taps(a, b, self.width(), self.height())
    }

    /// The mean of `taps`' samples about `(u, v)`.
    pub fn sample_taps(&self, u: f32, v: f32, taps: &FootprintTaps) -> [f32; 3] {
        if taps.count == 1 {
            return self.trilinear(u, v, taps.level);
        }
        let mut sum = [0.0f32; 3];
        let count = taps.count as f32;
        for k in 0..taps.count {
            let t = (k as f32 + 0.5) / count - 0.5;
            let s = self.trilinear(u + t * taps.step[0], v + t * taps.step[1], taps.level);
            for c in 0..3 {
                sum[c] += s[c];
            }
        }
        sum.map(|s| s / count)
    }

    /// Bilinear samples of the two levels around `level`, blended by its fraction.
    fn trilinear(&self, u: f32, v: f32, level: f32) -> [f32; 3] {
        let last = self.levels.len() - 1;
        let below = (level as usize).min(last);
        let fraction = level - below as f32;
        let fine = self.bilinear(below, u, v);
        if below == last || fraction <= 0.0 {
            return fine;
        }
        let coarse = self.bilinear(below + 1, u, v);
        let mut out = fine;
        for c in 0..3 {
            out[c] += (coarse[c] - fine[c]) * fraction;
        }
        out
    }

    /// The bilinear sample of level `index` at full-resolution position `(u, v)`.
    fn bilinear(&self, index: usize, u: f32, v: f32) -> [f32; 3] {
        let level = &self.levels[index];
        let (w, h) = (level.width as i64, level.height as i64);
        // Continuous position in this level's pixels, relative to pixel centres.
        let x = u * level.scale[0] - 0.5;
        let y = v * level.scale[1] - 0.5;
        let (x0, y0) = (floor(x), floor(y));
        let (fx, fy) = (x - x0 as f32, y - y0 as f32);
        let (c0, c1) = if self.wrap_x {
            (wrap(x0, w), wrap(x0 + 1, w))
        } else {
            (x0.clamp(0, w - 1), (x0 + 1).clamp(0, w - 1))
        };
        let (r0, r1) = (y0.clamp(0, h - 1), (y0 + 1).clamp(0, h - 1));
        let (c0, c1, r0, r1) = (c0 as usize, c1 as usize, r0 as usize, r1 as usize);
        let stride = level.width;
        let (top, bottom) = (
            &level.data[3 * r0 * stride..3 * (r0 + 1) * stride],
            &level.data[3 * r1 * stride..3 * (r1 + 1) * stride],
        );
        let (p00, p01) = (&top[3 * c0..3 * c0 + 3], &top[3 * c1..3 * c1 + 3]);
        let (p10, p11) = (&bottom[3 * c0..3 * c0 + 3], &bottom[3 * c1..3 * c1 + 3]);
        let mut out = [0.0f32; 3];
        for c in 0..3 {
            let t = f32::from(p00[c]) + (f32::from(p01[c]) - f32::from(p00[c])) * fx;
            let b = f32::from(p10[c]) + (f32::from(p11[c]) - f32::from(p10[c])) * fx;
            out[c] = t + (b - t) * fy;
        }
        out
    }
}

/// `⌊x⌋` for the positions a sampler sees (well inside ±2^31): through f64, whose 52 bits hold
/// an f32's position exactly, and a truncation (cheaper than `floorf` without SSE4.1).
fn floor(x: f32) -> i64 {
    let x = f64::from(x);
    let t = x as i64;
    if (t as f64) > x { t - 1 } else { t }
}

/// Column `i` wrapped into `0..w`: positions stray at most a turn past either edge.
fn wrap(i: i64, w: i64) -> i64 {
    if i < 0 {
        if i >= -w { i + w } else { i.rem_euclid(w) }
    } else if i >= w {
        if i < 2 * w { i - w } else { i.rem_euclid(w) }
    } else {
        i
    }
}

/// [`Pyramid::footprint_taps`] for any image of `width x height` pixels.
pub fn footprint_taps(a: [f32; 2], b: [f32; 2], width: usize, height: usize) -> FootprintTaps {
    let limit = width.max(height) as f32;
    let (axis, major, minor) = principal_axes(a, b);
    // A footprint wider than the whole image (a pole's turn of longitude) averages it once.
    let major = major.min(limit);
    let count = if major <= 1.0 {
        1
    } else {
        ((major / minor.max(1e-6)).round() as usize).clamp(1, MAX_SAMPLES)
    };
    let texel = (major / count as f32).max(minor);
    FootprintTaps {
        step: [axis[0] * major, axis[1] * major],
        level: if texel > 1.0 { texel.log2() } else { 0.0 },
        count: count as u32,
    }
}

/// The footprint `J = [a b]`'s principal axes: the unit direction of its longer one and the
/// two lengths (the singular values of `J`, from the eigenvalues of `J Jᵀ`). Two long but
/// nearly parallel columns (a view pixel at a pole, whose x and y both turn the longitude)
/// make one long axis and one short one.
fn principal_axes(a: [f32; 2], b: [f32; 2]) -> ([f32; 2], f32, f32) {
    let m00 = a[0] * a[0] + b[0] * b[0];
    let m01 = a[0] * a[1] + b[0] * b[1];
    let m11 = a[1] * a[1] + b[1] * b[1];
    let half_trace = 0.5 * (m00 + m11);
    let spread = (0.25 * (m00 - m11) * (m00 - m11) + m01 * m01).sqrt();
    let (large, small) = (half_trace + spread, (half_trace - spread).max(0.0));
    let axis = if m01.abs() > 1e-12 * (m00 + m11) {
        let (x, y) = (large - m11, m01);
        let norm = x.hypot(y);
        [x / norm, y / norm]
    } else if m00 >= m11 {
        [1.0, 0.0]
    } else {
        [0.0, 1.0]
    };
    (axis, large.sqrt(), small.sqrt())
}

/// The next level of `level`: each pixel the mean of a 2x2 block, rounded.
fn halve(level: &Level, wrap_x: bool) -> Level {
    let (w, h) = (level.width, level.height);
    let (nw, nh) = (w.div_ceil(2), h.div_ceil(2));
    let mut data = vec![0u8; nw * nh * 3];
    let src = &level.data;
    data.par_chunks_mut(nw * 3)
        .enumerate()
        .for_each(|(j, row)| {
            let (r0, r1) = (2 * j, (2 * j + 1).min(h - 1));
            let (top, bottom) = (
                &src[3 * r0 * w..3 * (r0 + 1) * w],
                &src[3 * r1 * w..3 * (r1 + 1) * w],
            );
            for (i, out) in row.chunks_exact_mut(3).enumerate() {
                let c0 = 2 * i;
                let c1 = match 2 * i + 1 {
                    c if c < w => c,
                    _ if wrap_x => 0,
                    _ => w - 1,
                };
                for c in 0..3 {
                    let sum = u32::from(top[3 * c0 + c])
                        + u32::from(top[3 * c1 + c])
                        + u32::from(bottom[3 * c0 + c])
                        + u32::from(bottom[3 * c1 + c]);
                    out[c] = ((sum + 2) / 4) as u8;
                }
            }
        });
    Level {
        width: nw,
        height: nh,
        scale: [1.0, 1.0],
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constant(width: usize, height: usize, rgb: [u8; 3]) -> Vec<u8> {
        rgb.iter()
            .copied()
            .cycle()
            .take(width * height * 3)
            .collect()
    }

    #[test]
    fn levels_halve_down_to_one_pixel_and_keep_the_mean() {
        let pyramid = Pyramid::new(12, 5, constant(12, 5, [10, 200, 37]), true);
        let sizes: Vec<(usize, usize)> =
            pyramid.levels.iter().map(|l| (l.width, l.height)).collect();
        assert_eq!(sizes, vec![(12, 5), (6, 3), (3, 2), (2, 1), (1, 1)]);
        for level in &pyramid.levels {
            assert!(level.data.chunks(3).all(|p| p == [10, 200, 37]));
        }
    }

    #[test]
    fn a_pixel_centre_samples_that_pixel() {
        let data: Vec<u8> = (0..4 * 3 * 3).map(|i| (7 * i) as u8).collect();
        let pyramid = Pyramid::new(4, 3, data.clone(), false);
        let s = pyramid.sample_footprint(2.5, 1.5, [1.0, 0.0], [0.0, 1.0]);
        let i = 3 * (4 + 2);
        assert_eq!(s, [0, 1, 2].map(|c| f32::from(data[i + c])));
    }

    #[test]
    fn x_wraps_around_or_stops_at_the_edge() {
        // Left column black, right column white: between them (at u = 0) the wrapped sample
        // is half grey, the clamped one black.
        let mut data = vec![0u8; 4 * 2 * 3];
        for r in 0..2 {
            for c in 0..3 {
                data[3 * (r * 4 + 3) + c] = 255;
            }
        }
        let wrapped = Pyramid::new(4, 2, data.clone(), true);
        let clamped = Pyramid::new(4, 2, data, false);
        let unit = ([1.0, 0.0], [0.0, 1.0]);
        assert_eq!(
            wrapped.sample_footprint(0.0, 1.0, unit.0, unit.1),
            [127.5; 3]
        );
        assert_eq!(clamped.sample_footprint(0.0, 1.0, unit.0, unit.1), [0.0; 3]);
    }

    #[test]
    fn floors_and_wraps() {
        for x in [-3.5f32, -1.0, -0.25, 0.0, 0.75, 1.0, 7.999, 123_456.7] {
            assert_eq!(floor(x), x.floor() as i64, "{x}");
        }
        for i in [-25, -10, -1, 0, 5, 9, 10, 19, 20, 35] {
            assert_eq!(wrap(i, 10), i.rem_euclid(10), "{i}");
        }
    }

    #[test]
    fn principal_axes_of_a_footprint() {
        let (axis, major, minor) = principal_axes([3.0, 0.0], [0.0, 2.0]);
        assert_eq!((axis, major, minor), ([1.0, 0.0], 3.0, 2.0));
        // Two long, nearly opposite columns: one long axis along them, one short across.
        let (axis, major, minor) = principal_axes([-163.0, -2.4], [163.0, -2.4]);
        assert!(
            (axis[0].abs() - 1.0).abs() < 1e-6 && axis[1].abs() < 1e-3,
            "{axis:?}"
        );
        assert!((major - 163.0 * 2f32.sqrt()).abs() < 0.1, "{major}");
        assert!((minor - 2.4 * 2f32.sqrt()).abs() < 0.01, "{minor}");
        let (axis, major, minor) = principal_axes([1.0, 1.0], [-1.0, 1.0]);
        assert!((major - 2f32.sqrt()).abs() < 1e-6 && (minor - 2f32.sqrt()).abs() < 1e-6);
        assert!((axis[0].hypot(axis[1]) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_wide_footprint_averages_a_fine_pattern_instead_of_aliasing() {
        // One-pixel stripes: a footprint 8 pixels wide sees their mean wherever it lands,
        // a point sample sees black or white.
        let (w, h) = (256, 64);
        let data: Vec<u8> = (0..w * h)
            .flat_map(|i| [if i % 2 == 0 { 0 } else { 255 }; 3])
            .collect();
        let pyramid = Pyramid::new(w, h, data, true);
        for k in 0..40 {
            let u = 3.0 + 5.37 * k as f32;
            let wide = pyramid.sample_footprint(u, 30.0, [8.0, 0.0], [0.0, 8.0])[0];
            assert!((wide - 127.5).abs() < 8.0, "u {u}: {wide}");
            // Anisotropic: 8 pixels along x, one along y.
            let thin = pyramid.sample_footprint(u, 30.0, [8.0, 0.0], [0.0, 1.0])[0];
            assert!((thin - 127.5).abs() < 8.0, "u {u}: {thin}");
        }
        let point = pyramid.sample_footprint(4.5, 30.0, [1.0, 0.0], [0.0, 1.0])[0];
        assert_eq!(point, 0.0);
    }
}
