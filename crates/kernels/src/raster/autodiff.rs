//! The rasterizer on `Autodiff<B>`: the forward runs `B`'s kernels and keeps their
//! [`RasterState`]; a hand-written `Backward` runs `B::rasterize_backward` once and hands
//! `packed` its gradient and the `screen_grads` probe the densification statistics.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{FloatTensor, IntTensor};

use super::RasterOps;
use super::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};

#[derive(Debug)]
struct RasterBackward;

/// What the backward needs: `packed` (checkpointed), the forward's state and the setup.
#[derive(Debug, Clone)]
struct SavedRaster<B: RasterOps> {
    packed: NodeId,
    state: RasterState<B>,
    setup: RasterSetup,
}

impl<B: RasterOps> Backward<B, 2> for RasterBackward {
    type State = SavedRaster<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad_image = grads.consume::<B>(&ops.node);
        let packed = checkpointer.retrieve_node_output::<FloatTensor<B>>(ops.state.packed);
        let g = B::rasterize_backward(packed, ops.state.state, grad_image, ops.state.setup);
        let [packed_node, probe_node] = ops.parents;
        if let Some(node) = packed_node {
            grads.register::<B>(node.id, g.packed);
        }
        if let Some(node) = probe_node {
            grads.register::<B>(node.id, g.screen_grads);
        }
    }
}

fn state_from_inner<B: RasterOps, C: CheckpointStrategy>(
    state: RasterState<B>,
) -> RasterState<Autodiff<B, C>> {
    RasterState {
        tile_offsets: state.tile_offsets,
        ids: state.ids,
        last: state.last,
        transmittance: Autodiff::<B, C>::from_inner(state.transmittance),
        order: state.order,
        pairs: state.pairs,
        extents: state.extents,
    }
}

impl<B: RasterOps, C: CheckpointStrategy> RasterOps for Autodiff<B, C> {
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        let nodes = [packed.node.clone(), screen_grads.node.clone()];
        let inner_packed = packed.primitive.clone();
        let inner_probe = screen_grads.primitive.clone();
        match RasterBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let saved_packed = prep.checkpoint(&packed);
                let out = B::rasterize_forward(inner_packed, extents, inner_probe, setup);
                let saved = SavedRaster {
                    packed: saved_packed,
                    state: out.state.clone(),
                    setup,
                };
                RasterPrimitives {
                    image: prep.finish(saved, out.image),
                    state: state_from_inner::<B, C>(out.state),
                }
            }
            OpsKind::UnTracked(prep) => {
                let out = B::rasterize_forward(inner_packed, extents, inner_probe, setup);
                RasterPrimitives {
                    image: prep.finish(out.image),
                    state: state_from_inner::<B, C>(out.state),
                }
            }
        }
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        let inner = RasterState {
            tile_offsets: state.tile_offsets,
            ids: state.ids,
            last: state.last,
            transmittance: state.transmittance.primitive,
            order: state.order,
            pairs: state.pairs,
            extents: state.extents,
        };
        let g = B::rasterize_backward(packed.primitive, inner, grad_image.primitive, setup);
        RasterGradPrimitives {
            packed: Autodiff::<B, C>::from_inner(g.packed),
            screen_grads: Autodiff::<B, C>::from_inner(g.screen_grads),
        }
    }
}
