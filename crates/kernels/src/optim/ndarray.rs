//! The fused Adam update on the ndarray backend: [`cpu::adam_update`](super::cpu::adam_update)
//! on host copies, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, TensorMetadata};

use super::{AdamGroup, AdamOps, AdamPrimitives, AdamStep, cpu};
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

fn adam_steps_visible_in<T: Real + Element, B: NdArrayBackend>(
    groups: Vec<AdamGroup<B>>,
    visible: &[T],
) -> Vec<AdamPrimitives<B>> {
    groups
        .into_iter()
        .map(|g| {
            let shape = g.state.param.shape();
            if shape.num_elements() == 0 {
                return g.state;
            }
            assert_eq!(
                shape.as_slice().first().copied(),
                Some(visible.len()),
                "adam_steps_visible: a group's leading dimension is not the mask's length"
            );
            let mut param = to_host::<T, B>(g.state.param);
            let mut exp_avg = to_host::<T, B>(g.state.exp_avg);
            let mut exp_avg_sq = to_host::<T, B>(g.state.exp_avg_sq);
            let grad = host_slice::<T, B>(&g.grad);
            cpu::adam_update_visible(
                &mut param,
                &grad,
                &mut exp_avg,
                &mut exp_avg_sq,
                visible,
                &g.step,
            );
            AdamPrimitives {
                param: float_tensor::<T, B>(param, shape.clone()),
                exp_avg: float_tensor::<T, B>(exp_avg, shape.clone()),
                exp_avg_sq: float_tensor::<T, B>(exp_avg_sq, shape),
            }
        })
        .collect()
}

impl<B: NdArrayBackend> AdamOps for B {
    fn adam_steps_visible(
        groups: Vec<AdamGroup<Self>>,
        visible: FloatTensor<Self>,
    ) -> Vec<AdamPrimitives<Self>> {
        let f64_groups = groups
            .first()
            .is_some_and(|g| g.state.param.dtype() == DType::F64);
        if f64_groups {
            adam_steps_visible_in::<f64, B>(groups, &host_slice::<f64, B>(&visible))
        } else {
            adam_steps_visible_in::<f32, B>(groups, &host_slice::<f32, B>(&visible))
        }
    }

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
