//! The fused Adam update on the ndarray backend: [`cpu::adam_update`](super::cpu::adam_update)
//! on host copies, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, TensorMetadata};

use super::AdamOps;
use super::{AdamPrimitives, AdamStep, cpu};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, to_host};
use crate::real::Real;

fn adam_step_in<T: Real + Element, B: NdArrayBackend>(
    state: AdamPrimitives<B>,
    grad: FloatTensor<B>,
    step: AdamStep,
) -> AdamPrimitives<B> {
    let shape = state.param.shape();
    let mut param = to_host::<T, B>(state.param);
    let mut exp_avg = to_host::<T, B>(state.exp_avg);
    let mut exp_avg_sq = to_host::<T, B>(state.exp_avg_sq);
    let grad = host_slice::<T, B>(&grad);
    cpu::adam_update(&mut param, &grad, &mut exp_avg, &mut exp_avg_sq, &step);
    AdamPrimitives {
        param: float_tensor::<T, B>(param, shape.clone()),
        exp_avg: float_tensor::<T, B>(exp_avg, shape.clone()),
        exp_avg_sq: float_tensor::<T, B>(exp_avg_sq, shape),
    }
}

impl<B: NdArrayBackend> AdamOps for B {
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        if state.param.dtype() == DType::F64 {
            adam_step_in::<f64, B>(state, grad, step)
        } else {
            adam_step_in::<f32, B>(state, grad, step)
        }
    }
}
