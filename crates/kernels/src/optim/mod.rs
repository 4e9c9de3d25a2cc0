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
//! # Visible rows only
//! [`AdamOps::adam_steps_visible`] is the sparse Adam of Taming 3DGS (Mallick et al. 2024; gsplat's
//! `SelectiveAdam`): given one weight per Gaussian (`visible`, `[N]`, every group's leading
//! dimension `N`), the rows whose weight is positive take the update above, and the others keep
//! their parameter and **both moments** bit for bit: a Gaussian no view of the step saw is not
//! pulled by momentum from earlier steps, and its moments do not decay. `t` still counts the
//! group's steps, seen or not, as in the paper.
//!
//! The scalars are computed in `f64` and rounded once to the tensor's float type; each
//! product, quotient and sum is then rounded in that type, in the order written, so the CPU
//! pass gives the same bits as [`adam_step_tensor_ops`] on ndarray. GPU kernels compute the
//! same operations in the same order; their compilers may contract a product and a sum into one
//! fused multiply-add, so they agree to rounding.
//!
//! # Implementations
//! - [`adam_step_tensor_ops`]: Burn tensor ops, the default of [`AdamOps::adam_step`] for any
//!   other backend, and the reference the others are tested against (with
//!   [`adam_steps_visible_tensor_ops`], which keeps the unseen rows by `mask_where`);
//! - `cpu.rs`: one rayon pass over the four arrays, for ndarray, where each Burn op would be a
//!   pass of its own over a fresh buffer;
//! - `cube.rs`: one CubeCL kernel over the four tensors as flat vectors (`fusion.rs` records it
//!   as one fusion operation: the host records one operation per parameter group instead of
//!   the tensor program's dozen, which Burn's fusion would fuse into one kernel); the groups of
//!   a step, with or without `visible`, in one launch;
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

    /// [`AdamOps::adam_steps`] for the rows `visible` (`[N]`) marks with a positive weight; the
    /// other rows keep their parameter and moments (see [Visible rows only](self#visible-rows-only)).
    /// Every group's leading dimension is `N` (a group without elements is returned as it came).
    /// The default runs [`adam_steps_visible_tensor_ops`].
    ///
    /// # Panics
    /// When a group with elements does not have `N` leading rows.
    fn adam_steps_visible(
        groups: Vec<AdamGroup<Self>>,
        visible: FloatTensor<Self>,
    ) -> Vec<AdamPrimitives<Self>> {
        adam_steps_visible_tensor_ops(groups, visible)
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

/// [`AdamOps::adam_steps_visible`] as Burn tensor ops: each group's [`AdamOps::adam_step`], then
/// the old values put back where `visible` is not positive (`mask_where`, so the kept rows are
/// the old bits). The default of that method, and the reference of the others.
///
/// # Panics
/// When a group with elements does not have `visible`'s `N` leading rows.
pub fn adam_steps_visible_tensor_ops<B: AdamOps>(
    groups: Vec<AdamGroup<B>>,
    visible: FloatTensor<B>,
) -> Vec<AdamPrimitives<B>> {
    let n = visible.shape().num_elements();
    let unseen = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(visible)).lower_equal_elem(0.0);
    groups
        .into_iter()
        .map(|g| {
            let shape = g.state.param.shape();
            let elements = shape.num_elements();
            if elements == 0 {
                return g.state;
            }
            assert_eq!(
                shape.as_slice().first().copied(),
                Some(n),
                "adam_steps_visible: a group's leading dimension is not the mask's length"
            );
            let width = elements / n;
            let old = g.state.clone();
            let new = B::adam_step(g.state, g.grad, g.step);
            let rows = unseen.clone().reshape([n, 1]).expand([n, width]);
            let keep = |old: FloatTensor<B>, new: FloatTensor<B>| {
                let flat = |t| {
                    Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::float_reshape(
                        t,
                        [n, width].into(),
                    )))
                };
                let kept = flat(new).mask_where(rows.clone(), flat(old));
                B::float_reshape(kept.into_primitive().tensor(), shape.clone())
            };
            AdamPrimitives {
                param: keep(old.param, new.param),
                exp_avg: keep(old.exp_avg, new.exp_avg),
                exp_avg_sq: keep(old.exp_avg_sq, new.exp_avg_sq),
            }
        })
        .collect()
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
