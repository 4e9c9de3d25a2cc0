//! The noise op on the ndarray backend: [`cpu::perturb_means`](super::cpu::perturb_means) on
//! host copies for `f32` tensors; `f64` ones (gradient checks, never training) run the default
//! tensor ops.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, TensorMetadata};

use super::{MeanNoise, NoiseInputs, NoiseOps, cpu, perturb_means_tensor_ops};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, to_host};

impl<B: NdArrayBackend> NoiseOps for B {
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        if inputs.means.dtype() != DType::F32 {
            return perturb_means_tensor_ops(inputs, noise);
        }
        let shape = inputs.means.shape();
        let mut means = to_host::<f32, B>(inputs.means);
        cpu::perturb_means(
            &mut means,
            &host_slice::<f32, B>(&inputs.quats),
            &host_slice::<f32, B>(&inputs.log_scales),
            &host_slice::<f32, B>(&inputs.opacity_logits),
            &noise,
        );
        float_tensor::<f32, B>(means, shape)
    }
}
