//! Training, `trainer` without a subcommand: the config, the scene, the run on one device or
//! data-parallel on several (or as a follower node of a multi-node run), optionally with the
//! live viewer, and the summary printed at the end.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::backend::Autodiff;
use ember_train::{RunObserver, TrainConfig, TrainScene, run, run_data_parallel};

use crate::backend::{Backend, PeerDevices, on_backend};
use crate::cli::Args;
use crate::guard::{fits_in_memory, not_an_input};
use crate::presets::load_config;
use crate::progress::{Progress, interrupt_flag, lpips_text};
use crate::view::{LiveObserver, live_budget, show_result, start_live};

/// `trainer [--config ...] [--data ...]`: trains, or prints the effective config.
pub fn train_command(args: &Args) -> Result<()> {
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
    on_backend!(args.backend, B => {
        let devices = B::peer_devices(&config.distributed)?;
        train::<Autodiff<B>>(args, &config, &devices)
    })
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
    let mut inputs: Vec<&Path> = Vec::new();
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
    let (summary, progress, viewer) = match args.view {
        Some(view_port) => {
            let port = args.listen.port(view_port)?;
            let viewer = start_live(&args.listen, port, &scene, config)?;
            progress.line(&format!("viewer: open {}", viewer.url()));
            let budget = live_budget(args.backend == Backend::Ndarray);
            let mut live = LiveObserver::new(progress, viewer, budget, interrupted.clone());
            let summary = run_with(&mut live);
            if let Err(error) = &summary {
                live.end(&format!("the run stopped: {error}"), &args.out);
            }
            let summary = summary?;
            live.inner.line(&format!(
                "viewer: rendering took {:.1}% of the training time",
                100.0 * live.render_share()
            ));
            let (progress, viewer) = live.into_parts();
            (summary, progress, Some(viewer))
        }
        None => {
            let mut progress = progress;
            (run_with(&mut progress)?, progress, None)
        }
    };
    progress.bar.finish();
    let held_out = match &summary.final_eval {
        Some(eval) => format!(
            "held-out PSNR {:.2} dB, SSIM {:.4}{}, colour-corrected PSNR {:.2} dB{} over {} \
             {}views",
            eval.psnr,
            eval.ssim,
            lpips_text(eval.lpips),
            eval.cc_psnr,
            eval.aligned
                .map(|a| format!(", aligned PSNR {:.2} dB", a.psnr))
                .unwrap_or_default(),
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
             {:.3} and {:.4}; all together {:.3} degrees and {:.4}); refined poses in {}",
            m.mean_degrees,
            m.mean_shift,
            m.max_degrees,
            m.max_shift,
            m.common_degrees,
            m.common_shift,
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
    match viewer {
        Some(viewer) => {
            show_result::<B::InnerBackend>(&viewer, &args.out, summary.steps, device, &interrupted)
        }
        None => Ok(()),
    }
}
