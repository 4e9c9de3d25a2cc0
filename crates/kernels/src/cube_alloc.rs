//! Allocating the outputs that a CubeCL kernel or a recorded fusion operation writes.

use burn::tensor::{DType, Shape};
use burn_cubecl::CubeRuntime;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_fusion::{FusionRuntime, FusionTensor};
use burn_ir::TensorIr;

/// A contiguous tensor of `shape` in `dtype` on the device of `like`, to be written entirely by
/// a kernel. Contiguous because the kernels index rows densely (see the crate docs).
pub(crate) fn output<R: CubeRuntime>(
    like: &CubeTensor<R>,
    shape: impl Into<Shape>,
    dtype: DType,
) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        shape.into(),
        dtype,
    )
}

/// An output of a recorded fusion operation of `shape` and `dtype`, on the stream of `like`.
pub(crate) fn fusion_output<R: FusionRuntime>(
    like: &FusionTensor<R>,
    shape: impl Into<Shape>,
    dtype: DType,
) -> TensorIr {
    TensorIr::uninit(like.client.create_empty_handle(), shape.into(), dtype)
}

/// An output of a recorded fusion operation of the same shape and dtype as `like`.
pub(crate) fn fusion_output_like<R: FusionRuntime>(like: &FusionTensor<R>) -> TensorIr {
    fusion_output(like, like.shape.clone(), like.dtype)
}
