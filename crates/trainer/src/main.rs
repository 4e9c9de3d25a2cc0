//! `trainer`: trains a Gaussian-splatting scene from a TOML config.
//!
//! `cargo run --release -p trainer` trains the built-in procedural scene of `configs/quick.toml`
//! (compiled in, so it works without data); `--config FILE` picks another preset, `--data` a
//! scene folder, `--set key=value` overrides any config field, `--view` serves the live
//! viewer during training. The subcommands `convert`, `transform`, `info` and `render` work on
//! splat files (3DGS PLY, `.splat`, SPZ); `view` serves a splat file, checkpoint or run folder
//! to the browser; `metrics` gives PSNR, SSIM and LPIPS of two images, `eval` of a run or a
//! splat file on a dataset split; `benchmark` trains a suite of scenes into a paper-style
//! table; `bench render|train|data|view` time renders, training steps, the image pipeline and
//! the viewer and write JSON (`ember_bench::BenchFile`), `compare` puts two such files side by
//! side. See `--help`.

mod bench;
mod bench_allreduce;
mod bench_data;
mod bench_lod;
mod bench_train;
mod bench_view;
mod benchmark;
mod eval;
mod guard;
mod lod;
mod metrics;
mod splat_tools;
mod view;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use ember_train::{
    EvalReport, RunObserver, StepReport, TrainConfig, TrainScene, run, run_data_parallel,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::guard::{fits_in_memory, not_an_input};
use crate::view::{ListenArgs, LiveObserver, interrupt_flag, live_budget, start_live};

/// A preset compiled into the binary, used when there is no `--config`.
struct Preset {
    /// Its file in the repository.
    file: &'static str,
    /// Its text.
    toml: &'static str,
    /// What it is for, for the run's first line.
    what: &'static str,
}

/// Without `--data`: the built-in procedural scene.
const QUICK: Preset = Preset {
    file: "configs/quick.toml",
    toml: include_str!("../../../configs/quick.toml"),
    what: "the procedural demo",
};

/// `--data` on a real capture, CPU backend.
const CAPTURE_CPU: Preset = Preset {
    file: "configs/colmap-cpu.toml",
    toml: include_str!("../../../configs/colmap-cpu.toml"),
    what: "real captures on the CPU",
};

/// `--data` on a real capture, GPU backends.
const CAPTURE_GPU: Preset = Preset {
    file: "configs/colmap.toml",
    toml: include_str!("../../../configs/colmap.toml"),
    what: "real captures on a GPU",
};

/// `--data` on a NeRF-Synthetic scene (`transforms_train.json`), CPU backend.
const SYNTHETIC_CPU: Preset = Preset {
    file: "configs/lego-cpu.toml",
    toml: include_str!("../../../configs/lego-cpu.toml"),
    what: "NeRF-Synthetic scenes on the CPU",
};

/// `--data` on a NeRF-Synthetic scene, GPU backends.
const SYNTHETIC_GPU: Preset = Preset {
    file: "configs/h100.toml",
    toml: include_str!("../../../configs/h100.toml"),
    what: "NeRF-Synthetic scenes on a GPU",
};

/// The training config and its overrides (the run's, and `bench train`'s).
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// TOML config (default: the built-in configs/quick.toml).
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Scene folder (COLMAP, NeRF-Synthetic or nerfstudio); overrides `data.path`.
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,
    /// Steps; overrides `steps`.
    #[arg(long)]
    steps: Option<usize>,
    /// Seed; overrides `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Override any config field, e.g. `--set optim.lr_opacity=0.05` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Train data-parallel on these devices, one peer each (e.g. `0,1,2,3`); overrides
    /// `distributed.devices`. On cuda device `i` is GPU `i`; on wgpu and ndarray every peer
    /// shares the default device.
    #[arg(long, value_name = "I,..", value_delimiter = ',')]
    devices: Option<Vec<usize>>,
    /// This process's node in a multi-node run (`distributed.nodes > 1`); overrides
    /// `distributed.node_rank`, so that every machine can share one config file.
    #[arg(long, value_name = "R")]
    node_rank: Option<usize>,
    /// The LPIPS weights for the held-out evaluation (safetensors, scripts/lpips-weights.py);
    /// overrides `eval.lpips_weights` (default: the file EMBER_LPIPS_WEIGHTS names, else the
    /// weights Ember ships).
    #[arg(long, value_name = "FILE")]
    lpips_weights: Option<PathBuf>,
    /// The backend the run uses (the global `--backend`), which picks the built-in preset.
    #[arg(skip = Backend::default_compiled())]
    backend: Backend,
}

impl ConfigArgs {
    /// The built-in preset these arguments train with when there is no `--config`: the
    /// procedural demo without `--data`; for a scene, the NeRF-Synthetic or the real-capture
    /// preset, sized for the CPU on ndarray and for a GPU on the other backends.
    fn preset(&self) -> &'static Preset {
        let cpu = self.backend == Backend::Ndarray;
        match &self.data {
            None => &QUICK,
            Some(data) if data.join("transforms_train.json").is_file() => {
                if cpu {
                    &SYNTHETIC_CPU
                } else {
                    &SYNTHETIC_GPU
                }
            }
            Some(_) => {
                if cpu {
                    &CAPTURE_CPU
                } else {
                    &CAPTURE_GPU
                }
            }
        }
    }

    /// Where the config comes from, for the first line of a run, `--print-config` and
    /// benchmark files: the file or the built-in preset (whose schedule differs from the
    /// library defaults a file starts from), and the command-line overrides.
    fn origin(&self) -> String {
        let mut origin = match &self.config {
            Some(path) => path.display().to_string(),
            None => format!(
                "the built-in preset {} ({}; keys a --config file leaves out take the library \
                 defaults instead, e.g. {} steps)",
                self.preset().file,
                self.preset().what,
                TrainConfig::default().steps
            ),
        };
        let mut overrides: Vec<String> = self.set.iter().map(|s| format!("--set {s}")).collect();
        overrides.extend(
            self.data
                .as_ref()
                .map(|d| format!("--data {}", d.display())),
        );
        overrides.extend(self.steps.map(|n| format!("--steps {n}")));
        overrides.extend(self.devices.as_ref().map(|d| {
            let list: Vec<String> = d.iter().map(usize::to_string).collect();
            format!("--devices {}", list.join(","))
        }));
        overrides.extend(self.seed.map(|n| format!("--seed {n}")));
        overrides.extend(self.node_rank.map(|n| format!("--node-rank {n}")));
        if !overrides.is_empty() {
            origin.push_str(&format!(", with {}", overrides.join(" ")));
        }
        origin
    }
}

/// Train a 3D Gaussian-splatting scene.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    run: ConfigArgs,
    /// Output folder.
    #[arg(long, value_name = "DIR", default_value = "runs/latest")]
    out: PathBuf,
    /// Backend (among the compiled cargo features); `EMBER_BACKEND` sets it when the flag is
    /// not given.
    #[arg(long, value_enum, env = "EMBER_BACKEND", default_value_t = Backend::default_compiled())]
    backend: Backend,
    /// Continue from a checkpoint written by an earlier run.
    #[arg(long, value_name = "CHECKPOINT")]
    resume: Option<PathBuf>,
    /// Print the effective config and exit.
    #[arg(long)]
    print_config: bool,
    /// Serve the live viewer while training: the field as it trains, curves, held-out views,
    /// pause and checkpoint buttons (port 7878 unless given here or as `--port`; 0 picks a
    /// free one).
    #[arg(long, value_name = "PORT", num_args = 0..=1)]
    view: Option<Option<u16>>,
    #[command(flatten)]
    listen: ListenArgs,
    /// A splat-file operation or a benchmark instead of training.
    #[command(subcommand)]
    command: Option<Command>,
}

/// What `trainer` does instead of training.
#[derive(Subcommand, Debug)]
enum Command {
    #[command(flatten)]
    Splat(splat_tools::SplatCommand),
    /// Serve a splat file, checkpoint or run folder to the browser (`--backend` renders it).
    View(view::ViewArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Level of detail: build a scene's hierarchy.
    #[command(subcommand)]
    Lod(lod::LodCommand),
    /// PSNR, SSIM and LPIPS of two images of one size (PNG or JPEG).
    Metrics(metrics::MetricsArgs),
    /// PSNR, SSIM and LPIPS of a run (or a splat file) on a dataset split, per view and mean.
    Eval(eval::EvalArgs),
    /// Train and evaluate a suite of scenes (configs/suites/*.toml): a paper-style table of
    /// PSNR, SSIM, LPIPS, training time, Gaussians and peak memory, markdown and JSON.
    Benchmark(benchmark::BenchmarkArgs),
    /// Serve the orchestrator of a multi-node run (`distributed.nodes > 1`) until Ctrl-C: every
    /// node registers with it and learns the others' addresses. No authentication: private
    /// networks only.
    Orchestrator {
        /// The port to listen on (every interface): `distributed.orchestrator`'s.
        #[arg(long, default_value_t = 7070)]
        port: u16,
    },
    /// Two `trainer bench` result files side by side, with B's speed-up over A.
    Compare {
        /// The baseline's JSON.
        a: PathBuf,
        /// The candidate's JSON.
        b: PathBuf,
    },
}

/// `trainer bench ...`.
#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Render a splat file over view sets (a dataset's train and test views, an orbit at
    /// `--resolution`): ms per frame (median, min, max), FPS, peak host memory; JSON out.
    Render(bench::RenderBenchArgs),
    /// Time `--steps` training steps (default 100) of a config, without evaluation, checkpoints
    /// or exports: steps/s and ms per step of each phase (median, min, max); JSON out.
    Train(bench_train::TrainBenchArgs),
    /// Time the image pipeline on a dataset: cold passes (decode) and warm passes (cache,
    /// prefetch, upload): images/s, MB/s, wait fraction, peak host memory; JSON out.
    Data(bench_data::DataBenchArgs),
    /// The viewer as a page sees it: frame latency (p50, p95) and FPS over an orbit, the
    /// renderer's share of it; with `--train`, training speed with and without a page asking
    /// for frames; JSON out.
    View(bench_view::ViewBenchArgs),
    /// Averaging a field's gradients across local peers with Burn's collective engine (the cost
    /// data-parallel training adds per step): ms per all-reduce by peers and Gaussian count;
    /// JSON out.
    Allreduce(bench_allreduce::AllReduceBenchArgs),
    /// Level of detail against the full render over orbits at 1x, 2x, 4x and 8x the framing
    /// distance: ms each way, speed-up, Gaussians drawn, PSNR against the full image; JSON out.
    Lod(bench_lod::LodBenchArgs),
}

/// `, LPIPS x` when it was measured.
fn lpips_text(lpips: Option<f32>) -> String {
    lpips.map_or(String::new(), |v| format!(", LPIPS {v:.4}"))
}

/// Runs `f` on the backend `backend` names (among the compiled ones).
macro_rules! on_backend {
    ($backend:expr, $f:ident, $args:expr) => {
        match $backend {
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => $f::<burn::backend::NdArray<f32>>($args, &Default::default()),
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => $f::<burn::backend::Wgpu<f32, i32, u32>>($args, &Default::default()),
            #[cfg(feature = "cuda")]
            Backend::Cuda => {
                cuda_driver_check()?;
                $f::<burn::backend::Cuda<f32, i32>>($args, &Default::default())
            }
            #[allow(unreachable_patterns)]
            other => bail!(
                "the {} backend is not compiled in: rebuild with `--features {}`",
                other.name(),
                other.name()
            ),
        }
    };
}

/// An error, instead of CubeCL's panic on its device thread, when the NVIDIA driver's library
/// cannot be loaded (a CUDA build run on a machine without an NVIDIA GPU).
#[cfg(feature = "cuda")]
fn cuda_driver_check() -> Result<()> {
    // SAFETY: only opens the library under its candidate names, as CubeCL would; no symbol
    // of it is called here.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return Ok(());
    }
    bail!(
        "the cuda backend needs the NVIDIA driver's library (libcuda.so), which this machine \
         does not have; choose another backend with --backend ndarray{}",
        if cfg!(feature = "wgpu") {
            " or --backend wgpu"
        } else {
            ""
        }
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// CPU (ndarray + Ember's rayon kernels).
    Ndarray,
    /// wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// CUDA.
    Cuda,
}

impl Backend {
    /// The name `--backend` takes.
    fn name(self) -> &'static str {
        match self {
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Cuda => "cuda",
        }
    }

    fn default_compiled() -> Backend {
        if cfg!(feature = "cuda") {
            Backend::Cuda
        } else if cfg!(feature = "wgpu") {
            Backend::Wgpu
        } else {
            Backend::Ndarray
        }
    }
}

/// Seconds between two plain progress lines when the output is not a terminal.
const PLAIN_PROGRESS_EVERY_S: f64 = 10.0;

/// The progress bar (step, loss, PSNR, Gaussians, steps/s and ETA), or a plain line every
/// [`PLAIN_PROGRESS_EVERY_S`] seconds when the output is not a terminal; and the Ctrl-C flag.
struct Progress {
    bar: ProgressBar,
    last_psnr: Option<f32>,
    last_eval: Option<f32>,
    smoothed_loss: Option<f32>,
    /// When the last plain progress line was printed, and at which step.
    last_plain: (Instant, usize),
    /// Set by the first SIGINT (a second one exits at once with status 130).
    interrupted: Arc<AtomicBool>,
}

impl Progress {
    fn new(total: usize, interrupted: Arc<AtomicBool>) -> Progress {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} {rate} ETA {eta} {msg}",
            )
            .map(|style| {
                style.with_key(
                    "rate",
                    |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.1} steps/s", state.per_sec());
                    },
                )
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Progress {
            bar,
            last_psnr: None,
            last_eval: None,
            smoothed_loss: None,
            last_plain: (Instant::now(), 0),
            interrupted,
        }
    }
}

impl Progress {
    /// A line on standard output, above the bar when there is one.
    fn line(&self, text: &str) {
        self.bar.suspend(|| println!("{text}"));
    }
}

impl<B: ember_train::SplatAutodiffBackend> RunObserver<B> for Progress {
    fn on_step(&mut self, report: &StepReport, total: usize) {
        // Exponential moving average, as the loss of one view is noisy.
        if let Some(loss) = report.loss {
            self.smoothed_loss = Some(match self.smoothed_loss {
                Some(s) => 0.9 * s + 0.1 * loss,
                None => loss,
            });
        }
        if report.psnr.is_some() {
            self.last_psnr = report.psnr;
        }
        self.bar.set_position(report.step as u64);
        let fmt = |v: Option<f32>| v.map(|p| format!("{p:.2}")).unwrap_or("-".into());
        let status = format!(
            "loss {} psnr {} eval {} | {} Gaussians",
            self.smoothed_loss
                .map(|l| format!("{l:.4}"))
                .unwrap_or("-".into()),
            fmt(self.last_psnr),
            fmt(self.last_eval),
            report.gaussians
        );
        let (since, from_step) = self.last_plain;
        let seconds = since.elapsed().as_secs_f64();
        if self.bar.is_hidden() && seconds >= PLAIN_PROGRESS_EVERY_S {
            println!(
                "step {}/{total} ({:.1} steps/s) {status}",
                report.step,
                (report.step - from_step) as f64 / seconds
            );
            self.last_plain = (Instant::now(), report.step);
        }
        self.bar.set_message(status);
    }

    fn on_eval(&mut self, report: &EvalReport) {
        self.last_eval = Some(report.psnr);
        self.line(&format!(
            "eval @ {:>6}: PSNR {:.2} dB, SSIM {:.4}{}, colour-corrected {:.2} dB, {} Gaussians \
             ({} views, {:.1} s)",
            report.step,
            report.psnr,
            report.ssim,
            lpips_text(report.lpips),
            report.cc_psnr,
            report.gaussians,
            report.views.len(),
            report.seconds
        ));
    }

    fn on_message(&mut self, message: &str) {
        self.line(message);
    }

    fn stop_requested(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }
}

/// The config `args` name, with their overrides applied, validated.
fn load_config(args: &ConfigArgs) -> Result<TrainConfig> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_file(path)
            .with_context(|| format!("reading the config {}", path.display()))?,
        None => {
            let preset = args.preset();
            TrainConfig::from_toml_str(preset.toml, &format!("{} (built in)", preset.file))?
        }
    };
    config = config.with_overrides(&args.set)?;
    if let Some(data) = &args.data {
        config.data.path = Some(data.clone());
    }
    if let Some(steps) = args.steps {
        config.steps = steps;
    }
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if let Some(devices) = &args.devices {
        config.distributed.devices = devices.clone();
    }
    if let Some(rank) = args.node_rank {
        config.distributed.node_rank = rank;
    }
    if let Some(weights) = &args.lpips_weights {
        config.eval.lpips_weights = Some(weights.clone());
    }
    config.validate()?;
    Ok(config)
}

/// Trains on `devices` (one, or one per data-parallel peer).
fn train<B: ember_train::SplatAutodiffBackend>(
    args: &Args,
    config: &TrainConfig,
    devices: &[B::Device],
) -> Result<()>
where
    B::Device: Send + 'static,
{
    let device = &devices[0];
    if args.view.is_none() && args.listen.port.is_some() {
        bail!("--port is the live viewer's port: add --view");
    }
    // A run writes `config.toml`, checkpoints, exports and logs into `--out`: none of them may
    // land on the config, the dataset or the checkpoint it reads.
    let mut inputs: Vec<&std::path::Path> = Vec::new();
    inputs.extend(args.run.config.as_deref());
    inputs.extend(config.data.path.as_deref());
    not_an_input("--out", &args.out, &inputs)?;
    not_an_input("--out", &args.out.join("config.toml"), &inputs)?;
    if let Some(data) = config.data.path.as_deref().filter(|p| !p.exists()) {
        let from = match &args.run.config {
            Some(file) if args.run.data.is_none() => {
                format!(
                    " (`data.path` of {}, relative to its folder)",
                    file.display()
                )
            }
            _ => String::new(),
        };
        bail!(
            "the scene {}{from} does not exist: give the scene folder with --data PATH",
            data.display()
        );
    }
    let started = Instant::now();
    let scene =
        TrainScene::load::<ember_train::trainer::Inner<B>>(&config.data, config.seed, device)
            .with_context(|| match &config.data.path {
                Some(p) => format!("loading the scene {}", p.display()),
                None => "building the procedural scene".to_string(),
            })?;
    println!(
        "scene {}: {} training views, {} held-out views, extent {:.3} ({:.1} s to load)",
        scene.name,
        scene.train.len(),
        scene.eval.len(),
        scene.extent,
        started.elapsed().as_secs_f64()
    );
    for note in &scene.notes {
        println!("{note}");
    }
    if config.init.mode != ember_train::config::InitMode::Points || scene.points.is_none() {
        // Parameters, their gradients and two Adam moments, in f32.
        let floats = 11 + 3 * (config.init.sh_degree + 1).pow(2);
        fits_in_memory(
            &format!(
                "initialising {} random Gaussians at SH degree {}",
                config.init.random_count, config.init.sh_degree
            ),
            (config.init.random_count * floats * 4 * 4) as u128,
        )?;
    }
    // The first Ctrl-C ends the run after the step in progress, with a checkpoint; a second
    // one exits at once.
    let interrupted = interrupt_flag()?;
    let distributed = &config.distributed;
    if distributed.is_multi_node() {
        println!(
            "node {} of {}: peers {}..{} of {} ({} view(s) per peer per step), orchestrator {}{}",
            distributed.node_rank,
            distributed.nodes,
            distributed.first_rank(),
            distributed.first_rank() + devices.len(),
            distributed.peers(),
            config.batch_size / distributed.peers(),
            distributed.orchestrator.as_deref().unwrap_or_default(),
            match distributed.node_rank {
                0 => String::new(),
                _ => "; node 0 writes the run".to_string(),
            }
        );
    }
    if distributed.node_rank > 0 {
        if args.view.is_some() {
            bail!("--view: the live viewer runs on node 0, which trains the run's outputs");
        }
        let summary = ember_train::parallel::follow_data_parallel::<B>(
            config,
            Arc::new(scene),
            args.resume.as_deref(),
            devices,
            interrupted,
        )?;
        println!(
            "done: node {} trained {} steps, {} Gaussians; parameters hash {:016x}",
            distributed.node_rank, summary.steps, summary.gaussians, summary.parameter_hash
        );
        return Ok(());
    }
    let progress = Progress::new(config.steps, interrupted.clone());
    let scene = Arc::new(scene);
    let data_parallel = devices.len() > 1 || distributed.is_multi_node();
    if devices.len() > 1 && !distributed.is_multi_node() {
        progress.line(&format!(
            "data-parallel on {} peers, {} views each per step",
            devices.len(),
            config.batch_size / devices.len()
        ));
    }
    let run_with = |observer: &mut dyn RunObserver<B>| {
        if data_parallel {
            run_data_parallel::<B>(
                config,
                scene.clone(),
                &args.out,
                args.resume.as_deref(),
                devices,
                observer,
            )
        } else {
            run::<B>(
                config,
                scene.clone(),
                &args.out,
                args.resume.as_deref(),
                device,
                observer,
            )
        }
    };
    let (summary, progress) = match args.view {
        Some(view_port) => {
            let port = args.listen.port(view_port)?;
            let viewer = start_live(&args.listen, port, &scene, config)?;
            progress.line(&format!("viewer: open {}", viewer.url()));
            let budget = live_budget(args.backend == Backend::Ndarray);
            let mut live = LiveObserver::new(progress, viewer, budget, interrupted);
            let summary = run_with(&mut live);
            let how = match &summary {
                Ok(summary) => format!("the run ended at step {}", summary.steps),
                Err(error) => format!("the run stopped: {error}"),
            };
            live.end(&how, &args.out);
            let summary = summary?;
            live.inner.line(&format!(
                "viewer: rendering took {:.1}% of the training time",
                100.0 * live.render_share()
            ));
            (summary, live.inner)
        }
        None => {
            let mut progress = progress;
            (run_with(&mut progress)?, progress)
        }
    };
    progress.bar.finish();
    let held_out = match &summary.final_eval {
        Some(eval) => format!(
            "held-out PSNR {:.2} dB, SSIM {:.4}{}, colour-corrected PSNR {:.2} dB over {} {}views",
            eval.psnr,
            eval.ssim,
            lpips_text(eval.lpips),
            eval.cc_psnr,
            eval.views.len(),
            if eval.masked { "masked " } else { "" }
        ),
        None => "no held-out views to evaluate".to_string(),
    };
    println!(
        "\ndone: {} steps in {:.1} s, {} Gaussians; {held_out}",
        summary.steps, summary.seconds, summary.gaussians
    );
    if let Some(m) = summary.camera_motion {
        println!(
            "training cameras moved {:.3} degrees and {:.4} scene units on average (at most \
             {:.3} and {:.4}); refined poses in {}",
            m.mean_degrees,
            m.mean_shift,
            m.max_degrees,
            m.max_shift,
            args.out.join("cameras.json").display()
        );
    }
    println!("\ntime per phase\n{}", summary.times.table());
    println!("evaluation render cache: {}", summary.eval_cache);
    if let Some(hash) = summary.parameter_hash {
        println!("parameters hash {hash:016x} (every peer's replica)");
    }
    if let Some(peak) = summary.peak_memory {
        println!(
            "peak device memory: {:.2} GB reserved by the allocator, {:.2} GB in live tensors",
            peak.reserved as f64 / 1e9,
            peak.in_use as f64 / 1e9
        );
    }
    println!("outputs in {}", args.out.display());
    Ok(())
}

/// An error as the user reads it: the outermost message, then each cause that says something
/// the message before it did not (I/O errors often repeat their cause in their own text).
fn error_report(error: &anyhow::Error) -> String {
    let mut report = String::from("error: ");
    let mut previous = String::new();
    for (i, cause) in error.chain().enumerate() {
        let text = cause.to_string();
        if i > 0 {
            if previous.contains(&text) {
                continue;
            }
            report.push_str("\n  caused by: ");
        }
        report.push_str(&text);
        previous = text;
    }
    report
}

fn main() -> std::process::ExitCode {
    match run_command() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            let interrupted = error.chain().find_map(|cause| {
                match cause.downcast_ref::<ember_train::TrainError>() {
                    Some(stop @ ember_train::TrainError::Interrupted { .. }) => Some(stop),
                    _ => None,
                }
            });
            if let Some(stop) = interrupted {
                println!("{stop}");
                // The shell's status for a process ended by SIGINT.
                return std::process::ExitCode::from(130);
            }
            eprintln!("{}", error_report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_command() -> Result<()> {
    // Every step frees and reallocates tens of megabytes of host buffers: keep them in the
    // heap instead of faulting them in again (see `ember_kernels::host_allocator`).
    ember_kernels::host_allocator::keep_freed_memory();
    let mut args = Args::parse();
    args.run.backend = args.backend;
    match &mut args.command {
        Some(Command::Bench(BenchCommand::Train(bench))) => bench.run.backend = args.backend,
        Some(Command::Bench(BenchCommand::View(bench))) => bench.run.backend = args.backend,
        Some(Command::Benchmark(suite)) => suite.backend = args.backend,
        Some(Command::Bench(BenchCommand::Allreduce(bench))) => bench.backend = args.backend,
        _ => {}
    }
    if let Some(command) = &args.command {
        use splat_tools::{SplatCommand, render_png};
        return match command {
            Command::Splat(SplatCommand::Render(render)) => {
                on_backend!(args.backend, render_png, render)
            }
            Command::Splat(other) => splat_tools::run(other),
            Command::View(scene) => {
                use view::view;
                on_backend!(args.backend, view, scene)
            }
            Command::Bench(BenchCommand::Render(bench)) => {
                use bench::bench_render;
                on_backend!(args.backend, bench_render, bench)
            }
            Command::Bench(BenchCommand::Train(bench)) => {
                use bench_train::bench_train;
                on_backend!(args.backend, bench_train, bench)
            }
            Command::Bench(BenchCommand::View(bench)) => {
                use bench_view::bench_view;
                on_backend!(args.backend, bench_view, bench)
            }
            Command::Bench(BenchCommand::Allreduce(bench)) => {
                use bench_allreduce::bench_allreduce;
                on_backend!(args.backend, bench_allreduce, bench)
            }
            Command::Bench(BenchCommand::Lod(bench)) => {
                use bench_lod::bench_lod;
                on_backend!(args.backend, bench_lod, bench)
            }
            Command::Lod(command) => lod::run(command),
            Command::Bench(BenchCommand::Data(bench)) => {
                use bench_data::bench_data;
                on_backend!(args.backend, bench_data, bench)
            }
            Command::Metrics(pair) => {
                use metrics::metrics;
                on_backend!(args.backend, metrics, pair)
            }
            Command::Eval(measured) => {
                use eval::eval;
                on_backend!(args.backend, eval, measured)
            }
            Command::Benchmark(suite) => {
                use benchmark::benchmark;
                on_backend!(args.backend, benchmark, suite)
            }
            Command::Compare { a, b } => bench::compare(a, b),
            Command::Orchestrator { port } => {
                ember_train::parallel::check_port_free(*port, "the orchestrator")?;
                println!(
                    "orchestrator: listening on port {port} (every interface); Ctrl-C stops it"
                );
                ember_train::parallel::serve_orchestrator(*port)
                    .context("serving the orchestrator")?;
                println!("orchestrator: stopped");
                Ok(())
            }
        };
    }
    let config = load_config(&args.run)?;
    let origin = args.run.origin();
    if args.print_config {
        print!("# {origin}\n{}", config.to_annotated_toml());
        return Ok(());
    }
    println!("config: {origin}");
    println!(
        "backend {}, {} steps, seed {}, output {}",
        args.backend.name(),
        config.steps,
        config.seed,
        args.out.display()
    );
    let peers = config.distributed.local_peers();
    match args.backend {
        #[cfg(feature = "ndarray")]
        Backend::Ndarray => {
            type B = burn::backend::Autodiff<burn::backend::NdArray<f32>>;
            train::<B>(&args, &config, &vec![Default::default(); peers])
        }
        #[cfg(feature = "wgpu")]
        Backend::Wgpu => {
            if peers > 1 {
                bail!(
                    "--devices: data-parallel training on wgpu is not supported: burn-collective \
                     0.21 cannot move tensors between wgpu devices, and peers sharing one fused \
                     wgpu device mix up its streams (use --backend cuda or ndarray)"
                );
            }
            type B = burn::backend::Autodiff<burn::backend::Wgpu<f32, i32, u32>>;
            train::<B>(&args, &config, &[Default::default()])
        }
        #[cfg(feature = "cuda")]
        Backend::Cuda => {
            cuda_driver_check()?;
            type B = burn::backend::Autodiff<burn::backend::Cuda<f32, i32>>;
            let devices: Vec<_> = if config.distributed.devices.is_empty() {
                vec![Default::default()]
            } else {
                config
                    .distributed
                    .devices
                    .iter()
                    .map(|&index| burn::backend::cuda::CudaDevice { index })
                    .collect()
            };
            train::<B>(&args, &config, &devices)
        }
        #[allow(unreachable_patterns)]
        other => bail!(
            "the {} backend is not compiled in: rebuild with `--features {}`",
            other.name(),
            other.name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    /// `--port` means the same for `trainer view` and for training with `--view`.
    #[test]
    fn the_viewer_port_is_one_flag_for_both_commands() {
        let training = Args::try_parse_from(["trainer", "--view", "--port", "0"]).unwrap();
        assert_eq!(training.view, Some(None));
        assert_eq!(training.listen.port(None).unwrap(), 0);
        let given = Args::try_parse_from(["trainer", "--view", "9000"]).unwrap();
        assert_eq!(given.listen.port(given.view.flatten()).unwrap(), 9000);
        let default = Args::try_parse_from(["trainer", "--view"]).unwrap();
        let port = default.listen.port(default.view.flatten()).unwrap();
        assert_eq!(port, ember_viewer::DEFAULT_PORT);
        let both = Args::try_parse_from(["trainer", "--view", "1", "--port", "2"]).unwrap();
        let error = both
            .listen
            .port(both.view.flatten())
            .unwrap_err()
            .to_string();
        assert!(error.contains("two ports"), "{error}");
        assert!(Args::try_parse_from(["trainer", "view", "scene.ply", "--port", "0"]).is_ok());
    }
}
