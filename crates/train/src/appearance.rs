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
//! device: no step reads a parameter back. With `appearance.init = "keypoints"` the exposure's
//! log-gains start where the photos' COLMAP keypoints put them (`keypoint_log_gains`) instead
//! of at zero.
//!
//! ## The bilateral grid (`appearance.kind = "bilateral_grid"`)
//! Photo `v` has a grid `G_v [12, L, GH, GW]` of affine colour maps (`appearance.grid = [L, GH,
//! GW]`), sliced by pixel position and luminance ([`ember_kernels::bilateral_grid`], Wang et al.
//! 2024): a local, tone-dependent exposure and white balance, which a global gain cannot be
//! (vignetting, a tone curve, a highlight that clips). The parameters are the grid's
//! difference from the identity map, `G_v = I + p_v`, so the same Adam step, pull towards the
//! identity (`identity_pull` on the 3x3 parts, `offset_pull` on the offsets) and centring on
//! `sum_v p_v = 0` apply to it unchanged. Its gradient adds the total variation
//! `w_tv sum_axes mean (G[.., i + 1] - G[.., i])^2` per photo (`appearance.tv_weight`), which
//! keeps neighbouring cells' maps alike where the photo says nothing about them.

use std::path::Path;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember_kernels::{
    AFFINE_ENTRIES, BilateralGridOps, identity_grid, slice_bilateral_grid,
    slice_bilateral_grid_backward,
};

use crate::config::{AppearanceConfig, AppearanceKind};
use crate::error::TrainError;
use crate::scene::TrainScene;

/// Parameters per photo of the exposure transform: three log-gains, then three offsets.
pub const PARAMS_PER_PHOTO: usize = 6;

/// How a photo's parameters `[1, P]` map a render: what a training pass applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// A log-gain and an offset per channel ([`apply`]); `P = 6`.
    Exposure,
    /// A bilateral grid of `cells = [L, GH, GW]` cells; the row is the grid `[12, L, GH, GW]`
    /// flattened (the identity included: [`PhotoAppearance::row`] adds it).
    BilateralGrid {
        /// `[L, GH, GW]`.
        cells: [usize; 3],
    },
}

impl Transform {
    /// The transform `config` asks for (`None` for `kind = "none"`).
    pub fn from_config(config: &AppearanceConfig) -> Option<Self> {
        match config.kind {
            AppearanceKind::None => None,
            AppearanceKind::Exposure => Some(Transform::Exposure),
            AppearanceKind::BilateralGrid => Some(Transform::BilateralGrid { cells: config.grid }),
        }
    }

    /// Parameters per photo.
    pub fn params_per_photo(self) -> usize {
        match self {
            Transform::Exposure => PARAMS_PER_PHOTO,
            Transform::BilateralGrid { cells } => AFFINE_ENTRIES * cells.iter().product::<usize>(),
        }
    }

    /// Photo `row [1, P]`'s colours from `rendered [H, W, 3]` -> `[H, W, 3]`; differentiable
    /// through Burn's autodiff.
    pub fn apply<B: BilateralGridOps>(
        self,
        rendered: Tensor<B, 3>,
        row: Tensor<B, 2>,
    ) -> Tensor<B, 3> {
        match self {
            Transform::Exposure => apply(rendered, row),
            Transform::BilateralGrid { cells } => {
                let [l, gh, gw] = cells;
                slice_bilateral_grid(rendered, row.reshape([AFFINE_ENTRIES, l, gh, gw]))
                    .expect("the grid's shape comes from the validated config")
            }
        }
    }

    /// The backward of [`Transform::apply`]: from `grad [H, W, 3]`, the gradients with
    /// respect to `rendered` `[H, W, 3]` and `row` `[1, P]`.
    pub fn apply_backward<B: BilateralGridOps>(
        self,
        rendered: Tensor<B, 3>,
        row: Tensor<B, 2>,
        grad: Tensor<B, 3>,
    ) -> (Tensor<B, 3>, Tensor<B, 2>) {
        match self {
            Transform::Exposure => apply_backward(rendered, row, grad),
            Transform::BilateralGrid { cells } => {
                let [l, gh, gw] = cells;
                let grid = row.reshape([AFFINE_ENTRIES, l, gh, gw]);
                let (grad_rendered, grad_grid) =
                    slice_bilateral_grid_backward(rendered, grid, grad)
                        .expect("the grid's shape comes from the validated config");
                (
                    grad_rendered,
                    grad_grid.reshape([1, self.params_per_photo()]),
                )
            }
        }
    }
}

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
    transform: Transform,
    /// `[V, P]`: each training photo's parameters, in the scene's training order (for the
    /// bilateral grid, its difference from the identity).
    params: Tensor<B, 2>,
    /// `[1, P]`: the identity grid a photo's row is added to (`None` for the exposure).
    identity: Option<Tensor<B, 2>>,
    /// `[V, P]`: Adam's first and second moments.
    exp_avg: Tensor<B, 2>,
    exp_avg_sq: Tensor<B, 2>,
    /// Adam steps taken per photo.
    steps: Vec<u64>,
    /// `[1, P]`: twice the pulls' weights per parameter, made once.
    pull: Tensor<B, 2>,
    beta1: f64,
    beta2: f64,
    eps: f64,
}

/// What a checkpoint keeps of a [`PhotoAppearance`]: `[V, P]` rows and the step counts.
#[derive(Debug, Clone, PartialEq)]
pub struct AppearanceState {
    /// `V * P` parameters, row-major.
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
        let transform = Transform::from_config(config)?;
        let width = transform.params_per_photo();
        let zeros = || Tensor::zeros([photos, width], device);
        let (g, b) = (
            (2.0 * config.identity_pull) as f32,
            (2.0 * config.offset_pull()) as f32,
        );
        let (pull, identity) = match transform {
            Transform::Exposure => (Tensor::from_floats([[g, g, g, b, b, b]], device), None),
            Transform::BilateralGrid { cells } => {
                // Entry `k` of the 3x4 map is an offset when `k % 4 == 3`.
                let plane = width / AFFINE_ENTRIES;
                let pulls: Vec<f32> = (0..width)
                    .map(|n| if (n / plane) % 4 == 3 { b } else { g })
                    .collect();
                let identity = identity_grid::<B>(cells, device).reshape([1, width]);
                (
                    Tensor::<B, 1>::from_floats(pulls.as_slice(), device).reshape([1, width]),
                    Some(identity),
                )
            }
        };
        Some(PhotoAppearance {
            config: config.clone(),
            transform,
            params: zeros(),
            identity,
            exp_avg: zeros(),
            exp_avg_sq: zeros(),
            steps: vec![0; photos],
            pull,
            beta1: betas.0,
            beta2: betas.1,
            eps: betas.2,
        })
    }

    /// Whether the transforms apply at (0-based) step `step` (`appearance.start`).
    pub fn active_at(&self, step: usize) -> bool {
        step >= self.config.start
    }

    /// How a row maps a render.
    pub fn transform(&self) -> Transform {
        self.transform
    }

    /// Every photo's parameters `[V, P]` (exposure: log-gains, then offsets; bilateral grid:
    /// the grid's difference from the identity).
    pub fn params(&self) -> Tensor<B, 2> {
        self.params.clone()
    }

    /// Training photo `photo`'s transform `[1, P]`, as [`Transform::apply`] takes it.
    pub fn row(&self, photo: usize) -> Tensor<B, 2> {
        let row = self.params.clone().narrow(0, photo, 1);
        match &self.identity {
            Some(identity) => row + identity.clone(),
            None => row,
        }
    }

    /// Sets every photo's exposure to `log_gains` (per photo in training order, per channel
    /// R, G, B; offsets zero), centred as every step keeps them. `Err` for the bilateral grid,
    /// or a count that is not the photos'.
    pub fn set_log_gains(&mut self, log_gains: &[[f64; 3]]) -> Result<(), String> {
        if self.transform != Transform::Exposure {
            return Err("only the exposure has log-gains".to_string());
        }
        let photos = self.steps.len();
        if log_gains.len() != photos {
            return Err(format!(
                "{} photos' gains for {photos} photos",
                log_gains.len()
            ));
        }
        let params = self.upload_rows(
            log_gains
                .iter()
                .flat_map(|g| [g[0] as f32, g[1] as f32, g[2] as f32, 0.0, 0.0, 0.0])
                .collect(),
        );
        self.params = params.clone() - params.mean_dim(0);
        Ok(())
    }

    /// `values` (`V * P`, row-major) as a `[V, P]` tensor on the parameters' device.
    fn upload_rows(&self, values: Vec<f32>) -> Tensor<B, 2> {
        let shape = [self.steps.len(), self.transform.params_per_photo()];
        Tensor::from_data(
            burn::tensor::TensorData::new(values, shape),
            &self.params.device(),
        )
    }

    /// One Adam step of photo `photo`'s parameters from their gradient `grad [1, P]` (with
    /// respect to its [`PhotoAppearance::row`]), with the pull towards the identity and, for
    /// the bilateral grid, the total variation's gradient.
    pub fn update(&mut self, photo: usize, grad: Tensor<B, 2>) {
        let width = self.transform.params_per_photo();
        let row = self.params.clone().narrow(0, photo, 1);
        let mut grad = grad + row.clone() * self.pull.clone();
        if let Transform::BilateralGrid { cells } = self.transform
            && self.config.tv_weight > 0.0
        {
            grad = grad + total_variation_grad(row.clone(), cells, self.config.tv_weight);
        }
        let ranges = [photo..photo + 1, 0..width];
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
        let width = self.transform.params_per_photo();
        let values = photos * width;
        if state.steps.len() != photos {
            return Err(format!(
                "it holds the appearance of {} photos, this run has {photos}",
                state.steps.len()
            ));
        }
        if [&state.params, &state.exp_avg, &state.exp_avg_sq]
            .iter()
            .any(|v| v.len() != values)
        {
            return Err(format!(
                "it holds {} appearance parameters per photo, this run's `[appearance]` has \
                 {width}",
                state.params.len() / photos.max(1)
            ));
        }
        self.params = self.upload_rows(state.params.clone());
        self.exp_avg = self.upload_rows(state.exp_avg.clone());
        self.exp_avg_sq = self.upload_rows(state.exp_avg_sq.clone());
        self.steps = state.steps.clone();
        Ok(())
    }
}

/// Each training photo's log-gains fitted from the keypoints of the COLMAP capture `scene`
/// was read from at `path` (`data.path`; `appearance.init = "keypoints"`:
/// [`ember_data::colmap::keypoint_exposures`]).
pub(crate) fn keypoint_log_gains(
    path: Option<&Path>,
    scene: &TrainScene,
) -> Result<Vec<[f64; 3]>, TrainError> {
    let refuse = |why: String| {
        TrainError::Scene(format!(
            "`appearance.init = \"keypoints\"` fits the exposures from a COLMAP capture's \
             keypoints: {why}"
        ))
    };
    let path =
        path.ok_or_else(|| refuse(format!("the scene {} is not read from disk", scene.name)))?;
    let dir = ember_data::colmap::find_model_dir(path)
        .ok_or_else(|| refuse(format!("{} has no COLMAP model", path.display())))?;
    let model = ember_data::colmap::ColmapModel::read(&dir)?;
    let photos = (0..scene.train.len())
        .map(|v| scene.train_image(v))
        .collect::<Result<Vec<_>, _>>()?;
    let named: Vec<(&str, &ember_data::DecodedImage)> = scene
        .train
        .iter()
        .zip(&photos)
        .map(|(view, photo)| (view.name.as_str(), photo.as_ref()))
        .collect();
    Ok(ember_data::colmap::keypoint_exposures(&model, &named).log_gains)
}

/// The gradient `[1, P]` of `w sum_axes mean (d_axis)^2` (the differences of neighbouring
/// cells along each of the grid's three cell axes) with respect to a grid's row `[1, P]`.
fn total_variation_grad<B: Backend>(
    row: Tensor<B, 2>,
    cells: [usize; 3],
    weight: f64,
) -> Tensor<B, 2> {
    let [l, gh, gw] = cells;
    let width = row.dims()[1];
    let grid = row.reshape([AFFINE_ENTRIES, l, gh, gw]);
    let mut grad = grid.zeros_like();
    for axis in 1..4 {
        let n = grid.dims()[axis];
        let diff = grid.clone().narrow(axis, 1, n - 1) - grid.clone().narrow(axis, 0, n - 1);
        // d/dG of mean(d^2): +2 d / count at the upper cell, -2 d / count at the lower one.
        let scaled = diff.clone() * (2.0 * weight / diff.shape().num_elements() as f64);
        let zero = scaled.clone().narrow(axis, 0, 1).zeros_like();
        grad = grad + Tensor::cat(vec![zero.clone(), scaled.clone()], axis)
            - Tensor::cat(vec![scaled, zero], axis);
    }
    grad.reshape([1, width])
}

#[cfg(test)]
mod tests {
    use burn::tensor::{DType, Tensor, TensorData};

    use super::{AFFINE_ENTRIES, total_variation_grad};

    type F64 = ember_kernels::backend::Cpu64;

    /// `w sum_axes mean (d_axis)^2` of a `[12, L, GH, GW]` grid, on the host.
    fn total_variation(grid: &[f64], cells: [usize; 3], weight: f64) -> f64 {
        let [l, gh, gw] = cells;
        let at = |k: usize, z: usize, y: usize, x: usize| grid[((k * l + z) * gh + y) * gw + x];
        let mut sums = [0.0; 3];
        for k in 0..AFFINE_ENTRIES {
            for z in 0..l {
                for y in 0..gh {
                    for x in 0..gw {
                        let here = at(k, z, y, x);
                        if z + 1 < l {
                            sums[0] += (at(k, z + 1, y, x) - here).powi(2);
                        }
                        if y + 1 < gh {
                            sums[1] += (at(k, z, y + 1, x) - here).powi(2);
                        }
                        if x + 1 < gw {
                            sums[2] += (at(k, z, y, x + 1) - here).powi(2);
                        }
                    }
                }
            }
        }
        let counts = [(l - 1) * gh * gw, l * (gh - 1) * gw, l * gh * (gw - 1)];
        weight
            * (0..3)
                .map(|a| sums[a] / (AFFINE_ENTRIES * counts[a]) as f64)
                .sum::<f64>()
    }

    #[test]
    fn total_variation_gradient_matches_central_differences_in_f64() {
        let cells = [3, 4, 2];
        let width = AFFINE_ENTRIES * 24;
        let grid: Vec<f64> = (0..width)
            .map(|i| ((i * 7919) % 101) as f64 / 101.0 - 0.5)
            .collect();
        let row = Tensor::<F64, 2>::from_data(
            TensorData::new(grid.clone(), [1, width]),
            (&Default::default(), DType::F64),
        );
        let grad: Vec<f64> = total_variation_grad(row, cells, 7.0)
            .into_data()
            .to_vec()
            .unwrap();
        let h = 1e-6;
        for k in 0..width {
            let (mut plus, mut minus) = (grid.clone(), grid.clone());
            plus[k] += h;
            minus[k] -= h;
            let numeric = (total_variation(&plus, cells, 7.0)
                - total_variation(&minus, cells, 7.0))
                / (2.0 * h);
            assert!(
                (numeric - grad[k]).abs() < 1e-7 * numeric.abs().max(1.0),
                "entry {k}: {} vs {numeric}",
                grad[k]
            );
        }
    }
}
