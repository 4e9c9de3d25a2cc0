//! `FieldOps` for the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on the host
//! buffers, in `f64` when the backend's float type is `f64` and in `f32` otherwise.

use std::borrow::Cow;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};

use super::FieldOps;
use super::cpu::{self, FieldArrays};
use super::{FieldGrads, FieldInputs, FieldOptions};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice};
use crate::real::Real;

/// The field query's inputs on the host: the tensors' own memory where they are contiguous
/// and of the kernel's type, copies otherwise.
struct HostInputs<'a, T: Clone> {
    points: Cow<'a, [T]>,
    means: Cow<'a, [T]>,
    quats: Cow<'a, [T]>,
    log_scales: Cow<'a, [T]>,
    features: Cow<'a, [T]>,
    channels: usize,
}

impl<'a, T: Real + burn::tensor::Element> HostInputs<'a, T> {
    fn read<B: NdArrayBackend>(inputs: &'a FieldInputs<B>) -> Self {
        let channels = inputs.features.shape().dims::<2>()[1];
        HostInputs {
            points: host_slice::<T, B>(&inputs.points),
            means: host_slice::<T, B>(&inputs.means),
            quats: host_slice::<T, B>(&inputs.quats),
            log_scales: host_slice::<T, B>(&inputs.log_scales),
            features: host_slice::<T, B>(&inputs.features),
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

fn forward_in<T: Real + burn::tensor::Element, B: NdArrayBackend>(
    inputs: FieldInputs<B>,
    options: FieldOptions,
) -> FloatTensor<B> {
    let host = HostInputs::<T>::read(&inputs);
    let a = host.arrays();
    let shape = Shape::new([a.num_points(), a.channels]);
    float_tensor::<T, B>(cpu::forward(&a, &options), shape)
}

fn backward_in<T: Real + burn::tensor::Element, B: NdArrayBackend>(
    inputs: FieldInputs<B>,
    grad_values: FloatTensor<B>,
    options: FieldOptions,
    points_grad: bool,
) -> FieldGrads<B> {
    let host = HostInputs::<T>::read(&inputs);
    let grad = host_slice::<T, B>(&grad_values);
    let a = host.arrays();
    let (p, n, c) = (a.num_points(), a.num_gaussians(), a.channels);
    let g = cpu::backward(&a, &grad, &options, points_grad);
    FieldGrads {
        points: points_grad.then(|| float_tensor::<T, B>(g.points, Shape::new([p, 3]))),
        means: float_tensor::<T, B>(g.means, Shape::new([n, 3])),
        quats: float_tensor::<T, B>(g.quats, Shape::new([n, 4])),
        log_scales: float_tensor::<T, B>(g.log_scales, Shape::new([n, 3])),
        features: float_tensor::<T, B>(g.features, Shape::new([n, c])),
    }
}

impl<B: NdArrayBackend> FieldOps for B {
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        if inputs.points.dtype() == DType::F64 {
            forward_in::<f64, B>(inputs, options)
        } else {
            forward_in::<f32, B>(inputs, options)
        }
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        if inputs.points.dtype() == DType::F64 {
            backward_in::<f64, B>(inputs, grad_values, options, points_grad)
        } else {
            backward_in::<f32, B>(inputs, grad_values, options, points_grad)
        }
    }
}
