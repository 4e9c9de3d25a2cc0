//! The transform on the ndarray backend: the rayon kernel of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::cpu::{self, GaussianSlices, GaussianSlicesMut};
use super::{Similarity, TransformInputs, TransformPrimitives};
use crate::ndarray_host::{float_tensor, to_host};
use crate::real::Real;

fn forward_in<T: Real + Element, E, I, Q>(
    inputs: TransformInputs<NdArray<E, I, Q>>,
    similarities: &[Similarity],
) -> TransformPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let [n, k, _] = inputs.sh_rest.shape().dims::<3>();
    let f = similarities.len();
    let means = to_host::<T, E, I, Q>(inputs.means);
    let quats = to_host::<T, E, I, Q>(inputs.quats);
    let log_scales = to_host::<T, E, I, Q>(inputs.log_scales);
    let sh_rest = to_host::<T, E, I, Q>(inputs.sh_rest);
    let mut out_means = vec![T::ZERO; f * n * 3];
    let mut out_quats = vec![T::ZERO; f * n * 4];
    let mut out_scales = vec![T::ZERO; f * n * 3];
    let mut out_sh = vec![T::ZERO; f * n * k * 3];
    // `transform_gaussians` validated the shapes and the transforms.
    cpu::transform_batch_into(
        similarities,
        GaussianSlices {
            means: &means,
            quats: &quats,
            log_scales: &log_scales,
            sh_rest: &sh_rest,
        },
        GaussianSlicesMut {
            means: &mut out_means,
            quats: &mut out_quats,
            log_scales: &mut out_scales,
            sh_rest: &mut out_sh,
        },
    )
    .expect("inputs validated by transform_gaussians");
    TransformPrimitives {
        means: float_tensor::<T, E, I, Q>(out_means, Shape::new([f, n, 3])),
        quats: float_tensor::<T, E, I, Q>(out_quats, Shape::new([f, n, 4])),
        log_scales: float_tensor::<T, E, I, Q>(out_scales, Shape::new([f, n, 3])),
        sh_rest: float_tensor::<T, E, I, Q>(out_sh, Shape::new([f, n, k, 3])),
    }
}

/// [`SplatBackend::transform_forward`](crate::SplatBackend::transform_forward) for `NdArray`.
pub(crate) fn forward<E, I, Q>(
    inputs: TransformInputs<NdArray<E, I, Q>>,
    similarities: &[Similarity],
) -> TransformPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    if inputs.means.dtype() == DType::F64 {
        forward_in::<f64, E, I, Q>(inputs, similarities)
    } else {
        forward_in::<f32, E, I, Q>(inputs, similarities)
    }
}
