//! The MCMC noise's GPU kernel against ndarray on every compiled GPU backend.

use super::cpu::standard_normals;
use super::tests::{field, moved};
use super::{GATE_CENTRE, GATE_STEEPNESS};
use crate::{MeanNoise, NoiseOps};

use crate::backend::Cpu;

/// The device's `f32` error per product term of a displacement, in units of `f32::EPSILON`:
/// the exponential of `2 log s` within the `3 + 2 |x|` ulp Vulkan allows (at most 23 over the
/// field's log-scales), the normal's logarithm, cosine and sine within a few ulp of its radius,
/// and about ten roundings of the arithmetic. The largest seen over 54 seeds on lavapipe was 39.
const ULPS_PER_TERM: f64 = 64.0;

/// The GPU kernel draws the same integers; its floats (the device's `f32` exponential,
/// logarithm, cosine and sine) agree with ndarray's to rounding. A coordinate's displacement is
/// a sum of nine product terms that may cancel (a move of `6e-5` out of terms of `0.3`), so the
/// error is bounded by the terms' magnitudes, not by the move.
fn gpu_matches_cpu<B: NoiseOps>(label: &str) {
    let f = field(label, 3_001);
    let noise = MeanNoise {
        seed: 0xdead_beef,
        scale: 80.0,
    };
    let got = moved::<B>(&f, &noise);
    let want = moved::<Cpu>(&f, &noise);
    let magnitudes = term_magnitudes(&f, &noise);
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{label}: coordinate {i} is {g}, the CPU's NaN");
            continue;
        }
        let magnitude = magnitudes[i];
        if !magnitude.is_finite() {
            // The displacement is not finite: the centre stays where it is on both.
            assert_eq!(g, w, "{label}: coordinate {i} must stay where it is");
            continue;
        }
        let err = f64::from((g - w).abs());
        // 1e-6 covers the rounding of `mean + move` (centres up to 2, one ulp 2.4e-7).
        let allowed = 1e-6 + ULPS_PER_TERM * f64::from(f32::EPSILON) * magnitude;
        worst = worst.max(err / allowed);
        assert!(
            err <= allowed,
            "{label}: coordinate {i}: {g} against the CPU's {w} (moved {}, terms of magnitude \
             {magnitude})",
            (w - f[0][i]).abs()
        );
    }
    println!("{label}: largest error {worst:.3} of its allowance");
}

/// For each coordinate of `[N, 3]`, `sum |R_ca| s_a^2 |R_ka| gate r_k` in `f64` over the nine
/// terms `(a, k)` of its displacement, with `r_k` the Box-Muller radius of normal `k` (an
/// absolute error of the cosine or sine scales with the radius, not with the normal).
fn term_magnitudes(f: &[Vec<f32>; 4], noise: &MeanNoise) -> Vec<f64> {
    let n = f[3].len();
    let normals = standard_normals(n, noise.seed);
    let pairs = (3 * n).div_ceil(2);
    let radius = |k: usize| {
        let z = f64::from(normals[k]);
        let partner = if k < pairs { k + pairs } else { k - pairs };
        // The last pair's sine half is not drawn when `3 N` is odd: the normal bounds it.
        normals
            .get(partner)
            .map_or(z.abs(), |&p| z.hypot(f64::from(p)))
    };
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    (0..3 * n)
        .map(|i| {
            let (g, c) = (i / 3, i % 3);
            let q = [0, 1, 2, 3].map(|j| f64::from(f[1][4 * g + j]));
            let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
            let [w, x, y, z] = q.map(|v| v / norm);
            let r = [
                [1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y)],
                [2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x)],
                [2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)],
            ];
            let opacity = sigmoid(f64::from(f[3][g]));
            let gate = sigmoid(GATE_STEEPNESS * (GATE_CENTRE - opacity)) * noise.scale;
            let mut sum = 0.0;
            for a in 0..3 {
                let s2 = (2.0 * f64::from(f[2][3 * g + a])).exp();
                for (k, row) in r.iter().enumerate() {
                    sum += (r[c][a] * s2 * row[a]).abs() * gate * radius(k * n + g);
                }
            }
            sum
        })
        .collect()
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
