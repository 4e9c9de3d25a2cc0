//! The fused Adam update on host slices (rayon), generic over `f32`/`f64`.

use rayon::prelude::*;

use super::AdamStep;
use crate::real::Real;

/// Elements per rayon task: large enough that scheduling is noise, small enough to split a
/// parameter group of a few thousand Gaussians.
const CHUNK: usize = 16 * 1024;

/// Updates `param`, `exp_avg` and `exp_avg_sq` in place with `grad` (see the
/// [module docs](super) for the formula and its rounding order).
///
/// # Panics
/// When the four slices differ in length.
pub fn adam_update<T: Real>(
    param: &mut [T],
    grad: &[T],
    exp_avg: &mut [T],
    exp_avg_sq: &mut [T],
    step: &AdamStep,
) {
    let n = param.len();
    assert!(
        grad.len() == n && exp_avg.len() == n && exp_avg_sq.len() == n,
        "adam_update: slices of different lengths"
    );
    let scalars = step.scalars().map(T::from_f64);
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(exp_avg.par_chunks_mut(CHUNK))
        .zip(exp_avg_sq.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| update(&scalars, p, g, m, v));
}

/// [`adam_update`] of the rows whose weight in `visible` is positive (rows of
/// `param.len() / visible.len()` elements, leading); the other rows are left as they are (see
/// the [module docs](super#visible-rows-only)).
///
/// # Panics
/// When the four slices differ in length, or are not a whole number of `visible.len()` rows.
pub fn adam_update_visible<T: Real>(
    param: &mut [T],
    grad: &[T],
    exp_avg: &mut [T],
    exp_avg_sq: &mut [T],
    visible: &[T],
    step: &AdamStep,
) {
    let n = param.len();
    assert!(
        grad.len() == n && exp_avg.len() == n && exp_avg_sq.len() == n,
        "adam_update_visible: slices of different lengths"
    );
    let rows = visible.len();
    assert!(
        rows > 0 && n.is_multiple_of(rows),
        "adam_update_visible: {n} elements are not {rows} rows"
    );
    let width = n / rows;
    if width == 0 {
        return;
    }
    let scalars = step.scalars().map(T::from_f64);
    let rows_per_task = CHUNK.div_ceil(width);
    let chunk = rows_per_task * width;
    param
        .par_chunks_mut(chunk)
        .zip(grad.par_chunks(chunk))
        .zip(exp_avg.par_chunks_mut(chunk))
        .zip(exp_avg_sq.par_chunks_mut(chunk))
        .zip(visible.par_chunks(rows_per_task))
        .for_each(|((((p, g), m), v), seen)| {
            // Runs of consecutive seen rows, each updated as one slice.
            let seen_at = |r: usize| seen.get(r).is_some_and(|w| *w > T::ZERO);
            let mut r = 0;
            while r < seen.len() {
                let first = r;
                while seen_at(r) {
                    r += 1;
                }
                if r == first {
                    r += 1;
                    continue;
                }
                let run = first * width..r * width;
                update(
                    &scalars,
                    &mut p[run.clone()],
                    &g[run.clone()],
                    &mut m[run.clone()],
                    &mut v[run],
                );
            }
        });
}

/// The update of matching elements with `scalars` ([`AdamStep::scalars`] in the tensors'
/// type), in the order of the module docs.
#[inline(always)]
fn update<T: Real>(scalars: &[T; 7], p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]) {
    let [
        beta1,
        one_minus_beta1,
        beta2,
        one_minus_beta2,
        sqrt_bias2,
        eps,
        scale,
    ] = *scalars;
    for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
        *m = *m * beta1 + g * one_minus_beta1;
        *v = *v * beta2 + (g * g) * one_minus_beta2;
        let denom = v.sqrt() / sqrt_bias2 + eps;
        *p -= *m / denom * scale;
    }
}
