//! The statistics on `Fusion<B>` (burn's `Wgpu` and `Cuda`): recorded in the fusion stream as
//! one custom operation that runs `B`'s kernel on the real tensor handles.

use core::marker::PhantomData;

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput};

use super::{DensifyStatsOps, DensifyStatsPrimitives, ViewSize};
use crate::cube_alloc::fusion_output_like;

/// The recorded op: inputs `[grad_sum, visible_steps, max_radius, screen_grads, extents]`,
/// outputs the three totals.
#[derive(Debug)]
struct DensifyStatsOp<B> {
    desc: CustomOpIr,
    view: ViewSize,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + DensifyStatsOps> Operation<B::FusionRuntime> for DensifyStatsOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([grad_sum, visible_steps, max_radius, screen_grads, extents], outputs) =
            self.desc.as_fixed::<5, 3>();
        let out = B::accumulate_densify_stats(
            DensifyStatsPrimitives {
                grad_sum: h.get_float_tensor::<B>(grad_sum),
                visible_steps: h.get_float_tensor::<B>(visible_steps),
                max_radius: h.get_float_tensor::<B>(max_radius),
            },
            h.get_float_tensor::<B>(screen_grads),
            h.get_int_tensor::<B>(extents),
            self.view,
        );
        h.register_float_tensor::<B>(&outputs[0].id, out.grad_sum);
        h.register_float_tensor::<B>(&outputs[1].id, out.visible_steps);
        h.register_float_tensor::<B>(&outputs[2].id, out.max_radius);
    }
}

impl<B: FusionBackend + DensifyStatsOps> DensifyStatsOps for Fusion<B> {
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        let DensifyStatsPrimitives {
            grad_sum,
            visible_steps,
            max_radius,
        } = state;
        let client = grad_sum.client.clone();
        let streams = OperationStreams::with_inputs([
            &grad_sum,
            &visible_steps,
            &max_radius,
            &screen_grads,
            &extents,
        ]);
        let outputs = [&grad_sum, &visible_steps, &max_radius].map(fusion_output_like);
        let desc = CustomOpIr::new(
            "ember_densify_stats",
            &[
                grad_sum.into_ir(),
                visible_steps.into_ir(),
                max_radius.into_ir(),
                screen_grads.into_ir(),
                extents.into_ir(),
            ],
            &outputs,
        );
        let op = DensifyStatsOp::<B> {
            desc: desc.clone(),
            view,
            _backend: PhantomData,
        };
        let [grad_sum, visible_steps, max_radius] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        DensifyStatsPrimitives {
            grad_sum,
            visible_steps,
            max_radius,
        }
    }
}
