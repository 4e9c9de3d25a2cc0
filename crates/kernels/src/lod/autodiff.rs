//! The level-of-detail op on `Autodiff<B>`: `B`'s implementation on the inner tensors, the
//! weights and the gathered rows untracked (the cut is a choice of what to draw, and its render
//! an image to look at, not a differentiable quantity; see [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{LodInputs, LodNodes, LodOps, LodView};
use crate::untracked::{Untracked, untracked_bundle};

untracked_bundle!(LodInputs { centres, radii, sizes; int parents; plain leaves });
untracked_bundle!(LodNodes { means, quats, log_scales, opacity_logits, sh_dc, sh_rest });

impl<B: LodOps, C: CheckpointStrategy> LodOps for Autodiff<B, C> {
    const GATHERS_CUT: bool = B::GATHERS_CUT;

    fn lod_weights(inputs: LodInputs<Self>, view: &LodView) -> FloatTensor<Self> {
        <Self as AutodiffBackend>::from_inner(B::lod_weights(inputs.into_inner(), view))
    }

    fn lod_gather(nodes: LodNodes<Self>, rows: &[u32], weights: &[f32]) -> LodNodes<Self> {
        Untracked::from_inner(B::lod_gather(nodes.into_inner(), rows, weights))
    }

    fn lod_leaves(nodes: LodNodes<Self>, leaves: usize) -> LodNodes<Self> {
        Untracked::from_inner(B::lod_leaves(nodes.into_inner(), leaves))
    }
}
