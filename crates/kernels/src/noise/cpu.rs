//! The noise op on the CPU, in `f32`: a rayon pass over the Box-Muller pairs (each pair's
//! logarithm and square root serve its two normals), then one over the Gaussians.
//!
//! Each value goes through the same `f32` operations, in the same order, as the tensor ops of
//! the default implementation do on ndarray (the sigmoid as `exp(-ln(exp(-x) + 1))`, as Burn
//! computes it; the cosine and sine in `f64`, rounded once, as ndarray does), so the two give
//! the same bits; the crate's tests check it.

use rayon::prelude::*;

use super::{GATE_CENTRE, GATE_STEEPNESS, HASH_MASK, HASH_MULTIPLIER, MeanNoise, UNIFORM_BITS};

/// Gaussians per rayon task.
const CHUNK: usize = 4096;

/// The hash of index `j` under the masked seed `seed` (see the module docs).
#[inline]
fn hash(j: u32, seed: u32) -> u32 {
    let mix = |x: u32| x ^ (x >> 16);
    let round = |x: u32| mix(x).wrapping_mul(HASH_MULTIPLIER) & HASH_MASK;
    mix(round(round(j ^ (seed & HASH_MASK))))
}

/// Uniform `j` of the draw: `(hash >> 7) / 2^24`, in `[0, 1)`.
#[inline]
fn uniform(j: u32, seed: u32) -> f32 {
    (hash(j, seed) >> (31 - UNIFORM_BITS)) as f32 / (1u32 << UNIFORM_BITS) as f32
}

/// The Box-Muller pair `p` of a draw with `pairs` pairs: its cosine half (normal `p`) and its
/// sine half (normal `pairs + p`).
#[inline]
fn normal_pair(p: usize, pairs: usize, seed: u32) -> (f32, f32) {
    let u1 = uniform(p as u32, seed) + 1.0 / (1u32 << UNIFORM_BITS) as f32;
    let angle = uniform((pairs + p) as u32, seed) * core::f64::consts::TAU as f32;
    let radius = (u1.ln() * -2.0).sqrt();
    let angle = f64::from(angle);
    (radius * angle.cos() as f32, radius * angle.sin() as f32)
}

/// The `3 n` standard normals of a draw for `n` Gaussians, normal `k` at index `k`: each pair
/// computed once, its two halves written together.
pub fn standard_normals(n: usize, seed: u32) -> Vec<f32> {
    let pairs = (3 * n).div_ceil(2);
    let mut normals = vec![0.0f32; 2 * pairs];
    let (cosines, sines) = normals.split_at_mut(pairs);
    cosines
        .par_chunks_mut(CHUNK)
        .zip(sines.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(chunk, (cosines, sines))| {
            for (offset, (c, s)) in cosines.iter_mut().zip(sines).enumerate() {
                (*c, *s) = normal_pair(chunk * CHUNK + offset, pairs, seed);
            }
        });
    normals.truncate(3 * n);
    normals
}

/// Burn's sigmoid, `exp(-ln(exp(-x) + 1))`, in `f32`.
#[inline]
fn sigmoid(x: f32) -> f32 {
    (-((-x).exp() + 1.0).ln()).exp()
}

/// Moves `means` (`[N, 3]`, row-major) by the noise (see the module docs), given `quats
/// [N, 4]`, `log_scales [N, 3]` and `opacity_logits [N]`.
pub fn perturb_means(
    means: &mut [f32],
    quats: &[f32],
    log_scales: &[f32],
    opacity_logits: &[f32],
    noise: &MeanNoise,
) {
    let n = opacity_logits.len();
    let z = standard_normals(n, noise.seed);
    let scale = noise.scale as f32;
    means
        .par_chunks_mut(3 * CHUNK)
        .enumerate()
        .for_each(|(chunk, rows)| {
            for (offset, mean) in rows.chunks_exact_mut(3).enumerate() {
                let i = chunk * CHUNK + offset;
                let z = [0, 1, 2].map(|b| z[b * n + i]);
                let d = displacement(
                    &quats[4 * i..4 * i + 4],
                    &log_scales[3 * i..3 * i + 3],
                    opacity_logits[i],
                    z,
                    scale,
                );
                for (m, d) in mean.iter_mut().zip(d) {
                    *m += d;
                }
            }
        });
}

/// `R diag(s^2) R^T (gate z)` of one Gaussian, zero where it is not finite.
#[inline]
fn displacement(q: &[f32], log_scale: &[f32], logit: f32, z: [f32; 3], scale: f32) -> [f32; 3] {
    let norm = (((q[0] * q[0] + q[1] * q[1]) + q[2] * q[2]) + q[3] * q[3]).sqrt();
    let norm = norm.max(1e-12);
    let [w, x, y, zq] = [q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm];
    let (xx, yy, zz) = (x * x, y * y, zq * zq);
    let (xy, xz, yz) = (x * y, x * zq, y * zq);
    let (wx, wy, wz) = (w * x, w * y, w * zq);
    let diagonal = |a: f32, b: f32| (a + b) * -2.0 + 1.0;
    let r = [
        diagonal(yy, zz),
        (xy - wz) * 2.0,
        (xz + wy) * 2.0,
        (xy + wz) * 2.0,
        diagonal(xx, zz),
        (yz - wx) * 2.0,
        (xz - wy) * 2.0,
        (yz + wx) * 2.0,
        diagonal(xx, yy),
    ];
    let opacity = sigmoid(logit);
    let gate = sigmoid((-opacity + GATE_CENTRE as f32) * GATE_STEEPNESS as f32) * scale;
    let z = z.map(|v| v * gate);
    let u = [0, 1, 2].map(|a| {
        let s2 = (log_scale[a] * 2.0).exp();
        s2 * ((r[a] * z[0] + r[3 + a] * z[1]) + r[6 + a] * z[2])
    });
    [0, 1, 2].map(|i| {
        let d = (r[3 * i] * u[0] + r[3 * i + 1] * u[1]) + r[3 * i + 2] * u[2];
        if d.is_finite() { d } else { 0.0 }
    })
}
