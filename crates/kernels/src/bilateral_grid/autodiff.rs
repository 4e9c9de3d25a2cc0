//! The bilateral grid on `Autodiff<B>`: the forward runs `B`'s kernel and keeps both inputs
//! (checkpointed, not copied); a hand-written `Backward` runs `B::bilateral_grid_backward` once
//! and hands each tracked input its gradient.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{BilateralGridGrads, BilateralGridOps};

#[derive(Debug)]
struct SliceBackward;

impl<B: BilateralGridOps> Backward<B, 2> for SliceBackward {
    /// The image and the grid.
    type State = [NodeId; 2];

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let [rgb, grid] = ops
            .state
            .map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
        let BilateralGridGrads {
            rgb: grad_rgb,
            grid: grad_grid,
        } = B::bilateral_grid_backward(rgb, grid, grad);
        let [rgb_node, grid_node] = ops.parents;
        for (node, grad) in [(rgb_node, grad_rgb), (grid_node, grad_grid)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: BilateralGridOps, C: CheckpointStrategy> BilateralGridOps for Autodiff<B, C> {
    fn bilateral_grid_forward(rgb: FloatTensor<Self>, grid: FloatTensor<Self>) -> FloatTensor<Self> {
        let nodes = [rgb.node.clone(), grid.node.clone()];
        let inner = || B::bilateral_grid_forward(rgb.primitive.clone(), grid.primitive.clone());
        match SliceBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(mut prep) => {
                let state = [prep.checkpoint(&rgb), prep.checkpoint(&grid)];
                prep.finish(state, inner())
            }
            OpsKind::UnTracked(prep) => prep.finish(inner()),
        }
    }

    fn bilateral_grid_backward(
        rgb: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> BilateralGridGrads<Self> {
        // The backward called directly (a step writing its own backward) is not itself
        // differentiated: its outputs are untracked.
        let grads = B::bilateral_grid_backward(rgb.primitive, grid.primitive, grad.primitive);
        BilateralGridGrads {
            rgb: Autodiff::<B, C>::from_inner(grads.rgb),
            grid: Autodiff::<B, C>::from_inner(grads.grid),
        }
    }
}
