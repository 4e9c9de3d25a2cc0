//! Per-photo appearance: each training photo's exposure and white balance, learned beside the
//! field so that the field keeps the scene's own colours.
//!
//! ## The transform (`appearance.kind = "exposure"`)
//! Photo `v` has six parameters `p_v = (g_r, g_g, g_b, b_r, b_g, b_b)`, a log-gain and an
//! offset per colour channel. Its render `x [H, W, 3]` is compared with the photo as
//!
//! ```text
//! y_c = exp(g_c) x_c + b_c
//! ```
//!
//! and the loss's gradient `dL/dy` comes back to the render and the parameters as
//!
//! ```text
//! dL/dx_c = exp(g_c) dL/dy_c        dL/dg_c = exp(g_c) sum_pixels dL/dy_c x_c
//! dL/db_c = sum_pixels dL/dy_c
//! ```
//!
//! ([`apply_backward`], checked against Burn's autodiff of [`apply`] and against f64 central
//! differences). A log-gain keeps the gain positive, and makes halving and doubling the
//! exposure the same distance from the identity.
//!
//! ## Learning it
//! Each photo's row takes one Adam step per visit ([`PhotoAppearance::update`]: its own
//! moments and step count, so a photo seen rarely is not damped by the others' steps), with the
//! pull towards the identity `w_g |g_v|^2 + w_b |b_v|^2` added to its gradient
//! (`appearance.identity_pull`, `appearance.offset_pull`). The field's colours and a transform
//! shared by every photo trade off freely (a brighter field and darker photos draw the same
//! pictures), so after each step the parameters are projected back onto `sum_v p_v = 0`: the
//! photos' log-gains and offsets average zero, and the field takes the capture's average
//! exposure, which is where a held-out photo of it most likely lies. (A pull alone settles that
//! trade only as slowly as its weight allows: on cup_colmap the held-out views came out 3.6 dB
//! worse than with no transform at all, `docs/benchmarks-history.md`.) Everything stays on the
//! device: no step reads a parameter back.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::config::{AppearanceConfig, AppearanceKind};

/// Parameters per photo: three log-gains, then three offsets.
pub const PARAMS_PER_PHOTO: usize = 6;

/// Photo `v`'s colours from the render: `rendered [H, W, 3]`, `row [1, 6]` (see the module
/// docs) -> `[H, W, 3]`. Differentiable through Burn's autodiff (the path a loss of the
/// user's own takes).
pub fn apply<B: Backend>(rendered: Tensor<B, 3>, row: Tensor<B, 2>) -> Tensor<B, 3> {
    let gains = row.clone().narrow(1, 0, 3).exp().reshape([1, 1, 3]);
    let offsets = row.narrow(1, 3, 3).reshape([1, 1, 3]);
    rendered * gains + offsets
}

/// The backward of [`apply`]: from `grad [H, W, 3]` (the loss's gradient with respect to its
/// output), the gradients with respect to `rendered` `[H, W, 3]` and `row` `[1, 6]`.
pub fn apply_backward<B: Backend>(
    rendered: Tensor<B, 3>,
    row: Tensor<B, 2>,
    grad: Tensor<B, 3>,
) -> (Tensor<B, 3>, Tensor<B, 2>) {
    let gains = row.narrow(1, 0, 3).exp();
    let grad_rendered = grad.clone() * gains.clone().reshape([1, 1, 3]);
    // Summed over rows, then columns: the order Burn's autodiff sums a broadcast gradient in,
    // so that this pass and the autodiff one give the same bits.
    let pixel_sum = |t: Tensor<B, 3>| t.sum_dim(0).sum_dim(1).reshape([1, 3]);
    let grad_gains = pixel_sum(grad.clone() * rendered) * gains;
    let grad_offsets = pixel_sum(grad);
    (
        grad_rendered,
        Tensor::cat(vec![grad_gains, grad_offsets], 1),
    )
}

/// The appearance of every training photo, with its optimiser state (see the module docs).
#[derive(Debug, Clone)]
pub struct PhotoAppearance<B: Backend> {
    config: AppearanceConfig,
    /// `[V, 6]`: each training photo's parameters, in the scene's training order.
    params: Tensor<B, 2>,
    /// `[V, 6]`: Adam's first and second moments.
    exp_avg: Tensor<B, 2>,
    exp_avg_sq: Tensor<B, 2>,
    /// Adam steps taken per photo.
    steps: Vec<u64>,
    /// `[1, 6]`: twice the pulls' weights (log-gains, then offsets), made once.
    pull: Tensor<B, 2>,
    beta1: f64,
    beta2: f64,
    eps: f64,
}

/// What a checkpoint keeps of a [`PhotoAppearance`]: `[V, 6]` rows and the step counts.
#[derive(Debug, Clone, PartialEq)]
pub struct AppearanceState {
    /// `V * 6` parameters, row-major.
    pub params: Vec<f32>,
    /// Adam's first moments, as `params`.
    pub exp_avg: Vec<f32>,
    /// Adam's second moments, as `params`.
    pub exp_avg_sq: Vec<f32>,
    /// Adam steps per photo.
    pub steps: Vec<u64>,
}

impl<B: Backend> PhotoAppearance<B> {
    /// Identity transforms for `photos` training photos, or `None` for `kind = "none"`.
    /// Adam's decays and epsilon are the run's (`optim.beta1`, `beta2`, `eps`).
    pub fn new(
        config: &AppearanceConfig,
        photos: usize,
        betas: (f64, f64, f64),
        device: &B::Device,
    ) -> Option<Self> {
        if config.kind == AppearanceKind::None {
            return None;
        }
        let zeros = || Tensor::zeros([photos, PARAMS_PER_PHOTO], device);
        let (g, b) = (
            (2.0 * config.identity_pull) as f32,
            (2.0 * config.offset_pull) as f32,
        );
        Some(PhotoAppearance {
            config: config.clone(),
            params: zeros(),
            exp_avg: zeros(),
            exp_avg_sq: zeros(),
            steps: vec![0; photos],
            pull: Tensor::from_floats([[g, g, g, b, b, b]], device),
            beta1: betas.0,
            beta2: betas.1,
            eps: betas.2,
        })
    }

    /// Whether the transforms apply at (0-based) step `step` (`appearance.start`).
    pub fn active_at(&self, step: usize) -> bool {
        step >= self.config.start
    }

    /// Every photo's parameters `[V, 6]` (log-gains, then offsets).
    pub fn params(&self) -> Tensor<B, 2> {
        self.params.clone()
    }

    /// Training photo `photo`'s parameters `[1, 6]`.
    pub fn row(&self, photo: usize) -> Tensor<B, 2> {
        self.params.clone().narrow(0, photo, 1)
    }

    /// One Adam step of photo `photo`'s parameters from their gradient `grad [1, 6]`, with
    /// the pull towards the identity.
    pub fn update(&mut self, photo: usize, grad: Tensor<B, 2>) {
        let row = self.row(photo);
        let grad = grad + row.clone() * self.pull.clone();
        let ranges = [photo..photo + 1, 0..PARAMS_PER_PHOTO];
        let m = self.exp_avg.clone().narrow(0, photo, 1) * self.beta1
            + grad.clone() * (1.0 - self.beta1);
        let v = self.exp_avg_sq.clone().narrow(0, photo, 1) * self.beta2
            + grad.powi_scalar(2) * (1.0 - self.beta2);
        self.steps[photo] += 1;
        let t = self.steps[photo] as i32;
        let step_size = self.config.lr / (1.0 - self.beta1.powi(t));
        let denom = (v.clone() / (1.0 - self.beta2.powi(t))).sqrt() + self.eps;
        let updated = row - m.clone() / denom * step_size;
        let params = self.params.clone().slice_assign(ranges.clone(), updated);
        self.params = params.clone() - params.mean_dim(0);
        self.exp_avg = self.exp_avg.clone().slice_assign(ranges.clone(), m);
        self.exp_avg_sq = self.exp_avg_sq.clone().slice_assign(ranges, v);
    }

    /// The state a checkpoint keeps (reads the device).
    pub fn state(&self) -> Result<AppearanceState, ember_field::ModelError> {
        Ok(AppearanceState {
            params: ember_field::to_host(self.params.clone(), "appearance parameters")?,
            exp_avg: ember_field::to_host(self.exp_avg.clone(), "appearance moments")?,
            exp_avg_sq: ember_field::to_host(self.exp_avg_sq.clone(), "appearance moments")?,
            steps: self.steps.clone(),
        })
    }

    /// Restores `state` (from [`PhotoAppearance::state`] of a run over the same photos);
    /// `Err` says what does not match.
    pub fn load_state(&mut self, state: &AppearanceState) -> Result<(), String> {
        let photos = self.steps.len();
        let values = photos * PARAMS_PER_PHOTO;
        if state.steps.len() != photos
            || [&state.params, &state.exp_avg, &state.exp_avg_sq]
                .iter()
                .any(|v| v.len() != values)
        {
            return Err(format!(
                "it holds the appearance of {} photos, this run has {photos}",
                state.steps.len()
            ));
        }
        let device = self.params.device();
        let upload = |v: &Vec<f32>| {
            Tensor::from_data(
                burn::tensor::TensorData::new(v.clone(), [photos, PARAMS_PER_PHOTO]),
                &device,
            )
        };
        self.params = upload(&state.params);
        self.exp_avg = upload(&state.exp_avg);
        self.exp_avg_sq = upload(&state.exp_avg_sq);
        self.steps = state.steps.clone();
        Ok(())
    }
}
