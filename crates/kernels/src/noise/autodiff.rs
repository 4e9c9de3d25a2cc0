//! The noise op on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (the op moves parameters between steps; it is not part of a differentiable
//! computation).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::FloatTensor;

use super::{MeanNoise, NoiseInputs, NoiseOps};

impl<B: NoiseOps, C: CheckpointStrategy> NoiseOps for Autodiff<B, C> {
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let out = B::perturb_means(
            NoiseInputs {
                means: inner(inputs.means),
                quats: inner(inputs.quats),
                log_scales: inner(inputs.log_scales),
                opacity_logits: inner(inputs.opacity_logits),
            },
            noise,
        );
        <Autodiff<B, C> as AutodiffBackend>::from_inner(out)
    }
}
