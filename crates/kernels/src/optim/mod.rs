//! One Adam update of a parameter tensor and its two moments, fused.
//!
//! # Definition
//! PyTorch's Adam (the form 3DGS trains with), element by element, at step `t >= 1` (the number
//! of updates this parameter has had, this one included):
//!
//! ```text
//! m' = beta1 m + (1 - beta1) g
//! v' = beta2 v + (1 - beta2) g^2
//! p' = p - lr / (1 - beta1^t) * m' / (sqrt(v') / sqrt(1 - beta2^t) + eps)
//! ```
//!
//! The scalars are computed in `f64` and rounded once to the tensor's float type; each
//! product, quotient and sum is then rounded in that type, in the order written, so the CPU
//! pass gives the same bits as [`adam_step_tensor_ops`] on ndarray. GPU kernels compute the
//! same operations in the same order; their compilers may contract a product and a sum into one
//! fused multiply-add, so they agree to rounding.
//!
//! # Implementations
//! - [`adam_step_tensor_ops`]: Burn tensor ops, the default of [`AdamOps::adam_step`] for any
//!   other backend, and the reference the others are tested against;
//! - `cpu.rs`: one rayon pass over the four arrays, for ndarray, where each Burn op would be a
//!   pass of its own over a fresh buffer;
//! - `cube.rs`: one CubeCL kernel over the four tensors as flat vectors (`fusion.rs` records it
//!   as one fusion operation: the host records one operation per parameter group instead of
//!   the tensor program's dozen, which Burn's fusion would fuse into one kernel);
//! - `autodiff.rs`: the inner backend's update on the inner tensors; the result is untracked.

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
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};

/// The settings of one Adam update.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// `t`: the updates this parameter has had, this one included (at least 1).
    pub step: u32,
}

impl AdamStep {
    /// `(beta1, 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^t), eps, lr / (1 - beta1^t))`:
    /// the scalars of the update, in `f64`.
    pub fn scalars(&self) -> [f64; 7] {
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        let bias1 = 1.0 - self.beta1.powi(t);
        let bias2 = 1.0 - self.beta2.powi(t);
        [
            self.beta1,
            1.0 - self.beta1,
            self.beta2,
            1.0 - self.beta2,
            bias2.sqrt(),
            self.eps,
            self.lr / bias1,
        ]
    }
}

/// A parameter and its moments, as backend primitives of one shape.
#[derive(Debug, Clone)]
pub struct AdamPrimitives<B: Backend> {
    /// The parameter.
    pub param: FloatTensor<B>,
    /// The first moment.
    pub exp_avg: FloatTensor<B>,
    /// The second moment.
    pub exp_avg_sq: FloatTensor<B>,
}

/// One group of [`AdamOps::adam_steps`]: a parameter with its moments, its gradient (all of one
/// shape) and the settings of its update.
#[derive(Debug, Clone)]
pub struct AdamGroup<B: Backend> {
    /// The parameter and its moments.
    pub state: AdamPrimitives<B>,
    /// The gradient.
    pub grad: FloatTensor<B>,
    /// The update's settings.
    pub step: AdamStep,
}

/// [`adam_step`]'s result: the updated parameter and moments.
#[derive(Debug, Clone)]
pub struct AdamUpdate<B: Backend, const D: usize> {
    /// The parameter after the update.
    pub param: Tensor<B, D>,
    /// The first moment after the update.
    pub exp_avg: Tensor<B, D>,
    /// The second moment after the update.
    pub exp_avg_sq: Tensor<B, D>,
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptimError {
    /// A tensor's shape differs from the parameter's.
    #[error("adam: `{name}` has shape {got:?}, the parameter {expected:?}")]
    Shape {
        /// The tensor's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The parameter's shape.
        expected: Vec<usize>,
    },
    /// The step count is zero (the first update is step 1).
    #[error("adam: step 0; the first update is step 1")]
    StepZero,
}

/// The fused Adam update on a backend: what [`adam_step`] dispatches to.
///
/// The default method runs [`adam_step_tensor_ops`]; ndarray (`ndarray.rs`), the CubeCL backends
/// (`cube.rs`), their fusion (`fusion.rs`) and autodiff (`autodiff.rs`) override it.
pub trait AdamOps: Backend {
    /// One Adam update (see the [module docs](self) for the formula) of `state` with `grad`, all
    /// of one shape: the updated parameter and moments. Not differentiable.
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        adam_step_tensor_ops(state, grad, step)
    }

    /// The updates of several groups, each what [`AdamOps::adam_step`] makes of it, in as few
    /// launches as the backend can (a training step updates six parameter groups: on a GPU,
    /// one launch instead of six). The default updates the groups one by one.
    fn adam_steps(groups: Vec<AdamGroup<Self>>) -> Vec<AdamPrimitives<Self>> {
        groups
            .into_iter()
            .map(|g| Self::adam_step(g.state, g.grad, g.step))
            .collect()
    }
}

/// One fused Adam update (see the [module docs](self)) of `param` with `grad`, given the
/// moments `exp_avg` and `exp_avg_sq`; all four of one shape, any rank. Not differentiable
/// (run it on the inner backend of an autodiff one).
pub fn adam_step<B: AdamOps, const D: usize>(
    param: Tensor<B, D>,
    grad: Tensor<B, D>,
    exp_avg: Tensor<B, D>,
    exp_avg_sq: Tensor<B, D>,
    step: &AdamStep,
) -> Result<AdamUpdate<B, D>, OptimError> {
    let expected = param.dims().to_vec();
    for (name, dims) in [
        ("grad", grad.dims()),
        ("exp_avg", exp_avg.dims()),
        ("exp_avg_sq", exp_avg_sq.dims()),
    ] {
        if dims.as_slice() != expected.as_slice() {
            return Err(OptimError::Shape {
                name,
                got: dims.to_vec(),
                expected,
            });
        }
    }
    if step.step == 0 {
        return Err(OptimError::StepZero);
    }
    let out = B::adam_step(
        AdamPrimitives {
            param: param.into_primitive().tensor(),
            exp_avg: exp_avg.into_primitive().tensor(),
            exp_avg_sq: exp_avg_sq.into_primitive().tensor(),
        },
        grad.into_primitive().tensor(),
        *step,
    );
    let tensor = |p| Tensor::from_primitive(TensorPrimitive::Float(p));
    Ok(AdamUpdate {
        param: tensor(out.param),
        exp_avg: tensor(out.exp_avg),
        exp_avg_sq: tensor(out.exp_avg_sq),
    })
}

/// The update as Burn tensor ops, in the order of the [module docs](self): the default of
/// [`AdamOps::adam_step`], and the reference of the other implementations. Inputs as
/// [`adam_step`]'s, not checked.
pub fn adam_step_tensor_ops<B: Backend>(
    state: AdamPrimitives<B>,
    grad: FloatTensor<B>,
    step: AdamStep,
) -> AdamPrimitives<B> {
    let tensor = |p| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(p));
    let flat = |p: FloatTensor<B>| {
        let n = p.shape().num_elements();
        B::float_reshape(p, [n].into())
    };
    let shape = state.param.shape();
    let [
        beta1,
        one_minus_beta1,
        beta2,
        one_minus_beta2,
        sqrt_bias2,
        eps,
        scale,
    ] = step.scalars();
    let (param, m, v, g) = (
        tensor(flat(state.param)),
        tensor(flat(state.exp_avg)),
        tensor(flat(state.exp_avg_sq)),
        tensor(flat(grad)),
    );
    let m = m * beta1 + g.clone() * one_minus_beta1;
    let v = v * beta2 + (g.clone() * g) * one_minus_beta2;
    let denom = v.clone().sqrt() / sqrt_bias2 + eps;
    let param = param - m.clone() / denom * scale;
    let back = |t: Tensor<B, 1>| B::float_reshape(t.into_primitive().tensor(), shape.clone());
    AdamPrimitives {
        param: back(param),
        exp_avg: back(m),
        exp_avg_sq: back(v),
    }
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
