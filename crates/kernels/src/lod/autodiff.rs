//! The level-of-detail op on `Autodiff<B>`: `B`'s implementation on the inner tensors, the
//! weights and the gathered rows untracked (the cut is a choice of what to draw, and its render
//! an image to look at, not a differentiable quantity).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{LodInputs, LodNodes, LodOps, LodView};

impl<B: LodOps, C: CheckpointStrategy> LodOps for Autodiff<B, C> {
    const GATHERS_CUT: bool = B::GATHERS_CUT;

    fn lod_weights(inputs: LodInputs<Self>, view: &LodView) -> FloatTensor<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let out = B::lod_weights(
            LodInputs {
                centres: inner(inputs.centres),
                radii: inner(inputs.radii),
                sizes: inner(inputs.sizes),
                parents: <Autodiff<B, C> as AutodiffBackend>::int_inner(inputs.parents),
                leaves: inputs.leaves,
            },
            view,
        );
        <Autodiff<B, C> as AutodiffBackend>::from_inner(out)
    }

    fn lod_gather(nodes: LodNodes<Self>, rows: &[u32], weights: &[f32]) -> LodNodes<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let outer = |t| <Autodiff<B, C> as AutodiffBackend>::from_inner(t);
        let g = B::lod_gather(
            LodNodes {
                means: inner(nodes.means),
                quats: inner(nodes.quats),
                log_scales: inner(nodes.log_scales),
                opacity_logits: inner(nodes.opacity_logits),
                sh_dc: inner(nodes.sh_dc),
                sh_rest: inner(nodes.sh_rest),
            },
            rows,
            weights,
        );
        LodNodes {
            means: outer(g.means),
            quats: outer(g.quats),
            log_scales: outer(g.log_scales),
            opacity_logits: outer(g.opacity_logits),
            sh_dc: outer(g.sh_dc),
            sh_rest: outer(g.sh_rest),
        }
    }
}
