//! The tile rasterizer on the CPU: rayon, one independent task per tile, generic over `f32` /
//! `f64` (`f64` is what the finite-difference gradient checks run on).
//!
//! The forward renders each tile into its own buffer and copies the tiles into the image; the
//! backward accumulates each tile's per-Gaussian partial sums in a buffer of its own and adds
//! the buffers up in tile order, so every result is bit-identical whatever the thread count.

// `!(a >= b)` is used on purpose: it is true when either side is NaN, so NaN is skipped.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use rayon::prelude::*;

use super::RasterError;
use crate::project::cpu::TILE_SIZE;
use crate::real::Real;

/// Below this alpha a Gaussian is skipped at a pixel.
const MIN_ALPHA: f64 = 1.0 / 255.0;

/// Alpha is clamped to this, so that the transmittance never reaches zero.
const MAX_ALPHA: f64 = 0.999;

/// A pixel stops before the Gaussian that would take its transmittance to this or below.
const MIN_TRANSMITTANCE: f64 = 1e-4;

/// Row-major splats to rasterize (shapes as in the [op contract](super)).
#[derive(Clone, Copy, Debug)]
pub struct RasterArrays<'a, T> {
    /// `[N, 2]`, pixels.
    pub xy: &'a [T],
    /// `[N]`
    pub depth: &'a [T],
    /// `[N, 3]`, `(a, b, c)`.
    pub conic: &'a [T],
    /// `[N, 3]`
    pub color: &'a [T],
    /// `[N]`
    pub opacity: &'a [T],
}

/// The Gaussians of every tile, front to back, as CSR. Made by [`bin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bins {
    width: u32,
    height: u32,
    tiles_x: u32,
    tiles_y: u32,
    gaussians: usize,
    offsets: Vec<usize>,
    ids: Vec<u32>,
}

impl Bins {
    /// Bins from their CSR arrays (as [`Bins::offsets`] and [`Bins::ids`] return them), for
    /// `gaussians` splats in a `width x height` image; `None` when the arrays are inconsistent.
    pub fn from_csr(
        width: u32,
        height: u32,
        gaussians: usize,
        offsets: Vec<usize>,
        ids: Vec<u32>,
    ) -> Option<Self> {
        let tiles_x = width.div_ceil(TILE_SIZE);
        let tiles_y = height.div_ceil(TILE_SIZE);
        let tiles = tiles_x as usize * tiles_y as usize;
        let consistent = offsets.len() == tiles + 1
            && offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets[tiles] <= ids.len()
            && ids.iter().all(|&i| (i as usize) < gaussians);
        consistent.then_some(Bins {
            width,
            height,
            tiles_x,
            tiles_y,
            gaussians,
            offsets,
            ids,
        })
    }

    /// Image width, pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Image height, pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Tiles per row, `ceil(width / 16)`.
    pub fn tiles_x(&self) -> u32 {
        self.tiles_x
    }

    /// Tiles per column, `ceil(height / 16)`.
    pub fn tiles_y(&self) -> u32 {
        self.tiles_y
    }

    /// `[tiles + 1]`: tile `t`'s Gaussians are `ids[offsets[t]..offsets[t + 1]]`.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// `[offsets[tiles]]`: Gaussian indices, each tile's front to back.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The Gaussians of tile `tile` (row-major), front to back; empty past the last tile.
    pub fn tile(&self, tile: usize) -> &[u32] {
        match (self.offsets.get(tile), self.offsets.get(tile + 1)) {
            (Some(&lo), Some(&hi)) => &self.ids[lo..hi],
            _ => &[],
        }
    }

    fn tile_count(&self) -> usize {
        self.tiles_x as usize * self.tiles_y as usize
    }

    fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Tile `t`'s pixel ranges: columns `x0..x1`, rows `y0..y1`.
    fn tile_pixels(&self, t: usize) -> (usize, usize, usize, usize) {
        let size = TILE_SIZE as usize;
        let (tx, ty) = (t % self.tiles_x as usize, t / self.tiles_x as usize);
        let (x0, y0) = (tx * size, ty * size);
        (
            x0,
            (x0 + size).min(self.width as usize),
            y0,
            (y0 + size).min(self.height as usize),
        )
    }
}

/// Row-major rasterization outputs (`H = height`, `W = width`).
#[derive(Clone, Debug, PartialEq)]
pub struct RasterOutputs<T> {
    /// `[H, W, 3]`
    pub rgb: Vec<T>,
    /// `[H, W]`, `1 - T_final`.
    pub alpha: Vec<T>,
    /// `[H, W]`, alpha-weighted depth (not normalised).
    pub depth: Vec<T>,
    /// `[H, W]`, entries of the tile's list the pixel went through.
    pub last: Vec<u32>,
    /// `[H, W]`, `T_final`.
    pub transmittance: Vec<T>,
}

impl<T> RasterOutputs<T> {
    /// What the backward replays from.
    pub fn replay(&self) -> ReplayState<'_, T> {
        ReplayState {
            last: &self.last,
            transmittance: &self.transmittance,
        }
    }
}

/// The part of the forward's outputs the backward replays from.
#[derive(Clone, Copy, Debug)]
pub struct ReplayState<'a, T> {
    /// `[H, W]`, entries of the tile's list each pixel went through.
    pub last: &'a [u32],
    /// `[H, W]`, `T_final`.
    pub transmittance: &'a [T],
}

/// Gradients of a scalar loss with respect to the images (same shapes).
#[derive(Clone, Copy, Debug)]
pub struct RasterOutputGrads<'a, T> {
    /// `[H, W, 3]`
    pub rgb: &'a [T],
    /// `[H, W]`
    pub alpha: &'a [T],
    /// `[H, W]`
    pub depth: &'a [T],
}

/// Gradients of a scalar loss with respect to the splats (same shapes as the inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct RasterGrads<T> {
    /// `[N, 2]`
    pub xy: Vec<T>,
    /// `[N, 3]`
    pub conic: Vec<T>,
    /// `[N, 3]`
    pub color: Vec<T>,
    /// `[N]`
    pub opacity: Vec<T>,
    /// `[N]`
    pub depth: Vec<T>,
    /// `[N]`: `sum` over pixels of `|dL_pixel / dxy|`, the Euclidean norm of each pixel's
    /// contribution to the `xy` gradient (a densification statistic, not a gradient).
    pub xy_abs: Vec<T>,
}

fn check_len(
    name: &'static str,
    got: usize,
    expected: usize,
    shape: &'static str,
) -> Result<(), RasterError> {
    if got == expected {
        Ok(())
    } else {
        Err(RasterError::Length {
            name,
            got,
            expected,
            shape,
        })
    }
}

/// Half-open tile index range of `[centre - radius, centre + radius]`, clipped to `tiles`;
/// `None` when empty (or NaN).
fn tile_span(centre: f64, radius: f64, tiles: u32) -> Option<(u32, u32)> {
    let tile = f64::from(TILE_SIZE);
    let lo = ((centre - radius) / tile).floor().max(0.0);
    let hi = ((centre + radius) / tile).ceil().min(f64::from(tiles));
    // Both are integers in `[0, tiles]` when `hi > lo`, so the casts are exact.
    (hi > lo).then_some((lo as u32, hi as u32))
}

/// Bins the splats of `xy` `[N, 2]`, `depth` `[N]`, `radius` `[N, 2]` into the tiles of a
/// `width x height` image (see [binning](super#binning)).
pub fn bin<T: Real>(
    xy: &[T],
    depth: &[T],
    radius: &[u32],
    width: u32,
    height: u32,
) -> Result<Bins, RasterError> {
    let n = depth.len();
    check_len("xy", xy.len(), 2 * n, "[N, 2]")?;
    check_len("radius", radius.len(), 2 * n, "[N, 2]")?;
    if width == 0 || height == 0 {
        return Err(RasterError::EmptyImage { width, height });
    }
    if u32::try_from(n).is_err() {
        return Err(RasterError::TooMany(n));
    }
    let tiles_x = width.div_ceil(TILE_SIZE);
    let tiles_y = height.div_ceil(TILE_SIZE);
    let rects: Vec<Option<[u32; 4]>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (rx, ry) = (radius[2 * i], radius[2 * i + 1]);
            if rx == 0 && ry == 0 {
                return None;
            }
            let (x0, x1) = tile_span(xy[2 * i].to_f64(), f64::from(rx), tiles_x)?;
            let (y0, y1) = tile_span(xy[2 * i + 1].to_f64(), f64::from(ry), tiles_y)?;
            Some([x0, x1, y0, y1])
        })
        .collect();
    let tiles = tiles_x as usize * tiles_y as usize;
    let mut offsets = vec![0usize; tiles + 1];
    for [x0, x1, y0, y1] in rects.iter().flatten() {
        for ty in *y0..*y1 {
            for tx in *x0..*x1 {
                offsets[ty as usize * tiles_x as usize + tx as usize + 1] += 1;
            }
        }
    }
    for t in 0..tiles {
        offsets[t + 1] += offsets[t];
    }
    let mut cursor = offsets.clone();
    let mut ids = vec![0u32; offsets[tiles]];
    for (i, rect) in rects.iter().enumerate() {
        let Some([x0, x1, y0, y1]) = *rect else {
            continue;
        };
        for ty in y0..y1 {
            for tx in x0..x1 {
                let t = ty as usize * tiles_x as usize + tx as usize;
                // `n` fits in `u32` (checked above).
                ids[cursor[t]] = i as u32;
                cursor[t] += 1;
            }
        }
    }
    let mut segments = Vec::with_capacity(tiles);
    let mut rest = ids.as_mut_slice();
    for t in 0..tiles {
        let (head, tail) = core::mem::take(&mut rest).split_at_mut(offsets[t + 1] - offsets[t]);
        segments.push(head);
        rest = tail;
    }
    segments.into_par_iter().for_each(|segment| {
        segment.sort_unstable_by(|&p, &q| {
            let (dp, dq) = (depth[p as usize].to_f64(), depth[q as usize].to_f64());
            dp.total_cmp(&dq).then(p.cmp(&q))
        });
    });
    Ok(Bins {
        width,
        height,
        tiles_x,
        tiles_y,
        gaussians: n,
        offsets,
        ids,
    })
}

/// Checks the splat arrays against each other and the bins; returns `N`.
fn validate<T>(a: &RasterArrays<'_, T>, bins: &Bins) -> Result<usize, RasterError> {
    let n = a.opacity.len();
    check_len("xy", a.xy.len(), 2 * n, "[N, 2]")?;
    check_len("depth", a.depth.len(), n, "[N]")?;
    check_len("conic", a.conic.len(), 3 * n, "[N, 3]")?;
    check_len("color", a.color.len(), 3 * n, "[N, 3]")?;
    if bins.gaussians != n {
        return Err(RasterError::BinsMismatch {
            bins: bins.gaussians,
            arrays: n,
        });
    }
    Ok(n)
}

/// One Gaussian as seen by one pixel.
struct Hit<T> {
    /// `centre - xy`.
    dx: T,
    dy: T,
    /// `exp(-sigma)`.
    vis: T,
    /// The (clamped) alpha.
    alpha: T,
    /// Whether the `0.999` clamp is active.
    clamped: bool,
}

/// For each Gaussian, a bound on `sigma` beyond which its alpha is certainly below `1/255`:
/// `ln(255 opacity)` (as `alpha <= opacity exp(-sigma)`) plus a margin far above rounding, so
/// that [`hit`] skips most pairs before the exponential without changing any decision.
fn sigma_reach<T: Real>(opacity: &[T]) -> Vec<T> {
    const MARGIN: f64 = 1e-3;
    opacity
        .iter()
        .map(|o| T::from_f64((o.to_f64() / MIN_ALPHA).ln() + MARGIN))
        .collect()
}

/// Gaussian `g` at the pixel centre `(cx, cy)`; `None` when the pair is skipped (`sigma < 0`,
/// `alpha < 1/255`, or NaN). `reach` is [`sigma_reach`] of the opacities.
#[inline(always)]
fn hit<T: Real>(a: &RasterArrays<'_, T>, reach: &[T], g: usize, cx: T, cy: T) -> Option<Hit<T>> {
    let dx = cx - a.xy[2 * g];
    let dy = cy - a.xy[2 * g + 1];
    let [ca, cb, cc] = [a.conic[3 * g], a.conic[3 * g + 1], a.conic[3 * g + 2]];
    let sigma = T::from_f64(0.5) * (ca * dx * dx + cc * dy * dy) + cb * dx * dy;
    if !(sigma >= T::ZERO) || sigma > reach[g] {
        return None;
    }
    let vis = (-sigma).exp();
    let raw = a.opacity[g] * vis;
    let max_alpha = T::from_f64(MAX_ALPHA);
    let clamped = raw > max_alpha;
    let alpha = if clamped { max_alpha } else { raw };
    if !(alpha >= T::from_f64(MIN_ALPHA)) {
        return None;
    }
    Some(Hit {
        dx,
        dy,
        vis,
        alpha,
        clamped,
    })
}

/// The centre of pixel `(px, py)`.
#[inline(always)]
fn centre<T: Real>(px: usize, py: usize) -> (T, T) {
    (T::from_f64(px as f64 + 0.5), T::from_f64(py as f64 + 0.5))
}

/// One pixel's forward result.
#[derive(Clone, Copy)]
struct Pixel<T> {
    rgb: [T; 3],
    depth: T,
    transmittance: T,
    last: u32,
}

/// Composites one pixel over `list`, front to back.
fn render_pixel<T: Real>(
    a: &RasterArrays<'_, T>,
    reach: &[T],
    list: &[u32],
    cx: T,
    cy: T,
) -> Pixel<T> {
    let min_t = T::from_f64(MIN_TRANSMITTANCE);
    let mut t = T::ONE;
    let mut rgb = [T::ZERO; 3];
    let mut depth = T::ZERO;
    let mut last = list.len();
    for (j, &g) in list.iter().enumerate() {
        let g = g as usize;
        let Some(h) = hit(a, reach, g, cx, cy) else {
            continue;
        };
        let next = t * (T::ONE - h.alpha);
        if next <= min_t {
            last = j;
            break;
        }
        let w = h.alpha * t;
        for (c, out) in rgb.iter_mut().enumerate() {
            *out += w * a.color[3 * g + c];
        }
        depth += w * a.depth[g];
        t = next;
    }
    Pixel {
        rgb,
        depth,
        transmittance: t,
        // A tile list is at most `N <= u32::MAX` long.
        last: last as u32,
    }
}

/// Forward: the images of the splats over `background` (RGB).
pub fn forward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
) -> Result<RasterOutputs<T>, RasterError> {
    validate(a, bins)?;
    let reach = sigma_reach(a.opacity);
    let tiles: Vec<Vec<Pixel<T>>> = (0..bins.tile_count())
        .into_par_iter()
        .map(|t| {
            let list = bins.tile(t);
            let (x0, x1, y0, y1) = bins.tile_pixels(t);
            let mut pixels = Vec::with_capacity((x1 - x0) * (y1 - y0));
            for py in y0..y1 {
                for px in x0..x1 {
                    let (cx, cy) = centre(px, py);
                    pixels.push(render_pixel(a, &reach, list, cx, cy));
                }
            }
            pixels
        })
        .collect();
    let count = bins.pixels();
    let width = bins.width as usize;
    let mut out = RasterOutputs {
        rgb: vec![T::ZERO; 3 * count],
        alpha: vec![T::ZERO; count],
        depth: vec![T::ZERO; count],
        last: vec![0; count],
        transmittance: vec![T::ZERO; count],
    };
    for (t, pixels) in tiles.iter().enumerate() {
        let (x0, x1, y0, _) = bins.tile_pixels(t);
        let tile_w = x1 - x0;
        for (k, p) in pixels.iter().enumerate() {
            let i = (y0 + k / tile_w) * width + x0 + k % tile_w;
            for ((o, c), b) in out.rgb[3 * i..3 * i + 3]
                .iter_mut()
                .zip(p.rgb)
                .zip(background)
            {
                *o = c + p.transmittance * b;
            }
            out.alpha[i] = T::ONE - p.transmittance;
            out.depth[i] = p.depth;
            out.last[i] = p.last;
            out.transmittance[i] = p.transmittance;
        }
    }
    Ok(out)
}

/// One tile entry's gradient partial sums.
#[derive(Clone, Copy, Default)]
struct Partial<T> {
    xy: [T; 2],
    conic: [T; 3],
    color: [T; 3],
    opacity: T,
    depth: T,
    xy_abs: T,
}

/// The loss gradient at one pixel and the state its forward ended in.
struct PixelGrad<T> {
    cx: T,
    cy: T,
    rgb: [T; 3],
    alpha: T,
    depth: T,
    transmittance: T,
    last: usize,
}

/// Replays one pixel back to front, adding its gradients into `partial` (indexed like `list`).
fn backward_pixel<T: Real>(
    a: &RasterArrays<'_, T>,
    reach: &[T],
    list: &[u32],
    background: &[T; 3],
    p: &PixelGrad<T>,
    partial: &mut [Partial<T>],
) {
    let half = T::from_f64(0.5);
    let v = p.rgb;
    let t_final = p.transmittance;
    // Everything behind the current Gaussian, as seen by its alpha (times `1 - alpha`): the
    // colour and depth drawn behind it, the background, and the coverage through `T_final`.
    let mut behind =
        t_final * (background[0] * v[0] + background[1] * v[1] + background[2] * v[2] - p.alpha);
    let mut t = t_final;
    for j in (0..p.last.min(list.len())).rev() {
        let g = list[j] as usize;
        let Some(h) = hit(a, reach, g, p.cx, p.cy) else {
            continue;
        };
        let one_minus = T::ONE - h.alpha;
        t = t / one_minus;
        let w = h.alpha * t;
        let color = [a.color[3 * g], a.color[3 * g + 1], a.color[3 * g + 2]];
        let own = color[0] * v[0] + color[1] * v[1] + color[2] * v[2] + a.depth[g] * p.depth;
        let v_alpha = t * own - behind / one_minus;
        behind += w * own;
        let e = &mut partial[j];
        for (ec, vc) in e.color.iter_mut().zip(v) {
            *ec += w * vc;
        }
        e.depth += w * p.depth;
        if h.clamped {
            continue;
        }
        e.opacity += h.vis * v_alpha;
        let v_sigma = -v_alpha * h.alpha;
        let (dx, dy) = (h.dx, h.dy);
        e.conic[0] += half * v_sigma * dx * dx;
        e.conic[1] += v_sigma * dx * dy;
        e.conic[2] += half * v_sigma * dy * dy;
        // d sigma / d xy = -(a dx + b dy, b dx + c dy).
        let gx = -v_sigma * (a.conic[3 * g] * dx + a.conic[3 * g + 1] * dy);
        let gy = -v_sigma * (a.conic[3 * g + 1] * dx + a.conic[3 * g + 2] * dy);
        e.xy[0] += gx;
        e.xy[1] += gy;
        e.xy_abs += (gx * gx + gy * gy).sqrt();
    }
}

/// Backward: the gradient of `sum(image * grad)` over the three images with respect to the
/// splats, given the forward's `replay` state for the same inputs, bins and `background`.
pub fn backward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
    replay: &ReplayState<'_, T>,
    grads: &RasterOutputGrads<'_, T>,
) -> Result<RasterGrads<T>, RasterError> {
    let n = validate(a, bins)?;
    let reach = sigma_reach(a.opacity);
    let count = bins.pixels();
    let lengths = [
        ("grad rgb", grads.rgb.len(), 3, "[H, W, 3]"),
        ("grad alpha", grads.alpha.len(), 1, "[H, W]"),
        ("grad depth", grads.depth.len(), 1, "[H, W]"),
        ("forward last", replay.last.len(), 1, "[H, W]"),
        (
            "forward transmittance",
            replay.transmittance.len(),
            1,
            "[H, W]",
        ),
    ];
    for (name, got, per, shape) in lengths {
        check_len(name, got, per * count, shape)?;
    }
    let width = bins.width as usize;
    let partials: Vec<Vec<Partial<T>>> = (0..bins.tile_count())
        .into_par_iter()
        .map(|t| {
            let list = bins.tile(t);
            let mut partial = vec![Partial::default(); list.len()];
            if list.is_empty() {
                return partial;
            }
            let (x0, x1, y0, y1) = bins.tile_pixels(t);
            for py in y0..y1 {
                for px in x0..x1 {
                    let i = py * width + px;
                    let (cx, cy) = centre(px, py);
                    let pixel = PixelGrad {
                        cx,
                        cy,
                        rgb: [grads.rgb[3 * i], grads.rgb[3 * i + 1], grads.rgb[3 * i + 2]],
                        alpha: grads.alpha[i],
                        depth: grads.depth[i],
                        transmittance: replay.transmittance[i],
                        last: replay.last[i] as usize,
                    };
                    backward_pixel(a, &reach, list, &background, &pixel, &mut partial);
                }
            }
            partial
        })
        .collect();
    let mut g = RasterGrads {
        xy: vec![T::ZERO; 2 * n],
        conic: vec![T::ZERO; 3 * n],
        color: vec![T::ZERO; 3 * n],
        opacity: vec![T::ZERO; n],
        depth: vec![T::ZERO; n],
        xy_abs: vec![T::ZERO; n],
    };
    for (t, partial) in partials.iter().enumerate() {
        for (&id, e) in bins.tile(t).iter().zip(partial) {
            let i = id as usize;
            for k in 0..2 {
                g.xy[2 * i + k] += e.xy[k];
            }
            for k in 0..3 {
                g.conic[3 * i + k] += e.conic[k];
                g.color[3 * i + k] += e.color[k];
            }
            g.opacity[i] += e.opacity;
            g.depth[i] += e.depth;
            g.xy_abs[i] += e.xy_abs;
        }
    }
    Ok(g)
}
