//! The 3DGS adaptive density control (Kerbl et al. 2023, section 5.2).
//!
//! Between `start` and `stop`, every step adds each visible Gaussian's screen-space gradient
//! norm (in NDC units: pixels scaled by half the image size, as the reference implementation
//! measures it) to an accumulator. Every `interval` steps, Gaussians whose mean gradient reaches
//! `grad_threshold` are densified: small ones (largest scale at most `percent_dense x extent`)
//! are cloned in place, large ones are replaced by two samples drawn from themselves with their
//! scales divided by 1.6. Gaussians below `min_opacity` are pruned, and after the first opacity
//! reset also those that covered more than `max_screen_size` pixels or are larger than a tenth
//! of the scene. Every `opacity_reset_interval` steps all opacities are clamped to 0.01 (and
//! their Adam moments zeroed). The host reads a few `[N]` arrays per refinement; the rows
//! themselves are gathered on the device.

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{RefineContext, RefineReport, Refinement, StepStatistics, Strategy};
use crate::adam::GroupAdam;
use crate::config::DensifyConfig;
use crate::error::TrainError;
use crate::params::ParamGroup;
use crate::params::index_tensor;
use ember_field::GaussianField;
use ember_field::to_host;
use ember_kernels::{DensifyStats, DensifyStatsOps, ViewSize, accumulate_densify_stats};

/// Split children are this much smaller than their parent (3DGS: `0.8 x 2`).
const SPLIT_SCALE_DIVISOR: f32 = 1.6;
/// Opacities are clamped to this by a reset.
const RESET_OPACITY: f32 = 0.01;

/// The 3DGS strategy (see the module docs).
#[derive(Debug, Clone)]
pub struct AdaptiveDensity<B: Backend> {
    config: DensifyConfig,
    /// `[N]`: sum of screen-space gradient norms over the steps a Gaussian was visible.
    grad_sum: Tensor<B, 1>,
    /// `[N]`: steps a Gaussian was visible.
    visible_steps: Tensor<B, 1>,
    /// `[N]`: largest screen radius seen, pixels.
    max_radius: Tensor<B, 1>,
}

impl<B: Backend> AdaptiveDensity<B> {
    /// Zero accumulators for `n` Gaussians.
    pub fn new(config: DensifyConfig, n: usize, device: &B::Device) -> Self {
        AdaptiveDensity {
            config,
            grad_sum: Tensor::zeros([n], device),
            visible_steps: Tensor::zeros([n], device),
            max_radius: Tensor::zeros([n], device),
        }
    }

    fn reset_accumulators(&mut self, n: usize) {
        let device = self.grad_sum.device();
        self.grad_sum = Tensor::zeros([n], &device);
        self.visible_steps = Tensor::zeros([n], &device);
        self.max_radius = Tensor::zeros([n], &device);
    }

    /// Mean accumulated gradient per Gaussian (zero where never visible), on the host.
    pub fn mean_gradients(&self) -> Result<Vec<f32>, TrainError> {
        let sum = to_host(self.grad_sum.clone(), "gradient sums")?;
        let count = to_host(self.visible_steps.clone(), "visibility counts")?;
        Ok(sum
            .iter()
            .zip(&count)
            .map(|(s, c)| if *c > 0.0 { s / c } else { 0.0 })
            .collect())
    }

    /// Clone, split and prune (see the module docs).
    fn densify_and_prune(
        &mut self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        adam: &mut GroupAdam<B>,
        report: &mut RefineReport,
    ) -> Result<(), TrainError> {
        let n = field.num_gaussians();
        let c = &self.config;
        let grads = self.mean_gradients()?;
        let radii = to_host(self.max_radius.clone(), "max radii")?;
        let log_scales = to_host(field.log_scales.val(), "log-scales")?;
        let logits = to_host(field.opacity_logits.val(), "opacities")?;
        let max_scale: Vec<f32> = log_scales
            .chunks_exact(3)
            .map(|s| s.iter().copied().fold(f32::NEG_INFINITY, f32::max).exp())
            .collect();
        let dense_limit = (c.percent_dense * context.extent) as f32;
        let huge_world = (0.1 * context.extent) as f32;
        let check_size = c.opacity_reset_interval > 0 && context.step > c.opacity_reset_interval;
        let transparent: Vec<bool> = logits
            .iter()
            .map(|l| 1.0 / (1.0 + (-l).exp()) < c.min_opacity as f32)
            .collect();
        let prune: Vec<bool> = (0..n)
            .map(|i| {
                transparent[i]
                    || (check_size
                        && (radii[i] > c.max_screen_size as f32 || max_scale[i] > huge_world))
            })
            .collect();
        // Candidates, strongest gradient first (they win when the cap binds).
        let mut candidates: Vec<usize> = (0..n)
            .filter(|&i| grads[i] >= c.grad_threshold as f32 && !transparent[i])
            .collect();
        candidates.sort_by(|&a, &b| grads[b].total_cmp(&grads[a]).then(a.cmp(&b)));
        let survivors = prune.iter().filter(|p| !**p).count();
        let mut budget = c.max_gaussians.saturating_sub(survivors);
        let (mut clone, mut split) = (Vec::new(), Vec::new());
        for i in candidates {
            let is_split = max_scale[i] > dense_limit;
            // A split adds two and removes the parent (which would otherwise survive, unless
            // it is pruned anyway).
            let cost = if is_split {
                2 - usize::from(!prune[i])
            } else {
                1
            };
            if cost > budget {
                continue;
            }
            budget -= cost;
            if is_split {
                split.push(i)
            } else {
                clone.push(i)
            }
        }
        clone.sort_unstable();
        split.sort_unstable();
        let mut removed = prune.clone();
        for &i in &split {
            removed[i] = true;
        }
        let keep: Vec<usize> = (0..n).filter(|&i| !removed[i]).collect();
        let device = field.means.device();
        let clones = field.select(&index_tensor(&clone, &device));
        let children = split_children(field, &split, context.seed)?;
        report.cloned = clone.len();
        report.split = split.len();
        report.pruned = prune.iter().filter(|p| **p).count();
        if keep.is_empty() && clone.is_empty() && split.is_empty() {
            return Err(TrainError::Scene(format!(
                "densification at step {} would remove every Gaussian (all below opacity {})",
                context.step, c.min_opacity
            )));
        }
        Refinement {
            keep,
            added: clones.cat(children)?,
        }
        .apply(field, adam)?;
        self.reset_accumulators(field.num_gaussians());
        Ok(())
    }
}

/// Two children per parent in `parents`: centres drawn from the parent's Gaussian, scales
/// divided by 1.6, everything else copied. Order: every parent's first child, then every
/// parent's second.
fn split_children<B: Backend>(
    field: &GaussianField<B>,
    parents: &[usize],
    seed: u64,
) -> Result<GaussianField<B>, TrainError> {
    let device = field.means.device();
    let k = parents.len();
    let twice: Vec<usize> = parents.iter().chain(parents).copied().collect();
    let mut children = field.select(&index_tensor(&twice, &device));
    if k == 0 {
        return Ok(children);
    }
    let means = to_host(children.means.val(), "split means")?;
    let quats = to_host(children.quats.val(), "split rotations")?;
    let log_scales = to_host(children.log_scales.val(), "split scales")?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut normal = || {
        let (u, v) = (rng.random::<f32>().max(1e-12), rng.random::<f32>());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    };
    let mut new_means = Vec::with_capacity(6 * k);
    for i in 0..2 * k {
        let s: [f32; 3] = core::array::from_fn(|a| log_scales[3 * i + a].exp());
        let local: [f32; 3] = core::array::from_fn(|a| normal() * s[a]);
        let r = rotation_matrix(&quats[4 * i..4 * i + 4]);
        for row in 0..3 {
            let offset: f32 = (0..3).map(|col| r[3 * row + col] * local[col]).sum();
            new_means.push(means[3 * i + row] + offset);
        }
    }
    let shrink = SPLIT_SCALE_DIVISOR.ln();
    let new_log_scales: Vec<f32> = log_scales.iter().map(|l| l - shrink).collect();
    children.means = Param::from_tensor(Tensor::from_data(
        TensorData::new(new_means, [2 * k, 3]),
        &device,
    ));
    children.log_scales = Param::from_tensor(Tensor::from_data(
        TensorData::new(new_log_scales, [2 * k, 3]),
        &device,
    ));
    Ok(children)
}

/// Row-major rotation matrix of an unnormalised `(w, x, y, z)` quaternion (identity for zero).
pub(super) fn rotation_matrix(q: &[f32]) -> [f32; 9] {
    let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    }
    ember_kernels::quat::rotation_matrix([q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm])
}

impl<B: DensifyStatsOps> Strategy<B> for AdaptiveDensity<B> {
    fn name(&self) -> &'static str {
        "default"
    }

    fn observe(&mut self, step: usize, stats: &StepStatistics<B>) -> Result<(), TrainError> {
        if step >= self.config.stop {
            return Ok(());
        }
        let n = self.grad_sum.dims()[0];
        if stats.screen_grads.dims()[0] != n {
            return Err(TrainError::Scene(format!(
                "densification statistics for {} Gaussians, the strategy tracks {n}",
                stats.screen_grads.dims()[0]
            )));
        }
        if n == 0 {
            return Ok(());
        }
        // One fused op: as tensor ops these totals are ~20 operations for the host to record
        // every step, and the GPU training step is bound by that recording.
        let totals = accumulate_densify_stats(
            DensifyStats {
                grad_sum: self.grad_sum.clone(),
                visible_steps: self.visible_steps.clone(),
                max_radius: self.max_radius.clone(),
            },
            stats.screen_grads.clone(),
            stats.extents.clone(),
            ViewSize {
                width: stats.width,
                height: stats.height,
            },
        )?;
        self.grad_sum = totals.grad_sum;
        self.visible_steps = totals.visible_steps;
        self.max_radius = totals.max_radius;
        Ok(())
    }

    fn refine(
        &mut self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        adam: &mut GroupAdam<B>,
    ) -> Result<RefineReport, TrainError> {
        let c = self.config.clone();
        let mut report = RefineReport::default();
        let s = context.step;
        if s >= c.stop {
            return Ok(report);
        }
        if s > c.start && s.is_multiple_of(c.interval) {
            self.densify_and_prune(context, field, adam, &mut report)?;
        }
        if c.opacity_reset_interval > 0 && s.is_multiple_of(c.opacity_reset_interval) {
            let ceiling = (RESET_OPACITY / (1.0 - RESET_OPACITY)).ln();
            field.opacity_logits =
                Param::from_tensor(field.opacity_logits.val().clamp_max(ceiling));
            adam.reset_moments(ParamGroup::Opacity);
            report.opacity_reset = true;
        }
        Ok(report)
    }

    fn state(&self) -> Vec<(&'static str, Tensor<B, 1>)> {
        vec![
            ("grad_sum", self.grad_sum.clone()),
            ("visible_steps", self.visible_steps.clone()),
            ("max_radius", self.max_radius.clone()),
        ]
    }

    fn load_state(&mut self, state: Vec<(String, Tensor<B, 1>)>) -> Result<(), TrainError> {
        for (name, tensor) in state {
            match name.as_str() {
                "grad_sum" => self.grad_sum = tensor,
                "visible_steps" => self.visible_steps = tensor,
                "max_radius" => self.max_radius = tensor,
                other => {
                    return Err(TrainError::Scene(format!(
                        "the default densification has no state `{other}`"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_of_a_quarter_turn_about_z() {
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let r = rotation_matrix(&[h, 0.0, 0.0, h]);
        // x axis goes to y.
        assert!((r[0]).abs() < 1e-6 && (r[3] - 1.0).abs() < 1e-6 && r[6].abs() < 1e-6);
        assert_eq!(rotation_matrix(&[0.0; 4])[0], 1.0);
    }
}
