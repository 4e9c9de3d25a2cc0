//! The noise op as one CubeCL kernel, generic over the runtime and the float type: one unit per
//! Gaussian, the arithmetic of `cpu.rs` (the hash in `u32`, the same integers on every
//! backend; the floats may round differently, the cosine and sine being the device's `f32`
//! ones).

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::{
    GATE_CENTRE, GATE_STEEPNESS, HASH_MASK, HASH_MULTIPLIER, MeanNoise, NoiseInputs, NoiseOps,
    UNIFORM_BITS,
};
use crate::cube_alloc::output;
use crate::cube_math::{finite, rotation_rows, sigmoid};

/// Units per cube.
const BLOCK: u32 = 256;
/// `2^UNIFORM_BITS`: the uniforms' denominator.
const UNIT: f32 = (1u32 << UNIFORM_BITS) as f32;
/// `1 / UNIT`, added to the first uniform of a pair (the logarithm's argument is then `> 0`).
const INV_UNIT: f32 = 1.0 / UNIT;
/// The shift that keeps a hash's top `UNIFORM_BITS` of 31.
const UNIFORM_SHIFT: u32 = 31 - UNIFORM_BITS;
/// `2 pi` in `f32`.
const TAU: f32 = core::f64::consts::TAU as f32;
/// The gate's constants in `f32`.
const CENTRE: f32 = GATE_CENTRE as f32;
/// See [`CENTRE`].
const STEEPNESS: f32 = GATE_STEEPNESS as f32;

/// `x ^ (x >> 16)`.
#[cube]
fn mix(x: u32) -> u32 {
    x ^ (x >> 16)
}

/// One round of the hash.
#[cube]
fn hash_round(x: u32) -> u32 {
    (mix(x) * HASH_MULTIPLIER) & HASH_MASK
}

/// Uniform `j` of the draw, in `[0, 1)`.
#[cube]
fn uniform<F: Float>(j: u32, seed: u32) -> F {
    let bits = mix(hash_round(hash_round(j ^ seed)));
    F::cast_from(bits >> UNIFORM_SHIFT) / F::new(UNIT)
}

/// Standard normal `k` of the draw (`pairs = ceil(3 N / 2)`).
#[cube]
fn standard_normal<F: Float>(k: u32, pairs: u32, seed: u32) -> F {
    let sine = k >= pairs;
    let mut p = k;
    if sine {
        p = k - pairs;
    }
    let u1 = uniform::<F>(p, seed) + F::new(INV_UNIT);
    let angle = uniform::<F>(pairs + p, seed) * F::new(TAU);
    let radius = F::sqrt(F::ln(u1) * F::new(-2.0));
    let mut trig = F::cos(angle);
    if sine {
        trig = F::sin(angle);
    }
    radius * trig
}

/// `d` where it is finite, else zero.
#[cube]
fn finite_or_zero<F: Float>(d: F) -> F {
    select(finite::<F>(d), d, F::new(0.0))
}

/// One unit per Gaussian: `out[i] = means[i] + R S^2 R^T (gate z)` (see the module docs).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn perturb_means_kernel<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    opacity_logits: &Tensor<F>,
    out: &mut Tensor<F>,
    seed: u32,
    pairs: u32,
    scale: f32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    let n = opacity_logits.shape(0);
    if i >= n {
        terminate!();
    }
    let q0 = quats[4 * i];
    let q1 = quats[4 * i + 1];
    let q2 = quats[4 * i + 2];
    let q3 = quats[4 * i + 3];
    let norm = F::max(
        F::sqrt(((q0 * q0 + q1 * q1) + q2 * q2) + q3 * q3),
        F::new(1e-12),
    );
    let w = q0 / norm;
    let x = q1 / norm;
    let y = q2 / norm;
    let z = q3 / norm;
    let two = F::new(2.0);
    // The rotation's entries row-major (the same values as the CPU twin's `-2 a + 1` and
    // `2 b`: doubling is exact).
    let (row0, row1, row2) = rotation_rows::<F>(w, x, y, z);
    let (r0, r1, r2) = (row0.x, row0.y, row0.z);
    let (r3, r4, r5) = (row1.x, row1.y, row1.z);
    let (r6, r7, r8) = (row2.x, row2.y, row2.z);

    let opacity = sigmoid::<F>(opacity_logits[i]);
    let gate = sigmoid::<F>((-opacity + F::new(CENTRE)) * F::new(STEEPNESS)) * F::cast_from(scale);
    let nu = n as u32;
    let iu = i as u32;
    let z0 = standard_normal::<F>(iu, pairs, seed) * gate;
    let z1 = standard_normal::<F>(nu + iu, pairs, seed) * gate;
    let z2 = standard_normal::<F>(2 * nu + iu, pairs, seed) * gate;

    let u0 = F::exp(log_scales[3 * i] * two) * ((r0 * z0 + r3 * z1) + r6 * z2);
    let u1 = F::exp(log_scales[3 * i + 1] * two) * ((r1 * z0 + r4 * z1) + r7 * z2);
    let u2 = F::exp(log_scales[3 * i + 2] * two) * ((r2 * z0 + r5 * z1) + r8 * z2);
    let d0 = (r0 * u0 + r1 * u1) + r2 * u2;
    let d1 = (r3 * u0 + r4 * u1) + r5 * u2;
    let d2 = (r6 * u0 + r7 * u1) + r8 * u2;
    out[3 * i] = means[3 * i] + finite_or_zero::<F>(d0);
    out[3 * i + 1] = means[3 * i + 1] + finite_or_zero::<F>(d1);
    out[3 * i + 2] = means[3 * i + 2] + finite_or_zero::<F>(d2);
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> NoiseOps
    for CubeBackend<R, F, I, BT>
{
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        let means = into_contiguous(inputs.means);
        let quats = into_contiguous(inputs.quats);
        let log_scales = into_contiguous(inputs.log_scales);
        let opacity_logits = into_contiguous(inputs.opacity_logits);
        let n = opacity_logits.shape()[0];
        let dtype = means.dtype;
        let out = output(&means, means.shape(), dtype);
        if n == 0 {
            return out;
        }
        let dim = CubeDim::new_1d(BLOCK);
        let count = calculate_cube_count_elemwise(&means.client, n, dim);
        perturb_means_kernel::launch::<R>(
            &means.client,
            count,
            dim,
            means.clone().into_tensor_arg(),
            quats.into_tensor_arg(),
            log_scales.into_tensor_arg(),
            opacity_logits.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            noise.seed & HASH_MASK,
            (3 * n).div_ceil(2) as u32,
            noise.scale as f32,
            dtype.into(),
        );
        out
    }
}
