//! The loss on `Fusion<B>` (burn's `Wgpu` and `Cuda`): recorded in the fusion stream as a
//! custom operation (its output shapes are known up front) that runs `B`'s kernels on the real
//! tensor handles.

use core::marker::PhantomData;

use burn::tensor::Shape;
use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr};

use super::LossOps;
use super::{LossOptions, LossOutputs, LossPrimitives};
use crate::cube_alloc::fusion_output;

/// The recorded op: inputs `[rendered, target]`, outputs `[loss]`, `[grad]` or `[loss, grad]`
/// as `outputs` says.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    options: LossOptions,
    outputs: LossOutputs,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + LossOps> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let [rendered, target] = [&self.desc.inputs[0], &self.desc.inputs[1]];
        let out = B::photometric_loss_forward(
            h.get_float_tensor::<B>(rendered),
            h.get_float_tensor::<B>(target),
            self.options,
            self.outputs,
        );
        let mut irs = self.desc.outputs.iter();
        for tensor in [out.loss, out.grad].into_iter().flatten() {
            let ir = irs.next().expect("one output per tensor asked for");
            h.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

impl<B: FusionBackend + LossOps> LossOps for Fusion<B> {
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        outputs: LossOutputs,
    ) -> LossPrimitives<Self> {
        let client = rendered.client.clone();
        let dtype = rendered.dtype;
        let image_shape: Shape = rendered.shape.clone();
        let streams = OperationStreams::with_inputs([&rendered, &target]);
        let output = |shape: Shape| fusion_output(&rendered, shape, dtype);
        let mut irs = Vec::with_capacity(2);
        if outputs.value() {
            irs.push(output(Shape::new([1])));
        }
        if outputs.gradient() {
            irs.push(output(image_shape));
        }
        let desc = CustomOpIr::new(
            "ember_photometric_loss",
            &[rendered.into_ir(), target.into_ir()],
            &irs,
        );
        let op = ForwardOp::<B> {
            desc: desc.clone(),
            options,
            outputs,
            _backend: PhantomData,
        };
        let mut tensors = client
            .register(streams, OperationIr::Custom(desc), op)
            .into_iter();
        LossPrimitives {
            loss: outputs.value().then(|| tensors.next()).flatten(),
            grad: outputs.gradient().then(|| tensors.next()).flatten(),
        }
    }
}
