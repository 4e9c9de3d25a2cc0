//! The Adam update as one CubeCL kernel, generic over the runtime and the float type: the four
//! tensors read as one flat vector each, `N` elements per unit (the widest vector the device
//! loads at once that divides the element count), the operations of the tensor-op default in
//! its order.
//!
//! Why a kernel of its own when Burn's fusion already fuses the tensor ops into one: the fusion
//! records, searches and plans a dozen operations per parameter group on the host, every step,
//! and the GPU training step is host-bound; this is one recorded operation per group.

use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{Shape, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;
use cubecl::std::tensor::layout::linear::LinearView;
use cubecl::tensor_vector_size_parallel;

use super::{AdamOps, AdamPrimitives, AdamStep};
use crate::cube_alloc::output;

/// One unit per `N` elements: the moments, then the parameter (see the [module docs](super)).
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn adam_kernel<F: Float, N: Size>(
    param: &LinearView<Vector<F, N>>,
    grad: &LinearView<Vector<F, N>>,
    exp_avg: &LinearView<Vector<F, N>>,
    exp_avg_sq: &LinearView<Vector<F, N>>,
    param_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    exp_avg_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    exp_avg_sq_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    beta1: InputScalar,
    one_minus_beta1: InputScalar,
    beta2: InputScalar,
    one_minus_beta2: InputScalar,
    sqrt_bias2: InputScalar,
    eps: InputScalar,
    scale: InputScalar,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if !param_out.is_in_bounds(i) {
        terminate!();
    }
    let g = grad[i];
    let m =
        exp_avg[i] * Vector::new(beta1.get::<F>()) + g * Vector::new(one_minus_beta1.get::<F>());
    let v = exp_avg_sq[i] * Vector::new(beta2.get::<F>())
        + (g * g) * Vector::new(one_minus_beta2.get::<F>());
    let denom = Vector::sqrt(v) / Vector::new(sqrt_bias2.get::<F>()) + Vector::new(eps.get::<F>());
    param_out[i] = param[i] - m / denom * Vector::new(scale.get::<F>());
    exp_avg_out[i] = m;
    exp_avg_sq_out[i] = v;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> AdamOps
    for CubeBackend<R, F, I, BT>
{
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        let shape = state.param.shape();
        let n = shape.num_elements();
        if n == 0 {
            return state;
        }
        let flat = |t| into_contiguous(Self::float_reshape(t, Shape::new([n])));
        let param = flat(state.param);
        let grad = flat(grad);
        let exp_avg = flat(state.exp_avg);
        let exp_avg_sq = flat(state.exp_avg_sq);
        let dtype = param.dtype;
        let client = param.client.clone();
        let vector_size = tensor_vector_size_parallel(
            client.io_optimized_vector_sizes(dtype.size()),
            param.meta.shape(),
            param.meta.strides(),
            0,
        );
        let units = n / vector_size;
        let cube_dim = CubeDim::new(&client, units);
        let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
        let address = [&param, &grad, &exp_avg, &exp_avg_sq]
            .iter()
            .map(|t| t.required_address_type())
            .max()
            .unwrap_or_default();
        let outputs = [(); 3].map(|_| output(&param, [n], dtype));
        // Each scalar rounded to the tensors' float type, as Burn rounds a tensor-scalar op's.
        let [
            beta1,
            one_minus_beta1,
            beta2,
            one_minus_beta2,
            sqrt_bias2,
            eps,
            scale,
        ] = step.scalars().map(|s| InputScalar::new(s, dtype));
        // SAFETY: every view has `n` elements and the kernel returns for a unit past them.
        unsafe {
            adam_kernel::launch_unchecked::<R>(
                &client,
                cube_count,
                cube_dim,
                address,
                vector_size,
                param.into_linear_view(),
                grad.into_linear_view(),
                exp_avg.into_linear_view(),
                exp_avg_sq.into_linear_view(),
                outputs[0].clone().into_linear_view(),
                outputs[1].clone().into_linear_view(),
                outputs[2].clone().into_linear_view(),
                beta1,
                one_minus_beta1,
                beta2,
                one_minus_beta2,
                sqrt_bias2,
                eps,
                scale,
                dtype.into(),
            );
        }
        let [param, exp_avg, exp_avg_sq] = outputs.map(|t| Self::float_reshape(t, shape.clone()));
        AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        }
    }
}
