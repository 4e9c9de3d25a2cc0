//! The loss on the ndarray backend: the rayon kernel of [`cpu`](super::cpu) on host buffers,
//! in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::{LossOptions, LossPrimitives, cpu};
use crate::ndarray_host::{float_tensor, to_host};
use crate::real::Real;

fn forward_in<T: Real + Element, E, I, Q>(
    rendered: FloatTensor<NdArray<E, I, Q>>,
    target: FloatTensor<NdArray<E, I, Q>>,
    options: LossOptions,
    with_grad: bool,
) -> LossPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    let shape = rendered.shape();
    let dims = shape.dims::<3>();
    let x = to_host::<T, E, I, Q>(rendered);
    let y = to_host::<T, E, I, Q>(target);
    let mut grad = with_grad.then(|| vec![T::ZERO; x.len()]);
    // `photometric_loss` validated the shapes and the options.
    let value = cpu::photometric_loss(&x, &y, dims, options, grad.as_deref_mut())
        .expect("inputs validated by photometric_loss");
    LossPrimitives {
        loss: float_tensor::<T, E, I, Q>(vec![T::from_f64(value.loss)], Shape::new([1])),
        grad: grad.map(|g| float_tensor::<T, E, I, Q>(g, shape)),
    }
}

/// [`SplatBackend::photometric_loss_forward`](crate::SplatBackend::photometric_loss_forward)
/// for `NdArray`.
pub(crate) fn forward<E, I, Q>(
    rendered: FloatTensor<NdArray<E, I, Q>>,
    target: FloatTensor<NdArray<E, I, Q>>,
    options: LossOptions,
    with_grad: bool,
) -> LossPrimitives<NdArray<E, I, Q>>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    if rendered.dtype() == DType::F64 {
        forward_in::<f64, E, I, Q>(rendered, target, options, with_grad)
    } else {
        forward_in::<f32, E, I, Q>(rendered, target, options, with_grad)
    }
}
