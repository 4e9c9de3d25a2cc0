//! The Adam update on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (an optimizer step is not part of a differentiable computation).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{AdamOps, AdamPrimitives, AdamStep};

impl<B: AdamOps, C: CheckpointStrategy> AdamOps for Autodiff<B, C> {
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let outer = |t| <Autodiff<B, C> as AutodiffBackend>::from_inner(t);
        let updated = B::adam_step(
            AdamPrimitives {
                param: inner(state.param),
                exp_avg: inner(state.exp_avg),
                exp_avg_sq: inner(state.exp_avg_sq),
            },
            inner(grad),
            step,
        );
        AdamPrimitives {
            param: outer(updated.param),
            exp_avg: outer(updated.exp_avg),
            exp_avg_sq: outer(updated.exp_avg_sq),
        }
    }
}
