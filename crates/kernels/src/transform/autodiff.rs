//! The transform on `Autodiff<B>`: `B`'s kernel on the inner tensors, outputs untracked (the
//! op edits a scene; it is not part of a differentiable computation).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;

use super::TransformOps;
use super::{Similarity, TransformInputs, TransformPrimitives};

impl<B: TransformOps, C: CheckpointStrategy> TransformOps for Autodiff<B, C> {
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let out = B::transform_forward(
            TransformInputs {
                means: inner(inputs.means),
                quats: inner(inputs.quats),
                log_scales: inner(inputs.log_scales),
                sh_rest: inner(inputs.sh_rest),
            },
            similarities,
        );
        let outer = |t| <Autodiff<B, C> as AutodiffBackend>::from_inner(t);
        TransformPrimitives {
            means: outer(out.means),
            quats: outer(out.quats),
            log_scales: outer(out.log_scales),
            sh_rest: outer(out.sh_rest),
        }
    }
}
