//! The Gaussian-field query: the value of an anisotropic Gaussian mixture at arbitrary 3D points.
//!
//! For query points `x_p` and Gaussians `i` with mean `mu_i`, rotation `R_i` (from the
//! normalised quaternion `(w, x, y, z)`) and scale `S_i = diag(exp(log_scale_i))`:
//!
//! ```text
//! d_i(x)^2   = | W_i (x - mu_i) |^2,        W_i = S_i^-1 R_i^T   (the whitening matrix)
//! out[p, c]  = sum_i f[i, c] * exp(-1/2 d_i(x_p)^2)
//! ```
//!
//! With one feature channel (`C = 1`, `f[i, 0] = w_i`) this is the weighted mixture
//! `sum_i w_i exp(-1/2 d^2)`.
//!
//! # Shapes
//! | input        | shape    | notes                                                   |
//! |--------------|----------|---------------------------------------------------------|
//! | `points`     | `[P, 3]` | query positions, world units                            |
//! | `means`      | `[N, 3]` | Gaussian centres, world units                           |
//! | `quats`      | `[N, 4]` | `(w, x, y, z)`, need not be normalised                  |
//! | `log_scales` | `[N, 3]` | natural log of the standard deviations along local axes |
//! | `features`   | `[N, C]` | per-Gaussian weights or features, `C >= 1`              |
//! | output       | `[P, C]` |                                                         |
//!
//! Every input is differentiable, the points included.
//!
//! # Implementation contract
//! - Fused: no `[P, N, ..]` intermediate exists. `W_i` is computed once per Gaussian per call.
//! - [`FieldOptions::cutoff`]: with `Some(k)`, pairs with `d^2 > k^2` contribute exactly zero
//!   (value and gradient), and the work grows with the number of pairs inside the cutoff (a
//!   uniform grid on the CPU; see the backend docs for the GPU). `None` (the default) is exact.
//! - [`Covariance::Diagonal`] ignores the rotation (`W_i = S_i^-1`); the quaternion gradient is
//!   then zero.
//!
//! # Edge cases (documented and tested)
//! - `N = 0`: the output is zeros `[P, C]`. `P = 0`: the output is `[0, C]`.
//! - A quaternion whose norm is below `1e-12` acts as the identity rotation and receives a zero
//!   gradient (its direction is undefined).
//! - Non-finite inputs propagate (a NaN parameter gives NaN outputs wherever it contributes); the
//!   op does not read tensors back to look for them. `ember_field::GaussianField::validate`
//!   reports the first non-finite parameter by name and index.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
mod cube_exact;
#[cfg(feature = "cube")]
mod cube_grid;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;
mod reference;

pub use reference::field_query_reference;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

/// How the covariance of each Gaussian is parameterised in the query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Covariance {
    /// `Sigma = R S S R^T`: rotation from the quaternion, scales from the log-scales.
    #[default]
    Full,
    /// `Sigma = S S`: axis-aligned; the quaternions are ignored. About twice as cheap per pair.
    Diagonal,
}

/// Options of the field query. `FieldOptions::default()` is the exact, full-covariance query.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FieldOptions {
    /// Cutoff radius in standard deviations (Mahalanobis units): pairs with `d^2 > k^2` are
    /// skipped. `None` evaluates every pair.
    pub cutoff: Option<f32>,
    /// Full or diagonal covariance.
    pub covariance: Covariance,
}

impl FieldOptions {
    /// Sets a cutoff of `k` standard deviations.
    pub fn with_cutoff(mut self, k: f32) -> Self {
        self.cutoff = Some(k);
        self
    }

    /// Sets the covariance parameterisation.
    pub fn with_covariance(mut self, covariance: Covariance) -> Self {
        self.covariance = covariance;
        self
    }
}

/// The inputs of the field query, as backend primitives. Shapes in the [module docs](self).
#[derive(Debug, Clone)]
pub struct FieldInputs<B: Backend> {
    /// `[P, 3]`
    pub points: FloatTensor<B>,
    /// `[N, 3]`
    pub means: FloatTensor<B>,
    /// `[N, 4]`, `(w, x, y, z)`
    pub quats: FloatTensor<B>,
    /// `[N, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[N, C]`
    pub features: FloatTensor<B>,
}

/// Gradients of a scalar loss with respect to every [`FieldInputs`] tensor (same shapes).
#[derive(Debug, Clone)]
pub struct FieldGrads<B: Backend> {
    /// `[P, 3]`, `None` when the backward was asked not to compute it.
    pub points: Option<FloatTensor<B>>,
    /// `[N, 3]`
    pub means: FloatTensor<B>,
    /// `[N, 4]`
    pub quats: FloatTensor<B>,
    /// `[N, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[N, C]`
    pub features: FloatTensor<B>,
}

/// Why a field query was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FieldError {
    /// A tensor does not have the documented shape.
    #[error("field query: `{name}` has shape {got:?}, expected {expected}")]
    Shape {
        /// The argument's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The expected shape, in words (`[N, 4]`).
        expected: String,
    },
    /// The feature tensor has no channel.
    #[error("field query: `features` has zero channels (shape [{n}, 0]); use at least one")]
    NoChannels {
        /// The number of Gaussians.
        n: usize,
    },
    /// The cutoff is not a positive finite number.
    #[error("field query: cutoff must be a positive finite number of standard deviations, got {0}")]
    Cutoff(f32),
}

/// The Gaussian-field query on a backend: what [`field_query`] dispatches to. Implemented for
/// every backend Ember supports, each in its own file of this folder (`ndarray.rs`, `cube.rs`,
/// `fusion.rs`, `autodiff.rs`).
///
/// Implementations may assume the shapes [`field_query`] checks.
pub trait FieldOps: Backend {
    /// Forward pass of the Gaussian-field query (see the [module docs](self) for the contract).
    ///
    /// Returns `values` `[P, C]`.
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self>;

    /// Backward pass of the Gaussian-field query: the gradient of a scalar loss with respect to
    /// every input, given `grad_values` `[P, C]` (the loss gradient with respect to the output).
    ///
    /// `points_grad = false` skips the gradient with respect to the query points
    /// (`FieldGrads::points` is then `None`), which saves a pass when the points are data.
    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self>;
}

/// The Gaussian-field query on tensors: `values [P, C]` (see the [module docs](self)).
///
/// Differentiable with respect to every argument on `Autodiff<B>`. Shapes are checked here, once,
/// so the backends can assume them.
pub fn field_query<B: FieldOps>(
    points: Tensor<B, 2>,
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    features: Tensor<B, 2>,
    options: FieldOptions,
) -> Result<Tensor<B, 2>, FieldError> {
    let [p, pd] = points.dims();
    let [n, md] = means.dims();
    let [_, c] = features.dims();
    let expect = |name: &'static str, got: [usize; 2], want: [usize; 2], expected: &str| {
        if got == want {
            Ok(())
        } else {
            Err(FieldError::Shape {
                name,
                got: got.to_vec(),
                expected: expected.to_string(),
            })
        }
    };
    expect("points", [p, pd], [p, 3], "[P, 3]")?;
    expect("means", [n, md], [n, 3], "[N, 3]")?;
    expect(
        "quats",
        quats.dims(),
        [n, 4],
        &format!("[N, 4] with N = {n}"),
    )?;
    expect(
        "log_scales",
        log_scales.dims(),
        [n, 3],
        &format!("[N, 3] with N = {n}"),
    )?;
    expect(
        "features",
        features.dims(),
        [n, c],
        &format!("[N, C] with N = {n}"),
    )?;
    if c == 0 {
        return Err(FieldError::NoChannels { n });
    }
    if let Some(k) = options.cutoff
        && !(k.is_finite() && k > 0.0)
    {
        return Err(FieldError::Cutoff(k));
    }
    if n == 0 || p == 0 {
        // Nothing to sum (or nowhere to evaluate): the documented zero result.
        return Ok(Tensor::zeros([p, c], &points.device()));
    }
    let inputs = FieldInputs {
        points: points.into_primitive().tensor(),
        means: means.into_primitive().tensor(),
        quats: quats.into_primitive().tensor(),
        log_scales: log_scales.into_primitive().tensor(),
        features: features.into_primitive().tensor(),
    };
    let out = B::field_forward(inputs, options);
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
