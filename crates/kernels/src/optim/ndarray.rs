//! The fused Adam update on the ndarray backend: [`cpu::adam_update`](super::cpu::adam_update)
//! on host copies, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, TensorMetadata};

use super::{AdamPrimitives, AdamStep, cpu};
use crate::ndarray_host::{float_tensor, to_host};
use crate::real::Real;

fn adam_step_in<T: Real + Element, E, I, Q>(
    state: AdamPrimitives<NdArray<E, I, Q>>,
    grad: FloatTensor<NdArray<E, I, Q>>,
    step: AdamStep,
) -> AdamPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let shape = state.param.shape();
    let mut param = to_host::<T, E, I, Q>(state.param);
    let mut exp_avg = to_host::<T, E, I, Q>(state.exp_avg);
    let mut exp_avg_sq = to_host::<T, E, I, Q>(state.exp_avg_sq);
    let grad = to_host::<T, E, I, Q>(grad);
    cpu::adam_update(&mut param, &grad, &mut exp_avg, &mut exp_avg_sq, &step);
    AdamPrimitives {
        param: float_tensor::<T, E, I, Q>(param, shape.clone()),
        exp_avg: float_tensor::<T, E, I, Q>(exp_avg, shape.clone()),
        exp_avg_sq: float_tensor::<T, E, I, Q>(exp_avg_sq, shape),
    }
}

/// [`SplatBackend::adam_step`](crate::SplatBackend::adam_step) for `NdArray`.
pub(crate) fn adam_step<E, I, Q>(
    state: AdamPrimitives<NdArray<E, I, Q>>,
    grad: FloatTensor<NdArray<E, I, Q>>,
    step: AdamStep,
) -> AdamPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    if state.param.dtype() == DType::F64 {
        adam_step_in::<f64, E, I, Q>(state, grad, step)
    } else {
        adam_step_in::<f32, E, I, Q>(state, grad, step)
    }
}
