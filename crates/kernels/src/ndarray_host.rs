//! Moving ndarray tensors to and from the host buffers the CPU kernels work on.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::{FloatTensor, FloatTensorOps, IntTensor, IntTensorOps};
use burn::tensor::{Element, ElementConversion, Shape, TensorData, read_sync};

/// Host copy of a float tensor in the kernel's scalar type `T`.
pub(crate) fn to_host<T: Element, E, I, Q>(tensor: FloatTensor<NdArray<E, I, Q>>) -> Vec<T>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    // A contiguous array is copied as a slice. Burn's `into_data` walks a shared array (one an
    // autodiff graph or a caller's clone also holds: the usual case here) element by element
    // through its dynamic-rank iterator, which was half the time of the fused loss.
    let contiguous = match &tensor {
        NdArrayTensor::F32(storage) => storage
            .view()
            .as_slice()
            .map(|values| values.iter().map(|v| v.elem::<T>()).collect()),
        NdArrayTensor::F64(storage) => storage
            .view()
            .as_slice()
            .map(|values| values.iter().map(|v| v.elem::<T>()).collect()),
        _ => None,
    };
    if let Some(values) = contiguous {
        return values;
    }
    // The ndarray backend reads synchronously from host memory: this cannot fail.
    let data = read_sync(NdArray::<E, I, Q>::float_into_data(tensor))
        .expect("ndarray tensors are host memory");
    data.convert::<T>()
        .into_vec()
        .expect("converted to the requested element type")
}

/// A float tensor from kernel output (keeps `T` as its dtype).
pub(crate) fn float_tensor<T: Element, E, I, Q>(
    values: Vec<T>,
    shape: Shape,
) -> FloatTensor<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    NdArray::<E, I, Q>::float_from_data(TensorData::new(values, shape), &Default::default())
}

/// An integer tensor of the backend's integer type from kernel output.
pub(crate) fn int_tensor<E, I, Q>(values: Vec<i64>, shape: Shape) -> IntTensor<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    NdArray::<E, I, Q>::int_from_data(
        TensorData::new(values, shape).convert::<I>(),
        &Default::default(),
    )
}

/// Host copy of an integer tensor.
pub(crate) fn int_to_host<E, I, Q>(tensor: IntTensor<NdArray<E, I, Q>>) -> Vec<i64>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let data = read_sync(NdArray::<E, I, Q>::int_into_data(tensor))
        .expect("ndarray tensors are host memory");
    data.convert::<i64>().into_vec().expect("converted to i64")
}
