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
    let [
        beta1,
        one_minus_beta1,
        beta2,
        one_minus_beta2,
        sqrt_bias2,
        eps,
        scale,
    ] = step.scalars().map(T::from_f64);
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(exp_avg.par_chunks_mut(CHUNK))
        .zip(exp_avg_sq.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| {
            for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
                *m = *m * beta1 + g * one_minus_beta1;
                *v = *v * beta2 + (g * g) * one_minus_beta2;
                let denom = v.sqrt() / sqrt_bias2 + eps;
                *p -= *m / denom * scale;
            }
        });
}
