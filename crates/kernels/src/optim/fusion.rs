//! The Adam update on `Fusion<B>` (burn's `Wgpu` and `Cuda`): recorded in the fusion stream as
//! one custom operation that runs `B`'s kernel on the real tensor handles.

use core::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput};

use super::{AdamGroup, AdamOps, AdamPrimitives, AdamStep};
use crate::cube_alloc::fusion_output_like;

/// The recorded op: inputs `[param, grad, exp_avg, exp_avg_sq]`, outputs the three updated.
#[derive(Debug)]
struct AdamOp<B> {
    desc: CustomOpIr,
    step: AdamStep,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + AdamOps> Operation<B::FusionRuntime> for AdamOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([param, grad, exp_avg, exp_avg_sq], [param_out, exp_avg_out, exp_avg_sq_out]) =
            self.desc.as_fixed::<4, 3>();
        let updated = B::adam_step(
            AdamPrimitives {
                param: h.get_float_tensor::<B>(param),
                exp_avg: h.get_float_tensor::<B>(exp_avg),
                exp_avg_sq: h.get_float_tensor::<B>(exp_avg_sq),
            },
            h.get_float_tensor::<B>(grad),
            self.step,
        );
        h.register_float_tensor::<B>(&param_out.id, updated.param);
        h.register_float_tensor::<B>(&exp_avg_out.id, updated.exp_avg);
        h.register_float_tensor::<B>(&exp_avg_sq_out.id, updated.exp_avg_sq);
    }
}

/// The recorded groups: inputs `[param, grad, exp_avg, exp_avg_sq]` per group (then `visible`
/// when `masked`), outputs the three updated per group.
#[derive(Debug)]
struct AdamGroupsOp<B> {
    desc: CustomOpIr,
    steps: Vec<AdamStep>,
    masked: bool,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + AdamOps> Operation<B::FusionRuntime> for AdamGroupsOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let groups = self
            .desc
            .inputs
            .chunks_exact(4)
            .zip(&self.steps)
            .map(|(irs, step)| AdamGroup {
                state: AdamPrimitives {
                    param: h.get_float_tensor::<B>(&irs[0]),
                    exp_avg: h.get_float_tensor::<B>(&irs[2]),
                    exp_avg_sq: h.get_float_tensor::<B>(&irs[3]),
                },
                grad: h.get_float_tensor::<B>(&irs[1]),
                step: *step,
            })
            .collect();
        let updated = if self.masked {
            let visible = self.desc.inputs.last().expect("the mask is the last input");
            B::adam_steps_visible(groups, h.get_float_tensor::<B>(visible))
        } else {
            B::adam_steps(groups)
        };
        for (irs, out) in self.desc.outputs.chunks_exact(3).zip(updated) {
            h.register_float_tensor::<B>(&irs[0].id, out.param);
            h.register_float_tensor::<B>(&irs[1].id, out.exp_avg);
            h.register_float_tensor::<B>(&irs[2].id, out.exp_avg_sq);
        }
    }
}

impl<B: FusionBackend + AdamOps> AdamOps for Fusion<B> {
    fn adam_steps(groups: Vec<AdamGroup<Self>>) -> Vec<AdamPrimitives<Self>> {
        record_groups(groups, None)
    }

    fn adam_steps_visible(
        groups: Vec<AdamGroup<Self>>,
        visible: FloatTensor<Self>,
    ) -> Vec<AdamPrimitives<Self>> {
        record_groups(groups, Some(visible))
    }

    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        let AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        } = state;
        let client = param.client.clone();
        let streams = OperationStreams::with_inputs([&param, &grad, &exp_avg, &exp_avg_sq]);
        let outputs = [&param, &exp_avg, &exp_avg_sq].map(fusion_output_like);
        let desc = CustomOpIr::new(
            "ember_adam_step",
            &[
                param.into_ir(),
                grad.into_ir(),
                exp_avg.into_ir(),
                exp_avg_sq.into_ir(),
            ],
            &outputs,
        );
        let op = AdamOp::<B> {
            desc: desc.clone(),
            step,
            _backend: PhantomData,
        };
        let [param, exp_avg, exp_avg_sq] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        }
    }
}

/// The groups' updates recorded as one operation ([`AdamGroupsOp`]), with `visible` when given.
fn record_groups<B: FusionBackend + AdamOps>(
    groups: Vec<AdamGroup<Fusion<B>>>,
    visible: Option<FloatTensor<Fusion<B>>>,
) -> Vec<AdamPrimitives<Fusion<B>>> {
    let Some(client) = groups.first().map(|g| g.state.param.client.clone()) else {
        return Vec::new();
    };
    let streams = OperationStreams::with_inputs(
        groups
            .iter()
            .flat_map(|g| {
                [
                    &g.state.param,
                    &g.grad,
                    &g.state.exp_avg,
                    &g.state.exp_avg_sq,
                ]
            })
            .chain(&visible),
    );
    let outputs: Vec<_> = groups
        .iter()
        .flat_map(|g| [&g.state.param, &g.state.exp_avg, &g.state.exp_avg_sq])
        .map(fusion_output_like)
        .collect();
    let steps = groups.iter().map(|g| g.step).collect();
    let masked = visible.is_some();
    let inputs: Vec<_> = groups
        .into_iter()
        .flat_map(|g| [g.state.param, g.grad, g.state.exp_avg, g.state.exp_avg_sq])
        .chain(visible)
        .map(|t| t.into_ir())
        .collect();
    let name = if masked {
        "ember_adam_steps_visible"
    } else {
        "ember_adam_steps"
    };
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let op = AdamGroupsOp::<B> {
        desc: desc.clone(),
        steps,
        masked,
        _backend: PhantomData,
    };
    let mut tensors = client
        .register(streams, OperationIr::Custom(desc), op)
        .into_iter();
    let mut updated = Vec::with_capacity(outputs.len() / 3);
    while let (Some(param), Some(exp_avg), Some(exp_avg_sq)) =
        (tensors.next(), tensors.next(), tensors.next())
    {
        updated.push(AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        });
    }
    updated
}
