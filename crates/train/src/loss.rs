//! The photometric loss and the image metrics.
//!
//! Training uses Ember's fused op ([`ember_kernels::loss`]): `(1 - lambda) L1 + lambda
//! (1 - SSIM)` and its gradient in one pass, on every backend. [`burn_ops`] is the same loss
//! written as plain Burn tensor ops (two depthwise convolutions and Burn's autodiff): the
//! baseline the fused op was measured against (`benches/loss.rs`, `BENCHMARKS.md`) and checked
//! by (`tests/all/loss.rs`).

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};

pub use ember_kernels::loss::{
    LossError, LossOptions, SSIM_SIGMA, SSIM_WINDOW, photometric_loss, ssim,
};

/// Peak signal-to-noise ratio of a render against its target, dB, both clamped to `[0, 1]`
/// (the render is what would be displayed). Identical images give `f32::INFINITY`.
pub fn psnr<B: Backend, const D: usize>(rendered: Tensor<B, D>, target: Tensor<B, D>) -> f32 {
    let mse: f32 = (rendered.clamp(0.0, 1.0) - target)
        .powi_scalar(2)
        .mean()
        .into_scalar()
        .elem();
    psnr_from_mse(mse)
}

/// PSNR in dB of a mean squared error on `[0, 1]` images.
pub fn psnr_from_mse(mse: f32) -> f32 {
    if mse <= 0.0 {
        f32::INFINITY
    } else {
        -10.0 * mse.log10()
    }
}

pub mod burn_ops {
    //! The loss as Burn tensor ops, differentiable through Burn's autodiff on any backend.
    //!
    //! SSIM's local statistics come from the separable window applied as two depthwise
    //! convolutions (11x1 then 1x11) over the five stacked statistics `x, y, x^2, y^2, xy`,
    //! zero padded; the constants are the fused op's.

    use burn::tensor::backend::Backend;
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{DType, Tensor, TensorData};
    use ember_kernels::loss::{SSIM_C1, SSIM_C2, SSIM_WINDOW, ssim_taps};

    /// `[C, 1, 11, 1]` or `[C, 1, 1, 11]` depthwise weights of the separable window.
    fn window<B: Backend>(
        channels: usize,
        vertical: bool,
        device: &B::Device,
        dtype: DType,
    ) -> Tensor<B, 4> {
        let taps = ssim_taps().map(|t| t as f32);
        let data: Vec<f32> = (0..channels).flat_map(|_| taps).collect();
        let shape = if vertical {
            [channels, 1, SSIM_WINDOW, 1]
        } else {
            [channels, 1, 1, SSIM_WINDOW]
        };
        Tensor::from_data(TensorData::new(data, shape), (device, dtype))
    }

    /// Gaussian blur of every channel of `[1, C, H, W]` (zero padding, same size out).
    fn blur<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
        let channels = x.dims()[1];
        let (device, dtype) = (x.device(), x.dtype());
        let pad = SSIM_WINDOW / 2;
        let x = conv2d(
            x,
            window(channels, true, &device, dtype),
            None,
            ConvOptions::new([1, 1], [pad, 0], [1, 1], channels),
        );
        conv2d(
            x,
            window(channels, false, &device, dtype),
            None,
            ConvOptions::new([1, 1], [0, pad], [1, 1], channels),
        )
    }

    /// `[H, W, C]` to `[1, C, H, W]`.
    fn to_nchw<B: Backend>(image: Tensor<B, 3>) -> Tensor<B, 4> {
        image.permute([2, 0, 1]).unsqueeze_dim(0)
    }

    /// Mean SSIM of two `[H, W, C]` images, as a one-element tensor.
    pub fn ssim<B: Backend>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 1> {
        ssim_map(x, y).mean()
    }

    /// SSIM at every pixel and channel of two `[H, W, C]` images: `[1, C, H, W]`.
    pub fn ssim_map<B: Backend>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 4> {
        let c = x.dims()[2];
        let (x, y) = (to_nchw(x), to_nchw(y));
        let stats = Tensor::cat(
            vec![
                x.clone(),
                y.clone(),
                x.clone() * x.clone(),
                y.clone() * y.clone(),
                x * y,
            ],
            1,
        );
        let blurred = blur(stats);
        let part = |i: usize| blurred.clone().narrow(1, i * c, c);
        let (mu_x, mu_y, e_xx, e_yy, e_xy) = (part(0), part(1), part(2), part(3), part(4));
        let mu_xx = mu_x.clone() * mu_x.clone();
        let mu_yy = mu_y.clone() * mu_y.clone();
        let mu_xy = mu_x * mu_y;
        let sigma_x = e_xx - mu_xx.clone();
        let sigma_y = e_yy - mu_yy.clone();
        let sigma_xy = e_xy - mu_xy.clone();
        let numerator = (mu_xy * 2.0 + SSIM_C1) * (sigma_xy * 2.0 + SSIM_C2);
        let denominator = (mu_xx + mu_yy + SSIM_C1) * (sigma_x + sigma_y + SSIM_C2);
        numerator / denominator
    }

    /// `(1 - lambda) L1 + lambda (1 - SSIM)` of `[H, W, C]` images, as a one-element tensor.
    pub fn photometric_loss<B: Backend>(
        rendered: Tensor<B, 3>,
        target: Tensor<B, 3>,
        ssim_lambda: f64,
    ) -> Tensor<B, 1> {
        let l1 = (rendered.clone() - target.clone()).abs().mean();
        let d_ssim = ssim(rendered, target).neg() + 1.0;
        l1 * (1.0 - ssim_lambda) + d_ssim * ssim_lambda
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    #[test]
    fn psnr_of_known_errors() {
        let device = Default::default();
        let x = Tensor::<ember_kernels::backend::Cpu, 3>::random(
            [20, 20, 3],
            Distribution::Uniform(0.0, 1.0),
            &device,
        );
        assert_eq!(psnr(x.clone(), x), f32::INFINITY);
        assert!((psnr_from_mse(0.01) - 20.0).abs() < 1e-5);
    }
}
