//! The fold and its backward on the CPU: one rayon pass over the Gaussians, each computed in
//! `f64` whatever the element type (`1 - c` as `-expm1(log c)`, exact where the filter is thin),
//! so the result is the formula's rounded once.

use rayon::prelude::*;

use super::MAX_EXP_LOGIT;
use crate::real::Real;

/// Gaussians per rayon task.
const CHUNK: usize = 2048;

/// One Gaussian's fold terms, in `f64`.
struct Terms {
    /// `u_a`.
    ratio: [f64; 3],
    /// `log c`.
    log_c: f64,
    /// `e^o`, `o` at most [`MAX_EXP_LOGIT`].
    exp_logit: f64,
    /// `D`.
    d: f64,
}

#[inline]
fn terms(log_scales: [f64; 3], logit: f64, variance: f64) -> Terms {
    let ratio = log_scales.map(|l| variance * (-2.0 * l).exp());
    let log_c = -0.5 * ratio.iter().map(|u| u.ln_1p()).sum::<f64>();
    let exp_logit = logit.min(MAX_EXP_LOGIT).exp();
    let d = 1.0 + exp_logit * -log_c.exp_m1();
    Terms {
        ratio,
        log_c,
        exp_logit,
        d,
    }
}

#[inline]
fn triple<R: Real>(values: &[R], i: usize) -> [f64; 3] {
    [0, 1, 2].map(|a| values[3 * i + a].to_f64())
}

/// Folds the filter of `variance [N]` into `log_scales [N, 3]` and `opacity_logits [N]` in
/// place: `(l', o')` of the [module docs](super).
pub fn fold<R: Real>(log_scales: &mut [R], opacity_logits: &mut [R], variance: &[R]) {
    log_scales
        .par_chunks_mut(3 * CHUNK)
        .zip(opacity_logits.par_chunks_mut(CHUNK))
        .zip(variance.par_chunks(CHUNK))
        .for_each(|((scales, logits), variance)| {
            for (i, (logit, var)) in logits.iter_mut().zip(variance).enumerate() {
                let t = terms(triple(scales, i), logit.to_f64(), var.to_f64());
                for (a, u) in t.ratio.iter().enumerate() {
                    let l = &mut scales[3 * i + a];
                    *l = R::from_f64(l.to_f64() + 0.5 * u.ln_1p());
                }
                *logit = R::from_f64(logit.to_f64() + t.log_c - t.d.ln());
            }
        });
}

/// The chain rule through the fold: turns `grad_log_scales [N, 3]` and `grad_opacity_logits
/// [N]` (with respect to the folded parameters) in place into the gradients with respect to
/// the raw `log_scales` and `opacity_logits` ([module docs](super)).
pub fn fold_backward<R: Real>(
    log_scales: &[R],
    opacity_logits: &[R],
    variance: &[R],
    grad_log_scales: &mut [R],
    grad_opacity_logits: &mut [R],
) {
    grad_log_scales
        .par_chunks_mut(3 * CHUNK)
        .zip(grad_opacity_logits.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(chunk, (grad_scales, grad_logits))| {
            let first = chunk * CHUNK;
            for (i, grad_logit) in grad_logits.iter_mut().enumerate() {
                let g = first + i;
                let t = terms(
                    triple(log_scales, g),
                    opacity_logits[g].to_f64(),
                    variance[g].to_f64(),
                );
                let grad_o = grad_logit.to_f64();
                let through_opacity = grad_o * (1.0 + t.exp_logit) / t.d;
                for (a, u) in t.ratio.iter().enumerate() {
                    let grad = &mut grad_scales[3 * i + a];
                    *grad = R::from_f64((grad.to_f64() + u * through_opacity) / (1.0 + u));
                }
                *grad_logit = R::from_f64(grad_o / t.d);
            }
        });
}
