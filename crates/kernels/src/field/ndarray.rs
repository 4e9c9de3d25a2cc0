//! `SplatBackend` for the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on the host
//! buffers, in `f64` when the backend's float type is `f64` and in `f32` otherwise.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};

use super::cpu::{self, FieldArrays};
use super::{FieldGrads, FieldInputs, FieldOptions};
use crate::ndarray_host::{float_tensor, to_host};
use crate::real::Real;

struct HostInputs<T> {
    points: Vec<T>,
    means: Vec<T>,
    quats: Vec<T>,
    log_scales: Vec<T>,
    features: Vec<T>,
    channels: usize,
}

impl<T: Real + burn::tensor::Element> HostInputs<T> {
    fn read<E, I, Q>(inputs: FieldInputs<NdArray<E, I, Q>>) -> Self
    where
        E: FloatNdArrayElement,
        I: IntNdArrayElement,
        Q: QuantElement,
        NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
    {
        let channels = inputs.features.shape().dims::<2>()[1];
        HostInputs {
            points: to_host::<T, E, I, Q>(inputs.points),
            means: to_host::<T, E, I, Q>(inputs.means),
            quats: to_host::<T, E, I, Q>(inputs.quats),
            log_scales: to_host::<T, E, I, Q>(inputs.log_scales),
            features: to_host::<T, E, I, Q>(inputs.features),
            channels,
        }
    }

    fn arrays(&self) -> FieldArrays<'_, T> {
        FieldArrays {
            points: &self.points,
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            features: &self.features,
            channels: self.channels,
        }
    }
}

fn forward_in<T: Real + burn::tensor::Element, E, I, Q>(
    inputs: FieldInputs<NdArray<E, I, Q>>,
    options: FieldOptions,
) -> FloatTensor<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let host = HostInputs::<T>::read(inputs);
    let a = host.arrays();
    let shape = Shape::new([a.num_points(), a.channels]);
    float_tensor::<T, E, I, Q>(cpu::forward(&a, &options), shape)
}

fn backward_in<T: Real + burn::tensor::Element, E, I, Q>(
    inputs: FieldInputs<NdArray<E, I, Q>>,
    grad_values: FloatTensor<NdArray<E, I, Q>>,
    options: FieldOptions,
    points_grad: bool,
) -> FieldGrads<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let host = HostInputs::<T>::read(inputs);
    let grad = to_host::<T, E, I, Q>(grad_values);
    let a = host.arrays();
    let (p, n, c) = (a.num_points(), a.num_gaussians(), a.channels);
    let g = cpu::backward(&a, &grad, &options, points_grad);
    FieldGrads {
        points: points_grad.then(|| float_tensor::<T, E, I, Q>(g.points, Shape::new([p, 3]))),
        means: float_tensor::<T, E, I, Q>(g.means, Shape::new([n, 3])),
        quats: float_tensor::<T, E, I, Q>(g.quats, Shape::new([n, 4])),
        log_scales: float_tensor::<T, E, I, Q>(g.log_scales, Shape::new([n, 3])),
        features: float_tensor::<T, E, I, Q>(g.features, Shape::new([n, c])),
    }
}

/// [`SplatBackend::field_forward`](crate::SplatBackend::field_forward) for `NdArray`.
pub(crate) fn forward<E, I, Q>(
    inputs: FieldInputs<NdArray<E, I, Q>>,
    options: FieldOptions,
) -> FloatTensor<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    if inputs.points.dtype() == DType::F64 {
        forward_in::<f64, E, I, Q>(inputs, options)
    } else {
        forward_in::<f32, E, I, Q>(inputs, options)
    }
}

/// [`SplatBackend::field_backward`](crate::SplatBackend::field_backward) for `NdArray`.
pub(crate) fn backward<E, I, Q>(
    inputs: FieldInputs<NdArray<E, I, Q>>,
    grad_values: FloatTensor<NdArray<E, I, Q>>,
    options: FieldOptions,
    points_grad: bool,
) -> FieldGrads<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    if inputs.points.dtype() == DType::F64 {
        backward_in::<f64, E, I, Q>(inputs, grad_values, options, points_grad)
    } else {
        backward_in::<f32, E, I, Q>(inputs, grad_values, options, points_grad)
    }
}
