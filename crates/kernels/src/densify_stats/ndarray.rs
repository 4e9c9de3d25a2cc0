//! The statistics on the ndarray backend: [`cpu::accumulate`](super::cpu::accumulate) on host
//! copies, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Element, TensorMetadata};

use super::{DensifyStatsOps, DensifyStatsPrimitives, ViewSize, cpu};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, int_to_host, to_host};
use crate::real::Real;

fn accumulate_in<T: Real + Element, B: NdArrayBackend>(
    state: DensifyStatsPrimitives<B>,
    screen_grads: FloatTensor<B>,
    extents: IntTensor<B>,
    view: ViewSize,
) -> DensifyStatsPrimitives<B> {
    let shape = state.grad_sum.shape();
    let mut grad_sum = to_host::<T, B>(state.grad_sum);
    let mut visible_steps = to_host::<T, B>(state.visible_steps);
    let mut max_radius = to_host::<T, B>(state.max_radius);
    let grads = host_slice::<T, B>(&screen_grads);
    let extents = int_to_host::<B>(extents);
    cpu::accumulate(
        &mut grad_sum,
        &mut visible_steps,
        &mut max_radius,
        &grads,
        &extents,
        view,
    );
    DensifyStatsPrimitives {
        grad_sum: float_tensor::<T, B>(grad_sum, shape.clone()),
        visible_steps: float_tensor::<T, B>(visible_steps, shape.clone()),
        max_radius: float_tensor::<T, B>(max_radius, shape),
    }
}

impl<B: NdArrayBackend> DensifyStatsOps for B {
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        if state.grad_sum.dtype() == DType::F64 {
            accumulate_in::<f64, B>(state, screen_grads, extents, view)
        } else {
            accumulate_in::<f32, B>(state, screen_grads, extents, view)
        }
    }
}
