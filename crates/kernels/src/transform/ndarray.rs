//! The transform on the ndarray backend: the rayon kernel of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::TransformOps;
use super::cpu::{self, GaussianSlices, GaussianSlicesMut};
use super::{Similarity, TransformInputs, TransformPrimitives};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice};
use crate::real::Real;

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    inputs: TransformInputs<B>,
    similarities: &[Similarity],
) -> TransformPrimitives<B> {
    let [n, k, _] = inputs.sh_rest.shape().dims::<3>();
    let f = similarities.len();
    let means = host_slice::<T, B>(&inputs.means);
    let quats = host_slice::<T, B>(&inputs.quats);
    let log_scales = host_slice::<T, B>(&inputs.log_scales);
    let sh_rest = host_slice::<T, B>(&inputs.sh_rest);
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
        means: float_tensor::<T, B>(out_means, Shape::new([f, n, 3])),
        quats: float_tensor::<T, B>(out_quats, Shape::new([f, n, 4])),
        log_scales: float_tensor::<T, B>(out_scales, Shape::new([f, n, 3])),
        sh_rest: float_tensor::<T, B>(out_sh, Shape::new([f, n, k, 3])),
    }
}

impl<B: NdArrayBackend> TransformOps for B {
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        if inputs.means.dtype() == DType::F64 {
            forward_in::<f64, B>(inputs, similarities)
        } else {
            forward_in::<f32, B>(inputs, similarities)
        }
    }
}
