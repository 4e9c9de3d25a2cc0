//! The transform on `Autodiff<B>`: `B`'s kernel on the inner tensors, outputs untracked (the
//! op edits a scene; it is not part of a differentiable computation; see [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;

use super::{Similarity, TransformInputs, TransformOps, TransformPrimitives};
use crate::untracked::{Untracked, untracked_bundle};

untracked_bundle!(TransformInputs { means, quats, log_scales, sh_rest });
untracked_bundle!(TransformPrimitives { means, quats, log_scales, sh_rest });

impl<B: TransformOps, C: CheckpointStrategy> TransformOps for Autodiff<B, C> {
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        Untracked::from_inner(B::transform_forward(inputs.into_inner(), similarities))
    }
}
