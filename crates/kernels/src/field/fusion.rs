//! `FieldOps` for `Fusion<B>` (burn's `Wgpu` and `Cuda`): each call is recorded in the
//! fusion stream as a custom operation that, when the stream runs, calls `B`'s implementation on
//! the real tensor handles. Custom operations are fusion barriers and are not fused themselves.

use core::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use super::FieldOps;
use super::{FieldGrads, FieldInputs, FieldOptions};
use crate::cube_alloc::{fusion_output, fusion_output_like};

/// The recorded forward: inputs `[points, means, quats, log_scales, features]`, output `values`.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    options: FieldOptions,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + FieldOps> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([points, means, quats, log_scales, features], [values]) = self.desc.as_fixed();
        let inputs = FieldInputs {
            points: h.get_float_tensor::<B>(points),
            means: h.get_float_tensor::<B>(means),
            quats: h.get_float_tensor::<B>(quats),
            log_scales: h.get_float_tensor::<B>(log_scales),
            features: h.get_float_tensor::<B>(features),
        };
        h.register_float_tensor::<B>(&values.id, B::field_forward(inputs, self.options));
    }
}

/// The recorded backward: inputs `[points, means, quats, log_scales, features, grad_values]`,
/// outputs the gradients of `[means, quats, log_scales, features]`, preceded by the points'
/// gradient when `points_grad` is set.
#[derive(Debug)]
struct BackwardOp<B> {
    desc: CustomOpIr,
    options: FieldOptions,
    points_grad: bool,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + FieldOps> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (inputs, outputs): (&[TensorIr; 6], &[TensorIr]) = if self.points_grad {
            let (inputs, outputs) = self.desc.as_fixed::<6, 5>();
            (inputs, outputs)
        } else {
            let (inputs, outputs) = self.desc.as_fixed::<6, 4>();
            (inputs, outputs)
        };
        let [points, means, quats, log_scales, features, grad_values] = inputs;
        let inputs = FieldInputs {
            points: h.get_float_tensor::<B>(points),
            means: h.get_float_tensor::<B>(means),
            quats: h.get_float_tensor::<B>(quats),
            log_scales: h.get_float_tensor::<B>(log_scales),
            features: h.get_float_tensor::<B>(features),
        };
        let grad_values = h.get_float_tensor::<B>(grad_values);
        let grads = B::field_backward(inputs, grad_values, self.options, self.points_grad);
        let grads = grads.points.into_iter().chain([
            grads.means,
            grads.quats,
            grads.log_scales,
            grads.features,
        ]);
        for (ir, tensor) in outputs.iter().zip(grads) {
            h.register_float_tensor::<B>(&ir.id, tensor);
        }
    }
}

impl<B: FusionBackend + FieldOps> FieldOps for Fusion<B> {
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        let FieldInputs {
            points,
            means,
            quats,
            log_scales,
            features,
        } = inputs;
        let client = points.client.clone();
        let streams =
            OperationStreams::with_inputs([&points, &means, &quats, &log_scales, &features]);
        let values = fusion_output(&points, [points.shape[0], features.shape[1]], points.dtype);
        let desc = CustomOpIr::new(
            "ember_field_forward",
            &[
                points.into_ir(),
                means.into_ir(),
                quats.into_ir(),
                log_scales.into_ir(),
                features.into_ir(),
            ],
            &[values],
        );
        let op = ForwardOp::<B> {
            desc: desc.clone(),
            options,
            _backend: PhantomData,
        };
        client
            .register(streams, OperationIr::Custom(desc), op)
            .output()
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        let FieldInputs {
            points,
            means,
            quats,
            log_scales,
            features,
        } = inputs;
        let client = points.client.clone();
        let streams = OperationStreams::with_inputs([
            &points,
            &means,
            &quats,
            &log_scales,
            &features,
            &grad_values,
        ]);
        let mut outputs = Vec::with_capacity(5);
        if points_grad {
            outputs.push(fusion_output_like(&points));
        }
        outputs.extend([
            fusion_output_like(&means),
            fusion_output_like(&quats),
            fusion_output_like(&log_scales),
            fusion_output_like(&features),
        ]);
        let desc = CustomOpIr::new(
            "ember_field_backward",
            &[
                points.into_ir(),
                means.into_ir(),
                quats.into_ir(),
                log_scales.into_ir(),
                features.into_ir(),
                grad_values.into_ir(),
            ],
            &outputs,
        );
        let op = BackwardOp::<B> {
            desc: desc.clone(),
            options,
            points_grad,
            _backend: PhantomData,
        };
        let outputs = client.register(streams, OperationIr::Custom(desc), op);
        let (points, [means, quats, log_scales, features]) = if points_grad {
            let [points, means, quats, log_scales, features] = outputs.outputs();
            (Some(points), [means, quats, log_scales, features])
        } else {
            (None, outputs.outputs())
        };
        FieldGrads {
            points,
            means,
            quats,
            log_scales,
            features,
        }
    }
}
