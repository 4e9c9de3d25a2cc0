//! The statistics on host slices (rayon), generic over `f32`/`f64`.

use rayon::prelude::*;

use super::ViewSize;
use crate::real::Real;

/// Gaussians per rayon task.
const CHUNK: usize = 8 * 1024;

/// Adds one view's statistics to `grad_sum`, `visible_steps` and `max_radius` (`[N]` each) in
/// place, from `screen_grads` and `extents` (`[N, 3]` each, row-major); see the
/// [module docs](super) for the formula and its rounding order.
///
/// # Panics
/// When the slices' lengths do not fit one `N`.
pub fn accumulate<T: Real>(
    grad_sum: &mut [T],
    visible_steps: &mut [T],
    max_radius: &mut [T],
    screen_grads: &[T],
    extents: &[i64],
    view: ViewSize,
) {
    let n = grad_sum.len();
    assert!(
        visible_steps.len() == n
            && max_radius.len() == n
            && screen_grads.len() == 3 * n
            && extents.len() == 3 * n,
        "densify_stats::accumulate: slices of different lengths"
    );
    let [half_w, half_h] = view.half().map(T::from_f64);
    grad_sum
        .par_chunks_mut(CHUNK)
        .zip(visible_steps.par_chunks_mut(CHUNK))
        .zip(max_radius.par_chunks_mut(CHUNK))
        .zip(screen_grads.par_chunks(3 * CHUNK))
        .zip(extents.par_chunks(3 * CHUNK))
        .for_each(|((((sums, steps), radii), grads), extents)| {
            let rows = grads.chunks_exact(3).zip(extents.chunks_exact(3));
            for (((sum, steps), max_radius), (g, e)) in
                sums.iter_mut().zip(steps).zip(radii).zip(rows)
            {
                let seen = if e[2] > 0 { T::ONE } else { T::ZERO };
                let (gx, gy) = (g[0] * half_w, g[1] * half_h);
                *sum += (gx * gx + gy * gy).sqrt() * seen;
                *steps += seen;
                let radius = T::from_f64(e[0].max(e[1]) as f64) * seen;
                if radius > *max_radius {
                    *max_radius = radius;
                }
            }
        });
}
