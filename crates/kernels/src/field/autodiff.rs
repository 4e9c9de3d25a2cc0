//! `FieldOps` for `Autodiff<B>`: the forward runs `B`'s kernel; a hand-written `Backward`
//! runs `B::field_backward` once and hands each tracked input its gradient.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::FieldOps;
use super::{FieldGrads, FieldInputs, FieldOptions};

#[derive(Debug)]
struct FieldBackward;

/// What the backward needs: the five inputs (checkpointed, not copied) and the options.
#[derive(Debug, Clone)]
struct FieldState {
    inputs: [NodeId; 5],
    options: FieldOptions,
}

impl<B: FieldOps> Backward<B, 5> for FieldBackward {
    type State = FieldState;

    fn backward(
        self,
        ops: Ops<Self::State, 5>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad_values = grads.consume::<B>(&ops.node);
        let [points, means, quats, log_scales, features] = ops
            .state
            .inputs
            .map(|id| checkpointer.retrieve_node_output::<FloatTensor<B>>(id));
        let inputs = FieldInputs {
            points,
            means,
            quats,
            log_scales,
            features,
        };
        let [n_points, n_means, n_quats, n_log_scales, n_features] = ops.parents;
        let FieldGrads {
            points,
            means,
            quats,
            log_scales,
            features,
        } = B::field_backward(inputs, grad_values, ops.state.options, n_points.is_some());
        if let (Some(node), Some(grad)) = (n_points, points) {
            grads.register::<B>(node.id, grad);
        }
        for (node, grad) in [
            (n_means, means),
            (n_quats, quats),
            (n_log_scales, log_scales),
            (n_features, features),
        ] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: FieldOps, C: CheckpointStrategy> FieldOps for Autodiff<B, C> {
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        let FieldInputs {
            points,
            means,
            quats,
            log_scales,
            features,
        } = inputs;
        let nodes = [
            points.node.clone(),
            means.node.clone(),
            quats.node.clone(),
            log_scales.node.clone(),
            features.node.clone(),
        ];
        let inner = |points: &FloatTensor<Autodiff<B, C>>,
                     means: &FloatTensor<Autodiff<B, C>>,
                     quats: &FloatTensor<Autodiff<B, C>>,
                     log_scales: &FloatTensor<Autodiff<B, C>>,
                     features: &FloatTensor<Autodiff<B, C>>| {
            B::field_forward(
                FieldInputs {
                    points: points.primitive.clone(),
                    means: means.primitive.clone(),
                    quats: quats.primitive.clone(),
                    log_scales: log_scales.primitive.clone(),
                    features: features.primitive.clone(),
                },
                options,
            )
        };
        match FieldBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(mut prep) => {
                let state = FieldState {
                    inputs: [
                        prep.checkpoint(&points),
                        prep.checkpoint(&means),
                        prep.checkpoint(&quats),
                        prep.checkpoint(&log_scales),
                        prep.checkpoint(&features),
                    ],
                    options,
                };
                let out = inner(&points, &means, &quats, &log_scales, &features);
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(inner(&points, &means, &quats, &log_scales, &features))
            }
        }
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        // The backward itself is not differentiated (no second derivatives): run the inner
        // backward on the primitives and return untracked tensors.
        let g = B::field_backward(
            FieldInputs {
                points: inputs.points.primitive,
                means: inputs.means.primitive,
                quats: inputs.quats.primitive,
                log_scales: inputs.log_scales.primitive,
                features: inputs.features.primitive,
            },
            grad_values.primitive,
            options,
            points_grad,
        );
        FieldGrads {
            points: g.points.map(Autodiff::<B, C>::from_inner),
            means: Autodiff::<B, C>::from_inner(g.means),
            quats: Autodiff::<B, C>::from_inner(g.quats),
            log_scales: Autodiff::<B, C>::from_inner(g.log_scales),
            features: Autodiff::<B, C>::from_inner(g.features),
        }
    }
}
