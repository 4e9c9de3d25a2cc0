//! The transform on `Autodiff<B>`: `B`'s kernel on the inner tensors, outputs untracked (the
//! op edits a scene; it is not part of a differentiable computation).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;

use super::{Similarity, TransformInputs, TransformPrimitives};
use crate::SplatBackend;

/// [`SplatBackend::transform_forward`] on `Autodiff<B>`.
pub(crate) fn forward<B: SplatBackend, C: CheckpointStrategy>(
    inputs: TransformInputs<Autodiff<B, C>>,
    similarities: &[Similarity],
) -> TransformPrimitives<Autodiff<B, C>> {
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
