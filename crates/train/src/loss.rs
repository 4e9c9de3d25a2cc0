//! The photometric loss and the image metrics, as Burn tensor ops (differentiable on any
//! backend).
//!
//! SSIM follows the 3DGS/Wang et al. form: local statistics under an 11x11 Gaussian window
//! (sigma 1.5) with zero padding at the borders, `C1 = 0.01^2`, `C2 = 0.03^2`, averaged over
//! pixels and channels. The window is separable, so the blur is two depthwise convolutions
//! (11x1 then 1x11) over the five stacked statistics `x, y, x^2, y^2, xy`.

use burn::tensor::backend::Backend;
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{ElementConversion, Tensor, TensorData};

/// Side of the SSIM window, pixels.
pub const SSIM_WINDOW: usize = 11;
/// Standard deviation of the SSIM window, pixels.
pub const SSIM_SIGMA: f64 = 1.5;

/// The normalised 1D Gaussian taps of the SSIM window.
fn gaussian_taps() -> [f32; SSIM_WINDOW] {
    let half = (SSIM_WINDOW / 2) as f64;
    let raw: [f64; SSIM_WINDOW] = core::array::from_fn(|i| {
        let d = i as f64 - half;
        (-d * d / (2.0 * SSIM_SIGMA * SSIM_SIGMA)).exp()
    });
    let sum: f64 = raw.iter().sum();
    raw.map(|v| (v / sum) as f32)
}

/// `[C, 1, 11, 1]` or `[C, 1, 1, 11]` depthwise weights of the separable window.
fn window<B: Backend>(channels: usize, vertical: bool, device: &B::Device) -> Tensor<B, 4> {
    let taps = gaussian_taps();
    let data: Vec<f32> = (0..channels).flat_map(|_| taps).collect();
    let shape = if vertical {
        [channels, 1, SSIM_WINDOW, 1]
    } else {
        [channels, 1, 1, SSIM_WINDOW]
    };
    Tensor::from_data(TensorData::new(data, shape), device)
}

/// Gaussian blur of every channel of `[1, C, H, W]` (zero padding, same size out).
fn blur<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let channels = x.dims()[1];
    let device = x.device();
    let pad = SSIM_WINDOW / 2;
    let x = conv2d(
        x,
        window(channels, true, &device),
        None,
        ConvOptions::new([1, 1], [pad, 0], [1, 1], channels),
    );
    conv2d(
        x,
        window(channels, false, &device),
        None,
        ConvOptions::new([1, 1], [0, pad], [1, 1], channels),
    )
}

/// `[H, W, 3]` to `[1, 3, H, W]`.
fn to_nchw<B: Backend>(image: Tensor<B, 3>) -> Tensor<B, 4> {
    image.permute([2, 0, 1]).unsqueeze_dim(0)
}

/// Mean SSIM of two `[H, W, C]` images with values in `[0, 1]`, as a one-element tensor
/// (1 for identical images).
pub fn ssim<B: Backend>(x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 1> {
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
    const C1: f64 = 0.01 * 0.01;
    const C2: f64 = 0.03 * 0.03;
    let numerator = (mu_xy * 2.0 + C1) * (sigma_xy * 2.0 + C2);
    let denominator = (mu_xx + mu_yy + C1) * (sigma_x + sigma_y + C2);
    (numerator / denominator).mean()
}

/// Mean absolute difference of two images, as a one-element tensor.
pub fn l1<B: Backend, const D: usize>(x: Tensor<B, D>, y: Tensor<B, D>) -> Tensor<B, 1> {
    (x - y).abs().mean()
}

/// The training loss `(1 - lambda) L1 + lambda (1 - SSIM)` of a `[H, W, 3]` render against its
/// target, as a one-element tensor.
pub fn photometric_loss<B: Backend>(
    rendered: Tensor<B, 3>,
    target: Tensor<B, 3>,
    ssim_lambda: f64,
) -> Tensor<B, 1> {
    let l1_term = l1(rendered.clone(), target.clone());
    if ssim_lambda == 0.0 {
        return l1_term;
    }
    let d_ssim = ssim(rendered, target).neg() + 1.0;
    l1_term * (1.0 - ssim_lambda) + d_ssim * ssim_lambda
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, NdArray};
    use burn::tensor::Distribution;

    type B = NdArray<f32>;

    /// SSIM by direct 2D summation over the window, zero padded, in f64.
    fn ssim_reference(x: &[f32], y: &[f32], h: usize, w: usize, c: usize) -> f64 {
        let taps = gaussian_taps();
        let mut total = 0.0;
        for ch in 0..c {
            for i in 0..h {
                for j in 0..w {
                    let (mut mx, mut my, mut xx, mut yy, mut xy) = (0.0, 0.0, 0.0, 0.0, 0.0);
                    for (a, ta) in taps.iter().enumerate() {
                        for (b, tb) in taps.iter().enumerate() {
                            let (ii, jj) =
                                (i as isize + a as isize - 5, j as isize + b as isize - 5);
                            if ii < 0 || jj < 0 || ii >= h as isize || jj >= w as isize {
                                continue;
                            }
                            let k = (ii as usize * w + jj as usize) * c + ch;
                            let wgt = f64::from(*ta) * f64::from(*tb);
                            let (xv, yv) = (f64::from(x[k]), f64::from(y[k]));
                            mx += wgt * xv;
                            my += wgt * yv;
                            xx += wgt * xv * xv;
                            yy += wgt * yv * yv;
                            xy += wgt * xv * yv;
                        }
                    }
                    let (c1, c2) = (1e-4, 9e-4);
                    total += ((2.0 * mx * my + c1) * (2.0 * (xy - mx * my) + c2))
                        / ((mx * mx + my * my + c1) * (xx - mx * mx + yy - my * my + c2));
                }
            }
        }
        total / (h * w * c) as f64
    }

    #[test]
    fn ssim_matches_direct_summation() {
        let device = Default::default();
        let (h, w) = (13, 17);
        let x = Tensor::<B, 3>::random([h, w, 3], Distribution::Uniform(0.0, 1.0), &device);
        let y = (x.clone() * 0.7
            + Tensor::random([h, w, 3], Distribution::Uniform(0.0, 0.3), &device))
        .clamp(0.0, 1.0);
        let got: f32 = ssim(x.clone(), y.clone()).into_scalar();
        let xs = x.into_data().to_vec::<f32>().unwrap();
        let ys = y.into_data().to_vec::<f32>().unwrap();
        let want = ssim_reference(&xs, &ys, h, w, 3);
        assert!((f64::from(got) - want).abs() < 1e-4, "{got} vs {want}");
    }

    #[test]
    fn identical_images_are_perfect() {
        let device = Default::default();
        let x = Tensor::<B, 3>::random([20, 20, 3], Distribution::Uniform(0.0, 1.0), &device);
        let s: f32 = ssim(x.clone(), x.clone()).into_scalar();
        assert!((s - 1.0).abs() < 1e-5, "{s}");
        let l: f32 = photometric_loss(x.clone(), x.clone(), 0.2).into_scalar();
        assert!(l.abs() < 1e-5, "{l}");
        assert_eq!(psnr(x.clone(), x), f32::INFINITY);
        assert!((psnr_from_mse(0.01) - 20.0).abs() < 1e-5);
    }

    #[test]
    fn loss_gradient_matches_finite_differences() {
        type A = Autodiff<B>;
        let device = Default::default();
        let target = Tensor::<A, 3>::random([9, 8, 3], Distribution::Uniform(0.0, 1.0), &device);
        let x0 = Tensor::<A, 3>::random([9, 8, 3], Distribution::Uniform(0.0, 1.0), &device);
        let x = x0.clone().require_grad();
        let loss = photometric_loss(x.clone(), target.clone(), 0.2);
        let grads = loss.backward();
        let g = x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
        let base = x0.into_data().to_vec::<f32>().unwrap();
        let eval = |v: Vec<f32>| -> f64 {
            let t = Tensor::<A, 3>::from_data(TensorData::new(v, [9, 8, 3]), &device);
            f64::from(photometric_loss(t, target.clone(), 0.2).into_scalar())
        };
        let t = target.clone().into_data().to_vec::<f32>().unwrap();
        // L1 has a kink where render = target: probe elements well away from it.
        let probes: Vec<usize> = (0..base.len())
            .filter(|&k| (base[k] - t[k]).abs() > 0.05)
            .step_by(37)
            .take(5)
            .collect();
        assert!(!probes.is_empty());
        for k in probes {
            let h = 1e-2f32;
            let (mut p, mut m) = (base.clone(), base.clone());
            p[k] += h;
            m[k] -= h;
            let numeric = (eval(p) - eval(m)) / (2.0 * f64::from(h));
            assert!(
                (numeric - f64::from(g[k])).abs() < 2e-4 + 2e-2 * numeric.abs(),
                "element {k}: analytic {} numeric {numeric}",
                g[k]
            );
        }
    }
}
