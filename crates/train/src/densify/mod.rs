//! Densification strategies: adding and removing Gaussians during training, with the optimizer
//! state following every Gaussian.
//!
//! A [`Strategy`] sees the render statistics of every step ([`Strategy::observe`]) and, after the
//! optimizer step, may change the set of Gaussians ([`Strategy::refine`]). Whatever it does to
//! the rows of the [`GaussianField`] it must do to the rows of [`GroupAdam`] (`GroupAdam::reindex`), so that
//! parameters and moments stay aligned; [`Refinement::apply`] does both.

mod adaptive;
mod mcmc;

pub use adaptive::AdaptiveDensity;
pub use mcmc::{McmcDensity, relocation};

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::adam::GroupAdam;
use crate::config::{DensifyConfig, StrategyKind};
use crate::error::TrainError;
use crate::params::index_tensor;
use ember_field::GaussianField;
use ember_kernels::{DensifyStatsOps, NoiseOps};

/// What one step's render tells densification, per Gaussian.
#[derive(Debug, Clone)]
pub struct StepStatistics<B: Backend> {
    /// `[N, 3]`: the gradient of the loss at each centre in pixels, `(dL/dx, dL/dy)`, and the
    /// sum over pixels of `|dL/dxy|` (see `ember_field::RenderAux::screen_grads`).
    pub screen_grads: Tensor<B, 2>,
    /// `[N, 3]`: the projection's `(rx, ry, tiles)`: screen-space half extents, pixels, and the
    /// 16x16 tiles the box touches (a Gaussian is drawn in this view when that is positive).
    pub extents: Tensor<B, 2, Int>,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
}

/// What a refinement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefineReport {
    /// Gaussians duplicated in place.
    pub cloned: usize,
    /// Gaussians replaced by two smaller ones.
    pub split: usize,
    /// Gaussians removed.
    pub pruned: usize,
    /// Whether opacities were reset.
    pub opacity_reset: bool,
    /// Dead Gaussians moved onto live ones (MCMC).
    pub relocated: usize,
    /// Gaussians added as copies of live ones (MCMC).
    pub added: usize,
    /// Of the relocated, those that had left the region (MCMC, `densify.fence`).
    pub escaped: usize,
}

/// Context of a refinement.
#[derive(Debug, Clone, Copy)]
pub struct RefineContext {
    /// Steps completed (3DGS's 1-based iteration).
    pub step: usize,
    /// The scene's cameras extent, world units.
    pub extent: f64,
    /// Seed for this refinement's random draws.
    pub seed: u64,
    /// Learning rate of the means at this step (the MCMC noise scales with it).
    pub lr_means: f64,
    /// The region the cameras and points span, as (centre, radius) in world units
    /// ([`TrainScene::region`](crate::TrainScene::region)): MCMC relocates Gaussians that leave
    /// `densify.fence` times it.
    pub region: ([f64; 3], f64),
}

/// A densification strategy (see the module docs).
pub trait Strategy<B: Backend>: Send {
    /// The strategy's name (checkpoints, messages).
    fn name(&self) -> &'static str;

    /// Accumulates one step's statistics (before the optimizer step).
    fn observe(&mut self, step: usize, stats: &StepStatistics<B>) -> Result<(), TrainError>;

    /// How many training views to score for error before the refinement after step `step`
    /// (steps completed): the trainer then hands their scores to [`Strategy::observe_errors`]
    /// first (the scores are stated in `src/trainer/densify.rs`). `0`, the default: none.
    fn error_views(&self, _step: usize) -> usize {
        0
    }

    /// Each Gaussian's error score `[N]` over the views [`Strategy::error_views`] asked for,
    /// just before the [`Strategy::refine`] of the same step.
    fn observe_errors(&mut self, _scores: Tensor<B, 1>) -> Result<(), TrainError> {
        Ok(())
    }

    /// After the optimizer step of step `context.step`: may clone, split, prune or reset, on
    /// `field` and `adam` together.
    fn refine(
        &mut self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        adam: &mut GroupAdam<B>,
    ) -> Result<RefineReport, TrainError>;

    /// The per-Gaussian accumulators (row-aligned with the field), for checkpoints.
    fn state(&self) -> Vec<(&'static str, Tensor<B, 1>)>;

    /// Restores [`Strategy::state`] from a checkpoint.
    fn load_state(&mut self, state: Vec<(String, Tensor<B, 1>)>) -> Result<(), TrainError>;
}

/// Never changes the set of Gaussians.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDensification;

impl<B: Backend> Strategy<B> for NoDensification {
    fn name(&self) -> &'static str {
        "none"
    }

    fn observe(&mut self, _step: usize, _stats: &StepStatistics<B>) -> Result<(), TrainError> {
        Ok(())
    }

    fn refine(
        &mut self,
        _context: RefineContext,
        _field: &mut GaussianField<B>,
        _adam: &mut GroupAdam<B>,
    ) -> Result<RefineReport, TrainError> {
        Ok(RefineReport::default())
    }

    fn state(&self) -> Vec<(&'static str, Tensor<B, 1>)> {
        Vec::new()
    }

    fn load_state(&mut self, _state: Vec<(String, Tensor<B, 1>)>) -> Result<(), TrainError> {
        Ok(())
    }
}

/// The strategy `config` names, for `n` initial Gaussians.
pub fn strategy_from_config<B: NoiseOps + DensifyStatsOps>(
    config: &DensifyConfig,
    n: usize,
    device: &B::Device,
) -> Box<dyn Strategy<B>> {
    match config.strategy {
        StrategyKind::None => Box::new(NoDensification),
        StrategyKind::Default => Box::new(AdaptiveDensity::new(config.clone(), n, device)),
        StrategyKind::Mcmc => Box::new(McmcDensity::new(config.clone())),
    }
}

/// A change of the set of Gaussians: keep the rows `keep` (in that order), then append `added`.
#[derive(Debug, Clone)]
pub struct Refinement<B: Backend> {
    /// Indices of the surviving Gaussians.
    pub keep: Vec<usize>,
    /// New Gaussians, appended after the survivors.
    pub added: GaussianField<B>,
}

impl<B: Backend> Refinement<B> {
    /// Applies the change to the parameters and the optimizer moments together: survivors keep
    /// their moments, new Gaussians start at zero.
    pub fn apply(
        self,
        field: &mut GaussianField<B>,
        adam: &mut GroupAdam<B>,
    ) -> Result<(), TrainError> {
        let device = field.means.device();
        let keep = index_tensor::<B>(&self.keep, &device);
        let appended = self.added.num_gaussians();
        let kept = if self.keep.len() == field.num_gaussians()
            && self.keep.iter().enumerate().all(|(i, &k)| i == k)
        {
            field.clone()
        } else {
            field.select(&keep)
        };
        *field = kept.cat(self.added)?;
        adam.reindex(&keep, appended);
        Ok(())
    }
}
