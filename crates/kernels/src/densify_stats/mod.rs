//! 3DGS densification's per-Gaussian statistics of one view, added to running totals in one op.
//!
//! # Definition
//! For Gaussian `i` of a view `W x H` pixels, with the rasterizer's screen gradient
//! `screen_grads[i] = (dL/dx, dL/dy, _)` and the projection's `extents[i] = (rx, ry, tiles)`:
//!
//! ```text
//! seen = 1 if tiles > 0 else 0
//! gx = dL/dx * (W / 2),  gy = dL/dy * (H / 2)            (the gradient in NDC units)
//! grad_sum'      = grad_sum + sqrt(gx gx + gy gy) * seen
//! visible_steps' = visible_steps + seen
//! max_radius'    = max(max_radius, max(rx, ry) * seen)
//! ```
//!
//! Each product, sum and root is rounded in the tensors' float type in the order written, so
//! the CPU pass gives the bits of [`densify_stats_tensor_ops`] on ndarray; GPU compilers may
//! contract a product and a sum into one fused multiply-add, so they agree to rounding.
//!
//! # Implementations
//! - [`densify_stats_tensor_ops`]: Burn tensor ops, the default of
//!   [`DensifyStatsOps::accumulate_densify_stats`] and the reference of the others;
//! - `cpu.rs`: one rayon pass, for ndarray;
//! - `cube.rs`: one CubeCL kernel, one unit per Gaussian (`fusion.rs` records it as one fusion
//!   operation: the tensor program is ~20 recorded operations per step, and the GPU training
//!   step is bound by the host's recording);
//! - `autodiff.rs`: the inner backend's op on the inner tensors; the result is untracked.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};

/// The running totals, as backend primitives of shape `[N]`.
#[derive(Debug, Clone)]
pub struct DensifyStatsPrimitives<B: Backend> {
    /// Sum over the views that drew the Gaussian of its screen gradient's NDC norm.
    pub grad_sum: FloatTensor<B>,
    /// Views that drew it.
    pub visible_steps: FloatTensor<B>,
    /// Its largest screen radius (the larger box half-extent), pixels.
    pub max_radius: FloatTensor<B>,
}

/// [`accumulate_densify_stats`]'s running totals, `[N]` each (see [`DensifyStatsPrimitives`]).
#[derive(Debug, Clone)]
pub struct DensifyStats<B: Backend> {
    /// See [`DensifyStatsPrimitives::grad_sum`].
    pub grad_sum: Tensor<B, 1>,
    /// See [`DensifyStatsPrimitives::visible_steps`].
    pub visible_steps: Tensor<B, 1>,
    /// See [`DensifyStatsPrimitives::max_radius`].
    pub max_radius: Tensor<B, 1>,
}

/// The view's size in pixels, the scale of the screen gradient to NDC units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewSize {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
}

impl ViewSize {
    /// `(W / 2, H / 2)`, in `f64`.
    pub fn half(&self) -> [f64; 2] {
        [0.5 * f64::from(self.width), 0.5 * f64::from(self.height)]
    }
}

/// Why the statistics were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DensifyStatsError {
    /// A tensor's shape does not fit the others.
    #[error("densification statistics: `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shape expected from the running totals' `[N]`.
        expected: Vec<usize>,
    },
}

/// The statistics op on a backend: what [`accumulate_densify_stats`] dispatches to.
///
/// The default method runs [`densify_stats_tensor_ops`]; ndarray (`ndarray.rs`), the CubeCL
/// backends (`cube.rs`), their fusion (`fusion.rs`) and autodiff (`autodiff.rs`) override it.
pub trait DensifyStatsOps: Backend {
    /// The totals `state` (`[N]` each) with one view's `screen_grads [N, 3]` and `extents
    /// [N, 3]` added (see the [module docs](self)). Not differentiable.
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        densify_stats_tensor_ops(state, screen_grads, extents, view)
    }
}

/// Adds one view's statistics (see the [module docs](self)) to `state`: `screen_grads [N, 3]`
/// (the rasterizer's screen gradient, pixels), `extents [N, 3]` (the projection's `(rx, ry,
/// tiles)`), `state` `[N]` each. Not differentiable (run it on the inner backend of an autodiff
/// one).
pub fn accumulate_densify_stats<B: DensifyStatsOps>(
    state: DensifyStats<B>,
    screen_grads: Tensor<B, 2>,
    extents: Tensor<B, 2, Int>,
    view: ViewSize,
) -> Result<DensifyStats<B>, DensifyStatsError> {
    let n = state.grad_sum.dims()[0];
    let checks = [
        (
            "visible_steps",
            state.visible_steps.dims().to_vec(),
            vec![n],
        ),
        ("max_radius", state.max_radius.dims().to_vec(), vec![n]),
        ("screen_grads", screen_grads.dims().to_vec(), vec![n, 3]),
        ("extents", extents.dims().to_vec(), vec![n, 3]),
    ];
    for (name, got, expected) in checks {
        if got != expected {
            return Err(DensifyStatsError::Shape {
                name,
                got,
                expected,
            });
        }
    }
    let float = |t: Tensor<B, 1>| t.into_primitive().tensor();
    let out = B::accumulate_densify_stats(
        DensifyStatsPrimitives {
            grad_sum: float(state.grad_sum),
            visible_steps: float(state.visible_steps),
            max_radius: float(state.max_radius),
        },
        screen_grads.into_primitive().tensor(),
        extents.into_primitive(),
        view,
    );
    let tensor = |p| Tensor::from_primitive(TensorPrimitive::Float(p));
    Ok(DensifyStats {
        grad_sum: tensor(out.grad_sum),
        visible_steps: tensor(out.visible_steps),
        max_radius: tensor(out.max_radius),
    })
}

/// The statistics as Burn tensor ops, in the order of the [module docs](self): the default of
/// [`DensifyStatsOps::accumulate_densify_stats`], and the reference of the other
/// implementations. Inputs as [`accumulate_densify_stats`]'s, not checked.
pub fn densify_stats_tensor_ops<B: Backend>(
    state: DensifyStatsPrimitives<B>,
    screen_grads: FloatTensor<B>,
    extents: IntTensor<B>,
    view: ViewSize,
) -> DensifyStatsPrimitives<B> {
    let float = |p| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(p));
    let (grad_sum, visible_steps, max_radius) = (
        float(state.grad_sum),
        float(state.visible_steps),
        float(state.max_radius),
    );
    let n = grad_sum.dims()[0];
    let grads = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(screen_grads));
    let extents = Tensor::<B, 2, Int>::from_primitive(extents);
    let [half_w, half_h] = view.half();
    let column = |t: &Tensor<B, 2>, c: usize| t.clone().narrow(1, c, 1).reshape([n]);
    let int_column = |c: usize| extents.clone().narrow(1, c, 1).reshape([n]);
    let gx = column(&grads, 0) * half_w;
    let gy = column(&grads, 1) * half_h;
    let norm = (gx.clone() * gx + gy.clone() * gy).sqrt();
    // In the totals' float type, which need not be the backend's default.
    let dtype = grad_sum.dtype();
    let seen = int_column(2).greater_elem(0).float().cast(dtype);
    let radius = int_column(0).max_pair(int_column(1)).float().cast(dtype);
    DensifyStatsPrimitives {
        grad_sum: (grad_sum + norm * seen.clone()).into_primitive().tensor(),
        visible_steps: (visible_steps + seen.clone()).into_primitive().tensor(),
        max_radius: max_radius.max_pair(radius * seen).into_primitive().tensor(),
    }
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
