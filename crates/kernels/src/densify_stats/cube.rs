//! The statistics as one CubeCL kernel, generic over the runtime and the element types: one
//! unit per Gaussian, the operations of the tensor-op default in its order.

use burn::tensor::TensorMetadata;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::{DensifyStatsOps, DensifyStatsPrimitives, ViewSize};
use crate::cube_alloc::output;

/// Gaussian `i`: its row of `screen_grads` and `extents` (`[N, 3]` each) added to the totals
/// (see the [module docs](super)).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn densify_stats_kernel<F: Float, I: Int>(
    screen_grads: &Tensor<F>,
    extents: &Tensor<I>,
    grad_sum: &Tensor<F>,
    visible_steps: &Tensor<F>,
    max_radius: &Tensor<F>,
    grad_sum_out: &mut Tensor<F>,
    visible_steps_out: &mut Tensor<F>,
    max_radius_out: &mut Tensor<F>,
    half_width: InputScalar,
    half_height: InputScalar,
    n: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    let mut seen = F::new(0.0);
    if extents[3 * i + 2] > I::new(0) {
        seen = F::new(1.0);
    }
    let gx = screen_grads[3 * i] * half_width.get::<F>();
    let gy = screen_grads[3 * i + 1] * half_height.get::<F>();
    grad_sum_out[i] = grad_sum[i] + F::sqrt(gx * gx + gy * gy) * seen;
    visible_steps_out[i] = visible_steps[i] + seen;
    let radius = F::cast_from(I::max(extents[3 * i], extents[3 * i + 1])) * seen;
    max_radius_out[i] = F::max(max_radius[i], radius);
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> DensifyStatsOps
    for CubeBackend<R, F, I, BT>
{
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        let n = state.grad_sum.shape().num_elements();
        if n == 0 {
            // An empty launch is invalid on CUDA; there is nothing to add.
            return state;
        }
        let grad_sum = into_contiguous(state.grad_sum);
        let visible_steps = into_contiguous(state.visible_steps);
        let max_radius = into_contiguous(state.max_radius);
        let screen_grads = into_contiguous(screen_grads);
        let extents = into_contiguous(extents);
        let dtype = grad_sum.dtype;
        let client = grad_sum.client.clone();
        let cube_dim = CubeDim::new(&client, n);
        let cube_count = calculate_cube_count_elemwise(&client, n, cube_dim);
        let outputs = [(); 3].map(|_| output(&grad_sum, [n], dtype));
        // Each scale rounded to the tensors' float type, as Burn rounds a tensor-scalar op's.
        let [half_width, half_height] = view.half().map(|s| InputScalar::new(s, dtype));
        densify_stats_kernel::launch::<R>(
            &client,
            cube_count,
            cube_dim,
            screen_grads.into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            grad_sum.into_tensor_arg(),
            visible_steps.into_tensor_arg(),
            max_radius.into_tensor_arg(),
            outputs[0].clone().into_tensor_arg(),
            outputs[1].clone().into_tensor_arg(),
            outputs[2].clone().into_tensor_arg(),
            half_width,
            half_height,
            n as u32,
            [dtype.into(), extents.dtype.into()],
        );
        let [grad_sum, visible_steps, max_radius] = outputs;
        DensifyStatsPrimitives {
            grad_sum,
            visible_steps,
            max_radius,
        }
    }
}
