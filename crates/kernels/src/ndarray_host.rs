//! Moving ndarray tensors to and from the host buffers the CPU kernels work on, and
//! [`NdArrayBackend`], the one bound every ndarray implementation of an op is written against.

use std::any::TypeId;
use std::borrow::Cow;

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayDevice, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Element, Shape, TensorData, read_sync};
use rayon::prelude::*;

/// Burn's ndarray backend, whatever its element types: every `NdArray<E, I, Q>` that is a Burn
/// backend. The ndarray implementations of the ops are written once against this trait
/// (`impl<B: NdArrayBackend> FieldOps for B`), so the element bounds of `NdArray` are listed
/// here only.
pub trait NdArrayBackend:
    Backend<
        FloatTensorPrimitive = NdArrayTensor,
        IntTensorPrimitive = NdArrayTensor,
        Device = NdArrayDevice,
    >
{
}

impl<E, I, Q> NdArrayBackend for NdArray<E, I, Q>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
}

/// Host copy of a float tensor in the kernel's scalar type `T`.
pub(crate) fn to_host<T: Element, B: NdArrayBackend>(tensor: FloatTensor<B>) -> Vec<T> {
    // A contiguous array is copied as a slice. Burn's `into_data` walks a shared array (one an
    // autodiff graph or a caller's clone also holds: the usual case here) element by element
    // through its dynamic-rank iterator, far slower than the copy of a slice.
    let contiguous = match &tensor {
        NdArrayTensor::F32(storage) => storage.view().as_slice().map(par_convert),
        NdArrayTensor::F64(storage) => storage.view().as_slice().map(par_convert),
        _ => None,
    };
    if let Some(values) = contiguous {
        return values;
    }
    // The ndarray backend reads synchronously from host memory: this cannot fail.
    let data = read_sync(B::float_into_data(tensor)).expect("ndarray tensors are host memory");
    data.convert::<T>()
        .into_vec()
        .expect("converted to the requested element type")
}

/// A float tensor's values in `T` on the host: borrowed where the tensor is contiguous and
/// already holds `T` (the parameters a render reads, no copy), else copied as [`to_host`] does.
pub(crate) fn host_slice<T: Element, B: NdArrayBackend>(tensor: &FloatTensor<B>) -> Cow<'_, [T]> {
    let contiguous = match tensor {
        NdArrayTensor::F32(storage) => storage.view().to_slice().map(same_or_converted),
        NdArrayTensor::F64(storage) => storage.view().to_slice().map(same_or_converted),
        _ => None,
    };
    contiguous.unwrap_or_else(|| Cow::Owned(to_host::<T, B>(tensor.clone())))
}

/// `values` as `T`: the same slice where `S` is `T`, else converted on all threads.
fn same_or_converted<S: Element, T: Element>(values: &[S]) -> Cow<'_, [T]> {
    if TypeId::of::<S>() == TypeId::of::<T>() {
        // SAFETY: `S` and `T` are the same type (same `TypeId`).
        Cow::Borrowed(unsafe {
            core::slice::from_raw_parts(values.as_ptr().cast::<T>(), values.len())
        })
    } else {
        Cow::Owned(par_convert(values))
    }
}

/// Elements per rayon task of the host-side copies: large enough that a task costs far more
/// than its scheduling.
pub(crate) const COPY_CHUNK: usize = 1 << 14;

/// `values` converted to `T`, on all threads: the copies between the ops run on the caller's
/// thread otherwise, with the other cores idle.
fn par_convert<S: Element, T: Element>(values: &[S]) -> Vec<T> {
    values
        .par_iter()
        .with_min_len(COPY_CHUNK)
        .map(|v| v.elem::<T>())
        .collect()
}

/// A float tensor from kernel output (keeps `T` as its dtype).
pub(crate) fn float_tensor<T: Element, B: NdArrayBackend>(
    values: Vec<T>,
    shape: Shape,
) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(values, shape), &Default::default())
}

/// An integer tensor of the backend's integer type from kernel output.
pub(crate) fn int_tensor<B: NdArrayBackend>(values: Vec<i64>, shape: Shape) -> IntTensor<B> {
    B::int_from_data(
        TensorData::new(values, shape).convert::<B::IntElem>(),
        &Default::default(),
    )
}

/// An integer tensor's values on the host: borrowed where it is a contiguous `i64` array, else
/// copied as [`int_to_host`] does.
pub(crate) fn int_host_slice<B: NdArrayBackend>(tensor: &IntTensor<B>) -> Cow<'_, [i64]> {
    if let NdArrayTensor::I64(storage) = tensor
        && let Some(values) = storage.view().to_slice()
    {
        return Cow::Borrowed(values);
    }
    Cow::Owned(int_to_host::<B>(tensor.clone()))
}

/// The first `rows` rows of a float tensor (along its first axis), sharing its memory: the
/// rows are a prefix of the array, so a view of them is contiguous wherever the array is, and
/// nothing is copied. Burn's `narrow` on ndarray copies them.
pub(crate) fn leading_rows<B: NdArrayBackend>(
    tensor: FloatTensor<B>,
    rows: usize,
) -> FloatTensor<B> {
    let prefix = ndarray::Slice::from(0..rows);
    match tensor {
        NdArrayTensor::F32(storage) => storage
            .into_shared()
            .slice_axis_move(ndarray::Axis(0), prefix)
            .into(),
        NdArrayTensor::F64(storage) => storage
            .into_shared()
            .slice_axis_move(ndarray::Axis(0), prefix)
            .into(),
        other => crate::lod::leading_rows_sliced::<B>(other, rows),
    }
}

/// Host copy of an integer tensor.
pub(crate) fn int_to_host<B: NdArrayBackend>(tensor: IntTensor<B>) -> Vec<i64> {
    // As in `to_host`: a shared array (the projection's extents, which `radius()` and
    // `tiles()` slice, are one) would otherwise be read element by element.
    let contiguous = match &tensor {
        NdArrayTensor::I64(storage) => storage.view().as_slice().map(par_convert),
        NdArrayTensor::I32(storage) => storage.view().as_slice().map(par_convert),
        _ => None,
    };
    if let Some(values) = contiguous {
        return values;
    }
    let data = read_sync(B::int_into_data(tensor)).expect("ndarray tensors are host memory");
    data.convert::<i64>().into_vec().expect("converted to i64")
}
