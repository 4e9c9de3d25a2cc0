//! The Adam update on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (an optimizer step is not part of a differentiable computation; see
//! [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{AdamOps, AdamPrimitives, AdamStep};
use crate::untracked::{Untracked, untracked_bundle};

untracked_bundle!(AdamPrimitives { param, exp_avg, exp_avg_sq });

impl<B: AdamOps, C: CheckpointStrategy> AdamOps for Autodiff<B, C> {
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        let grad = <Self as AutodiffBackend>::inner(grad);
        Untracked::from_inner(B::adam_step(state.into_inner(), grad, step))
    }
}
