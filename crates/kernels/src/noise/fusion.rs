//! The noise op on `Fusion<B>` (burn's `Wgpu` and `Cuda`): recorded in the fusion stream as one
//! custom operation that runs `B`'s kernel on the real tensor handles.

use core::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput};

use super::{MeanNoise, NoiseInputs, NoiseOps};
use crate::cube_alloc::fusion_output_like;

/// The recorded op: inputs `[means, quats, log_scales, opacity_logits]`, output the moved
/// means.
#[derive(Debug)]
struct PerturbOp<B> {
    desc: CustomOpIr,
    noise: MeanNoise,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + NoiseOps> Operation<B::FusionRuntime> for PerturbOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([means, quats, log_scales, opacity_logits], [out]) = self.desc.as_fixed::<4, 1>();
        let moved = B::perturb_means(
            NoiseInputs {
                means: h.get_float_tensor::<B>(means),
                quats: h.get_float_tensor::<B>(quats),
                log_scales: h.get_float_tensor::<B>(log_scales),
                opacity_logits: h.get_float_tensor::<B>(opacity_logits),
            },
            self.noise,
        );
        h.register_float_tensor::<B>(&out.id, moved);
    }
}

impl<B: FusionBackend + NoiseOps> NoiseOps for Fusion<B> {
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        let NoiseInputs {
            means,
            quats,
            log_scales,
            opacity_logits,
        } = inputs;
        let client = means.client.clone();
        let streams = OperationStreams::with_inputs([&means, &quats, &log_scales, &opacity_logits]);
        let out = fusion_output_like(&means);
        let desc = CustomOpIr::new(
            "ember_perturb_means",
            &[
                means.into_ir(),
                quats.into_ir(),
                log_scales.into_ir(),
                opacity_logits.into_ir(),
            ],
            &[out],
        );
        let op = PerturbOp::<B> {
            desc: desc.clone(),
            noise,
            _backend: PhantomData,
        };
        let [moved] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        moved
    }
}
