//! The MCMC noise's GPU kernel against ndarray on every compiled GPU backend.

use super::tests::{field, moved};
use crate::{MeanNoise, NoiseOps};

use crate::backend::Cpu;

/// The GPU kernel draws the same integers; its floats (the device's `f32` logarithm, cosine and
/// sine) agree with ndarray's to rounding.
fn gpu_matches_cpu<B: NoiseOps>(label: &str) {
    let f = field(label, 3_001);
    let noise = MeanNoise {
        seed: 0xdead_beef,
        scale: 80.0,
    };
    let got = moved::<B>(&f, &noise);
    let want = moved::<Cpu>(&f, &noise);
    let mut worst = 0.0f32;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{label}: coordinate {i} is {g}, the CPU's NaN");
            continue;
        }
        // Relative to the move, not to the centre.
        let step = (w - f[0][i]).abs();
        let err = (g - w).abs() / (1e-6 + step);
        worst = worst.max(err);
        assert!(
            (g - w).abs() <= 1e-6 + 1e-3 * step,
            "{label}: coordinate {i}: {g} against the CPU's {w} (moved {step})"
        );
    }
    println!("{label}: largest error {worst} of the move");
}

#[cfg(feature = "wgpu")]
#[test]
fn noise_wgpu_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Wgpu>("noise_wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn noise_cuda_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Cuda>("noise_cuda");
}
