//! The projection on `Autodiff<B>`: the forward runs `B`'s kernel; a hand-written `Backward`
//! runs `B::project_backward` once and hands each tracked input its gradient. Only `packed` is
//! differentiable; the integer `extents` pass through untracked.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::ProjectOps;
use super::{CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives};

#[derive(Debug)]
struct ProjectBackward;

/// What the backward needs: the six inputs (checkpointed, not copied), cameras and options.
#[derive(Debug, Clone)]
struct ProjectState {
    inputs: [NodeId; 6],
    cameras: Vec<CameraParams>,
    options: ProjectOptions,
}

impl<B: ProjectOps> Backward<B, 6> for ProjectBackward {
    type State = ProjectState;

    fn backward(
        self,
        ops: Ops<Self::State, 6>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad_packed = grads.consume::<B>(&ops.node);
        let inputs = ops
            .state
            .inputs
            .map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
        let g = B::project_backward(
            ProjectInputs::from_array(inputs),
            grad_packed,
            &ops.state.cameras,
            ops.state.options,
        );
        for (node, grad) in ops.parents.into_iter().zip(g.into_array()) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: ProjectOps, C: CheckpointStrategy> ProjectOps for Autodiff<B, C> {
    fn project_forward(
        inputs: ProjectInputs<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        let tracked = inputs.into_array();
        let nodes = tracked.each_ref().map(|t| t.node.clone());
        let inner = ProjectInputs::from_array(tracked.each_ref().map(|t| t.primitive.clone()));
        match ProjectBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = ProjectState {
                    inputs: tracked.each_ref().map(|t| prep.checkpoint(t)),
                    cameras: cameras.to_vec(),
                    options,
                };
                let out = B::project_forward(inner, cameras, options);
                ProjectPrimitives {
                    packed: prep.finish(state, out.packed),
                    extents: out.extents,
                }
            }
            OpsKind::UnTracked(prep) => {
                let out = B::project_forward(inner, cameras, options);
                ProjectPrimitives {
                    packed: prep.finish(out.packed),
                    extents: out.extents,
                }
            }
        }
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        let inner = ProjectInputs::from_array(inputs.into_array().map(|t| t.primitive));
        let g = B::project_backward(inner, grad_packed.primitive, cameras, options);
        ProjectGrads::from_array(g.into_array().map(Autodiff::<B, C>::from_inner))
    }
}
