//! The projection on `Autodiff<B>`: the forward runs `B`'s kernel; a hand-written `Backward`
//! runs `B::project_backward` once and hands each tracked input its gradient. Only `packed` is
//! differentiable; the integer `extents` pass through untracked. (The `SplatBackend` impl block
//! for `Autodiff` lives with the field op and delegates here.)

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives};
use crate::SplatBackend;

#[derive(Debug)]
struct ProjectBackward;

/// What the backward needs: the six inputs (checkpointed, not copied), camera and options.
#[derive(Debug, Clone)]
struct ProjectState {
    inputs: [NodeId; 6],
    camera: CameraParams,
    options: ProjectOptions,
}

impl<B: SplatBackend> Backward<B, 6> for ProjectBackward {
    type State = ProjectState;

    fn backward(
        self,
        ops: Ops<Self::State, 6>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad_packed = grads.consume::<B>(&ops.node);
        let [means, quats, log_scales, opacity_logits, sh_dc, sh_rest] = ops
            .state
            .inputs
            .map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
        let g = B::project_backward(
            ProjectInputs {
                means,
                quats,
                log_scales,
                opacity_logits,
                sh_dc,
                sh_rest,
            },
            grad_packed,
            ops.state.camera,
            ops.state.options,
        );
        let grads_in_order = [
            g.means,
            g.quats,
            g.log_scales,
            g.opacity_logits,
            g.sh_dc,
            g.sh_rest,
        ];
        for (node, grad) in ops.parents.into_iter().zip(grads_in_order) {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// [`SplatBackend::project_forward`] for `Autodiff<B>`.
pub(crate) fn forward<B: SplatBackend, C: CheckpointStrategy>(
    inputs: ProjectInputs<Autodiff<B, C>>,
    camera: CameraParams,
    options: ProjectOptions,
) -> ProjectPrimitives<Autodiff<B, C>> {
    let ProjectInputs {
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
    } = inputs;
    let tracked = [
        &means,
        &quats,
        &log_scales,
        &opacity_logits,
        &sh_dc,
        &sh_rest,
    ];
    let nodes = tracked.map(|t| t.node.clone());
    let inner = ProjectInputs {
        means: means.primitive.clone(),
        quats: quats.primitive.clone(),
        log_scales: log_scales.primitive.clone(),
        opacity_logits: opacity_logits.primitive.clone(),
        sh_dc: sh_dc.primitive.clone(),
        sh_rest: sh_rest.primitive.clone(),
    };
    match ProjectBackward
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let state = ProjectState {
                inputs: tracked.map(|t| prep.checkpoint(t)),
                camera,
                options,
            };
            let out = B::project_forward(inner, camera, options);
            ProjectPrimitives {
                packed: prep.finish(state, out.packed),
                extents: out.extents,
            }
        }
        OpsKind::UnTracked(prep) => {
            let out = B::project_forward(inner, camera, options);
            ProjectPrimitives {
                packed: prep.finish(out.packed),
                extents: out.extents,
            }
        }
    }
}

/// [`SplatBackend::project_backward`] for `Autodiff<B>`: not differentiated itself.
pub(crate) fn backward<B: SplatBackend, C: CheckpointStrategy>(
    inputs: ProjectInputs<Autodiff<B, C>>,
    grad_packed: FloatTensor<Autodiff<B, C>>,
    camera: CameraParams,
    options: ProjectOptions,
) -> ProjectGrads<Autodiff<B, C>> {
    let g = B::project_backward(
        ProjectInputs {
            means: inputs.means.primitive,
            quats: inputs.quats.primitive,
            log_scales: inputs.log_scales.primitive,
            opacity_logits: inputs.opacity_logits.primitive,
            sh_dc: inputs.sh_dc.primitive,
            sh_rest: inputs.sh_rest.primitive,
        },
        grad_packed.primitive,
        camera,
        options,
    );
    ProjectGrads {
        means: Autodiff::<B, C>::from_inner(g.means),
        quats: Autodiff::<B, C>::from_inner(g.quats),
        log_scales: Autodiff::<B, C>::from_inner(g.log_scales),
        opacity_logits: Autodiff::<B, C>::from_inner(g.opacity_logits),
        sh_dc: Autodiff::<B, C>::from_inner(g.sh_dc),
        sh_rest: Autodiff::<B, C>::from_inner(g.sh_rest),
    }
}
