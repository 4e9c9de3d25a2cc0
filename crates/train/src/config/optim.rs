//! `[optim]`: Adam's rates per parameter group, the centres' decay, the SH schedule and the
//! end-of-run anneal (used by `Trainer::learning_rate`).

use serde::{Deserialize, Serialize};

use crate::params::ParamGroup;

/// Adam with one learning rate per parameter group (the 3DGS defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Learning rate of the means at step 0, times the scene extent.
    pub lr_means: f64,
    /// Learning rate of the means at `lr_means_steps`, times the scene extent (log-linear decay).
    pub lr_means_final: f64,
    /// Steps over which the means' rate decays; `None`: the run's `steps`.
    pub lr_means_steps: Option<usize>,
    /// Learning rate of the SH DC coefficients.
    pub lr_sh_dc: f64,
    /// Learning rate of the higher SH bands.
    pub lr_sh_rest: f64,
    /// Learning rate of the opacity logits.
    pub lr_opacity: f64,
    /// Learning rate of the log-scales.
    pub lr_scales: f64,
    /// Learning rate of the quaternions.
    pub lr_quats: f64,
    /// Adam's first-moment decay.
    pub beta1: f64,
    /// Adam's second-moment decay.
    pub beta2: f64,
    /// Adam's epsilon.
    pub eps: f64,
    /// One more SH band every this many steps, up to
    /// [`InitConfig::sh_degree`](super::InitConfig::sh_degree).
    pub sh_interval: usize,
    /// Where the run's end anneals the field's rates, as a fraction of `steps`: from this step
    /// on, each parameter group's rate (the means' on top of their own decay, so the MCMC noise
    /// too) is multiplied by a factor falling log-linearly from 1 to `anneal_factor` at the last
    /// step. `1`: off. The appearance and pose corrections keep their own schedules.
    pub anneal_start: f64,
    /// The factor every rate reaches at the last step when `anneal_start < 1`.
    pub anneal_factor: f64,
    /// Visible-only updates (the sparse Adam of Taming 3DGS, gsplat's `visible_adam`): a
    /// Gaussian that no view of the step draws (no tile of any view's image) keeps its
    /// parameters and moments as they are, so its momentum from earlier steps does not move it
    /// and the regularisers' gradients do not reach it; the seen ones take the usual update.
    pub visible_adam: bool,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            lr_means: 1.6e-4,
            lr_means_final: 1.6e-6,
            lr_means_steps: None,
            lr_sh_dc: 2.5e-3,
            lr_sh_rest: 2.5e-3 / 20.0,
            lr_opacity: 0.025,
            lr_scales: 5e-3,
            lr_quats: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
            sh_interval: 1000,
            anneal_start: 1.0,
            anneal_factor: 0.1,
            visible_adam: false,
        }
    }
}

impl OptimConfig {
    /// The rate of `group` at (0-based) step `step` of a run of `steps` (one view per step) in a
    /// scene of extent `extent`: the means' rate decays log-linearly from `lr_means` to
    /// `lr_means_final` (both times the extent) over `lr_means_steps`, the others are fixed, and
    /// every one is annealed from `anneal_start` on ([`OptimConfig::anneal_at`]).
    pub fn learning_rate(&self, group: ParamGroup, step: usize, steps: usize, extent: f64) -> f64 {
        let scheduled = match group {
            ParamGroup::Means => {
                let total = self.lr_means_steps.unwrap_or(steps).max(1);
                let t = (step as f64 / total as f64).clamp(0.0, 1.0);
                let (a, b) = (
                    self.lr_means.max(1e-30).ln(),
                    self.lr_means_final.max(1e-30).ln(),
                );
                if self.lr_means == 0.0 {
                    0.0
                } else {
                    ((1.0 - t) * a + t * b).exp() * extent
                }
            }
            ParamGroup::Quats => self.lr_quats,
            ParamGroup::LogScales => self.lr_scales,
            ParamGroup::Opacity => self.lr_opacity,
            ParamGroup::ShDc => self.lr_sh_dc,
            ParamGroup::ShRest => self.lr_sh_rest,
        };
        self.anneal_at(step, steps) * scheduled
    }

    /// The factor every rate is multiplied by at (0-based) step `step` of a run of `steps`:
    /// from `anneal_start` of the run's last step on, log-linearly from 1 to `anneal_factor`
    /// at the last step; 1 before.
    pub fn anneal_at(&self, step: usize, steps: usize) -> f64 {
        let last = steps.saturating_sub(1) as f64;
        let start = self.anneal_start * last;
        if self.anneal_start >= 1.0 || (step as f64) <= start {
            return 1.0;
        }
        let t = ((step as f64 - start) / (last - start)).min(1.0);
        (t * self.anneal_factor.ln()).exp()
    }
}
