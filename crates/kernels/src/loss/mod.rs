//! The photometric training loss `(1 - lambda) L1 + lambda (1 - SSIM)` as one fused op that
//! returns the loss and, in the same pass, its gradient with respect to the render.
//!
//! # Definition
//! For a render `x` and a target `y`, both `[H, W, C]`, over all `N = H W C` values:
//! - `L1 = mean |x - y|`;
//! - `SSIM = mean S`, with per value `S = (2 mu_x mu_y + C1)(2 s_xy + C2) /
//!   ((mu_x^2 + mu_y^2 + C1)(s_x + s_y + C2))`, the local statistics taken per channel under an
//!   11x11 Gaussian window of sigma 1.5 ([`SSIM_WINDOW`], [`SSIM_SIGMA`]) with zero padding,
//!   `C1 = 0.01^2`, `C2 = 0.03^2` (Wang et al. 2004, the form 3DGS trains with).
//!
//! # Why fused
//! As Burn tensor ops the SSIM is two depthwise convolutions over five stacked statistics, and
//! its autodiff replays them, which on the CPU dominates a training step (the `micro` profile in
//! `docs/PROFILING.md` has the numbers, machine and date). Here the window is applied as two separable passes over
//! contiguous rows, and the backward is derived by hand: the gradient of `S` with respect to the
//! five blurred statistics at each pixel is three maps (`mu_x`, `E[x^2]` and `E[xy]`; the
//! target's statistics are constants), and since the zero-padded blur with a symmetric window
//! is self-adjoint, `dL/dx = G*g_mu + 2 x G*g_xx + y G*g_xy` plus the L1 term. The op computes
//! that gradient during the forward (the loss is a scalar, so the backward only scales it).
//!
//! # Implementations
//! - `cpu.rs`: rayon over rows, generic over `f32`/`f64`, deterministic (per-row sums in `f64`
//!   reduced in row order);
//! - `cube.rs`: four CubeCL kernels (row blur of the statistics, column blur plus the SSIM map,
//!   row blur of the gradient maps, column blur plus the gradient);
//! - `ndarray.rs`, `fusion.rs`, `autodiff.rs`: the [`LossOps`] impls for each backend. The target is
//!   data: no gradient flows into it.

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

/// Side of the SSIM window, pixels.
pub const SSIM_WINDOW: usize = 11;
/// Standard deviation of the SSIM window, pixels.
pub const SSIM_SIGMA: f64 = 1.5;
/// The SSIM stabiliser on the means, `(0.01 L)^2` for a dynamic range `L = 1`.
pub const SSIM_C1: f64 = 0.01 * 0.01;
/// The SSIM stabiliser on the variances, `(0.03 L)^2`.
pub const SSIM_C2: f64 = 0.03 * 0.03;

/// The normalised 1D taps of the separable SSIM window (sum 1, symmetric).
pub fn ssim_taps() -> [f64; SSIM_WINDOW] {
    let half = (SSIM_WINDOW / 2) as f64;
    let raw: [f64; SSIM_WINDOW] = core::array::from_fn(|i| {
        let d = i as f64 - half;
        (-d * d / (2.0 * SSIM_SIGMA * SSIM_SIGMA)).exp()
    });
    let sum: f64 = raw.iter().sum();
    raw.map(|v| v / sum)
}

/// Why the loss cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossError {
    /// The render and the target differ in shape.
    #[error("render {rendered:?} and target {target:?} differ in shape")]
    ShapeMismatch {
        /// The render's `[H, W, C]`.
        rendered: [usize; 3],
        /// The target's `[H, W, C]`.
        target: [usize; 3],
    },
    /// A host buffer whose length is not `H W C`.
    #[error("the {what} buffer holds {len} values, expected {expected}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        len: usize,
        /// `H W C`.
        expected: usize,
    },
    /// An image with no pixels or no channels.
    #[error("the images are empty ({0:?})")]
    Empty([usize; 3]),
    /// `ssim_lambda` outside `[0, 1]` or not finite.
    #[error("ssim_lambda is {0}; it must lie in [0, 1]")]
    Lambda(f64),
}

/// What the op computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossOptions {
    /// Weight of `1 - SSIM` (3DGS: 0.2); `1 - ssim_lambda` weighs the L1 term.
    pub ssim_lambda: f64,
}

impl Default for LossOptions {
    fn default() -> Self {
        Self { ssim_lambda: 0.2 }
    }
}

/// Which of the op's outputs a caller takes: a training step that does not read its loss needs
/// the gradient alone, and on a GPU the loss's sum over the image is one launch more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossOutputs {
    /// The loss alone.
    Value,
    /// The gradient alone.
    Gradient,
    /// Both.
    Both,
}

impl LossOutputs {
    /// Whether the loss is asked for.
    pub fn value(self) -> bool {
        matches!(self, LossOutputs::Value | LossOutputs::Both)
    }

    /// Whether the gradient is asked for.
    pub fn gradient(self) -> bool {
        matches!(self, LossOutputs::Gradient | LossOutputs::Both)
    }
}

/// The op's outputs as backend primitives.
#[derive(Debug, Clone)]
pub struct LossPrimitives<B: Backend> {
    /// The loss, `[1]`, when asked for.
    pub loss: Option<FloatTensor<B>>,
    /// `dloss/drendered` `[H, W, C]`, when asked for.
    pub grad: Option<FloatTensor<B>>,
}

fn check(rendered: [usize; 3], target: [usize; 3], options: LossOptions) -> Result<(), LossError> {
    if rendered != target {
        return Err(LossError::ShapeMismatch { rendered, target });
    }
    if rendered.contains(&0) {
        return Err(LossError::Empty(rendered));
    }
    if !(0.0..=1.0).contains(&options.ssim_lambda) {
        return Err(LossError::Lambda(options.ssim_lambda));
    }
    Ok(())
}

/// The fused photometric loss on a backend: what [`photometric_loss`] and [`ssim`] dispatch to.
/// Implemented for every backend Ember supports, each in its own file of this folder.
pub trait LossOps: Backend {
    /// The fused photometric loss (see the [module docs](self) for the contract) of `rendered`
    /// `[H, W, C]` against `target` `[H, W, C]`: the loss `[1]` and its gradient with respect
    /// to `rendered` `[H, W, C]`, those that `outputs` asks for. On `Autodiff` the loss is
    /// always computed, and differentiable with respect to `rendered`.
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        outputs: LossOutputs,
    ) -> LossPrimitives<Self>;
}

/// The training loss `(1 - lambda) L1 + lambda (1 - SSIM)` of a render `[H, W, C]` against its
/// target `[H, W, C]` (values nominally in `[0, 1]`), as a one-element tensor.
///
/// Differentiable with respect to `rendered` under `Autodiff` (the gradient is computed in the
/// forward pass); the target is treated as data.
pub fn photometric_loss<B: LossOps>(
    rendered: Tensor<B, 3>,
    target: Tensor<B, 3>,
    options: LossOptions,
) -> Result<Tensor<B, 1>, LossError> {
    check(rendered.dims(), target.dims(), options)?;
    let out = B::photometric_loss_forward(
        rendered.into_primitive().tensor(),
        target.into_primitive().tensor(),
        options,
        LossOutputs::Value,
    );
    let loss = out.loss.expect("asked for the loss");
    Ok(Tensor::from_primitive(TensorPrimitive::Float(loss)))
}

/// Mean SSIM of two `[H, W, C]` images (1 for identical images), as a one-element tensor; not
/// differentiated (a metric). Same window and constants as [`photometric_loss`].
pub fn ssim<B: LossOps>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Result<Tensor<B, 1>, LossError> {
    let options = LossOptions { ssim_lambda: 1.0 };
    check(x.dims(), y.dims(), options)?;
    let out = B::photometric_loss_forward(
        x.detach().into_primitive().tensor(),
        y.into_primitive().tensor(),
        options,
        LossOutputs::Value,
    );
    let loss = out.loss.expect("asked for the loss");
    let dssim = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(loss));
    Ok(dssim.neg() + 1.0)
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
