//! `trainer bench train`: training steps per second of a config, and the time of each phase of
//! a step, as a `BenchFile` (`trainer compare` reads it).
//!
//! The steps run through [`Trainer::step`] alone: no evaluation, checkpoint, metric file or
//! export. Each step's phases come from the trainer's own [`PhaseTimes`] (the totals after the
//! step `since` those before it), so the numbers are the ones a training run's phase table adds
//! up. On the GPU backends a phase is the time to queue its work except where a read-back
//! synchronises (see `ember_train::timing`); the step time is exact (the loss is read back).
//! `--sync-phases` waits for the device at the end of every phase instead
//! ([`Trainer::set_phase_sync`]): each phase then holds its own device time, and the step loses
//! the overlap of host and device work.
//!
//! On wgpu and cuda the bench also counts the kernel launches per timed step and the host's
//! blocking reads of device memory ([`ember_kernels::activity`]) per step that reads nothing
//! back, and per step that reads the loss (`output.loss_every`), in the table's footer and
//! the file's `device_activity` (`null` on ndarray, with the reason). The set `host (no
//! read-back)` is the wall time of the steps that read nothing back: such a step returns once
//! its work is queued, so on a GPU it is the host's time to record and launch a step. On
//! lavapipe the device runs on the host's cores and CubeCL's queue of work fills, so that wall
//! time is the device's. After the timed steps, `--host-probes` more steps (default 5) each
//! start on an idle device and are timed alone: `host (idle device)`, the host's own time to
//! record and launch a step, measurable without a GPU.
//!
//! With `--eval`, the held-out views are then evaluated twice at the same step: the first
//! evaluation renders (`eval`), the second finds every render in the trainer's cache
//! (`eval cached`); one sample each, ms per evaluation.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::backend::Autodiff;
use clap::Args;
use ember_bench::{BenchFile, BenchResult, peak_host_mib};
use ember_kernels::SplatBackend;
use ember_train::{Phase, PhaseTimes, TrainScene, Trainer};

use super::write_bench_file;
use crate::presets::{ConfigArgs, load_config};

/// Timed steps when `--steps` is not given.
const DEFAULT_STEPS: usize = 100;

/// `trainer bench train [--config FILE.toml] [--data PATH] [--steps N] [--set k=v]...`.
#[derive(Args, Debug)]
pub struct TrainBenchArgs {
    /// The run to time; `--steps` is the number of timed steps (default 100).
    #[command(flatten)]
    pub(crate) run: ConfigArgs,
    /// Untimed steps before the timed ones (allocations, first-use costs).
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Steps after the timed ones, each started on an idle device (after a wait for it) and
    /// timed alone: the host's time to record and launch a step (`host (idle device)`).
    #[arg(long, default_value_t = 5)]
    host_probes: usize,
    /// After the timed steps, evaluate twice (rendering, then from the render cache).
    #[arg(long)]
    eval: bool,
    /// Start from a checkpoint of a run of the same config (its Gaussians and step), to time
    /// steps of a trained scene instead of its first steps.
    #[arg(long, value_name = "CHECKPOINT")]
    resume: Option<std::path::PathBuf>,
    /// Wait for the device at the end of every phase, so that on a GPU each phase's time holds
    /// its own device work (steps get slower: host and device no longer overlap).
    #[arg(long)]
    sync_phases: bool,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-train.json"
    )]
    json: std::path::PathBuf,
}

/// `trainer bench train` on backend `Bk` (autodiff on top of it).
pub fn bench_train<Bk: SplatBackend>(args: &TrainBenchArgs, device: &Bk::Device) -> Result<()> {
    let timed = args.run.steps.unwrap_or(DEFAULT_STEPS);
    if timed == 0 {
        bail!("--steps must be at least 1");
    }
    let mut config = load_config(&args.run)?;
    let mut inputs: Vec<&std::path::Path> = Vec::new();
    inputs.extend(args.run.config.as_deref());
    inputs.extend(config.data.path.as_deref());
    inputs.extend(args.resume.as_deref());
    crate::guard::not_an_input("--json", &args.json, &inputs)?;
    // The schedules (learning-rate decay, SH bands, densification) see a run of this length,
    // after the steps a checkpoint already holds.
    let resumed_at = match &args.resume {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            ember_train::checkpoint::CheckpointFile::parse(&bytes, path)?.step
        }
        None => 0,
    };
    config.steps = resumed_at + args.warmup + timed + args.host_probes;
    config.validate()?;
    let loading = Instant::now();
    let scene =
        TrainScene::load::<Bk>(&config.data, config.seed, device).with_context(|| match &config
            .data
            .path
        {
            Some(p) => format!("loading the scene {}", p.display()),
            None => "building the procedural scene".to_string(),
        })?;
    println!(
        "scene {}: {} training views ({:.1} s to load); {} warm-up + {timed} timed steps",
        scene.name,
        scene.train.len(),
        loading.elapsed().as_secs_f64(),
        args.warmup
    );
    let scene_name = scene.name.clone();
    let scene = Arc::new(scene);
    let mut trainer = Trainer::<Autodiff<Bk>>::new(config, scene.clone(), device)?;
    if let Some(path) = &args.resume {
        trainer.load_checkpoint(path)?;
        println!(
            "resumed {} at step {} with {} Gaussians",
            path.display(),
            trainer.step_count(),
            trainer.num_gaussians()
        );
    }
    trainer.set_phase_sync(args.sync_phases);
    let gaussians_start = trainer.num_gaussians();
    let counter = match Bk::memory_usage(device) {
        Some(_) => ember_kernels::count_device_activity().map_err(|e| e.to_string()),
        None => Err(format!(
            "{} runs its ops on the host: no kernel launches, no device memory",
            Bk::name(device)
        )),
    };
    for _ in 0..args.warmup {
        trainer.step()?;
    }
    Bk::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;

    let mut step_ms = Vec::with_capacity(timed);
    let mut host_ms = Vec::with_capacity(timed);
    let mut losses = Vec::with_capacity(timed);
    let mut phase_ms: [Vec<f64>; Phase::STEP.len()] =
        std::array::from_fn(|_| Vec::with_capacity(timed));
    // Reads on the steps that read nothing back, and on those that read the loss: (steps, reads).
    let (mut quiet, mut loud) = ((0usize, 0u64), (0usize, 0u64));
    let timed_start = *trainer.times();
    let activity_start = counter.as_ref().map(|c| c.now()).unwrap_or_default();
    let started = Instant::now();
    for _ in 0..timed {
        let before = *trainer.times();
        let reads_before = counter.as_ref().map_or(0, |c| c.now().reads);
        let t = Instant::now();
        let report = trainer.step()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let reads = counter.as_ref().map_or(0, |c| c.now().reads) - reads_before;
        step_ms.push(ms);
        match (report.loss, report.psnr) {
            (None, None) => {
                host_ms.push(ms);
                quiet = (quiet.0 + 1, quiet.1 + reads);
            }
            (loss, _) => {
                losses.extend(loss.map(f64::from));
                loud = (loud.0 + 1, loud.1 + reads);
            }
        }
        let phases = trainer.times().since(&before);
        for (samples, phase) in phase_ms.iter_mut().zip(Phase::STEP) {
            samples.push(phases.get(phase) * 1e3);
        }
    }
    // Counted before the final wait, which reads nothing but is no part of a step.
    let per = |(steps, reads): (usize, u64)| (steps > 0).then(|| reads as f64 / steps as f64);
    let activity = match &counter {
        Ok(counter) => ember_bench::DeviceActivity {
            launches_per_step: Some(
                counter.now().since(&activity_start).launches as f64 / timed as f64,
            ),
            device_reads_per_step: per(quiet),
            reads_per_loss_step: per(loud),
            not_counted: None,
        },
        Err(reason) => ember_bench::DeviceActivity {
            launches_per_step: None,
            device_reads_per_step: None,
            reads_per_loss_step: None,
            not_counted: Some(reason.clone()),
        },
    };
    Bk::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let seconds = started.elapsed().as_secs_f64();
    let totals: PhaseTimes = trainer.times().since(&timed_start);

    let mut idle_ms = Vec::with_capacity(args.host_probes);
    for _ in 0..args.host_probes {
        Bk::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let t = Instant::now();
        let report = trainer.step()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match report.loss {
            Some(loss) => losses.push(f64::from(loss)),
            None if report.psnr.is_none() => idle_ms.push(ms),
            None => {}
        }
    }
    Bk::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;

    let pairs = tile_pairs::<Bk>(&trainer.drawn_field()?, &scene)?;
    let steps_per_s = timed as f64 / seconds;
    println!(
        "tile-Gaussian pairs over {} training views: {:.2} per pixel, {:.0} Gaussians per 16x16 \
         tile on average, {:.1}% of the Gaussians in view",
        pairs.views,
        pairs.per_pixel,
        pairs.per_tile,
        100.0 * pairs.visible
    );
    let mean_loss = losses.iter().sum::<f64>() / losses.len().max(1) as f64;
    let targets = trainer.target_stats();
    println!(
        "training photos: {} of {} views resident on the device ({:.1} MB), {} uploads of the \
         others",
        targets.resident_views,
        scene.train.len(),
        targets.resident_bytes as f64 / 1e6,
        targets.per_step_uploads
    );
    let mut step = BenchResult::from_samples("step", &step_ms)
        .context("no step timed")?
        .with_metric("steps_per_s", steps_per_s)
        .with_metric("pairs_per_pixel", pairs.per_pixel)
        .with_metric("gaussians_per_tile", pairs.per_tile)
        .with_metric("visible_fraction", pairs.visible)
        .with_metric("resident_views", targets.resident_views as f64)
        .with_metric("mean_loss", mean_loss);
    if let Some(peak) = trainer.peak_memory() {
        println!(
            "peak device memory (the allocator's, sampled twice a step): {:.0} MiB reserved, \
             {:.0} MiB in live tensors",
            mib(peak.reserved),
            mib(peak.in_use)
        );
        step = step
            .with_metric("peak_device_reserved_mib", mib(peak.reserved))
            .with_metric("peak_device_in_use_mib", mib(peak.in_use));
    }
    let mut results = vec![step];
    // The steps that read nothing back return once their work is queued: the host's time to
    // record and launch a step, which bounds the step when the device is faster. Where the
    // device runs on the host's own cores (lavapipe) its queue of work fills and the host
    // waits for room, so those steps take the device's time; a step started on an idle device
    // (the probes) shows the host's own.
    results.extend(BenchResult::from_samples("host (no read-back)", &host_ms));
    results.extend(BenchResult::from_samples("host (idle device)", &idle_ms));
    for (samples, phase) in phase_ms.iter().zip(Phase::STEP) {
        let share = totals.get(phase) / totals.total().max(f64::MIN_POSITIVE);
        results.push(
            BenchResult::from_samples(phase.name(), samples)
                .context("no step timed")?
                .with_metric("share", share),
        );
    }
    if args.eval {
        for name in ["eval", "eval cached"] {
            let before = trainer.eval_cache_stats();
            let t = Instant::now();
            let report = trainer.evaluate()?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let after = trainer.eval_cache_stats();
            let hits = after.hits - before.hits;
            let asked = hits + after.misses - before.misses;
            println!(
                "{name}: {} views in {ms:.1} ms, PSNR {:.2} dB, {hits} of {asked} renders from the cache",
                report.views.len(),
                report.psnr
            );
            results.push(
                BenchResult::from_samples(name, &[ms])
                    .context("no evaluation timed")?
                    .with_metric("views", report.views.len() as f64)
                    .with_metric("cache_hit_rate", hits as f64 / asked.max(1) as f64),
            );
        }
    }
    println!("| set | steps | median (ms) | min (ms) | max (ms) | share of the step |");
    println!("|---|---|---|---|---|---|");
    for r in &results {
        let share = match (r.name.as_str(), r.metrics.get("share")) {
            (_, Some(s)) => format!("{:.1}%", 100.0 * s),
            ("step", None) => "100%".to_string(),
            _ => "-".to_string(),
        };
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {share} |",
            r.name, r.frames, r.median_ms, r.min_ms, r.max_ms
        );
    }
    println!(
        "{steps_per_s:.2} steps/s over {timed} steps ({seconds:.2} s), mean loss {mean_loss:.5} \
         over the {} steps that read it; Gaussians {gaussians_start} -> {}",
        losses.len(),
        trainer.num_gaussians()
    );
    match (&activity.not_counted, activity.launches_per_step) {
        (None, Some(launches)) => println!(
            "per step: {launches:.1} kernel launches; device reads (the host's blocking waits): \
             {} per step between loss reads, {} per step that reads the loss",
            activity
                .device_reads_per_step
                .map_or("-".to_string(), |r| format!("{r:.2}")),
            activity
                .reads_per_loss_step
                .map_or("-".to_string(), |r| format!("{r:.2}")),
        ),
        (reason, _) => println!(
            "kernel launches and device reads not counted: {}",
            reason.as_deref().unwrap_or("unknown")
        ),
    }
    let file = BenchFile {
        tool: "trainer bench train".into(),
        backend: Bk::name(device),
        input: format!(
            "{} on {scene_name}{}{}",
            args.run.origin(),
            match &args.resume {
                Some(path) => format!(", resumed from {} (step {resumed_at})", path.display()),
                None => String::new(),
            },
            if args.sync_phases {
                ", phases synchronised"
            } else {
                ""
            }
        ),
        gaussians: trainer.num_gaussians(),
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: Some(activity),
    };
    write_bench_file(&file, &args.json)
}

/// Bytes to MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// How much compositing work a field makes: tile-Gaussian pairs through the training views.
struct TilePairs {
    /// Views projected.
    views: usize,
    /// Pairs per pixel (each pair is one Gaussian on one 16x16 tile's list).
    per_pixel: f64,
    /// Mean length of a tile's list: the Gaussians each pixel of it walks (at most).
    per_tile: f64,
    /// Share of the Gaussians that touch at least one tile, mean over the views.
    visible: f64,
}

/// [`TilePairs`] of `field` through up to 8 evenly spaced training views of `scene`.
fn tile_pairs<Bk: SplatBackend>(
    field: &ember_field::GaussianField<Bk>,
    scene: &TrainScene,
) -> Result<TilePairs> {
    let views = ember_data::evenly_spaced(scene.train.len(), Some(8));
    let (mut pairs, mut pixels, mut tiles, mut visible) = (0.0, 0.0, 0.0, 0.0);
    let n = field.num_gaussians().max(1) as f64;
    for &i in &views {
        let camera = scene.train[i].camera;
        let projected = ember_field::project(
            field,
            core::slice::from_ref(&camera),
            &ember_field::RenderOptions::default(),
        )?;
        let counts = projected.tiles().float();
        let touched = counts.clone().greater_elem(0.0).float().sum();
        pairs += f64::from(ember_field::to_host(counts.sum(), "tile counts")?[0]);
        visible += f64::from(ember_field::to_host(touched, "tile counts")?[0]) / n;
        let (w, h) = (f64::from(camera.width), f64::from(camera.height));
        pixels += w * h;
        tiles += (w / 16.0).ceil() * (h / 16.0).ceil();
    }
    let count = views.len().max(1) as f64;
    Ok(TilePairs {
        views: views.len(),
        per_pixel: pairs / pixels.max(1.0),
        per_tile: pairs / tiles.max(1.0),
        visible: visible / count,
    })
}
