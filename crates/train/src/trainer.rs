//! [`Trainer`]: the state of a run and its step.
//!
//! One step is a pipeline, one call per stage: pick `batch_size` views (consecutive entries of a
//! per-epoch permutation drawn from the seed) and their photos (kept on the device after their
//! first use, see [`crate::targets`]); the forward and the loss of the batch ([`crate::pass`]:
//! the ops called directly, or a loss of the user's own through autodiff); the backward; the
//! [`Reducer`] (the identity alone, the sum over the peers of a data-parallel run); the reads
//! the step is due (the loss, the tile lists' counts, agreed over the replicas: the step's one
//! wait for the device, on the steps that have it); the densification statistics; one Adam
//! update for all parameter groups (and, with `[appearance]`, one for each photo of the batch;
//! with `[poses] refine`, one for each camera: [`crate::poses`]); the densification strategy;
//! with `raster.antialiased`, the 3D smoothing filter measured again from the training cameras
//! when the Gaussians changed or every [`SMOOTHING_EVERY`] steps (the field is drawn through
//! it in every step, evaluation, export and view: [`Trainer::drawn_field`]).
//! Every random draw is a function of `(seed, step)`, so a run resumed from a checkpoint takes
//! the same decisions as one that never stopped; on the CPU the numbers are bit-identical.

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::Tensor;
use ember_field::{
    Camera, GaussianField, GaussianFieldConfig, RenderOptions, SmoothingFilter,
    SplatAutodiffBackend,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

use ember_kernels::MemoryUsage;

use crate::adam::{AdamSettings, GroupAdam};
use crate::appearance::{PhotoAppearance, keypoint_log_gains};
use crate::coarse::{shrink_camera, shrink_image};
use crate::config::{AppearanceInit, InitMode, LpipsWhen, TrainConfig};
use crate::densify::{RefineReport, Strategy, strategy_from_config};
use crate::error::TrainError;
use crate::eval::{EvalReport, EvalRequest, Evaluator};
use crate::loss::{LossOptions, psnr_from_mse};
use crate::params::ParamGroup;
use crate::pass::{
    Forward, PassGradients, PassInputs, TrainingLoss, autodiff_forward, direct_forward,
};
use crate::poses::{CameraMotion, CameraPoses};
use crate::reduce::{OneDevice, PeerLink, ReadRequest, ReadValues, Reducer};
use crate::scene::TrainScene;
use crate::targets::{TargetImages, TargetStats};
use crate::tile_lists::{TileListStats, TileLists};
use crate::timing::{Phase, PhaseTimes};
use crate::view_cache::CacheStats;

pub use crate::pass::Inner;

mod densify;

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
    /// The run's training time after this step, seconds ([`Trainer::training_seconds`]).
    pub elapsed: f64,
    /// Whether the run stops after this step: [`Trainer::request_stop`] was set before it, on
    /// any peer of a data-parallel run (every peer then stops after the same step).
    pub stop: bool,
}

/// A training run in memory (see the module docs).
pub struct Trainer<B: SplatAutodiffBackend> {
    pub(crate) config: TrainConfig,
    pub(crate) scene: Arc<TrainScene>,
    /// [`TrainScene::region`], computed once (the scene does not change).
    region: ([f64; 3], f64),
    /// The model being trained (on the inner backend; each step makes autodiff leaves of it).
    pub(crate) field: GaussianField<Inner<B>>,
    pub(crate) adam: GroupAdam<Inner<B>>,
    /// Each training photo's exposure and white balance (`None` for `appearance.kind = "none"`).
    pub(crate) appearance: Option<PhotoAppearance<Inner<B>>>,
    /// Each training camera's pose correction (`None` unless `poses.refine`).
    pub(crate) poses: Option<CameraPoses>,
    pub(crate) strategy: Box<dyn Strategy<Inner<B>>>,
    pub(crate) step: usize,
    pub(crate) device: B::Device,
    pub(crate) times: PhaseTimes,
    /// See [`Trainer::training_seconds`].
    pub(crate) training_seconds: f64,
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
    /// The sum over the replicas of a data-parallel run, or the identity (see [`crate::reduce`]).
    reducer: Box<dyn Reducer<Inner<B>>>,
    /// The length of the GPU's tile lists (see [`crate::tile_lists`]).
    tile_lists: TileLists<Inner<B>>,
    /// A loss of the user's own, trained through autodiff (see [`Trainer::set_loss`]).
    loss_fn: Option<Box<dyn TrainingLoss<B>>>,
    /// Set by [`Trainer::request_stop`], reported (and agreed among peers) by the next step.
    stop_requested: bool,
    /// The 3D smoothing filter of the current Gaussians (`None` unless `raster.antialiased`
    /// with `raster.filter_3d > 0`).
    pub(crate) smoothing: Option<SmoothingFilter<Inner<B>>>,
}

/// Steps between two measurements of the 3D smoothing filter when the number of Gaussians
/// has not changed (Mip-Splatting's cadence; MCMC moves Gaussians without changing it).
pub const SMOOTHING_EVERY: usize = 100;

/// What a step reads back, by the cadence of `output`.
#[derive(Debug, Clone, Copy)]
struct StepReads {
    /// The loss (every `loss_every` steps, logging steps and the last).
    loss: bool,
    /// The render's PSNR (every `log_every` steps).
    psnr: bool,
}

/// The views a step renders, with their photos.
struct StepViews<I: burn::tensor::backend::Backend> {
    /// Indices into the scene's training views.
    views: Vec<usize>,
    cameras: Vec<Camera>,
    /// The photos, each times its mask.
    targets: Vec<Tensor<I, 3>>,
    /// The photos' masks `[H, W, 1]`, one per view; empty when the scene has none.
    masks: Vec<Tensor<I, 3>>,
    names: Vec<String>,
    background: [f32; 3],
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
const STREAM_ERRORS: u64 = 5;

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
        // 1000 steps and 0.6 dB at 1500 (docs/benchmarks-history.md, "Real captures").
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
        let mut appearance = PhotoAppearance::new(
            &config.appearance,
            scene.train.len(),
            (config.optim.beta1, config.optim.beta2, config.optim.eps),
            device,
        );
        if let Some(appearance) = &mut appearance
            && config.appearance.init == AppearanceInit::Keypoints
        {
            let log_gains = keypoint_log_gains(config.data.path.as_deref(), &scene)?;
            appearance
                .set_log_gains(&log_gains)
                .map_err(TrainError::Scene)?;
        }
        let poses = CameraPoses::new(
            &config.poses,
            scene.train.len(),
            (config.optim.beta1, config.optim.beta2, config.optim.eps),
            scene.extent,
            config.steps,
        );
        let strategy = strategy_from_config(&config.densify, field.num_gaussians(), device);
        let evaluator = Evaluator::new(&config.eval);
        let targets = TargetImages::new(scene.train.len(), config.data.image_budget_mb, device);
        let smoothing = smoothing_filter(&config, &scene, &field);
        Ok(Trainer {
            config,
            region: scene.region(),
            scene,
            field,
            adam,
            appearance,
            poses,
            strategy,
            step: 0,
            device: device.clone(),
            times: PhaseTimes::default(),
            training_seconds: 0.0,
            generation: 0,
            evaluator,
            order: None,
            targets,
            peak_memory: None,
            phase_sync: false,
            reducer: Box::new(OneDevice),
            tile_lists: TileLists::default(),
            loss_fn: None,
            stop_requested: false,
            smoothing,
        })
    }

    /// How the training photos are held on the device (see [`TargetImages`]).
    pub fn target_stats(&self) -> TargetStats {
        self.targets.stats()
    }

    /// The largest device memory the backend's allocator held, sampled on every step so far that
    /// read its loss back (asking the allocator waits for the device's thread, which such a
    /// step has done anyway); `None` on the CPU backend, and before the first such step.
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

    /// The current model as it is drawn: with `raster.antialiased`, the 3D smoothing filter
    /// folded into it (the field a run evaluates, exports and shows; [`Trainer::field`] holds
    /// the parameters it trains).
    pub fn drawn_field(&self) -> Result<GaussianField<Inner<B>>, TrainError> {
        Ok(match &self.smoothing {
            Some(filter) => filter.apply(&self.field)?,
            None => self.field.clone(),
        })
    }

    /// The 3D smoothing filter of the current Gaussians, when the run draws with one.
    pub fn smoothing(&self) -> Option<&SmoothingFilter<Inner<B>>> {
        self.smoothing.as_ref()
    }

    /// The trained field (the current parameters).
    pub fn field(&self) -> &GaussianField<Inner<B>> {
        &self.field
    }

    /// The Adam state (row-aligned with [`Trainer::field`]).
    pub fn adam(&self) -> &GroupAdam<Inner<B>> {
        &self.adam
    }

    /// Each training photo's appearance (see [`crate::appearance`]), when the run learns it.
    pub fn appearance(&self) -> Option<&PhotoAppearance<Inner<B>>> {
        self.appearance.as_ref()
    }

    /// How far pose refinement has moved the training cameras, when the run refines them.
    pub fn camera_motion(&self) -> Option<CameraMotion> {
        let poses = self.poses.as_ref()?;
        let given: Vec<Camera> = self.scene.train.iter().map(|v| v.camera).collect();
        Some(poses.motion(&given))
    }

    /// Every camera of the scene as the run draws it, with its name and whether it was
    /// refined: the training cameras (moved by their corrections when the run refines them),
    /// then the held-out ones as given.
    pub fn cameras(&self) -> Vec<(String, Camera, bool)> {
        let train = self
            .scene
            .train
            .iter()
            .enumerate()
            .map(|(v, view)| match &self.poses {
                Some(poses) => (view.name.clone(), poses.camera(v, &view.camera), true),
                None => (view.name.clone(), view.camera, false),
            });
        let eval = self
            .scene
            .eval
            .iter()
            .map(|view| (view.name.clone(), view.camera, false));
        train.chain(eval).collect()
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

    /// The run's training time so far, seconds: the wall time of its steps (from the
    /// checkpoint on when it resumed one), and on a GPU the wait for the device to finish the
    /// steps it was given before each evaluation (a step returns once its work is queued).
    /// Evaluations, outputs and whatever the caller does between steps are not in it: it is
    /// the time axis of `train.csv`, `eval.csv` and `metrics.jsonl` (`elapsed`) and what
    /// `max_seconds` budgets.
    pub fn training_seconds(&self) -> f64 {
        self.training_seconds
    }

    /// Whether `max_seconds` is set and the training time has reached it.
    pub fn out_of_time(&self) -> bool {
        self.config.max_seconds > 0.0 && self.training_seconds >= self.config.max_seconds
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

    /// Trains with `loss` instead of the photometric loss of `config.loss`: each view's loss
    /// of its render against its photo, through Burn's autodiff (the batch averages them, and
    /// `loss.opacity_reg` and `loss.scale_reg` are added as usual). The default loss skips the
    /// autodiff graph (its ops' backwards are called directly), so a step with a loss of one's
    /// own records more operations; the images, gradients and statistics are otherwise the
    /// same. `None` goes back to the default.
    pub fn set_loss(&mut self, loss: Option<Box<dyn TrainingLoss<B>>>) {
        self.loss_fn = loss;
    }

    /// This trainer's place among the peers of a data-parallel run, if it is one.
    pub fn peer(&self) -> Option<PeerLink> {
        self.reducer.peer()
    }

    /// Makes `reducer` the step's sum over replicas (see [`crate::parallel`]).
    pub(crate) fn set_reducer(&mut self, reducer: Box<dyn Reducer<Inner<B>>>) {
        self.reducer = reducer;
    }

    /// How long the GPU's tile lists are, and how often they overflowed (see
    /// [`crate::tile_lists`]).
    pub fn tile_list_stats(&self) -> TileListStats {
        self.tile_lists.stats()
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
    /// trained so far and measures PSNR, SSIM and LPIPS (as `eval.lpips` says) against them
    /// (see [`Evaluator::evaluate`]).
    /// Views rendered by an earlier evaluation of the same [generation](Trainer::generation)
    /// come from the cache.
    pub fn evaluate(&mut self) -> Result<EvalReport, TrainError> {
        // The steps queued on a GPU are training, not evaluation.
        let queued = Instant::now();
        B::sync(&self.device).map_err(|e| TrainError::DeviceSync {
            phase: Phase::Eval.name(),
            message: format!("{e:?}"),
        })?;
        self.training_seconds += queued.elapsed().as_secs_f64();
        let started = Instant::now();
        let sh_degree = self.sh_degree_at(self.step.saturating_sub(1));
        let request = EvalRequest {
            generation: self.generation,
            step: self.step,
            sh_degree,
            antialiased: self.config.raster.antialiased,
            lpips: match self.config.eval.lpips {
                LpipsWhen::Every => true,
                LpipsWhen::Last => self.step >= self.config.steps || self.out_of_time(),
                LpipsWhen::Never => false,
            },
        };
        let drawn = self.drawn_field()?;
        let mut report = self.evaluator.evaluate(&self.scene, &drawn, request)?;
        report.elapsed = self.training_seconds;
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
        self.smoothing = smoothing_filter(&self.config, &self.scene, &self.field);
        self.generation += 1;
        Ok(())
    }

    /// SH bands rendered at (0-based) step `step`: one more every `optim.sh_interval` steps.
    pub fn sh_degree_at(&self, step: usize) -> usize {
        (step / self.config.optim.sh_interval).min(self.config.init.sh_degree)
    }

    /// Learning rate of `group` at (0-based) step `step`: the means' rate decays log-linearly
    /// from `lr_means` to `lr_means_final` (both times the scene extent), the others are fixed,
    /// and all of them anneal at the run's end when `optim.anneal_start < 1`.
    /// With `batch_size = B` every rate is multiplied by `sqrt(B)`: the square-root scaling rule
    /// for Adam (Malladi et al. 2022), which gsplat uses for its batches, with Adam's decays
    /// raised to the power `B` and eps divided by `sqrt(B)` (see [`Trainer::from_field`]).
    pub fn learning_rate(&self, group: ParamGroup, step: usize) -> f64 {
        let c = &self.config;
        (c.batch_size as f64).sqrt()
            * c.optim
                .learning_rate(group, step, c.steps, self.scene.extent)
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
            .with_antialiased(self.config.raster.antialiased)
            .with_tile_pairs(self.tile_lists.capacity())
    }

    /// Runs one step (see the module docs): the data flow of a step, one call per stage. On a
    /// step that reads the loss back
    /// ([`OutputConfig::loss_every`](crate::config::OutputConfig::loss_every)), a non-finite
    /// loss returns [`TrainError::NonFiniteLoss`] before anything is changed. A step that
    /// reads nothing back does not wait for the device.
    pub fn step(&mut self) -> Result<StepReport, TrainError> {
        let started = Instant::now();
        let step = self.step;
        let t = Instant::now();
        let views = self.step_views(step)?;
        self.end_phase(Phase::Data, t)?;

        let t = Instant::now();
        let reads = self.reads_at(step);
        let sh_degree = self.sh_degree_at(step);
        let forward = self.forward(step, &views, sh_degree, reads)?;
        self.end_phase(Phase::Forward, t)?;

        let t = Instant::now();
        let (loss, mse, extents) = (
            forward.loss.clone(),
            forward.mse.clone(),
            forward.extents.clone(),
        );
        if let Some(pairs) = forward.tile_pairs.clone() {
            self.tile_lists.record(pairs);
        }
        let PassGradients {
            field: grads,
            screen: screen_grads,
            appearance: appearance_grads,
            poses: pose_grads,
        } = forward.backward()?;
        let grads = self.reducer.gradients(&self.field, grads)?;
        self.end_phase(Phase::Backward, t)?;

        let t = Instant::now();
        let read = self.read_back(step, &views, loss, mse, reads)?;
        if reads.loss {
            // The allocator's figures come from the device's thread: asking for them waits
            // for it, which a step that reads the loss has done anyway.
            self.sample_memory();
        }
        self.end_phase(Phase::Forward, t)?;

        let t = Instant::now();
        if let Some(screen_grads) = screen_grads {
            self.observe(step, &views, screen_grads, extents.clone())?;
        }
        self.end_phase(Phase::Densify, t)?;

        let t = Instant::now();
        let visible = if self.config.optim.visible_adam {
            Some(self.views_reached(extents)?)
        } else {
            None
        };
        let rates = ParamGroup::ALL.map(|group| self.learning_rate(group, step));
        self.adam.step(&mut self.field, grads, visible, |group| {
            rates[group.index()]
        });
        if let Some(appearance) = &mut self.appearance {
            for (&photo, grad) in views.views.iter().zip(appearance_grads) {
                appearance.update(photo, grad);
            }
        }
        if let Some(poses) = &mut self.poses
            && !pose_grads.is_empty()
        {
            for (&camera, grad) in views.views.iter().zip(pose_grads) {
                poses.update(camera, grad, step);
            }
            poses.hold_frame(self.scene.train.iter().map(|v| &v.camera));
        }
        self.end_phase(Phase::Optimizer, t)?;

        let t = Instant::now();
        let refine = self.refine(step)?;
        self.end_phase(Phase::Densify, t)?;
        self.reducer.after_step(&self.field, step + 1)?;

        self.step += 1;
        self.generation += 1;
        let seconds = started.elapsed().as_secs_f64();
        self.training_seconds += seconds;
        Ok(StepReport {
            step: self.step,
            view: views.views[0],
            loss: read.loss.filter(|_| reads.loss),
            psnr: read.mse.map(psnr_from_mse),
            gaussians: self.field.num_gaussians(),
            sh_degree,
            lr_means: self.learning_rate(ParamGroup::Means, step),
            refine,
            seconds,
            elapsed: self.training_seconds,
            stop: read.stop,
        })
    }

    /// What (0-based) step `step` reads back.
    fn reads_at(&self, step: usize) -> StepReads {
        let output = &self.config.output;
        let psnr = (step + 1).is_multiple_of(output.log_every);
        StepReads {
            loss: psnr
                || (step + 1).is_multiple_of(output.loss_every)
                || step + 1 >= self.config.steps,
            psnr,
        }
    }

    /// This replica's views of (0-based) step `step`, with their photos on the device.
    fn step_views(&mut self, step: usize) -> Result<StepViews<Inner<B>>, TrainError> {
        let batch = self.config.batch_size;
        let views: Vec<usize> = self
            .reducer
            .share(batch)
            .map(|j| self.view_at(step * batch + j))
            .collect();
        let background = self.background_at(step);
        self.views_of(views, step, background)
    }

    /// The training views `views` as (0-based) step `step` draws them over `background`: their
    /// cameras (refined, shrunk) and photos on the device.
    fn views_of(
        &mut self,
        views: Vec<usize>,
        step: usize,
        background: [f32; 3],
    ) -> Result<StepViews<Inner<B>>, TrainError> {
        let mut targets = Vec::with_capacity(views.len());
        let mut masks = Vec::new();
        for &v in &views {
            let image = self.scene.train_image(v)?;
            let target =
                self.targets
                    .target(v, &image, self.scene.background, background, &self.device);
            targets.push(target.rgb.inner());
            masks.extend(target.mask.map(|m| m.inner()));
        }
        // Coarse to fine: early steps compare the render with the photo shrunk.
        let factor = self.config.resolution.factor_at(step);
        if factor > 1 {
            let k = factor as usize;
            targets = targets.into_iter().map(|t| shrink_image(t, k)).collect();
            masks = masks.into_iter().map(|m| shrink_image(m, k)).collect();
        }
        if !masks.is_empty() && masks.len() != targets.len() {
            return Err(TrainError::Scene(format!(
                "the photos of step {} mix masked and unmasked ones (every photo of a scene \
                 has a mask, or none)",
                step + 1
            )));
        }
        Ok(StepViews {
            cameras: views
                .iter()
                .map(|&v| {
                    let camera = match &self.poses {
                        Some(poses) => poses.camera(v, &self.scene.train[v].camera),
                        None => self.scene.train[v].camera,
                    };
                    shrink_camera(camera, factor)
                })
                .collect(),
            names: views
                .iter()
                .map(|&v| self.scene.train[v].name.clone())
                .collect(),
            views,
            targets,
            masks,
            background,
        })
    }

    /// The render and the loss of `views` (see [`crate::pass`]): directly through the ops,
    /// or through autodiff for a loss of the user's own (and for an empty field).
    fn forward(
        &self,
        step: usize,
        views: &StepViews<Inner<B>>,
        sh_degree: usize,
        reads: StepReads,
    ) -> Result<Forward<B>, TrainError> {
        let replicas = self.reducer.replicas() as f64;
        let rows: Vec<Tensor<Inner<B>, 2>> = match &self.appearance {
            Some(appearance) if appearance.active_at(step) => {
                views.views.iter().map(|&v| appearance.row(v)).collect()
            }
            _ => Vec::new(),
        };
        let inputs = PassInputs {
            cameras: &views.cameras,
            targets: &views.targets,
            masks: &views.masks,
            names: &views.names,
            appearance: &rows,
            transform: self.appearance.as_ref().map(|a| a.transform()),
            saturation_bound: self.config.appearance.saturation_bound(),
            batch: self.config.batch_size,
            render: self.render_options(sh_degree, views.background),
            loss: LossOptions {
                ssim_lambda: self.config.loss.ssim_lambda,
            },
            opacity_reg: self.config.loss.opacity_reg / replicas,
            scale_reg: self.config.loss.scale_reg / replicas,
            wants_loss: reads.loss,
            wants_mse: reads.psnr,
            wants_poses: self.poses.as_ref().is_some_and(|p| p.active_at(step)),
            smoothing: self.smoothing.as_ref(),
            panoramas: self.scene.panoramas,
        };
        if inputs.panoramas && (self.loss_fn.is_some() || self.field.num_gaussians() == 0) {
            return Err(TrainError::Config {
                origin: "config".to_string(),
                message: "`data.whole_panoramas` trains through the built-in loss's pass on a \
                          non-empty field: a loss of one's own (`Trainer::set_loss`) or an \
                          empty start trains on the rig's views"
                    .to_string(),
            });
        }
        if inputs.wants_poses && self.loss_fn.is_some() {
            return Err(TrainError::Config {
                origin: "config".to_string(),
                message: "`poses.refine` takes its gradient from the built-in loss's pass: a \
                          loss of one's own (`Trainer::set_loss`) trains with `false`"
                    .to_string(),
            });
        }
        match &self.loss_fn {
            None if self.field.num_gaussians() > 0 => direct_forward::<B>(&self.field, &inputs),
            None => {
                autodiff_forward::<B>(&self.field, &inputs, &crate::pass::photometric(inputs.loss))
            }
            Some(loss_fn) => autodiff_forward::<B>(&self.field, &inputs, loss_fn.as_ref()),
        }
    }

    /// Reads back what (0-based) step `step` reads, agreed over the replicas, with the tile
    /// lists' counts when they are due; a non-finite loss is an error.
    fn read_back(
        &mut self,
        step: usize,
        views: &StepViews<Inner<B>>,
        loss: Option<Tensor<Inner<B>, 1>>,
        mse: Option<Tensor<Inner<B>, 1>>,
        reads: StepReads,
    ) -> Result<ReadValues, TrainError> {
        let pairs_due = reads.loss || self.tile_lists.must_read();
        let read = self.reducer.read(ReadRequest {
            device: self.device.clone(),
            loss,
            mse,
            tile_pairs: pairs_due
                .then(|| self.tile_lists.largest_pending())
                .flatten(),
            stop: self.stop_requested,
        })?;
        if let Some(largest) = read.tile_pairs {
            self.tile_lists.update(largest);
        }
        if let Some(value) = read.loss
            && !value.is_finite()
        {
            return Err(TrainError::NonFiniteLoss {
                step: step + 1,
                view: views.names[0].clone(),
                loss: value,
                last_checkpoint: None,
            });
        }
        Ok(read)
    }

    /// `[N]`: for each Gaussian, the sum of its projection's `extents [C N, 3]` over the step's
    /// views (over every replica): positive where any view draws it.
    fn views_reached(
        &self,
        extents: Tensor<Inner<B>, 2, burn::tensor::Int>,
    ) -> Result<Tensor<Inner<B>, 1>, TrainError> {
        let n = self.field.num_gaussians();
        let views = extents.dims()[0] / n.max(1);
        // `(rx, ry, tiles)` are never negative and all zero where a view culls the Gaussian:
        // their sum over the columns and views is positive where any view draws it. (A sum
        // along the rows' own memory: taking the `tiles` column alone is a strided copy, which
        // cost ndarray 2-3 ms a step at 150 000 Gaussians.)
        let drawn = extents.sum_dim(1).float();
        let counts = match views {
            1 => drawn.reshape([n]),
            _ => drawn.reshape([views, n]).sum_dim(0).reshape([n]),
        };
        self.reducer.sum_rows(counts)
    }
}

/// The 3D smoothing filter of `field`'s Gaussians from the scene's training cameras as given
/// (a refined pose moves a camera by far less than changes its sampling), when `config` draws
/// with one.
pub(crate) fn smoothing_filter<I: burn::tensor::backend::Backend>(
    config: &TrainConfig,
    scene: &TrainScene,
    field: &GaussianField<I>,
) -> Option<SmoothingFilter<I>> {
    let options = config.raster.smoothing()?;
    let cameras: Vec<Camera> = scene.train.iter().map(|view| view.camera).collect();
    Some(SmoothingFilter::from_cameras(
        field.means.val(),
        &cameras,
        options,
    ))
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
