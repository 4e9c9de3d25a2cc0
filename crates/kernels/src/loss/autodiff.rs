//! The loss on `Autodiff<B>`: when the render is tracked, the forward asks `B` for the gradient
//! too and keeps it; the `Backward` only scales it by the incoming gradient of the scalar.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Shape, TensorMetadata};

use super::LossOps;
use super::{LossOptions, LossOutputs, LossPrimitives};

#[derive(Debug)]
struct LossBackward;

impl<B: LossOps> Backward<B, 1> for LossBackward {
    /// `dloss/drendered` `[H, W, C]` from the forward.
    type State = FloatTensor<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let [rendered] = ops.parents;
        let Some(node) = rendered else {
            return;
        };
        // `[1]` -> `[1, 1, 1]`, broadcast over the image.
        let grad_loss = B::float_reshape(grads.consume::<B>(&ops.node), Shape::new([1, 1, 1]));
        let grad = ops.state;
        debug_assert_eq!(grad.shape().num_dims(), 3);
        grads.register::<B>(node.id, B::float_mul(grad, grad_loss));
    }
}

impl<B: LossOps, C: CheckpointStrategy> LossOps for Autodiff<B, C> {
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        outputs: LossOutputs,
    ) -> LossPrimitives<Self> {
        let inner_target = target.primitive;
        match LossBackward
            .prepare::<C>([rendered.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::photometric_loss_forward(
                    rendered.primitive,
                    inner_target,
                    options,
                    LossOutputs::Both,
                );
                let grad = out.grad.expect("asked for the gradient");
                let loss = out.loss.expect("asked for the loss");
                LossPrimitives {
                    loss: Some(prep.finish(grad.clone(), loss)),
                    grad: outputs
                        .gradient()
                        .then(|| Autodiff::<B, C>::from_inner(grad)),
                }
            }
            OpsKind::UnTracked(prep) => {
                let outputs = match outputs {
                    LossOutputs::Gradient => LossOutputs::Both,
                    asked => asked,
                };
                let out =
                    B::photometric_loss_forward(rendered.primitive, inner_target, options, outputs);
                LossPrimitives {
                    loss: out.loss.map(|loss| prep.finish(loss)),
                    grad: out.grad.map(Autodiff::<B, C>::from_inner),
                }
            }
        }
    }
}
