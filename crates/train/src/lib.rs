//! Ember's training as a library: [`TrainConfig`], the initial field, the L1 + D-SSIM loss,
//! per-group Adam, the SH schedule, densification strategies, evaluation, checkpoints and PLY
//! export, and the step loop ([`Trainer`]) generic over the autodiff backend.
//!
//! ```text
//! TrainScene (views + images) -> Trainer::step: render -> loss -> backward (pass)
//!   -> Reducer (one device, or the peers) -> reads due (loss, tile lists)
//!   -> GroupAdam (one rate per ParamGroup) -> Strategy::refine (clone/split/prune/reset)
//! run(): steps + Trainer::evaluate (PSNR/SSIM, PNGs; renders cached per field generation)
//!   + checkpoints + metrics + curve + PLY
//! ```
//!
//! # Example
//! ```no_run
//! use std::sync::Arc;
//! use ember_train::{TrainConfig, TrainScene, Trainer};
//! type B = burn::backend::Autodiff<burn::backend::NdArray<f32>>;
//!
//! let config = TrainConfig::from_toml_str("steps = 100\n[densify]\nstrategy = \"none\"", "inline")?;
//! let device = Default::default();
//! // The procedural scene (no `data.path`), rendered on the training device.
//! let scene = Arc::new(TrainScene::load::<burn::backend::NdArray<f32>>(&config.data, config.seed, &device)?);
//! let mut trainer = Trainer::<B>::new(config, scene, &device)?;
//! for _ in 0..100 {
//!     let report = trainer.step()?;
//!     // The loss is read back every `output.loss_every` steps (default: every step).
//!     if let Some(loss) = report.loss {
//!         println!("step {} loss {loss:.4}", report.step);
//!     }
//! }
//! println!("held-out PSNR {:.2} dB", trainer.evaluate()?.psnr);
//! # Ok::<(), ember_train::TrainError>(())
//! ```
//!
//! # Determinism
//! Every random choice (view order, initialisation, split samples, random backgrounds) is drawn from
//! `(seed, purpose, step)`, so a run resumed from a checkpoint makes the same choices as one that
//! never stopped; on the CPU backend the numbers are bit-identical (the kernels reduce in a fixed
//! order).
//!
//! # Not implemented yet
//! - Training images are decoded up front and fetched from memory each step; there is no
//!   prefetch thread. On a GPU the photos stay on the device as `u8` within
//!   `data.image_budget_mb`; only those past the budget are uploaded by each step that uses them
//!   (`docs/benchmarks-history.md`, "The GPU step at scale", has the data phase's share of a step).

#![warn(missing_docs)]

pub mod adam;
pub mod align;
pub mod appearance;
pub mod checkpoint;
pub mod coarse;
pub mod config;
pub mod curve;
pub mod densify;
mod error;
pub mod eval;
pub mod loss;
pub mod lpips;
pub mod parallel;
pub mod params;
pub mod pass;
pub mod poses;
pub mod reduce;
pub mod run;
pub mod scene;
pub mod targets;
pub mod tile_lists;
pub mod timing;
pub mod trainer;
pub mod view_cache;

pub use adam::{AdamSettings, GroupAdam};
pub use config::{DistributedConfig, ResolutionConfig, TrainConfig};
pub use ember_field::SplatAutodiffBackend;
pub use error::{TrainError, write_atomically};
pub use eval::EvalReport;
pub use parallel::{follow_data_parallel, run_data_parallel, serve_orchestrator};
pub use params::ParamGroup;
pub use pass::TrainingLoss;
pub use reduce::{OneDevice, PeerLink, Reducer};
pub use run::{ObserverAction, Quiet, RunObserver, RunSummary, run};
pub use scene::{SceneView, TrainScene};
pub use targets::{TargetImages, TargetStats};
pub use tile_lists::TileListStats;
pub use timing::{Phase, PhaseTimes};
pub use trainer::{StepReport, Trainer};
pub use view_cache::{CacheStats, ViewCache};
