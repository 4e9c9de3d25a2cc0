//! The fused loss on the CPU: rayon over image rows, `f32` for training and `f64` for the
//! gradient check. Images are `[H, W, C]` row-major, so a row is `W C` contiguous values and
//! the window's horizontal taps are `C` apart.
//!
//! Passes (each parallel over rows):
//! 1. row blur of `x, y, x^2, y^2, xy` into `[H][5][W C]`;
//! 2. column blur, the SSIM map and its gradient maps `[H][3][W C]` (when asked), per-row sums
//!    of `S` and `|x - y|` in `f64`;
//! 3. row blur of the gradient maps;
//! 4. column blur and the gradient `dloss/dx`.
//!
//! The row sums are added in row order, so the result does not depend on the thread count.

use rayon::prelude::*;

use super::{LossError, LossOptions, SSIM_C1, SSIM_C2, SSIM_WINDOW, ssim_taps};
use crate::real::Real;

/// Half the window, pixels.
const HALF: usize = SSIM_WINDOW / 2;

/// The loss and its two terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossValue {
    /// `(1 - lambda) l1 + lambda (1 - ssim)`.
    pub loss: f64,
    /// Mean SSIM.
    pub ssim: f64,
    /// Mean absolute difference.
    pub l1: f64,
}

/// Zero-padded row blur of `count` interleaved rows: `src` is `count` rows of `W C` values,
/// `dst` likewise; `padded` is scratch of `(W + 2 HALF) C` values.
fn blur_row<T: Real>(
    src: &[T],
    dst: &mut [T],
    channels: usize,
    taps: &[T; SSIM_WINDOW],
    padded: &mut [T],
) {
    let width = src.len();
    let margin = HALF * channels;
    padded[..margin].fill(T::ZERO);
    padded[margin..margin + width].copy_from_slice(src);
    padded[margin + width..].fill(T::ZERO);
    dst.fill(T::ZERO);
    for (t, &tap) in taps.iter().enumerate() {
        let shifted = &padded[t * channels..t * channels + width];
        for (d, &s) in dst.iter_mut().zip(shifted) {
            *d += tap * s;
        }
    }
}

/// Zero-padded column blur at row `i` of plane `plane` of `planes`-plane rows (`rows[r]` is
/// `planes` segments of `W C` values) into `dst` (`W C` values).
#[allow(clippy::too_many_arguments)]
fn blur_column<T: Real>(
    rows: &[T],
    row_len: usize,
    planes: usize,
    plane: usize,
    i: usize,
    height: usize,
    taps: &[T; SSIM_WINDOW],
    dst: &mut [T],
) {
    dst.fill(T::ZERO);
    let first = i.saturating_sub(HALF);
    let last = (i + HALF).min(height - 1);
    for r in first..=last {
        let tap = taps[r + HALF - i];
        let start = (r * planes + plane) * row_len;
        for (d, &s) in dst.iter_mut().zip(&rows[start..start + row_len]) {
            *d += tap * s;
        }
    }
}

/// Pass 2 for one row: the inputs shared by every row.
struct SsimRow<'a, T> {
    row_stats: &'a [T],
    x: &'a [T],
    y: &'a [T],
    height: usize,
    row_len: usize,
    taps: &'a [T; SSIM_WINDOW],
    /// `dloss/dS` at every value.
    d_s: T,
}

impl<T: Real> SsimRow<'_, T> {
    /// Row `i`: the sums of `S` and `|x - y|`, and the gradient maps `[3][W C]` (with respect
    /// to `mu_x`, `E[x^2]`, `E[xy]`) into `maps` when given. `stats` is scratch of `5 W C`.
    fn run(&self, i: usize, stats: &mut [T], mut maps: Option<&mut [T]>) -> (f64, f64) {
        let row_len = self.row_len;
        for s in 0..5 {
            let dst = &mut stats[s * row_len..(s + 1) * row_len];
            blur_column(
                self.row_stats,
                row_len,
                5,
                s,
                i,
                self.height,
                self.taps,
                dst,
            );
        }
        let xr = &self.x[i * row_len..(i + 1) * row_len];
        let yr = &self.y[i * row_len..(i + 1) * row_len];
        let (c1, c2) = (T::from_f64(SSIM_C1), T::from_f64(SSIM_C2));
        let two = T::from_f64(2.0);
        let (mut s_sum, mut l1_sum) = (0.0f64, 0.0f64);
        for k in 0..row_len {
            let mx = stats[k];
            let my = stats[row_len + k];
            let exx = stats[2 * row_len + k];
            let eyy = stats[3 * row_len + k];
            let exy = stats[4 * row_len + k];
            let a = two * mx * my + c1;
            let b = two * (exy - mx * my) + c2;
            let c = mx * mx + my * my + c1;
            let d = (exx - mx * mx) + (eyy - my * my) + c2;
            let cd = c * d;
            let s = a * b / cd;
            s_sum += s.to_f64();
            let diff = xr[k] - yr[k];
            l1_sum += if diff < T::ZERO { -diff } else { diff }.to_f64();
            if let Some(maps) = maps.as_deref_mut() {
                let g_mu = two * my * (b - a) / cd + two * mx * s * (T::ONE / d - T::ONE / c);
                maps[k] = self.d_s * g_mu;
                maps[row_len + k] = self.d_s * (-s / d);
                maps[2 * row_len + k] = self.d_s * (two * a / cd);
            }
        }
        (s_sum, l1_sum)
    }
}

/// The fused loss of `x` (the render) against `y`, both `[height, width, channels]` row-major;
/// writes `dloss/dx` into `grad` when given (same layout).
pub fn photometric_loss<T: Real>(
    x: &[T],
    y: &[T],
    [height, width, channels]: [usize; 3],
    options: LossOptions,
    grad: Option<&mut [T]>,
) -> Result<LossValue, LossError> {
    let shape = [height, width, channels];
    super::check(shape, shape, options)?;
    let row_len = width * channels;
    let count = height * row_len;
    let grad_len = grad.as_ref().map_or(count, |g| g.len());
    for (what, len) in [
        ("render", x.len()),
        ("target", y.len()),
        ("gradient", grad_len),
    ] {
        if len != count {
            return Err(LossError::BufferLength {
                what,
                len,
                expected: count,
            });
        }
    }
    let taps = ssim_taps().map(T::from_f64);
    let lambda = options.ssim_lambda;
    let padded_len = row_len + 2 * HALF * channels;

    // 1. Row blur of the five statistics.
    let mut row_stats = vec![T::ZERO; height * 5 * row_len];
    row_stats
        .par_chunks_mut(5 * row_len)
        .enumerate()
        .for_each_init(
            || (vec![T::ZERO; padded_len], vec![T::ZERO; row_len]),
            |(padded, product), (i, out)| {
                let xr = &x[i * row_len..(i + 1) * row_len];
                let yr = &y[i * row_len..(i + 1) * row_len];
                let (bx, rest) = out.split_at_mut(row_len);
                let (by, rest) = rest.split_at_mut(row_len);
                let (bxx, rest) = rest.split_at_mut(row_len);
                let (byy, bxy) = rest.split_at_mut(row_len);
                blur_row(xr, bx, channels, &taps, padded);
                blur_row(yr, by, channels, &taps, padded);
                for (p, &v) in product.iter_mut().zip(xr) {
                    *p = v * v;
                }
                blur_row(product, bxx, channels, &taps, padded);
                for (p, &v) in product.iter_mut().zip(yr) {
                    *p = v * v;
                }
                blur_row(product, byy, channels, &taps, padded);
                for ((p, &a), &b) in product.iter_mut().zip(xr).zip(yr) {
                    *p = a * b;
                }
                blur_row(product, bxy, channels, &taps, padded);
            },
        );

    // 2. Column blur, the SSIM map, its gradient maps and the per-row sums.
    let n = count as f64;
    let map_row = SsimRow {
        row_stats: &row_stats,
        x,
        y,
        height,
        row_len,
        taps: &taps,
        d_s: T::from_f64(-lambda / n),
    };
    let mut sums = vec![(0.0f64, 0.0f64); height];
    let mut grad_maps = Vec::new();
    if grad.is_some() {
        grad_maps = vec![T::ZERO; height * 3 * row_len];
        grad_maps
            .par_chunks_mut(3 * row_len)
            .zip(sums.par_iter_mut())
            .enumerate()
            .for_each_init(
                || vec![T::ZERO; 5 * row_len],
                |stats, (i, (maps, sum))| *sum = map_row.run(i, stats, Some(maps)),
            );
    } else {
        sums.par_iter_mut().enumerate().for_each_init(
            || vec![T::ZERO; 5 * row_len],
            |stats, (i, sum)| *sum = map_row.run(i, stats, None),
        );
    }
    let (s_total, l1_total) = sums
        .iter()
        .fold((0.0, 0.0), |(s, l), &(rs, rl)| (s + rs, l + rl));
    let ssim = s_total / n;
    let l1 = l1_total / n;
    let value = LossValue {
        loss: (1.0 - lambda) * l1 + lambda * (1.0 - ssim),
        ssim,
        l1,
    };
    let Some(grad) = grad else {
        return Ok(value);
    };

    // 3. Row blur of the gradient maps (in place, through a scratch row).
    grad_maps.par_chunks_mut(3 * row_len).for_each_init(
        || (vec![T::ZERO; padded_len], vec![T::ZERO; row_len]),
        |(padded, blurred), maps| {
            for m in 0..3 {
                let map = &mut maps[m * row_len..(m + 1) * row_len];
                blur_row(map, blurred, channels, &taps, padded);
                map.copy_from_slice(blurred);
            }
        },
    );

    // 4. Column blur and the gradient.
    let l1_weight = T::from_f64((1.0 - lambda) / n);
    let two = T::from_f64(2.0);
    grad.par_chunks_mut(row_len).enumerate().for_each_init(
        || vec![T::ZERO; 3 * row_len],
        |blurred, (i, out)| {
            for m in 0..3 {
                let dst = &mut blurred[m * row_len..(m + 1) * row_len];
                blur_column(&grad_maps, row_len, 3, m, i, height, &taps, dst);
            }
            let xr = &x[i * row_len..(i + 1) * row_len];
            let yr = &y[i * row_len..(i + 1) * row_len];
            for k in 0..row_len {
                let diff = xr[k] - yr[k];
                let sign = if diff > T::ZERO {
                    T::ONE
                } else if diff < T::ZERO {
                    -T::ONE
                } else {
                    T::ZERO
                };
                out[k] = blurred[k]
                    + two * xr[k] * blurred[row_len + k]
                    + yr[k] * blurred[2 * row_len + k]
                    + l1_weight * sign;
            }
        },
    );
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// SSIM and L1 by direct 2D summation over the window, zero padded, in f64.
    fn reference(x: &[f64], y: &[f64], [h, w, c]: [usize; 3], lambda: f64) -> f64 {
        let taps = ssim_taps();
        let mut s_total = 0.0;
        for ch in 0..c {
            for i in 0..h {
                for j in 0..w {
                    let (mut mx, mut my, mut xx, mut yy, mut xy) = (0.0, 0.0, 0.0, 0.0, 0.0);
                    for (a, ta) in taps.iter().enumerate() {
                        for (b, tb) in taps.iter().enumerate() {
                            let (ii, jj) = (
                                i as isize + a as isize - HALF as isize,
                                j as isize + b as isize - HALF as isize,
                            );
                            if ii < 0 || jj < 0 || ii >= h as isize || jj >= w as isize {
                                continue;
                            }
                            let k = (ii as usize * w + jj as usize) * c + ch;
                            let wgt = ta * tb;
                            mx += wgt * x[k];
                            my += wgt * y[k];
                            xx += wgt * x[k] * x[k];
                            yy += wgt * y[k] * y[k];
                            xy += wgt * x[k] * y[k];
                        }
                    }
                    s_total += ((2.0 * mx * my + SSIM_C1) * (2.0 * (xy - mx * my) + SSIM_C2))
                        / ((mx * mx + my * my + SSIM_C1) * (xx - mx * mx + yy - my * my + SSIM_C2));
                }
            }
        }
        let n = (h * w * c) as f64;
        let l1: f64 = x.iter().zip(y).map(|(a, b)| (a - b).abs()).sum::<f64>() / n;
        (1.0 - lambda) * l1 + lambda * (1.0 - s_total / n)
    }

    fn images(seed: u64, shape: [usize; 3]) -> (Vec<f64>, Vec<f64>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = shape.iter().product();
        let x: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..1.0)).collect();
        let y = x
            .iter()
            .map(|v| (0.6 * v + rng.random_range(0.0..0.4)).clamp(0.0, 1.0))
            .collect();
        (x, y)
    }

    #[test]
    fn matches_direct_summation() {
        for (seed, shape) in [
            (11, [13, 17, 3]),
            (12, [1, 1, 3]),
            (13, [20, 4, 1]),
            (14, [5, 30, 2]),
        ] {
            let (x, y) = images(seed, shape);
            for lambda in [0.0, 0.2, 1.0] {
                let options = LossOptions {
                    ssim_lambda: lambda,
                };
                let got = photometric_loss(&x, &y, shape, options, None).unwrap();
                let want = reference(&x, &y, shape, lambda);
                assert!(
                    (got.loss - want).abs() < 1e-12,
                    "{shape:?} {lambda}: {} vs {want}",
                    got.loss
                );
                let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                let yf: Vec<f32> = y.iter().map(|&v| v as f32).collect();
                let got32 = photometric_loss(&xf, &yf, shape, options, None).unwrap();
                assert!(
                    (got32.loss - want).abs() < 1e-5,
                    "f32 {}: {want}",
                    got32.loss
                );
            }
        }
    }

    #[test]
    fn gradient_matches_central_differences() {
        let shape = [9, 14, 3];
        let (x, y) = images(21, shape);
        let options = LossOptions { ssim_lambda: 0.3 };
        let mut grad = vec![f64::NAN; x.len()];
        photometric_loss(&x, &y, shape, options, Some(&mut grad)).unwrap();
        let eps = 1e-6;
        for k in 0..x.len() {
            let mut plus = x.clone();
            plus[k] += eps;
            let mut minus = x.clone();
            minus[k] -= eps;
            let fd = (photometric_loss(&plus, &y, shape, options, None)
                .unwrap()
                .loss
                - photometric_loss(&minus, &y, shape, options, None)
                    .unwrap()
                    .loss)
                / (2.0 * eps);
            assert!(
                (grad[k] - fd).abs() < 1e-9 + 1e-5 * fd.abs(),
                "value {k}: analytic {} vs finite difference {fd}",
                grad[k]
            );
        }
    }

    #[test]
    fn identical_images_give_zero_loss() {
        let shape = [16, 16, 3];
        let (x, _) = images(31, shape);
        let mut grad = vec![f64::NAN; x.len()];
        let v = photometric_loss(&x, &x, shape, LossOptions::default(), Some(&mut grad)).unwrap();
        assert!(
            v.loss.abs() < 1e-12 && (v.ssim - 1.0).abs() < 1e-12,
            "{v:?}"
        );
        assert!(
            grad.iter().all(|g| g.abs() < 1e-9),
            "the optimum has zero gradient"
        );
    }

    #[test]
    fn independent_of_thread_count() {
        let shape = [37, 29, 3];
        let (x, y) = images(41, shape);
        let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let yf: Vec<f32> = y.iter().map(|&v| v as f32).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut grad = vec![f32::NAN; xf.len()];
                let v = photometric_loss(&xf, &yf, shape, LossOptions::default(), Some(&mut grad))
                    .unwrap();
                (
                    v.loss.to_bits(),
                    grad.iter().map(|g| g.to_bits()).collect::<Vec<_>>(),
                )
            })
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = vec![0.5f32; 12];
        let shape = [2, 2, 3];
        let bad = LossOptions { ssim_lambda: 1.5 };
        assert_eq!(
            photometric_loss(&x, &x, shape, bad, None),
            Err(LossError::Lambda(1.5))
        );
        let nan = LossOptions {
            ssim_lambda: f64::NAN,
        };
        assert!(matches!(
            photometric_loss(&x, &x, shape, nan, None),
            Err(LossError::Lambda(_))
        ));
        assert_eq!(
            photometric_loss(&x, &x, [0, 2, 3], LossOptions::default(), None),
            Err(LossError::Empty([0, 2, 3]))
        );
        assert_eq!(
            photometric_loss(&x, &x[..9], shape, LossOptions::default(), None),
            Err(LossError::BufferLength {
                what: "target",
                len: 9,
                expected: 12
            })
        );
    }
}
