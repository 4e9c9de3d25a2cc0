//! [`Trainer`]: the state of a run and its step.
//!
//! One step: pick `batch_size` views (consecutive entries of a per-epoch permutation drawn from
//! the seed), take their photos (kept on the device after their first use, see
//! [`crate::targets`]), render them in one batch on the autodiff backend, average their losses,
//! backward, one Adam step per parameter group, then the densification strategy. Every random draw is a function of `(seed, step)`, so a run resumed
//! from a checkpoint takes the same decisions as one that never stopped; on the CPU the numbers
//! are bit-identical.

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use ember_field::{
    Camera, GaussianField, GaussianFieldConfig, RenderOptions, SplatAutodiffBackend, render_batch,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

use ember_kernels::MemoryUsage;

use crate::adam::{AdamSettings, FieldGradients, GroupAdam};
use crate::config::{InitMode, TrainConfig};
use crate::densify::{RefineContext, RefineReport, StepStatistics, Strategy, strategy_from_config};
use crate::error::TrainError;
use crate::eval::{EvalReport, Evaluator};
use crate::loss::{LossOptions, photometric_loss, psnr_from_mse};
use crate::parallel::{PeerLink, checks_after};
use crate::params::{ParamGroup, to_host};
use crate::scene::TrainScene;
use crate::targets::{TargetImages, TargetStats};
use crate::timing::{Phase, PhaseTimes};
use crate::view_cache::CacheStats;

/// The inner (non-autodiff) backend of `B`.
pub type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// Steps completed after this one (1-based, like 3DGS's iteration).
    pub step: usize,
    /// The training view rendered (the first of the batch with `batch_size` above 1).
    pub view: usize,
    /// The loss; `None` on a step that did not read it back (see
    /// [`OutputConfig::loss_every`](crate::config::OutputConfig::loss_every)).
    pub loss: Option<f32>,
    /// PSNR of the render against its training image, dB (measured every `output.log_every`
    /// steps, `None` otherwise: it costs a read-back).
    pub psnr: Option<f32>,
    /// Gaussians after the step.
    pub gaussians: usize,
    /// SH bands rendered.
    pub sh_degree: usize,
    /// Learning rate of the means at this step.
    pub lr_means: f64,
    /// What densification did.
    pub refine: RefineReport,
    /// Wall time of the step, seconds.
    pub seconds: f64,
    /// Whether the run stops after this step: [`Trainer::request_stop`] was set before it, on
    /// any peer of a data-parallel run (every peer then stops after the same step).
    pub stop: bool,
}

/// A training run in memory (see the module docs).
pub struct Trainer<B: SplatAutodiffBackend> {
    pub(crate) config: TrainConfig,
    pub(crate) scene: Arc<TrainScene>,
    /// The model being trained (on the inner backend; each step makes autodiff leaves of it).
    pub(crate) field: GaussianField<Inner<B>>,
    pub(crate) adam: GroupAdam<Inner<B>>,
    pub(crate) strategy: Box<dyn Strategy<Inner<B>>>,
    pub(crate) step: usize,
    pub(crate) device: B::Device,
    pub(crate) times: PhaseTimes,
    /// Changes whenever `field` does (see [`Trainer::generation`]).
    pub(crate) generation: u64,
    /// Held-out evaluation, with the renders of the current generation.
    evaluator: Evaluator<Inner<B>>,
    order: Option<(usize, Vec<usize>)>,
    /// The training photos on the device.
    targets: TargetImages<B>,
    /// The largest device memory figures sampled during steps (`None` on the CPU).
    peak_memory: Option<MemoryUsage>,
    /// Wait for the device at the end of each phase of a step (see [`Trainer::set_phase_sync`]).
    phase_sync: bool,
    /// This trainer's place in a data-parallel run (see [`crate::parallel`]).
    pub(crate) peer: Option<PeerLink>,
    /// Set by [`Trainer::request_stop`], reported (and agreed among peers) by the next step.
    stop_requested: bool,
}

/// Mixes a seed with a stream id and a counter into one 64-bit seed (SplitMix64 finaliser), so
/// the draws of different purposes and steps are independent.
pub fn derive_seed(seed: u64, stream: u64, counter: u64) -> u64 {
    let mut z = seed
        .wrapping_add(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(counter.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const STREAM_VIEWS: u64 = 1;
const STREAM_DENSIFY: u64 = 2;
const STREAM_INIT: u64 = 3;
const STREAM_BACKGROUND: u64 = 4;

/// The initial field of a run: from the scene's points (colour to SH DC, scale from the mean
/// distance to the 3 nearest neighbours, the configured opacity), random in the scene bounds,
/// or in the part of them the cameras see ([`TrainScene::view_volume_points`], also the start
/// of `points` on a scene without points).
pub fn initial_field<Bk: burn::tensor::backend::Backend>(
    config: &TrainConfig,
    scene: &TrainScene,
    device: &Bk::Device,
) -> Result<GaussianField<Bk>, TrainError> {
    let field_config = GaussianFieldConfig::new()
        .with_sh_degree(config.init.sh_degree)
        .with_opacity(config.init.opacity)
        .with_seed(derive_seed(config.seed, STREAM_INIT, 0));
    // Positions and colours: the scene's points, or generated ones (kept alive here).
    let generated;
    let (xyz, rgb) = match (&config.init.mode, &scene.points) {
        (InitMode::Points, Some((xyz, rgb))) => (xyz, rgb),
        // Without points, the view volume: on cup_colmap it beats the random box by 1.6 dB at
        // 1000 steps and 0.6 dB at 1500 (BENCHMARKS.md, "Real captures").
        (InitMode::ViewVolume, _) | (InitMode::Points, None) => {
            let (centre, half) = scene.bounds();
            let mut rng = StdRng::seed_from_u64(derive_seed(config.seed, STREAM_INIT, 1));
            generated = scene.view_volume_points(
                config.init.random_count,
                (centre, half * config.init.random_box as f32),
                config.init.view_fraction,
                &mut rng,
            )?;
            (&generated.0, &generated.1)
        }
        (InitMode::Random, _) => {
            // As 3DGS does for scenes without points: uniform positions in the box, random
            // colours, scales from the 3 nearest neighbours.
            let (centre, half) = scene.bounds();
            let half = half * config.init.random_box as f32;
            let mut rng = StdRng::seed_from_u64(derive_seed(config.seed, STREAM_INIT, 1));
            let n = config.init.random_count;
            let xyz: Vec<f32> = (0..3 * n)
                .map(|i| centre[i % 3] + half * (2.0 * rng.random::<f32>() - 1.0))
                .collect();
            let rgb: Vec<f32> = (0..3 * n).map(|_| rng.random::<f32>()).collect();
            generated = (xyz, rgb);
            (&generated.0, &generated.1)
        }
    };
    Ok(GaussianField::from_points(&field_config, xyz, rgb, device)?)
}

/// `field` on the autodiff backend `A`, every parameter a fresh leaf that requires its gradient
/// (the values are shared, not copied).
fn autodiff_leaves<A: AutodiffBackend>(
    field: &GaussianField<A::InnerBackend>,
) -> Result<GaussianField<A>, TrainError> {
    Ok(GaussianField::from_tensors(
        Tensor::from_inner(field.means.val()),
        Tensor::from_inner(field.quats.val()),
        Tensor::from_inner(field.log_scales.val()),
        Tensor::from_inner(field.opacity_logits.val()),
        Tensor::from_inner(field.sh_dc.val()),
        Tensor::from_inner(field.sh_rest.val()),
        None,
    )?)
}

impl<B: SplatAutodiffBackend> Trainer<B> {
    /// A new run: the initial field (see [`initial_field`]), zero Adam moments.
    pub fn new(
        config: TrainConfig,
        scene: Arc<TrainScene>,
        device: &B::Device,
    ) -> Result<Self, TrainError> {
        config.validate()?;
        let field = initial_field::<Inner<B>>(&config, &scene, device)?;
        Self::from_field(config, scene, field, device)
    }

    /// A run starting from `field` with zero moments (its features, if any, are not trained
    /// and dropped).
    pub fn from_field(
        config: TrainConfig,
        scene: Arc<TrainScene>,
        mut field: GaussianField<Inner<B>>,
        device: &B::Device,
    ) -> Result<Self, TrainError> {
        field.features = None;
        if scene.train.is_empty() {
            return Err(TrainError::Scene(format!(
                "{} has no training views",
                scene.name
            )));
        }
        let batch = config.batch_size;
        if batch > 1 {
            let first = scene.train[0].camera;
            if let Some(other) = scene
                .train
                .iter()
                .find(|v| (v.camera.width, v.camera.height) != (first.width, first.height))
            {
                return Err(TrainError::Config {
                    origin: "config".to_string(),
                    message: format!(
                        "`batch_size` = {batch} needs training images of one size, but {} is {}x{} and {} is {}x{}",
                        scene.train[0].name,
                        first.width,
                        first.height,
                        other.name,
                        other.camera.width,
                        other.camera.height
                    ),
                });
            }
        }
        // A batch of `B` views averages `B` gradients. The square-root scaling rule for Adam
        // (the rates are in `learning_rate`): the decays raised to the power `B`, so that the
        // moments forget at the same rate per view seen (gsplat's `1 - B (1 - beta)` is the
        // same to first order, and turns negative past `B = 10`), and eps divided by `sqrt(B)`.
        let settings = AdamSettings {
            beta1: config.optim.beta1.powi(batch as i32),
            beta2: config.optim.beta2.powi(batch as i32),
            eps: config.optim.eps / (batch as f64).sqrt(),
        };
        let adam = GroupAdam::new(settings, &field);
        let strategy = strategy_from_config(&config.densify, field.num_gaussians(), device);
        let evaluator = Evaluator::new(&config.eval);
        let targets = TargetImages::new(scene.train.len(), config.data.image_budget_mb, device);
        Ok(Trainer {
            config,
            scene,
            field,
            adam,
            strategy,
            step: 0,
            device: device.clone(),
            times: PhaseTimes::default(),
            generation: 0,
            evaluator,
            order: None,
            targets,
            peak_memory: None,
            phase_sync: false,
            peer: None,
            stop_requested: false,
        })
    }

    /// How the training photos are held on the device (see [`TargetImages`]).
    pub fn target_stats(&self) -> TargetStats {
        self.targets.stats()
    }

    /// The largest device memory the backend's allocator held, sampled after the backward and
    /// at the end of every step so far; `None` on the CPU backend.
    pub fn peak_memory(&self) -> Option<MemoryUsage> {
        self.peak_memory
    }

    /// Folds the allocator's figures now into [`Trainer::peak_memory`].
    fn sample_memory(&mut self) {
        if let Some(now) = B::memory_usage(&self.device) {
            self.peak_memory = Some(self.peak_memory.map_or(now, |peak| peak.max(now)));
        }
    }

    /// The run's config.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The scene.
    pub fn scene(&self) -> &TrainScene {
        &self.scene
    }

    /// Steps completed.
    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Number of Gaussians.
    pub fn num_gaussians(&self) -> usize {
        self.field.num_gaussians()
    }

    /// The trained field (the current parameters).
    pub fn field(&self) -> &GaussianField<Inner<B>> {
        &self.field
    }

    /// The Adam state (row-aligned with [`Trainer::field`]).
    pub fn adam(&self) -> &GroupAdam<Inner<B>> {
        &self.adam
    }

    /// The densification strategy.
    pub fn strategy(&self) -> &dyn Strategy<Inner<B>> {
        self.strategy.as_ref()
    }

    /// The device.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Time spent per phase so far.
    pub fn times(&self) -> &PhaseTimes {
        &self.times
    }

    /// With `on`, [`Trainer::step`] waits for the device at the end of each of its phases, so
    /// that on a GPU backend every phase's time holds its own device work instead of the time
    /// to queue it (see [`crate::timing`]). The waits remove the overlap of host and device
    /// work, so steps get slower; the results do not change. Off by default.
    pub fn set_phase_sync(&mut self, on: bool) {
        self.phase_sync = on;
    }

    /// Asks the run to stop: the next step's report says `stop` (in a data-parallel run, the
    /// peers agree on it in that step, so that all of them stop after the same step).
    pub fn request_stop(&mut self, stop: bool) {
        self.stop_requested = stop;
    }

    /// Adds the time since `started` to `phase`, after waiting for the device with phase sync.
    fn end_phase(&mut self, phase: Phase, started: Instant) -> Result<(), TrainError> {
        if self.phase_sync {
            B::sync(&self.device).map_err(|e| TrainError::DeviceSync {
                phase: phase.name(),
                message: format!("{e:?}"),
            })?;
        }
        self.times.add(phase, started.elapsed());
        Ok(())
    }

    pub(crate) fn times_mut(&mut self) -> &mut PhaseTimes {
        &mut self.times
    }

    /// A counter that changes whenever the parameters do: each step (optimizer and
    /// densification), [`Trainer::replace_field`], [`Trainer::load_checkpoint`]. Renders of
    /// the field at one generation stay valid until it changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Hits and misses of the evaluation renders' cache ([`Trainer::evaluate`]).
    pub fn eval_cache_stats(&self) -> CacheStats {
        self.evaluator.cache_stats()
    }

    /// Renders the held-out views (at most `eval.max_views`, evenly spaced) with every SH band
    /// trained so far and measures PSNR and SSIM against them (see [`Evaluator::evaluate`]).
    /// Views rendered by an earlier evaluation of the same [generation](Trainer::generation)
    /// come from the cache.
    pub fn evaluate(&mut self) -> Result<EvalReport, TrainError> {
        let started = Instant::now();
        let sh_degree = self.sh_degree_at(self.step.saturating_sub(1));
        let report = self.evaluator.evaluate(
            &self.scene,
            &self.field,
            self.generation,
            self.step,
            sh_degree,
        )?;
        self.times.add(Phase::Eval, started.elapsed());
        Ok(report)
    }

    /// Replaces the parameters with others of the same shapes, keeping the optimizer state
    /// (e.g. after editing them); a different count or layout is refused.
    pub fn replace_field(&mut self, field: GaussianField<Inner<B>>) -> Result<(), TrainError> {
        let same = ParamGroup::ALL
            .iter()
            .all(|g| g.columns(&field).dims() == g.columns(&self.field).dims());
        if !same || field.features.is_some() {
            return Err(TrainError::Scene(
                "replacement parameters must have the shapes of the current ones (and no features)"
                    .to_string(),
            ));
        }
        self.field = field;
        self.generation += 1;
        Ok(())
    }

    /// SH bands rendered at (0-based) step `step`: one more every `optim.sh_interval` steps.
    pub fn sh_degree_at(&self, step: usize) -> usize {
        (step / self.config.optim.sh_interval).min(self.config.init.sh_degree)
    }

    /// Learning rate of `group` at (0-based) step `step`: the means' rate decays log-linearly
    /// from `lr_means` to `lr_means_final` (both times the scene extent), the others are fixed.
    /// With `batch_size = B` every rate is multiplied by `sqrt(B)`: the square-root scaling rule
    /// for Adam (Malladi et al. 2022), which gsplat uses for its batches, with Adam's decays
    /// raised to the power `B` and eps divided by `sqrt(B)` (see [`Trainer::from_field`]).
    pub fn learning_rate(&self, group: ParamGroup, step: usize) -> f64 {
        (self.config.batch_size as f64).sqrt() * self.unscaled_learning_rate(group, step)
    }

    /// [`Trainer::learning_rate`] for a batch of one.
    fn unscaled_learning_rate(&self, group: ParamGroup, step: usize) -> f64 {
        let o = &self.config.optim;
        match group {
            ParamGroup::Means => {
                let total = o.lr_means_steps.unwrap_or(self.config.steps).max(1);
                let t = (step as f64 / total as f64).clamp(0.0, 1.0);
                let (a, b) = (o.lr_means.max(1e-30).ln(), o.lr_means_final.max(1e-30).ln());
                if o.lr_means == 0.0 {
                    0.0
                } else {
                    ((1.0 - t) * a + t * b).exp() * self.scene.extent
                }
            }
            ParamGroup::Quats => o.lr_quats,
            ParamGroup::LogScales => o.lr_scales,
            ParamGroup::Opacity => o.lr_opacity,
            ParamGroup::ShDc => o.lr_sh_dc,
            ParamGroup::ShRest => o.lr_sh_rest,
        }
    }

    /// The training view at (0-based) position `index` of the run's view sequence: each epoch
    /// visits every view once, in an order drawn from `(seed, epoch)`. Step `s` renders the
    /// positions `s B .. s B + B` (`B` = `batch_size`).
    pub fn view_at(&mut self, index: usize) -> usize {
        let n = self.scene.train.len();
        let epoch = index / n;
        if self.order.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let mut order: Vec<usize> = (0..n).collect();
            let mut rng =
                StdRng::seed_from_u64(derive_seed(self.config.seed, STREAM_VIEWS, epoch as u64));
            order.shuffle(&mut rng);
            self.order = Some((epoch, order));
        }
        self.order.as_ref().map(|(_, o)| o[index % n]).unwrap_or(0)
    }

    /// The background of (0-based) step `step`: the scene's, or with
    /// `data.random_background` one drawn from `(seed, step)`.
    fn background_at(&self, step: usize) -> [f32; 3] {
        if !self.config.data.random_background {
            return self.scene.background;
        }
        let mut rng = StdRng::seed_from_u64(derive_seed(
            self.config.seed,
            STREAM_BACKGROUND,
            step as u64,
        ));
        [0; 3].map(|_| rng.random::<f32>())
    }

    /// The render options of training at SH degree `sh_degree` over `background`.
    fn render_options(&self, sh_degree: usize, background: [f32; 3]) -> RenderOptions {
        RenderOptions::default()
            .with_background(background)
            .with_sh_degree(sh_degree as u32)
    }

    /// Runs one step (see the module docs). On a step that reads the loss back
    /// ([`OutputConfig::loss_every`](crate::config::OutputConfig::loss_every)), a non-finite
    /// loss returns [`TrainError::NonFiniteLoss`] before anything is changed.
    pub fn step(&mut self) -> Result<StepReport, TrainError> {
        let started = Instant::now();
        let step = self.step;
        let batch = self.config.batch_size;
        // A peer of a data-parallel run renders its share of the batch.
        let (share, first) = match self.peer {
            Some(link) => (batch / link.peers, link.rank * (batch / link.peers)),
            None => (batch, 0),
        };
        let views: Vec<usize> = (0..share)
            .map(|j| self.view_at(step * batch + first + j))
            .collect();
        let view = views[0];
        let cameras: Vec<Camera> = views.iter().map(|&v| self.scene.train[v].camera).collect();
        let camera = cameras[0];

        let t = Instant::now();
        let background = self.background_at(step);
        let mut targets = Vec::with_capacity(share);
        for &v in &views {
            let image = self.scene.train_image(v)?;
            targets.push(self.targets.target(
                v,
                &image,
                self.scene.background,
                background,
                &self.device,
            ));
        }
        self.end_phase(Phase::Data, t)?;

        let t = Instant::now();
        let sh_degree = self.sh_degree_at(step);
        let field = autodiff_leaves::<B>(&self.field)?;
        let out = render_batch(
            &field,
            &cameras,
            &self.render_options(sh_degree, background),
        )
        .map_err(|cause| TrainError::Render {
            view: self.scene.train[view].name.clone(),
            cause,
        })?;
        let options = LossOptions {
            ssim_lambda: self.config.loss.ssim_lambda,
        };
        let (h, w) = (camera.height as usize, camera.width as usize);
        // One view is the batch whole: a narrow would add an operation to record and, in the
        // backward, a zero image to assign its gradient into.
        let rendered = |j: usize| match share {
            1 => out.rgb.clone().reshape([h, w, 3]),
            _ => out.rgb.clone().narrow(0, j, 1).reshape([h, w, 3]),
        };
        let mut loss = None;
        for (j, target) in targets.iter().enumerate() {
            let view_loss =
                photometric_loss(rendered(j), target.clone(), options).map_err(|cause| {
                    TrainError::Loss {
                        view: self.scene.train[views[j]].name.clone(),
                        cause,
                    }
                })?;
            loss = Some(match loss {
                None => view_loss,
                Some(sum) => sum + view_loss,
            });
        }
        // The mean over the batch; a peer's share of it, which the peers' sum completes.
        let mut loss = loss.expect("a batch holds at least one view");
        if batch > 1 {
            loss = loss / batch as f32;
        }
        let peers = self.peer.map_or(1, |link| link.peers) as f64;
        let (opacity_reg, scale_reg) = (
            self.config.loss.opacity_reg / peers,
            self.config.loss.scale_reg / peers,
        );
        if opacity_reg > 0.0 && self.field.num_gaussians() > 0 {
            loss = loss + sigmoid(field.opacity_logits.val()).mean() * opacity_reg;
        }
        if scale_reg > 0.0 && self.field.num_gaussians() > 0 {
            loss = loss + field.log_scales.val().exp().mean() * scale_reg;
        }
        let logs = (step + 1).is_multiple_of(self.config.output.log_every);
        let reads_loss = logs
            || (step + 1).is_multiple_of(self.config.output.loss_every)
            || step + 1 >= self.config.steps;
        let batch_mse = |rgb: Tensor<Inner<B>, 4>| {
            let targets = targets.iter().map(|t| t.clone().inner()).collect();
            (rgb.clamp(0.0, 1.0) - Tensor::stack(targets, 0))
                .powi_scalar(2)
                .mean()
        };
        // Read back: the loss, the render's mean squared error on logging steps (for its PSNR),
        // and the stop request. A data-parallel step sums them over the peers, every step, so
        // that every peer stops at the same step.
        let (loss_value, mse, stop) = match self.peer {
            Some(link) => {
                let device = loss.device();
                let mse = if logs {
                    batch_mse(out.rgb.clone().inner()) * (share as f32 / batch as f32)
                } else {
                    Tensor::zeros([1], &device)
                };
                let vote = if self.stop_requested { 1.0f32 } else { 0.0 };
                let control = Tensor::cat(
                    vec![
                        loss.clone().inner().reshape([1]),
                        mse.reshape([1]),
                        Tensor::from_data(TensorData::new(vec![vote], [1]), &device),
                    ],
                    0,
                );
                let control = to_host(link.sum(control)?, "the peers' loss")?;
                (
                    reads_loss.then_some(control[0]),
                    logs.then_some(control[1]),
                    control[2] > 0.0,
                )
            }
            None => (
                reads_loss.then(|| loss.clone().into_scalar().elem::<f32>()),
                logs.then(|| {
                    batch_mse(out.rgb.clone().inner())
                        .into_scalar()
                        .elem::<f32>()
                }),
                self.stop_requested,
            ),
        };
        if let Some(value) = loss_value
            && !value.is_finite()
        {
            return Err(TrainError::NonFiniteLoss {
                step: step + 1,
                view: self.scene.train[view].name.clone(),
                loss: value,
                last_checkpoint: None,
            });
        }
        let psnr = mse.map(psnr_from_mse);
        self.end_phase(Phase::Forward, t)?;

        let t = Instant::now();
        let grads = loss.backward();
        let field_grads = FieldGradients {
            means: field.means.grad(&grads),
            quats: field.quats.grad(&grads),
            log_scales: field.log_scales.grad(&grads),
            opacity_logits: field.opacity_logits.grad(&grads),
            sh_dc: field.sh_dc.grad(&grads),
            sh_rest: field.sh_rest.grad(&grads),
        };
        let field_grads = match self.peer {
            Some(link) => link.sum_gradients(&self.field, field_grads)?,
            None => field_grads,
        };
        let screen_grads = out.aux.screen_grads.grad(&grads);
        self.end_phase(Phase::Backward, t)?;
        self.sample_memory();

        let t = Instant::now();
        if let Some(screen_grads) = screen_grads {
            // Each (view, Gaussian) pair is one observation, as gsplat counts a batch. The
            // loss averages the views, so each view's screen gradient is scaled back up by
            // `B` to the size it has in a batch of one.
            let n = self.field.num_gaussians();
            let extents = out.aux.extents.inner();
            let (screen_grads, extents) = match self.peer {
                Some(link) => link.gather_statistics(screen_grads, extents, batch)?,
                None => (screen_grads, extents),
            };
            for j in 0..batch {
                // A batch of one observes the tensors whole: on a GPU each narrow would be one
                // more operation for the host to record.
                let (view_grads, view_extents) = if batch == 1 {
                    (screen_grads.clone(), extents.clone())
                } else {
                    (
                        screen_grads.clone().narrow(0, j * n, n) * batch as f32,
                        extents.clone().narrow(0, j * n, n),
                    )
                };
                let stats = StepStatistics {
                    screen_grads: view_grads,
                    extents: view_extents,
                    width: camera.width,
                    height: camera.height,
                };
                self.strategy.observe(step, &stats)?;
            }
        }
        self.end_phase(Phase::Densify, t)?;

        let t = Instant::now();
        let rates = ParamGroup::ALL.map(|group| self.learning_rate(group, step));
        self.adam
            .step(&mut self.field, field_grads, |group| rates[group.index()]);
        self.end_phase(Phase::Optimizer, t)?;

        let t = Instant::now();
        let context = RefineContext {
            step: step + 1,
            extent: self.scene.extent,
            seed: derive_seed(self.config.seed, STREAM_DENSIFY, step as u64 + 1),
            lr_means: self.learning_rate(ParamGroup::Means, step),
        };
        let refine = self
            .strategy
            .refine(context, &mut self.field, &mut self.adam)?;
        self.end_phase(Phase::Densify, t)?;

        if let Some(link) = self.peer
            && checks_after(&link, step + 1)
        {
            link.check_replica(&self.field, step + 1)?;
        }

        self.sample_memory();
        self.step += 1;
        self.generation += 1;
        Ok(StepReport {
            step: self.step,
            view,
            loss: loss_value,
            psnr,
            gaussians: self.field.num_gaussians(),
            sh_degree,
            lr_means: self.learning_rate(ParamGroup::Means, step),
            refine,
            seconds: started.elapsed().as_secs_f64(),
            stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_seeds_differ_by_stream_and_counter() {
        let a = derive_seed(0, 1, 0);
        assert_ne!(a, derive_seed(0, 1, 1));
        assert_ne!(a, derive_seed(0, 2, 0));
        assert_ne!(a, derive_seed(1, 1, 0));
        assert_eq!(a, derive_seed(0, 1, 0));
    }
}
