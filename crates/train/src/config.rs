//! [`TrainConfig`]: every setting of a training run, read from TOML with defaults.
//!
//! A config file only names what it changes; every other field keeps its default (the 3DGS
//! values). Unknown keys are errors that name the key, so a typo never silently trains with a
//! default. `key=value` overrides (the trainer's `--set`) address any field by its dotted path,
//! e.g. `optim.lr_opacity=0.05` or `densify.strategy="none"`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::TrainError;

mod appearance;
mod data;
mod distributed;
mod optim;
mod poses;
mod resolution;
pub use appearance::{AppearanceConfig, AppearanceInit, AppearanceKind};
pub use data::{DataConfig, EvalSplit, ProceduralConfig};
pub use distributed::{DistributedConfig, ReduceStrategyKind, host_port};
pub use optim::OptimConfig;
pub use poses::{PoseAnchor, PosesConfig};
pub use resolution::ResolutionConfig;

/// Every setting of a run. Sections mirror the step's data flow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimisation steps (`batch_size` training views per step).
    pub steps: usize,
    /// A training-time budget, seconds (`0`: none): the run ends after the first step that
    /// brings its training time ([`Trainer::training_seconds`](crate::Trainer::training_seconds))
    /// to the budget, with the final evaluation and outputs of a last step. Schedules stay
    /// keyed to `steps`, so a run cut by the budget is the same run up to where it stops.
    pub max_seconds: f64,
    /// Training views rendered per step, in one batched projection and rasterization; their
    /// losses are averaged. Above 1 the learning rates are scaled by `sqrt(batch_size)` and
    /// Adam's decays raised to the power `batch_size` (see `Trainer::learning_rate`), and every
    /// training image must have one size.
    pub batch_size: usize,
    /// The one seed of the run: view order, initialisation, split sampling.
    pub seed: u64,
    /// The scene.
    pub data: DataConfig,
    /// The initial Gaussians.
    pub init: InitConfig,
    /// The photometric loss.
    pub loss: LossConfig,
    /// Each training photo's own exposure and white balance.
    pub appearance: AppearanceConfig,
    /// Refining the training cameras' poses.
    pub poses: PosesConfig,
    /// Coarse to fine: the photos shrunk early in the run.
    pub resolution: ResolutionConfig,
    /// How the field is drawn, in training and in its evaluations.
    pub raster: RasterConfig,
    /// Adam and its learning rates.
    pub optim: OptimConfig,
    /// Adding and removing Gaussians.
    pub densify: DensifyConfig,
    /// Held-out evaluation.
    pub eval: EvalConfig,
    /// What the run writes.
    pub output: OutputConfig,
    /// Data-parallel training on several devices.
    pub distributed: DistributedConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            steps: 30_000,
            max_seconds: 0.0,
            batch_size: 1,
            seed: 0,
            data: DataConfig::default(),
            init: InitConfig::default(),
            loss: LossConfig::default(),
            appearance: AppearanceConfig::default(),
            poses: PosesConfig::default(),
            resolution: ResolutionConfig::default(),
            raster: RasterConfig::default(),
            optim: OptimConfig::default(),
            densify: DensifyConfig::default(),
            eval: EvalConfig::default(),
            output: OutputConfig::default(),
            distributed: DistributedConfig::default(),
        }
    }
}

/// How the Gaussians start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitMode {
    /// One Gaussian per scene point (falls back to `view_volume` when the scene has none).
    Points,
    /// `random_count` Gaussians uniform in the scene bounds, random colours (3DGS's start for
    /// scenes without points).
    Random,
    /// `random_count` Gaussians uniform in the part of the scene bounds that at least
    /// `view_fraction` of the training cameras see, coloured from the photos that see them:
    /// no Gaussians in space no camera looks at, where they can only become floaters.
    ViewVolume,
}

/// The initial Gaussians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InitConfig {
    /// From the scene's points or random.
    pub mode: InitMode,
    /// Gaussians of a random initialisation.
    pub random_count: usize,
    /// Half the side of the random box, as a fraction of the scene extent (the box is centred on
    /// the points' centre, or without points on the point the training cameras look at).
    pub random_box: f64,
    /// `view_volume`: the fraction of training cameras that must see a point, in `(0, 1]`.
    pub view_fraction: f64,
    /// Initial opacity, after the sigmoid.
    pub opacity: f64,
    /// SH degree of the model (bands are switched on by [`OptimConfig::sh_interval`]).
    pub sh_degree: usize,
}

impl Default for InitConfig {
    fn default() -> Self {
        InitConfig {
            mode: InitMode::Points,
            random_count: 100_000,
            random_box: 1.0,
            view_fraction: 0.5,
            opacity: 0.1,
            sh_degree: 3,
        }
    }
}

/// `(1 - ssim_lambda) L1 + ssim_lambda (1 - SSIM)` (SSIM: 11x11 Gaussian window, sigma 1.5),
/// plus optional regularisers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossConfig {
    /// Weight of the D-SSIM term.
    pub ssim_lambda: f64,
    /// Weight of the mean opacity added to the loss (the MCMC paper uses 0.01).
    pub opacity_reg: f64,
    /// Weight of the mean scale (world units) added to the loss (the MCMC paper uses 0.01).
    pub scale_reg: f64,
}

impl Default for LossConfig {
    fn default() -> Self {
        LossConfig {
            ssim_lambda: 0.2,
            opacity_reg: 0.0,
            scale_reg: 0.0,
        }
    }
}

/// Which densification strategy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// Never add or remove Gaussians.
    None,
    /// The 3DGS schedule: clone, split, prune, opacity reset ([`crate::densify::AdaptiveDensity`]).
    Default,
    /// Relocation of dead Gaussians, growth to a hard cap and noise on the centres
    /// ([`crate::densify::McmcDensity`]).
    Mcmc,
}

/// Adding and removing Gaussians (the 3DGS defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DensifyConfig {
    /// The strategy.
    pub strategy: StrategyKind,
    /// First step that refines.
    pub start: usize,
    /// No refinement from this step on.
    pub stop: usize,
    /// Refine every this many steps.
    pub interval: usize,
    /// Mean screen-space gradient norm (NDC units, as 3DGS) above which a Gaussian is cloned
    /// or split.
    pub grad_threshold: f64,
    /// Gaussians with a largest scale above `percent_dense x extent` are split, smaller ones
    /// cloned.
    pub percent_dense: f64,
    /// Gaussians below this opacity are pruned.
    pub min_opacity: f64,
    /// Set every opacity to at most 0.01 every this many steps (`0`: never).
    pub opacity_reset_interval: usize,
    /// After the first opacity reset, prune Gaussians whose screen radius exceeded this many
    /// pixels, or whose largest scale exceeds `0.1 x extent`.
    pub max_screen_size: f64,
    /// Never grow beyond this many Gaussians (3DGS: candidates with the largest gradients win;
    /// MCMC: the hard cap it grows towards, 5% per refinement).
    pub max_gaussians: usize,
    /// MCMC: scale of the noise on the centres, times the means' learning rate.
    pub noise_lr: f64,
    /// MCMC: a Gaussian whose centre lies farther than `fence` times the radius of the region
    /// the training cameras and initialisation points span (around the cameras' mean centre)
    /// counts as dead at every relocation, from `start` to the end of the run (after `stop`
    /// only these are relocated); 0 turns the fence off.
    pub fence: f64,
    /// MCMC: how much the multi-view error decides where Gaussians are relocated and added,
    /// from 0 (by opacity alone, the paper's rule) to 1 (by opacity times the error score
    /// alone): each live Gaussian is drawn with weight `o_i ((1 - w) + w s_i / mean s)`, `s`
    /// its blend weight in the high-error pixels of `error_views` training views scored before
    /// each refinement (FastGS's multi-view error, stated in `src/trainer/densify.rs`).
    pub error_weight: f64,
    /// MCMC with `error_weight`: training views scored before each refinement.
    pub error_views: usize,
    /// MCMC with `error_weight`: a pixel is a high-error one when its error, scaled to
    /// `[0, 1]` over its view, exceeds this.
    pub error_threshold: f64,
}

impl Default for DensifyConfig {
    fn default() -> Self {
        DensifyConfig {
            strategy: StrategyKind::Default,
            start: 500,
            stop: 15_000,
            interval: 100,
            grad_threshold: 2e-4,
            percent_dense: 0.01,
            min_opacity: 0.005,
            opacity_reset_interval: 3000,
            max_screen_size: 20.0,
            max_gaussians: 6_000_000,
            noise_lr: 5e5,
            fence: 3.0,
            error_weight: 0.0,
            error_views: 8,
            error_threshold: 0.1,
        }
    }
}

/// Held-out evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Evaluate every this many steps (`0`: only at the end).
    pub every: usize,
    /// At most this many held-out views (evenly spaced); `None`: all.
    pub max_views: Option<usize>,
    /// Save this many eval views as PNG (render left, ground truth right).
    pub save_images: usize,
    /// MiB of rendered eval views (RGB `f32`) kept between evaluations of an unchanged field
    /// ([`crate::view_cache::ViewCache`]); `0` turns the cache off.
    pub cache_mib: usize,
    /// The LPIPS weights (safetensors, `scripts/lpips-weights.py`), relative to the config
    /// file's folder; unset: the file `EMBER_LPIPS_WEIGHTS` names, else the weights Ember ships
    /// (`ember_train::lpips::Lpips::bundled`). A named file that does not load turns LPIPS off
    /// with a notice; PSNR and SSIM are measured all the same.
    pub lpips_weights: Option<std::path::PathBuf>,
    /// Which evaluations measure LPIPS: `every` one, only the `last` of a run (the step at
    /// `steps`), or `never`. On two CPU cores LPIPS costs ~0.6 s per 400x400 view,
    /// ten times the render and SSIM together, so the CPU presets measure it last.
    pub lpips: LpipsWhen,
    /// Steps of test-time alignment per held-out view (`0`: none): each held-out camera's pose
    /// and its photo's exposure (a gain per channel) fitted to the photo with the field frozen,
    /// then the aligned PSNR and SSIM measured beside the plain ones (`ember_train::align`).
    /// Each step renders the view and runs its backward once: 100 steps cost ~35 s a view at
    /// 400x300 and 150 000 Gaussians on two CPU cores.
    pub align_steps: usize,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            every: 7000,
            max_views: None,
            save_images: 4,
            cache_mib: 256,
            lpips_weights: None,
            lpips: LpipsWhen::Every,
            align_steps: 0,
        }
    }
}

/// How the field is drawn in training and in the run's evaluations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RasterConfig {
    /// Mip-Splatting's antialiasing, both filters. The 2D filter: the opacity of each Gaussian
    /// multiplied by `sqrt(det C / det(C + eps2d I))`, so that the screen covariance's
    /// dilation adds no energy (`ember_field::RenderOptions::with_antialiased`). The 3D filter
    /// (`filter_3d`): each Gaussian smoothed by the finest sampling of the training cameras
    /// (`ember_field::SmoothingFilter`), folded into the field the run evaluates, exports and
    /// shows. A field trained with it is drawn with it: `trainer eval` of the run reads this
    /// key, `trainer eval --antialiased` turns the 2D filter on for a splat file.
    pub antialiased: bool,
    /// With `antialiased`, the 3D filter's variance in squared pixels of each Gaussian's finest
    /// training view (Mip-Splatting's 0.2); `0` keeps only the 2D filter.
    pub filter_3d: f64,
}

impl Default for RasterConfig {
    fn default() -> Self {
        RasterConfig {
            antialiased: false,
            filter_3d: 0.2,
        }
    }
}

impl RasterConfig {
    /// The 3D filter's options when the run draws with it.
    pub fn smoothing(&self) -> Option<ember_field::SmoothingOptions> {
        (self.antialiased && self.filter_3d > 0.0).then(|| ember_field::SmoothingOptions {
            strength: self.filter_3d,
            ..Default::default()
        })
    }
}

/// Which evaluations of a run measure LPIPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LpipsWhen {
    /// Every evaluation.
    #[default]
    Every,
    /// The run's last evaluation only (the one its summary and a benchmark table report).
    Last,
    /// None: PSNR and SSIM alone.
    Never,
}

/// What the run writes into its output folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputConfig {
    /// Write a checkpoint every this many steps (`0`: only at the end).
    pub checkpoint_every: usize,
    /// Export the field as a 3DGS PLY at the end.
    pub ply: bool,
    /// Log the training loss/PSNR every this many steps in `metrics.jsonl`/`.csv`.
    pub log_every: usize,
    /// Read the loss back and check that it is finite every this many steps; the steps that
    /// log (`log_every`) and the last step always read it. A read makes the host wait for the
    /// device, so on a GPU reading every step keeps the host from queueing the next step while
    /// the device runs this one; the GPU presets read every 100. With 1, a non-finite loss
    /// stops the run before it changes anything; with more, up to `loss_every - 1` earlier
    /// steps may have changed the parameters first.
    pub loss_every: usize,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            checkpoint_every: 5000,
            ply: true,
            log_every: 10,
            loss_every: 1,
        }
    }
}

/// A key that may be left unset (an `Option` field), for [`TrainConfig::to_annotated_toml`].
#[derive(Debug, Clone, Copy)]
pub struct OptionalKey {
    /// Its table (`data`, `optim`, ...).
    pub section: &'static str,
    /// Its name in the table.
    pub key: &'static str,
    /// A valid value, as TOML.
    pub example: &'static str,
    /// What leaving it unset means.
    pub unset: &'static str,
}

/// Every optional key of [`TrainConfig`].
pub const OPTIONAL_KEYS: [OptionalKey; 10] = [
    OptionalKey {
        section: "data",
        key: "path",
        example: "\"path/to/scene\"",
        unset: "train on the built-in procedural scene",
    },
    OptionalKey {
        section: "data",
        key: "max_side",
        example: "800",
        unset: "`downsample` alone sets the size",
    },
    OptionalKey {
        section: "data",
        key: "max_images",
        example: "100",
        unset: "every view",
    },
    OptionalKey {
        section: "data",
        key: "test_every",
        example: "8",
        unset: "no view is held out (a scene's split files still decide where it has them)",
    },
    OptionalKey {
        section: "data",
        key: "point_cloud",
        example: "\"points3d.ply\"",
        unset: "the scene's own points",
    },
    OptionalKey {
        section: "optim",
        key: "lr_means_steps",
        example: "30000",
        unset: "the run's `steps`",
    },
    OptionalKey {
        section: "eval",
        key: "max_views",
        example: "8",
        unset: "every held-out view",
    },
    OptionalKey {
        section: "eval",
        key: "lpips_weights",
        example: "\"alex.safetensors\"",
        unset: "the file EMBER_LPIPS_WEIGHTS names, else the weights Ember ships",
    },
    OptionalKey {
        section: "distributed",
        key: "orchestrator",
        example: "\"10.0.0.1:7070\"",
        unset: "one node: no orchestrator",
    },
    OptionalKey {
        section: "distributed",
        key: "node_address",
        example: "\"10.0.0.2:7071\"",
        unset: "one node: nothing listens",
    },
];

impl TrainConfig {
    /// Parses a TOML document; `origin` names it in errors (a file path, or `<built-in>`).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<TrainConfig, TrainError> {
        let config: TrainConfig = toml::from_str(text).map_err(|e| TrainError::Config {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads and parses a TOML file. A relative `data.path` or `eval.lpips_weights` in it is
    /// relative to the file's folder (as cargo and docker compose resolve paths in their
    /// files), so a preset works from any working directory.
    pub fn from_file(path: &Path) -> Result<TrainConfig, TrainError> {
        let text = std::fs::read_to_string(path).map_err(|e| TrainError::io(path, e))?;
        let mut config = Self::from_toml_str(&text, &path.display().to_string())?;
        let folder = path.parent().unwrap_or(Path::new(""));
        for file in [
            config.data.path.as_mut(),
            config.eval.lpips_weights.as_mut(),
        ]
        .into_iter()
        .flatten()
        .filter(|p| p.is_relative())
        {
            *file = folder.join(&*file);
        }
        Ok(config)
    }

    /// The config as TOML (what a run records next to its outputs and in checkpoints).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# not serialisable: {e}\n"))
    }

    /// [`TrainConfig::to_toml_string`] with every unset optional key ([`OPTIONAL_KEYS`]) shown
    /// as a comment under its section, with an example value and what unset means: what
    /// `trainer --print-config` prints, so that every key can be discovered.
    pub fn to_annotated_toml(&self) -> String {
        let text = self.to_toml_string();
        let table = toml::Table::try_from(self).unwrap_or_default();
        let is_set = |section: &str, key: &str| {
            table
                .get(section)
                .and_then(toml::Value::as_table)
                .is_some_and(|t| t.contains_key(key))
        };
        let mut out = String::with_capacity(text.len() + 512);
        for line in text.lines() {
            out.push_str(line);
            out.push('\n');
            let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
                continue;
            };
            for optional in OPTIONAL_KEYS.iter().filter(|k| k.section == section) {
                if !is_set(section, optional.key) {
                    out.push_str(&format!(
                        "# {} = {}  # unset: {}\n",
                        optional.key, optional.example, optional.unset
                    ));
                }
            }
        }
        out
    }

    /// This config with `key=value` overrides applied in order. `key` is a dotted path
    /// (`optim.lr_opacity`); `value` is a TOML value (`0.05`, `"none"`, `[1, 1, 1]`), or a bare
    /// word taken as a string (`densify.strategy=none`).
    pub fn with_overrides<S: AsRef<str>>(
        &self,
        overrides: &[S],
    ) -> Result<TrainConfig, TrainError> {
        if overrides.is_empty() {
            return Ok(self.clone());
        }
        let bad = |message: String| TrainError::Config {
            origin: "--set".to_string(),
            message,
        };
        let mut tree = toml::Table::try_from(self).map_err(|e| bad(e.to_string()))?;
        for item in overrides {
            let item = item.as_ref();
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("`{item}` is not key=value")))?;
            let (key, value) = (key.trim(), value.trim());
            let value = parse_override_value(value);
            let path: Vec<&str> = key.split('.').collect();
            if path.iter().any(|p| p.is_empty()) {
                return Err(bad(format!("`{key}` is not a dotted key")));
            }
            let mut table = &mut tree;
            for part in &path[..path.len() - 1] {
                let entry = table
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                table = entry
                    .as_table_mut()
                    .ok_or_else(|| bad(format!("`{key}`: `{part}` is a value, not a section")))?;
            }
            table.insert(path[path.len() - 1].to_string(), value);
        }
        let config: TrainConfig = tree
            .try_into()
            .map_err(|e: toml::de::Error| bad(e.to_string().trim_end().to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that no type can: positive counts, rates and ranges.
    pub fn validate(&self) -> Result<(), TrainError> {
        let fail = |field: &str, why: &str| {
            Err(TrainError::Config {
                origin: "config".to_string(),
                message: format!("`{field}` {why}"),
            })
        };
        if self.batch_size == 0 {
            return fail("batch_size", "must be at least 1");
        }
        if !(self.max_seconds.is_finite() && self.max_seconds >= 0.0) {
            return fail(
                "max_seconds",
                "must be a number of seconds, at least 0 (0: no budget)",
            );
        }
        if !self.batch_size.is_multiple_of(self.distributed.peers()) {
            return fail(
                "batch_size",
                "must be a multiple of the peers (`distributed.devices` times `distributed.nodes`): each renders its share",
            );
        }
        self.distributed
            .validate()
            .map_err(|message| TrainError::Config {
                origin: "config".to_string(),
                message,
            })?;
        self.appearance
            .validate()
            .map_err(|message| TrainError::Config {
                origin: "config".to_string(),
                message,
            })?;
        self.resolution
            .validate()
            .map_err(|message| TrainError::Config {
                origin: "config".to_string(),
                message,
            })?;
        self.poses
            .validate()
            .map_err(|message| TrainError::Config {
                origin: "config".to_string(),
                message,
            })?;
        if self.poses.refine && self.distributed.peers() > 1 {
            return fail(
                "poses.refine",
                "is per camera and not yet summed over the peers: data-parallel runs take `false`",
            );
        }
        if self.appearance.kind != AppearanceKind::None && self.distributed.peers() > 1 {
            return fail(
                "appearance.kind",
                "is per photo and not yet summed over the peers: data-parallel runs take `none`",
            );
        }
        if !(self.raster.filter_3d.is_finite() && self.raster.filter_3d >= 0.0) {
            return fail(
                "raster.filter_3d",
                "must be a variance in squared pixels, at least 0 (0: no 3D filter)",
            );
        }
        if self.data.downsample == 0 {
            return fail("data.downsample", "must be at least 1");
        }
        if self.data.max_side == Some(0) {
            return fail("data.max_side", "must be at least 1 pixel");
        }
        if let Some(key) = DataConfig::whole_panorama_conflict(self) {
            return fail(
                key,
                "needs pinhole training views: leave it at its default with `data.whole_panoramas`",
            );
        }
        if let Some(problem) = self.data.equirect.problem() {
            return Err(TrainError::Config {
                origin: "config".to_string(),
                message: format!("`data.equirect`: {problem}"),
            });
        }
        if self
            .data
            .background
            .iter()
            .any(|c| !(0.0..=1.0).contains(c))
        {
            return fail("data.background", "must be RGB in [0, 1]");
        }
        let p = &self.data.procedural;
        // No test views is allowed: a run then trains on every view and evaluates nothing.
        if p.resolution < 8 || p.train_views == 0 || p.gaussians == 0 {
            return fail(
                "data.procedural",
                "needs resolution >= 8 and at least one train view and Gaussian",
            );
        }
        if !(self.init.opacity > 0.0 && self.init.opacity < 1.0) {
            return fail("init.opacity", "must be in (0, 1)");
        }
        if self.init.sh_degree > 3 {
            return fail("init.sh_degree", "must be 0 to 3");
        }
        if self.init.random_count == 0 || self.init.random_box <= 0.0 {
            return fail("init.random_count / init.random_box", "must be positive");
        }
        if !(self.init.view_fraction > 0.0 && self.init.view_fraction <= 1.0) {
            return fail("init.view_fraction", "must be in (0, 1]");
        }
        if self.eval.max_views == Some(0) {
            return fail(
                "eval.max_views",
                "must be at least 1 (leave it out for every view)",
            );
        }
        if !(0.0..=1.0).contains(&self.loss.ssim_lambda) {
            return fail("loss.ssim_lambda", "must be in [0, 1]");
        }
        if !(self.loss.opacity_reg >= 0.0 && self.loss.scale_reg >= 0.0) {
            return fail("loss.opacity_reg / loss.scale_reg", "must be >= 0");
        }
        if !(self.densify.noise_lr.is_finite() && self.densify.noise_lr >= 0.0) {
            return fail("densify.noise_lr", "must be finite and >= 0");
        }
        if !(self.densify.fence.is_finite() && self.densify.fence >= 0.0) {
            return fail("densify.fence", "must be finite and >= 0 (0: no fence)");
        }
        let d = &self.densify;
        if !(0.0..=1.0).contains(&d.error_weight) {
            return fail(
                "densify.error_weight",
                "must be in [0, 1] (0: by opacity alone)",
            );
        }
        if d.error_weight > 0.0 && d.strategy != StrategyKind::Mcmc {
            return fail(
                "densify.error_weight",
                "is read by `strategy = \"mcmc\"` alone",
            );
        }
        if d.error_weight > 0.0 && d.error_views == 0 {
            return fail(
                "densify.error_views",
                "must be at least 1 with an error weight",
            );
        }
        if !(0.0..1.0).contains(&d.error_threshold) {
            return fail("densify.error_threshold", "must be in [0, 1)");
        }
        let o = &self.optim;
        for (name, lr) in [
            ("optim.lr_means", o.lr_means),
            ("optim.lr_means_final", o.lr_means_final),
            ("optim.lr_sh_dc", o.lr_sh_dc),
            ("optim.lr_sh_rest", o.lr_sh_rest),
            ("optim.lr_opacity", o.lr_opacity),
            ("optim.lr_scales", o.lr_scales),
            ("optim.lr_quats", o.lr_quats),
        ] {
            if !(lr.is_finite() && lr >= 0.0) {
                return fail(name, "must be a finite rate >= 0");
            }
        }
        if !(0.0..1.0).contains(&o.beta1) || !(0.0..1.0).contains(&o.beta2) || o.eps <= 0.0 {
            return fail("optim.beta1/beta2/eps", "need betas in [0, 1) and eps > 0");
        }
        if o.sh_interval == 0 {
            return fail("optim.sh_interval", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&o.anneal_start) {
            return fail(
                "optim.anneal_start",
                "must be a fraction of the run in [0, 1]",
            );
        }
        if !(o.anneal_factor.is_finite() && o.anneal_factor > 0.0 && o.anneal_factor <= 1.0) {
            return fail("optim.anneal_factor", "must be in (0, 1]");
        }
        if self.densify.interval == 0 {
            return fail("densify.interval", "must be at least 1");
        }
        if self.densify.max_gaussians == 0 {
            return fail("densify.max_gaussians", "must be at least 1");
        }
        if self.output.log_every == 0 {
            return fail("output.log_every", "must be at least 1");
        }
        if self.output.loss_every == 0 {
            return fail("output.loss_every", "must be at least 1");
        }
        Ok(())
    }
}

/// A TOML value, or the raw text as a string when it does not parse as one.
fn parse_override_value(text: &str) -> toml::Value {
    let doc = format!("v = {text}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut table) => table
            .remove("v")
            .unwrap_or(toml::Value::String(text.to_string())),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotated_toml_shows_every_unset_optional_key_and_its_examples_are_valid() {
        let mut config = TrainConfig::default();
        config.data.test_every = None;
        let text = config.to_annotated_toml();
        for optional in OPTIONAL_KEYS {
            let commented = format!("# {} = {}", optional.key, optional.example);
            assert_eq!(
                text.matches(&commented).count(),
                1,
                "{commented} in\n{text}"
            );
        }
        // Uncommented, the example values make a valid config with every optional key set.
        let uncommented: String = text
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest) => rest.split("  # unset:").next().unwrap_or(rest),
                None => line,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let full = TrainConfig::from_toml_str(&uncommented, "uncommented").unwrap();
        assert!(full.data.path.is_some() && full.data.max_images.is_some());
        assert!(full.data.max_side.is_some());
        assert!(full.data.test_every.is_some() && full.data.point_cloud.is_some());
        assert!(full.optim.lr_means_steps.is_some() && full.eval.max_views.is_some());
        assert!(!full.to_annotated_toml().contains("# unset:"));
    }

    #[test]
    fn defaults_are_the_3dgs_schedule() {
        let c = TrainConfig::default();
        assert_eq!(c.steps, 30_000);
        assert_eq!(c.optim.lr_means, 1.6e-4);
        assert_eq!(c.optim.eps, 1e-15);
        assert_eq!(c.densify.grad_threshold, 2e-4);
        assert_eq!(c.densify.opacity_reset_interval, 3000);
        assert_eq!(c.loss.ssim_lambda, 0.2);
    }

    #[test]
    fn empty_file_is_the_default_and_round_trips() {
        let c = TrainConfig::from_toml_str("", "test").unwrap();
        assert_eq!(c, TrainConfig::default());
        let again = TrainConfig::from_toml_str(&c.to_toml_string(), "again").unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = TrainConfig::from_toml_str("stepz = 3", "a.toml").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("stepz") && text.contains("a.toml"), "{text}");
        let e = TrainConfig::from_toml_str("[optim]\nlr_mean = 1.0", "b.toml").unwrap_err();
        assert!(e.to_string().contains("lr_mean"), "{e}");
        let e = TrainConfig::default()
            .with_overrides(&["densify.grad_treshold=1e-4"])
            .unwrap_err();
        assert!(e.to_string().contains("grad_treshold"), "{e}");
    }

    #[test]
    fn overrides_reach_any_field() {
        let c = TrainConfig::default()
            .with_overrides(&[
                "steps=12",
                "max_seconds=250",
                "optim.lr_opacity=0.05",
                "densify.strategy=none",
                "data.background=[0, 0, 0]",
                "data.path=\"/x/y\"",
                "eval.max_views=3",
            ])
            .unwrap();
        assert_eq!(c.steps, 12);
        assert_eq!(c.max_seconds, 250.0);
        assert_eq!(c.optim.lr_opacity, 0.05);
        assert_eq!(c.densify.strategy, StrategyKind::None);
        assert_eq!(c.data.background, [0.0; 3]);
        assert_eq!(c.data.path.as_deref(), Some(Path::new("/x/y")));
        assert_eq!(c.eval.max_views, Some(3));
    }

    #[test]
    fn bad_values_are_refused() {
        for (text, key) in [
            ("steps = \"many\"", "steps"),
            ("[init]\nopacity = 1.5", "init.opacity"),
            ("[densify]\nstrategy = \"sometimes\"", "sometimes"),
            ("[densify]\nerror_weight = 0.5", "densify.error_weight"),
            (
                "[densify]\nstrategy = \"mcmc\"\nerror_weight = 2",
                "densify.error_weight",
            ),
            (
                "[densify]\nerror_threshold = 1.0",
                "densify.error_threshold",
            ),
            ("[loss]\nssim_lambda = -1", "ssim_lambda"),
            ("max_seconds = -1.0", "max_seconds"),
            ("max_seconds = nan", "max_seconds"),
        ] {
            let e = TrainConfig::from_toml_str(text, "c.toml").unwrap_err();
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
        assert!(TrainConfig::default().with_overrides(&["novalue"]).is_err());
        assert!(
            TrainConfig::default()
                .with_overrides(&["steps.x=1"])
                .is_err()
        );
    }
}
