//! Similarity transforms of a Gaussian set: translation, rotation and uniform scale, with the
//! SH coefficients rotated along, in one fused pass over the Gaussians.
//!
//! # What a [`Similarity`] does to a Gaussian
//! | parameter    | shape       | new value                                                   |
//! |--------------|-------------|-------------------------------------------------------------|
//! | `means`      | `[N, 3]`    | `s R (m - c) + c + t`, computed as `(s R) m + o` with `o = c - s R c + t` |
//! | `quats`      | `[N, 4]`    | `q_R * q` (Hamilton product; an unnormalised `q` keeps its norm) |
//! | `log_scales` | `[N, 3]`    | `log_scales + ln s`                                         |
//! | `sh_rest`    | `[N, K, 3]` | bands 1-3 multiplied by the rotation's SH matrices ([`ShRotation`]), per channel; `K` in `{0, 3, 8, 15}` |
//!
//! Opacities and the DC colour do not change (the DC term is rotation invariant) and are not
//! part of the op. The op is not differentiable (it is an edit of a scene, not a step of
//! training): on `Autodiff<B>` its outputs are untracked.
//!
//! # Batches
//! Every entry point takes a slice of `F` transforms and writes `F` transformed copies of the
//! set, frame-major (`[F, N, ...]`): animation frames, or the views of an orbit, in one launch.
//!
//! # Implementations
//! - `cpu.rs`: rayon, one fused loop over Gaussians writing into caller-provided buffers
//!   ([`cpu::transform_into`], no allocation) in `f32` or `f64`; `cpu/x86.rs`: its `f32`
//!   blocks of eight Gaussians in AVX2, with streaming stores for outputs past the caches;
//! - `cube.rs`: one CubeCL unit per (frame, Gaussian), the same arithmetic;
//! - `ndarray.rs`, `fusion.rs`, `autodiff.rs`: the [`TransformOps`] impls for each backend.
//!
//! The per-frame constants (`s R`, `o`, `q_R`, `ln s`, the SH matrices) are computed once on
//! the host in `f64` ([`frame_params`]) and handed to the kernels as [`PARAMS_WIDTH`] numbers.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;
pub mod sh_rotation;
mod similarity;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

pub use sh_rotation::ShRotation;
pub use similarity::Similarity;

/// Offset of `s R` (row-major 3x3) in a frame's parameters.
pub const PARAM_LINEAR: usize = 0;
/// Offset of the translation `o` (3).
pub const PARAM_OFFSET: usize = 9;
/// Offset of the rotation quaternion `q_R` `(w, x, y, z)` (4).
pub const PARAM_QUAT: usize = 12;
/// Offset of `ln s` (1).
pub const PARAM_LOG_SCALE: usize = 16;
/// Offset of the band-1 SH matrix (3x3).
pub const PARAM_SH1: usize = 17;
/// Offset of the band-2 SH matrix (5x5).
pub const PARAM_SH2: usize = 26;
/// Offset of the band-3 SH matrix (7x7).
pub const PARAM_SH3: usize = 51;
/// Numbers per frame in the kernels' parameter block.
pub const PARAMS_WIDTH: usize = 100;

/// Why a transform cannot be applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransformError {
    /// A transform holds NaN or infinity.
    #[error("the transform holds a NaN or infinite value")]
    NotFinite,
    /// `scale <= 0` (a reflection or a collapse is not a similarity of Gaussians).
    #[error("the transform's scale is {0}; it must be positive")]
    NonPositiveScale(f64),
    /// The rotation quaternion is zero.
    #[error("the transform's rotation quaternion is zero")]
    ZeroRotation,
    /// No transforms were given to a batched call.
    #[error("no transforms given")]
    NoTransforms,
    /// Buffers or tensors whose sizes do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
}

/// The per-frame constants of `similarity` in the kernels' layout (the `PARAM_*` offsets).
pub fn frame_params(similarity: &Similarity) -> Result<[f64; PARAMS_WIDTH], TransformError> {
    similarity.validate()?;
    let r = similarity.rotation_matrix();
    let sh = ShRotation::new(&r);
    let mut p = [0.0; PARAMS_WIDTH];
    for (dst, v) in p[PARAM_LINEAR..PARAM_LINEAR + 9].iter_mut().zip(r) {
        *dst = similarity.scale * v;
    }
    p[PARAM_OFFSET..PARAM_OFFSET + 3].copy_from_slice(&similarity.offset());
    p[PARAM_QUAT..PARAM_QUAT + 4].copy_from_slice(&similarity.unit_rotation());
    p[PARAM_LOG_SCALE] = similarity.scale.ln();
    p[PARAM_SH1..PARAM_SH2].copy_from_slice(&sh.band1);
    p[PARAM_SH2..PARAM_SH3].copy_from_slice(&sh.band2);
    p[PARAM_SH3..PARAMS_WIDTH].copy_from_slice(&sh.band3);
    Ok(p)
}

/// The inputs of the op as backend primitives.
#[derive(Debug, Clone)]
pub struct TransformInputs<B: Backend> {
    /// `[N, 3]`
    pub means: FloatTensor<B>,
    /// `[N, 4]`
    pub quats: FloatTensor<B>,
    /// `[N, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[N, K, 3]`, `K` in `{0, 3, 8, 15}`.
    pub sh_rest: FloatTensor<B>,
}

/// The outputs of the op as backend primitives, one copy of the set per transform.
#[derive(Debug, Clone)]
pub struct TransformPrimitives<B: Backend> {
    /// `[F, N, 3]`
    pub means: FloatTensor<B>,
    /// `[F, N, 4]`
    pub quats: FloatTensor<B>,
    /// `[F, N, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[F, N, K, 3]`
    pub sh_rest: FloatTensor<B>,
}

/// `F` transformed copies of a Gaussian set as tensors (frame-major).
#[derive(Debug, Clone)]
pub struct TransformedGaussians<B: Backend> {
    /// `[F, N, 3]`
    pub means: Tensor<B, 3>,
    /// `[F, N, 4]`
    pub quats: Tensor<B, 3>,
    /// `[F, N, 3]`
    pub log_scales: Tensor<B, 3>,
    /// `[F, N, K, 3]`
    pub sh_rest: Tensor<B, 4>,
}

/// Checks the shapes of one set and the number of SH coefficients; returns `(N, K)`.
pub(crate) fn check_shapes(
    means: &[usize],
    quats: &[usize],
    log_scales: &[usize],
    sh_rest: &[usize],
) -> Result<(usize, usize), TransformError> {
    let n = means[0];
    let k = sh_rest.get(1).copied().unwrap_or(0);
    let ok = means == [n, 3]
        && quats == [n, 4]
        && log_scales == [n, 3]
        && sh_rest == [n, k, 3]
        && matches!(k, 0 | 3 | 8 | 15);
    if ok {
        Ok((n, k))
    } else {
        Err(TransformError::Shape(format!(
            "means {means:?}, quats {quats:?}, log_scales {log_scales:?}, sh_rest {sh_rest:?} \
             (expected [N, 3], [N, 4], [N, 3], [N, K, 3] with K in 0, 3, 8, 15)"
        )))
    }
}

/// The similarity transform of Gaussian sets on a backend: what [`transform_gaussians`]
/// dispatches to. Implemented for every backend Ember supports, each in its own file of this
/// folder.
pub trait TransformOps: Backend {
    /// The similarity transform of a Gaussian set (see the [module docs](self) for the
    /// contract): one transformed copy per entry of `similarities` (non-empty, each valid),
    /// frame-major outputs `[F, N, ...]`. Not differentiable: on `Autodiff` the outputs are
    /// untracked.
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self>;
}

/// Applies each of `similarities` to the Gaussian set, returning `F = similarities.len()`
/// transformed copies, frame-major. Runs the backend's fused kernel; not differentiable.
pub fn transform_gaussians<B: TransformOps>(
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    sh_rest: Tensor<B, 3>,
    similarities: &[Similarity],
) -> Result<TransformedGaussians<B>, TransformError> {
    if similarities.is_empty() {
        return Err(TransformError::NoTransforms);
    }
    for s in similarities {
        s.validate()?;
    }
    check_shapes(
        &means.dims(),
        &quats.dims(),
        &log_scales.dims(),
        &sh_rest.dims(),
    )?;
    let out = B::transform_forward(
        TransformInputs {
            means: means.into_primitive().tensor(),
            quats: quats.into_primitive().tensor(),
            log_scales: log_scales.into_primitive().tensor(),
            sh_rest: sh_rest.into_primitive().tensor(),
        },
        similarities,
    );
    let wrap3 = |t| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t));
    Ok(TransformedGaussians {
        means: wrap3(out.means),
        quats: wrap3(out.quats),
        log_scales: wrap3(out.log_scales),
        sh_rest: Tensor::from_primitive(TensorPrimitive::Float(out.sh_rest)),
    })
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
