//! The transform on `Fusion<B>` (burn's `Wgpu` and `Cuda`): recorded in the fusion stream as a
//! custom operation that runs `B`'s kernel on the real tensor handles.

use core::marker::PhantomData;

use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput};

use super::TransformOps;
use super::{Similarity, TransformInputs, TransformPrimitives};
use crate::cube_alloc::fusion_output;

/// The recorded op: inputs `[means, quats, log_scales, sh_rest]`, outputs the same four,
/// transformed, with a leading frame axis.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    similarities: Vec<Similarity>,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + TransformOps> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([means, quats, log_scales, sh_rest], outputs) = self.desc.as_fixed::<4, 4>();
        let out = B::transform_forward(
            TransformInputs {
                means: h.get_float_tensor::<B>(means),
                quats: h.get_float_tensor::<B>(quats),
                log_scales: h.get_float_tensor::<B>(log_scales),
                sh_rest: h.get_float_tensor::<B>(sh_rest),
            },
            &self.similarities,
        );
        for (ir, tensor) in outputs
            .iter()
            .zip([out.means, out.quats, out.log_scales, out.sh_rest])
        {
            h.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

impl<B: FusionBackend + TransformOps> TransformOps for Fusion<B> {
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        let TransformInputs {
            means,
            quats,
            log_scales,
            sh_rest,
        } = inputs;
        let client = means.client.clone();
        let frames = similarities.len();
        let n = means.shape[0];
        let k = sh_rest.shape[1];
        let dtype = means.dtype;
        let streams = OperationStreams::with_inputs([&means, &quats, &log_scales, &sh_rest]);
        let output = |shape: Vec<usize>| fusion_output(&means, shape, dtype);
        let outputs = [
            output(vec![frames, n, 3]),
            output(vec![frames, n, 4]),
            output(vec![frames, n, 3]),
            output(vec![frames, n, k, 3]),
        ];
        let desc = CustomOpIr::new(
            "ember_transform_forward",
            &[
                means.into_ir(),
                quats.into_ir(),
                log_scales.into_ir(),
                sh_rest.into_ir(),
            ],
            &outputs,
        );
        let op = ForwardOp::<B> {
            desc: desc.clone(),
            similarities: similarities.to_vec(),
            _backend: PhantomData,
        };
        let [means, quats, log_scales, sh_rest] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        TransformPrimitives {
            means,
            quats,
            log_scales,
            sh_rest,
        }
    }
}
