//! The projection on `Fusion<B>` (burn's `Wgpu` and `Cuda`): each call is recorded in the fusion
//! stream as a custom operation that, when the stream runs, calls `B`'s implementation on the
//! real tensor handles. Custom operations are fusion barriers and are not fused themselves.

use core::marker::PhantomData;

use burn::tensor::Element;
use burn::tensor::backend::BackendTypes;
use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::{
    CameraParams, PACKED_WIDTH, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::SplatBackend;

/// The recorded forward: inputs `[means, quats, log_scales, opacity_logits, sh_dc, sh_rest]`,
/// outputs
/// `[packed, extents]`.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    camera: CameraParams,
    options: ProjectOptions,
    _backend: PhantomData<B>,
}

/// The inputs of a recorded call, read back from the handle container.
fn inputs<B: FusionBackend>(
    h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>,
    [means, quats, log_scales, opacity_logits, sh_dc, sh_rest]: [&TensorIr; 6],
) -> ProjectInputs<B> {
    ProjectInputs {
        means: h.get_float_tensor::<B>(means),
        quats: h.get_float_tensor::<B>(quats),
        log_scales: h.get_float_tensor::<B>(log_scales),
        opacity_logits: h.get_float_tensor::<B>(opacity_logits),
        sh_dc: h.get_float_tensor::<B>(sh_dc),
        sh_rest: h.get_float_tensor::<B>(sh_rest),
    }
}

impl<B: FusionBackend + SplatBackend> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (inputs_ir, [packed, extents]) = self.desc.as_fixed::<6, 2>();
        let inputs = inputs::<B>(h, inputs_ir.each_ref());
        let out = B::project_forward(inputs, self.camera, self.options);
        h.register_float_tensor::<B>(&packed.id, out.packed);
        h.register_int_tensor::<B>(&extents.id, out.extents);
    }
}

/// The recorded backward: inputs `[means, quats, log_scales, opacity_logits, sh_dc, sh_rest,
/// grad_packed]`, outputs the gradients of the first six.
#[derive(Debug)]
struct BackwardOp<B> {
    desc: CustomOpIr,
    camera: CameraParams,
    options: ProjectOptions,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + SplatBackend> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (
            [
                means,
                quats,
                log_scales,
                opacity_logits,
                sh_dc,
                sh_rest,
                grad_packed,
            ],
            outputs,
        ) = self.desc.as_fixed::<7, 6>();
        let inputs = inputs::<B>(
            h,
            [means, quats, log_scales, opacity_logits, sh_dc, sh_rest],
        );
        let grad_packed = h.get_float_tensor::<B>(grad_packed);
        let g = B::project_backward(inputs, grad_packed, self.camera, self.options);
        let grads = [
            g.means,
            g.quats,
            g.log_scales,
            g.opacity_logits,
            g.sh_dc,
            g.sh_rest,
        ];
        for (ir, tensor) in outputs.iter().zip(grads) {
            h.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

/// An output of the same shape and dtype as `like`, to be written by the recorded operation.
fn output_like<R: FusionRuntime>(like: &FusionTensor<R>) -> TensorIr {
    TensorIr::uninit(
        like.client.create_empty_handle(),
        like.shape.clone(),
        like.dtype,
    )
}

/// [`SplatBackend::project_forward`] on `Fusion<B>`.
pub(crate) fn forward<B: FusionBackend + SplatBackend>(
    inputs: ProjectInputs<Fusion<B>>,
    camera: CameraParams,
    options: ProjectOptions,
) -> ProjectPrimitives<Fusion<B>> {
    let ProjectInputs {
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
    } = inputs;
    let client = means.client.clone();
    let n = means.shape[0];
    let streams = OperationStreams::with_inputs([
        &means,
        &quats,
        &log_scales,
        &opacity_logits,
        &sh_dc,
        &sh_rest,
    ]);
    let packed = TensorIr::uninit(
        client.create_empty_handle(),
        [n, PACKED_WIDTH].into(),
        means.dtype,
    );
    let extents = TensorIr::uninit(
        client.create_empty_handle(),
        [n, 3].into(),
        <B as BackendTypes>::IntElem::dtype(),
    );
    let desc = CustomOpIr::new(
        "ember_project_forward",
        &[
            means.into_ir(),
            quats.into_ir(),
            log_scales.into_ir(),
            opacity_logits.into_ir(),
            sh_dc.into_ir(),
            sh_rest.into_ir(),
        ],
        &[packed, extents],
    );
    let op = ForwardOp::<B> {
        desc: desc.clone(),
        camera,
        options,
        _backend: PhantomData,
    };
    let [packed, extents] = client
        .register(streams, OperationIr::Custom(desc), op)
        .outputs();
    ProjectPrimitives { packed, extents }
}

/// [`SplatBackend::project_backward`] on `Fusion<B>`.
pub(crate) fn backward<B: FusionBackend + SplatBackend>(
    inputs: ProjectInputs<Fusion<B>>,
    grad_packed: FloatTensor<Fusion<B>>,
    camera: CameraParams,
    options: ProjectOptions,
) -> ProjectGrads<Fusion<B>> {
    let ProjectInputs {
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
    } = inputs;
    let client = means.client.clone();
    let streams = OperationStreams::with_inputs([
        &means,
        &quats,
        &log_scales,
        &opacity_logits,
        &sh_dc,
        &sh_rest,
        &grad_packed,
    ]);
    let outputs = [
        output_like(&means),
        output_like(&quats),
        output_like(&log_scales),
        output_like(&opacity_logits),
        output_like(&sh_dc),
        output_like(&sh_rest),
    ];
    let desc = CustomOpIr::new(
        "ember_project_backward",
        &[
            means.into_ir(),
            quats.into_ir(),
            log_scales.into_ir(),
            opacity_logits.into_ir(),
            sh_dc.into_ir(),
            sh_rest.into_ir(),
            grad_packed.into_ir(),
        ],
        &outputs,
    );
    let op = BackwardOp::<B> {
        desc: desc.clone(),
        camera,
        options,
        _backend: PhantomData,
    };
    let [means, quats, log_scales, opacity_logits, sh_dc, sh_rest] = client
        .register(streams, OperationIr::Custom(desc), op)
        .outputs();
    ProjectGrads {
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
    }
}
