//! The Adam update on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (an optimizer step is not part of a differentiable computation; see
//! [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{AdamGroup, AdamOps, AdamPrimitives, AdamStep};
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

    fn adam_steps_visible(
        groups: Vec<AdamGroup<Self>>,
        visible: FloatTensor<Self>,
    ) -> Vec<AdamPrimitives<Self>> {
        let inner = groups
            .into_iter()
            .map(|g| AdamGroup {
                state: g.state.into_inner(),
                grad: <Self as AutodiffBackend>::inner(g.grad),
                step: g.step,
            })
            .collect();
        let visible = <Self as AutodiffBackend>::inner(visible);
        B::adam_steps_visible(inner, visible)
            .into_iter()
            .map(Untracked::from_inner)
            .collect()
    }
}
