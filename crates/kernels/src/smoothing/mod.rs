//! Mip-Splatting's 3D smoothing filter folded into each Gaussian's scales and opacity, and the
//! chain rule back through the fold.
//!
//! # Definition
//! Gaussian `i` has log-scales `l_i` (three), opacity logit `o_i` and filter variance
//! `sigma_i^2 >= 0` (world units squared; how `ember-field` measures it from the training
//! cameras is its business). Convolving its covariance `R S^2 R^T` with `sigma^2 I` gives
//! `R (S^2 + sigma^2 I) R^T`: the same rotation with scales `s' = sqrt(s^2 + sigma^2)`; its
//! opacity is multiplied by `c = sqrt(det S^2 / det S'^2) = prod s / s'`, so that its integral
//! is kept. With `u_a = sigma^2 e^{-2 l_a}` (the filter's variance over axis `a`'s):
//!
//! ```text
//! l_a'  = l_a + log1p(u_a) / 2
//! log c = -sum_a log1p(u_a) / 2
//! o'    = logit(sigmoid(o) c) = o + log c - log D,     D = 1 + e^o (1 - c)
//! ```
//!
//! (the last form stays finite where `sigmoid(o)` rounds to 1; `e^o` is taken at most at
//! [`MAX_EXP_LOGIT`]). The variance is a constant of the fold: no gradient flows into it. The
//! backward, with `a_a = 1 / (1 + u_a)` (so `1 - a_a = u_a / (1 + u_a)`, taken from `u_a` and
//! not by subtraction, which would lose the digits of a thin filter):
//!
//! ```text
//! dL/dl_a = dL/dl_a' a_a + dL/do' (1 - a_a) (1 + e^o) / D
//! dL/do   = dL/do' / D
//! ```
//!
//! # Implementations
//! - the defaults of [`SmoothingOps`]: Burn tensor ops, on every backend Ember does not
//!   implement the op on: the GPU backends (Burn's fusion makes the elementwise program a few
//!   kernels) and `Autodiff` (which records the forward's ops, so a render through the fold
//!   differentiates it: the autodiff training pass);
//! - `cpu.rs`: one rayon pass over the Gaussians, each in `f64` (`1 - c` as `-expm1(log c)`),
//!   for ndarray, where the ~30 tensor ops would each be a pass over a fresh buffer (measured:
//!   60-80 ms of a 150k-Gaussian step; the pass takes a few);
//! - `ndarray.rs`: `cpu.rs` on host copies of `f32` tensors; `f64` ones run the defaults.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

/// The largest logit `e^o` is taken at: `e^80` is finite in `f32`, and a Gaussian's opacity is
/// 1 to `f32`'s precision long before it.
pub const MAX_EXP_LOGIT: f64 = 80.0;

/// Below this `|log c|`, the default tensor ops take `1 - c` from its series (`1 - e^x`
/// loses the digits there, and Burn has no `expm1`).
const SERIES_BELOW: f64 = 1e-3;

/// Why a fold was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmoothingError {
    /// An input's shape does not match the log-scales' `[N, 3]`.
    #[error("smoothing filter: `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        /// The input's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shape it must have.
        expected: Vec<usize>,
    },
}

/// The fold on a backend: what [`smoothing_fold`] and [`smoothing_fold_backward`] dispatch to.
/// Inputs `log_scales [N, 3]`, `opacity_logits [N]`, `variance [N]`, checked by the entry
/// functions.
pub trait SmoothingOps: Backend {
    /// `(l' [N, 3], o' [N])` (see the [module docs](self)). The default runs Burn tensor ops
    /// ([`smoothing_fold_tensor_ops`]).
    fn smoothing_fold(
        log_scales: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        variance: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        smoothing_fold_tensor_ops::<Self>(log_scales, opacity_logits, variance)
    }

    /// `(dL/dl [N, 3], dL/do [N])` from `dL/dl'` and `dL/do'` (see the [module docs](self)).
    /// The default runs Burn tensor ops ([`smoothing_fold_backward_tensor_ops`]).
    fn smoothing_fold_backward(
        log_scales: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        grad_log_scales: FloatTensor<Self>,
        grad_opacity_logits: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        smoothing_fold_backward_tensor_ops::<Self>(
            log_scales,
            opacity_logits,
            variance,
            grad_log_scales,
            grad_opacity_logits,
        )
    }
}

/// [`SmoothingOps::smoothing_fold`]'s default, as Burn tensor ops on any backend.
pub fn smoothing_fold_tensor_ops<B: Backend>(
    log_scales: FloatTensor<B>,
    opacity_logits: FloatTensor<B>,
    variance: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let fold = Fold::<B>::new(log_scales, opacity_logits, variance);
    let logits = fold.opacity_logits();
    (
        fold.log_scales.into_primitive().tensor(),
        logits.into_primitive().tensor(),
    )
}

/// [`SmoothingOps::smoothing_fold_backward`]'s default, as Burn tensor ops on any backend.
pub fn smoothing_fold_backward_tensor_ops<B: Backend>(
    log_scales: FloatTensor<B>,
    opacity_logits: FloatTensor<B>,
    variance: FloatTensor<B>,
    grad_log_scales: FloatTensor<B>,
    grad_opacity_logits: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let fold = Fold::<B>::new(log_scales, opacity_logits, variance);
    let [n, _] = fold.ratio.dims();
    let grad_scales = float::<B, 2>(grad_log_scales);
    let grad_logits = float::<B, 1>(grad_opacity_logits);
    // A division, not `recip`: ndarray's vector reciprocal is an approximation taken only for
    // aligned runs of elements, which would make a run's bits depend on its allocations.
    let kept = fold.ratio.ones_like().div(fold.ratio.clone() + 1.0);
    let widened = fold.ratio.clone() * kept.clone();
    let d = fold.d();
    let through_opacity = (fold.exp_logit.clone() + 1.0).div(d.clone()) * grad_logits.clone();
    let grad_scales = grad_scales * kept + widened * through_opacity.reshape([n, 1]);
    (
        grad_scales.into_primitive().tensor(),
        grad_logits.div(d).into_primitive().tensor(),
    )
}

/// `log_scales [N, 3]` and `opacity_logits [N]` with the filter of `variance [N]` folded in:
/// `(l', o')` of the [module docs](self) (differentiable under `Autodiff`).
pub fn smoothing_fold<B: SmoothingOps>(
    log_scales: Tensor<B, 2>,
    opacity_logits: Tensor<B, 1>,
    variance: Tensor<B, 1>,
) -> Result<(Tensor<B, 2>, Tensor<B, 1>), SmoothingError> {
    check(&log_scales, &opacity_logits, &variance, None)?;
    let (l, o) = B::smoothing_fold(
        log_scales.into_primitive().tensor(),
        opacity_logits.into_primitive().tensor(),
        variance.into_primitive().tensor(),
    );
    Ok((float(l), float(o)))
}

/// The gradients with respect to the raw `log_scales [N, 3]` and `opacity_logits [N]` from
/// those with respect to the folded ones (`grad_log_scales [N, 3]`, `grad_opacity_logits
/// [N]`), for the filter of `variance [N]`.
pub fn smoothing_fold_backward<B: SmoothingOps>(
    log_scales: Tensor<B, 2>,
    opacity_logits: Tensor<B, 1>,
    variance: Tensor<B, 1>,
    grad_log_scales: Tensor<B, 2>,
    grad_opacity_logits: Tensor<B, 1>,
) -> Result<(Tensor<B, 2>, Tensor<B, 1>), SmoothingError> {
    check(
        &log_scales,
        &opacity_logits,
        &variance,
        Some((&grad_log_scales, &grad_opacity_logits)),
    )?;
    let (l, o) = B::smoothing_fold_backward(
        log_scales.into_primitive().tensor(),
        opacity_logits.into_primitive().tensor(),
        variance.into_primitive().tensor(),
        grad_log_scales.into_primitive().tensor(),
        grad_opacity_logits.into_primitive().tensor(),
    );
    Ok((float(l), float(o)))
}

fn float<B: Backend, const D: usize>(primitive: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(primitive))
}

fn check<B: Backend>(
    log_scales: &Tensor<B, 2>,
    opacity_logits: &Tensor<B, 1>,
    variance: &Tensor<B, 1>,
    grads: Option<(&Tensor<B, 2>, &Tensor<B, 1>)>,
) -> Result<(), SmoothingError> {
    let n = log_scales.dims()[0];
    let mut shapes = vec![
        ("log_scales", log_scales.dims().to_vec(), vec![n, 3]),
        ("opacity_logits", opacity_logits.dims().to_vec(), vec![n]),
        ("variance", variance.dims().to_vec(), vec![n]),
    ];
    if let Some((l, o)) = grads {
        shapes.push(("grad_log_scales", l.dims().to_vec(), vec![n, 3]));
        shapes.push(("grad_opacity_logits", o.dims().to_vec(), vec![n]));
    }
    for (name, got, expected) in shapes {
        if got != expected {
            return Err(SmoothingError::Shape {
                name,
                got,
                expected,
            });
        }
    }
    Ok(())
}

/// The fold's shared terms as tensor ops (the defaults' arithmetic).
struct Fold<B: Backend> {
    /// `[N, 3]`: `u`.
    ratio: Tensor<B, 2>,
    /// `[N, 3]`: `l'`.
    log_scales: Tensor<B, 2>,
    /// `[N]`: `o`.
    logits: Tensor<B, 1>,
    /// `[N]`: `log c`.
    log_c: Tensor<B, 1>,
    /// `[N]`: `e^o`, `o` at most [`MAX_EXP_LOGIT`].
    exp_logit: Tensor<B, 1>,
}

impl<B: Backend> Fold<B> {
    fn new(
        log_scales: FloatTensor<B>,
        logits: FloatTensor<B>,
        variance: FloatTensor<B>,
    ) -> Fold<B> {
        let log_scales = float::<B, 2>(log_scales);
        let logits = float::<B, 1>(logits);
        let [n, _] = log_scales.dims();
        let ratio = log_scales.clone().mul_scalar(-2.0).exp() * float::<B, 1>(variance).reshape([n, 1]);
        let widened = ratio.clone().log1p().mul_scalar(0.5);
        // Added column by column: the same order of the three on every backend.
        let axis = |a: usize| widened.clone().narrow(1, a, 1).reshape([n]);
        let log_c = (axis(0) + axis(1) + axis(2)).neg();
        Fold {
            ratio,
            log_scales: log_scales + widened,
            exp_logit: logits.clone().clamp_max(MAX_EXP_LOGIT).exp(),
            logits,
            log_c,
        }
    }

    /// `D = 1 + e^o (1 - c)`, with `1 - c = -(x + x^2/2 + x^3/6)` for `x = log c` near zero.
    fn d(&self) -> Tensor<B, 1> {
        let x = self.log_c.clone();
        let series = (x.clone() * (x.clone() * (x.clone() / 6.0 + 0.5) + 1.0)).neg();
        let direct = x.clone().exp().neg() + 1.0;
        let one_minus_c = direct.mask_where(x.greater_elem(-SERIES_BELOW), series);
        self.exp_logit.clone() * one_minus_c + 1.0
    }

    /// `o' = o + log c - log D`.
    fn opacity_logits(&self) -> Tensor<B, 1> {
        self.logits.clone() + self.log_c.clone() - self.d().log()
    }
}

#[cfg(test)]
mod tests;
