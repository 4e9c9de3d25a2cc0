//! The MCMC strategy's exploration noise on the centres, as one op.
//!
//! # Definition
//! For Gaussian `i` of `N`, with unit quaternion `q_i` (the stored one divided by its norm, the
//! norm clamped at `1e-12`), rotation `R_i`, scales `s_i = exp(log_scales_i)` and opacity
//! `o_i = sigmoid(opacity_logits_i)`:
//!
//! ```text
//! means_i' = means_i + R_i diag(s_i^2) R_i^T (gate(o_i) z_i),
//! gate(o)  = scale x sigmoid(100 (0.005 - o))
//! ```
//!
//! so nearly transparent Gaussians explore and opaque ones barely move. A coordinate whose
//! displacement is not finite (from non-finite parameters, which the projection culls) is left
//! where it is.
//!
//! `z_i` are standard normals drawn from `seed` alone by a counter-based generator: with
//! `P = ceil(3N / 2)` pairs, the integer hash `h(j) = mix(round(round(j ^ seed')))` (`mix(x) =
//! x ^ (x >> 16)`, `round(x) = (mix(x) x 0x045d9f3b) & 0x7fffffff`, `seed' = seed & 0x7fffffff`)
//! of each index `j < 2P` gives the uniform `u_j = (h(j) >> 7) / 2^24`; pair `p` is the
//! Box-Muller transform of `(u_p + 2^-24, u_{P + p})`, its cosine half the normal `k = p` and its
//! sine half the normal `k = P + p`; normal `k` is `z[k / N]` of Gaussian `k % N` (the first
//! `N` are every Gaussian's `x`, and so on). The hash keeps 31 bits, so every backend computes
//! the same integers whatever its integer type (`i32` wrapping, `i64` exact, `u32`), and a run
//! draws the same noise after a resume.
//!
//! # Implementations
//! - the default of [`NoiseOps::perturb_means`]: Burn tensor ops, in the order of `cpu.rs`;
//! - `cpu.rs`: two rayon passes, over the Box-Muller pairs and then over the Gaussians (for
//!   ndarray, where each tensor op is a pass over a fresh buffer: ~80 of them), with the same
//!   `f32` operations in the same order as the tensor ops on ndarray, so the two give the same
//!   bits;
//! - `cube.rs`: one CubeCL kernel, one unit per Gaussian (`fusion.rs` records it as one fusion
//!   operation, so it costs one launch instead of the tensor program's);
//! - `autodiff.rs`: the inner backend's op on the inner tensors; the result is untracked.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{ElementConversion, Int, Tensor, TensorPrimitive};

/// The settings of one noise draw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanNoise {
    /// Seed of the normals: the same seed gives the same normals on every backend.
    pub seed: u32,
    /// `scale` of the gate: the centres' learning rate times the noise rate.
    pub scale: f64,
}

/// The inputs of [`perturb_means`], as backend primitives: `means [N, 3]`, `quats [N, 4]`
/// (`w, x, y, z`, not necessarily unit), `log_scales [N, 3]`, `opacity_logits [N]`.
#[derive(Debug, Clone)]
pub struct NoiseInputs<B: Backend> {
    /// `[N, 3]` centres.
    pub means: FloatTensor<B>,
    /// `[N, 4]` rotations `(w, x, y, z)`.
    pub quats: FloatTensor<B>,
    /// `[N, 3]` natural logarithms of the scales.
    pub log_scales: FloatTensor<B>,
    /// `[N]` opacity logits.
    pub opacity_logits: FloatTensor<B>,
}

/// Why [`perturb_means`] refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoiseError {
    /// An input's shape does not match the centres' `[N, 3]`.
    #[error("mean noise: `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        /// The input's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shape it must have.
        expected: Vec<usize>,
    },
}

/// The noise op on a backend: what [`perturb_means`] dispatches to.
pub trait NoiseOps: Backend {
    /// The perturbed centres `[N, 3]` (see the [module docs](self)). Not differentiable. The
    /// default runs Burn tensor ops.
    fn perturb_means(inputs: NoiseInputs<Self>, noise: MeanNoise) -> FloatTensor<Self> {
        perturb_means_tensor_ops(inputs, noise)
    }
}

/// `means` moved by the MCMC exploration noise (see the [module docs](self)): `means [N, 3]`,
/// `quats [N, 4]`, `log_scales [N, 3]`, `opacity_logits [N]`; returns `[N, 3]`, untracked under
/// autodiff.
pub fn perturb_means<B: NoiseOps>(
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    opacity_logits: Tensor<B, 1>,
    noise: &MeanNoise,
) -> Result<Tensor<B, 2>, NoiseError> {
    let n = means.dims()[0];
    for (name, got, expected) in [
        ("means", means.dims().to_vec(), vec![n, 3]),
        ("quats", quats.dims().to_vec(), vec![n, 4]),
        ("log_scales", log_scales.dims().to_vec(), vec![n, 3]),
        ("opacity_logits", opacity_logits.dims().to_vec(), vec![n]),
    ] {
        if got != expected {
            return Err(NoiseError::Shape {
                name,
                got,
                expected,
            });
        }
    }
    if n == 0 {
        return Ok(means);
    }
    let out = B::perturb_means(
        NoiseInputs {
            means: means.into_primitive().tensor(),
            quats: quats.into_primitive().tensor(),
            log_scales: log_scales.into_primitive().tensor(),
            opacity_logits: opacity_logits.into_primitive().tensor(),
        },
        *noise,
    );
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

/// Low 31 bits: what survives every integer operation of the hash identically on an `i32`
/// backend (wrapping), an `i64` one (exact) and in `u32`.
pub const HASH_MASK: u32 = 0x7fff_ffff;
/// The multiplier of the hash's rounds (below 2^31, so products stay within `i64`).
pub const HASH_MULTIPLIER: u32 = 0x045d_9f3b;
/// Bits per uniform: exact in `f32`.
pub const UNIFORM_BITS: u32 = 24;
/// The gate's steepness and centre: `sigmoid(GATE_STEEPNESS (GATE_CENTRE - opacity))`.
pub const GATE_STEEPNESS: f64 = 100.0;
/// See [`GATE_STEEPNESS`]: `1 - 0.995`, as the reference implementation writes it.
pub const GATE_CENTRE: f64 = 1.0 - 0.995;

/// The op as Burn tensor ops on any backend: [`NoiseOps::perturb_means`]'s default, and the
/// reference that `cpu.rs` matches bit for bit on ndarray. Inputs as [`perturb_means`]'s, not
/// checked.
pub fn perturb_means_tensor_ops<B: Backend>(
    inputs: NoiseInputs<B>,
    noise: MeanNoise,
) -> FloatTensor<B> {
    let float = |p| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p));
    let means = float(inputs.means);
    let [n, _] = means.dims();
    let device = means.device();
    // Parameters as rows (`[3, N]`, `[4, N]`): each component is then a contiguous row, which
    // ndarray walks much faster than a column of a row-major `[N, k]` tensor.
    let row = |t: &Tensor<B, 2>, c: usize| t.clone().narrow(0, c, 1);
    let z = standard_normals::<B>(n, noise.seed, &device);
    let quats = float(inputs.quats).transpose();
    let norm = quats.clone().powi_scalar(2).sum_dim(0).sqrt();
    // A zero quaternion stays zero here, and the formula below then gives the identity (as the
    // projection treats it).
    let q = quats / norm.clamp_min(1e-12);
    let r = rotation_rows(row(&q, 0), row(&q, 1), row(&q, 2), row(&q, 3));
    let s2 = (float(inputs.log_scales).transpose() * 2.0).exp();
    let opacity = sigmoid(
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(inputs.opacity_logits))
            .reshape([1, n]),
    );
    let gate = sigmoid((opacity.neg().add_scalar(GATE_CENTRE)) * GATE_STEEPNESS) * noise.scale;
    let z = z * gate;
    // d = R S^2 R^T z, component by component.
    let u: Vec<Tensor<B, 2>> = (0..3)
        .map(|a| {
            let rt_z = (0..3)
                .map(|b| r[3 * b + a].clone() * row(&z, b))
                .reduce(|acc, t| acc + t)
                .expect("three terms");
            row(&s2, a) * rt_z
        })
        .collect();
    let d: Vec<Tensor<B, 2>> = (0..3)
        .map(|i| {
            (0..3)
                .map(|a| r[3 * i + a].clone() * u[a].clone())
                .reduce(|acc, t| acc + t)
                .expect("three terms")
        })
        .collect();
    // Masked as `[3, N]`, before the transpose: Burn 0.21's ndarray `abs` of a large
    // transposed view returns its elements in memory order, so `is_finite` (through `is_inf`)
    // of the view marks the wrong ones.
    let d = Tensor::cat(d, 0);
    let d = d.clone().mask_fill(d.is_finite().bool_not(), 0.0);
    (means + d.transpose()).into_primitive().tensor()
}

/// The rotation matrix of unit quaternions `(w, x, y, z)` (`[1, N]` each), as its nine entries
/// `[1, N]`, row-major (the formula of [`crate::quat::rotation_matrix`]).
fn rotation_rows<B: Backend>(
    w: Tensor<B, 2>,
    x: Tensor<B, 2>,
    y: Tensor<B, 2>,
    z: Tensor<B, 2>,
) -> [Tensor<B, 2>; 9] {
    let product = |a: &Tensor<B, 2>, b: &Tensor<B, 2>| a.clone() * b.clone();
    let (xx, yy, zz) = (product(&x, &x), product(&y, &y), product(&z, &z));
    let (xy, xz, yz) = (product(&x, &y), product(&x, &z), product(&y, &z));
    let (wx, wy, wz) = (product(&w, &x), product(&w, &y), product(&w, &z));
    let diagonal = |a: Tensor<B, 2>, b: Tensor<B, 2>| (a + b).mul_scalar(-2.0).add_scalar(1.0);
    let twice = |a: Tensor<B, 2>| a.mul_scalar(2.0);
    [
        diagonal(yy.clone(), zz.clone()),
        twice(xy.clone() - wz.clone()),
        twice(xz.clone() + wy.clone()),
        twice(xy + wz),
        diagonal(xx.clone(), zz),
        twice(yz.clone() - wx.clone()),
        twice(xz - wy),
        twice(yz + wx),
        diagonal(xx, yy),
    ]
}

/// `[3, n]` standard normals from `seed` (see the [module docs](self)), as tensor ops.
fn standard_normals<B: Backend>(n: usize, seed: u32, device: &B::Device) -> Tensor<B, 2> {
    let pairs = (3 * n).div_ceil(2);
    let hash = |x: Tensor<B, 1, Int>| {
        let mix = |x: Tensor<B, 1, Int>| {
            let shifted = x.clone().bitwise_right_shift_scalar(16.elem());
            x.bitwise_xor(shifted)
        };
        let round = |x: Tensor<B, 1, Int>| {
            mix(x)
                .mul_scalar(i64::from(HASH_MULTIPLIER))
                .bitwise_and_scalar(i64::from(HASH_MASK).elem())
        };
        mix(round(round(x)))
    };
    let index = Tensor::<B, 1, Int>::arange(0..2 * pairs as i64, device);
    let bits = hash(index.bitwise_xor_scalar(i64::from(seed & HASH_MASK).elem()));
    let unit = f64::from(1u32 << UNIFORM_BITS);
    // The first of each pair is in (0, 1], for the logarithm.
    let uniform = bits
        .bitwise_right_shift_scalar(i64::from(31 - UNIFORM_BITS).elem())
        .float()
        / unit;
    let u1 = uniform.clone().narrow(0, 0, pairs).add_scalar(1.0 / unit);
    let angle = uniform.narrow(0, pairs, pairs) * core::f64::consts::TAU;
    let radius = (u1.log() * -2.0).sqrt();
    let normals = Tensor::cat(
        vec![radius.clone() * angle.clone().cos(), radius * angle.sin()],
        0,
    );
    normals.narrow(0, 0, 3 * n).reshape([3, n])
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
