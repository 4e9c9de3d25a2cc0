//! The loss on the ndarray backend: the rayon kernel of [`cpu`](super::cpu) on host buffers,
//! in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::LossOps;
use super::{LossOptions, LossOutputs, LossPrimitives, cpu};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice};
use crate::real::Real;

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    rendered: FloatTensor<B>,
    target: FloatTensor<B>,
    options: LossOptions,
    outputs: LossOutputs,
) -> LossPrimitives<B> {
    let shape = rendered.shape();
    let dims = shape.dims::<3>();
    let x = host_slice::<T, B>(&rendered);
    let y = host_slice::<T, B>(&target);
    let mut grad = outputs.gradient().then(|| vec![T::ZERO; x.len()]);
    // `photometric_loss` validated the shapes and the options.
    let value = cpu::photometric_loss(&x, &y, dims, options, grad.as_deref_mut())
        .expect("inputs validated by photometric_loss");
    LossPrimitives {
        loss: outputs
            .value()
            .then(|| float_tensor::<T, B>(vec![T::from_f64(value.loss)], Shape::new([1]))),
        grad: grad.map(|g| float_tensor::<T, B>(g, shape)),
    }
}

impl<B: NdArrayBackend> LossOps for B {
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        outputs: LossOutputs,
    ) -> LossPrimitives<Self> {
        if rendered.dtype() == DType::F64 {
            forward_in::<f64, B>(rendered, target, options, outputs)
        } else {
            forward_in::<f32, B>(rendered, target, options, outputs)
        }
    }
}
