//! The noise op on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (the op moves parameters between steps; it is not part of a differentiable
//! computation; see [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{MeanNoise, NoiseInputs, NoiseOps};
use crate::untracked::{Untracked, untracked_bundle};

untracked_bundle!(NoiseInputs { means, quats, log_scales, opacity_logits });

impl<B: NoiseOps, C: CheckpointStrategy> NoiseOps for Autodiff<B, C> {
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        let out = B::perturb_means(inputs.into_inner(), noise);
        <Self as AutodiffBackend>::from_inner(out)
    }
}
