//! The projection on `Fusion<B>` (burn's `Wgpu` and `Cuda`): each call is recorded in the fusion
//! stream as a custom operation that, when the stream runs, calls `B`'s implementation on the
//! real tensor handles. Custom operations are fusion barriers and are not fused themselves.

use core::marker::PhantomData;

use burn::tensor::Element;
use burn::tensor::backend::BackendTypes;
use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::ProjectOps;
use super::{
    CameraParams, PACKED_WIDTH, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::cube_alloc::{fusion_output, fusion_output_like};

/// The recorded forward: inputs `[means, quats, log_scales, opacity_logits, sh_dc, sh_rest]`,
/// outputs `[packed, extents]`.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    cameras: Vec<CameraParams>,
    options: ProjectOptions,
    _backend: PhantomData<B>,
}

/// The inputs of a recorded call, read back from the handle container.
fn inputs<B: FusionBackend>(
    h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    irs: [&TensorIr; 6],
) -> ProjectInputs<B> {
    ProjectInputs::from_array(irs.map(|ir| h.get_float_tensor::<B>(ir)))
}

impl<B: FusionBackend + ProjectOps> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (inputs_ir, [packed, extents]) = self.desc.as_fixed::<6, 2>();
        let inputs = inputs::<B>(h, inputs_ir.each_ref());
        let out = B::project_forward(inputs, &self.cameras, self.options);
        h.register_float_tensor::<B>(&packed.id, out.packed);
        h.register_int_tensor::<B>(&extents.id, out.extents);
    }
}

/// The recorded backward: inputs `[means, quats, log_scales, opacity_logits, sh_dc, sh_rest,
/// grad_packed]`, outputs the gradients of the first six.
#[derive(Debug)]
struct BackwardOp<B> {
    desc: CustomOpIr,
    cameras: Vec<CameraParams>,
    options: ProjectOptions,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + ProjectOps> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (irs, outputs) = self.desc.as_fixed::<7, 6>();
        let [input_irs @ .., grad_packed] = irs.each_ref();
        let inputs = inputs::<B>(h, input_irs);
        let grad_packed = h.get_float_tensor::<B>(grad_packed);
        let g = B::project_backward(inputs, grad_packed, &self.cameras, self.options);
        for (ir, tensor) in outputs.iter().zip(g.into_array()) {
            h.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

impl<B: FusionBackend + ProjectOps> ProjectOps for Fusion<B> {
    fn project_forward(
        inputs: ProjectInputs<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        let inputs = inputs.into_array();
        let (client, rows, dtype) = (
            inputs[0].client.clone(),
            cameras.len() * inputs[0].shape[0],
            inputs[0].dtype,
        );
        let streams = OperationStreams::with_inputs(&inputs);
        let packed = fusion_output(&inputs[0], [rows, PACKED_WIDTH], dtype);
        let extents = fusion_output(&inputs[0], [rows, 3], <B as BackendTypes>::IntElem::dtype());
        let desc = CustomOpIr::new(
            "ember_project_forward",
            &inputs.map(|t| t.into_ir()),
            &[packed, extents],
        );
        let op = ForwardOp::<B> {
            desc: desc.clone(),
            cameras: cameras.to_vec(),
            options,
            _backend: PhantomData,
        };
        let [packed, extents] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        ProjectPrimitives { packed, extents }
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        let inputs = inputs.into_array();
        let client = inputs[0].client.clone();
        let streams = OperationStreams::with_inputs(inputs.iter().chain([&grad_packed]));
        let outputs = inputs.each_ref().map(fusion_output_like);
        let irs: Vec<TensorIr> = inputs
            .into_iter()
            .chain([grad_packed])
            .map(|t| t.into_ir())
            .collect();
        let desc = CustomOpIr::new("ember_project_backward", &irs, &outputs);
        let op = BackwardOp::<B> {
            desc: desc.clone(),
            cameras: cameras.to_vec(),
            options,
            _backend: PhantomData,
        };
        let grads: [FloatTensor<Fusion<B>>; 6] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        ProjectGrads::from_array(grads)
    }
}
