//! The fold on the ndarray backend: [`cpu`](super::cpu)'s pass on host copies of `f32`
//! tensors; `f64` ones (gradient checks, never training) run the default tensor ops.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, TensorMetadata};

use super::{
    SmoothingOps, cpu, smoothing_fold_backward_tensor_ops, smoothing_fold_tensor_ops,
};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, to_host};

impl<B: NdArrayBackend> SmoothingOps for B {
    fn smoothing_fold(
        log_scales: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        variance: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if log_scales.dtype() != DType::F32 {
            return smoothing_fold_tensor_ops::<B>(log_scales, opacity_logits, variance);
        }
        let (scales_shape, logits_shape) = (log_scales.shape(), opacity_logits.shape());
        let mut scales = to_host::<f32, B>(log_scales);
        let mut logits = to_host::<f32, B>(opacity_logits);
        cpu::fold(&mut scales, &mut logits, &host_slice::<f32, B>(&variance));
        (
            float_tensor::<f32, B>(scales, scales_shape),
            float_tensor::<f32, B>(logits, logits_shape),
        )
    }

    fn smoothing_fold_backward(
        log_scales: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        grad_log_scales: FloatTensor<Self>,
        grad_opacity_logits: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        if log_scales.dtype() != DType::F32 {
            return smoothing_fold_backward_tensor_ops::<B>(
                log_scales,
                opacity_logits,
                variance,
                grad_log_scales,
                grad_opacity_logits,
            );
        }
        let (scales_shape, logits_shape) = (grad_log_scales.shape(), grad_opacity_logits.shape());
        let mut grad_scales = to_host::<f32, B>(grad_log_scales);
        let mut grad_logits = to_host::<f32, B>(grad_opacity_logits);
        cpu::fold_backward(
            &host_slice::<f32, B>(&log_scales),
            &host_slice::<f32, B>(&opacity_logits),
            &host_slice::<f32, B>(&variance),
            &mut grad_scales,
            &mut grad_logits,
        );
        (
            float_tensor::<f32, B>(grad_scales, scales_shape),
            float_tensor::<f32, B>(grad_logits, logits_shape),
        )
    }
}
