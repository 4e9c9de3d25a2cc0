//! `trainer eval RUN_OR_SPLAT`: PSNR, SSIM and LPIPS of a trained field on a dataset split, per
//! view and mean, on the `--backend` given before the subcommand. A run folder is measured on
//! its own dataset at the resolution it trained at (its `config.toml`'s `[data]`); a splat
//! file or a checkpoint on `--data`; `--downsample`, `--max-side` and `--background` change
//! what the run used. Nothing is written into the inputs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use ember_kernels::SplatBackend;
use ember_train::config::{DataConfig, EvalConfig, EvalSplit, LpipsWhen};
use ember_train::eval::{EvalRequest, Evaluator};
use ember_train::{TrainScene, write_atomically};
use serde_json::json;

use crate::guard::{not_an_input, not_inside};
use crate::inputs::{load_field, parse_triple};
use crate::progress::lpips_text;

/// `--split`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Split {
    /// The held-out views: a NeRF-Synthetic scene's `transforms_test.json` (its val split
    /// when it has none), every `test_every`-th photo of a capture (8 by default).
    Test,
    /// `transforms_val.json` of a NeRF-Synthetic scene.
    Val,
    /// The training views.
    Train,
}

impl From<Split> for EvalSplit {
    fn from(split: Split) -> EvalSplit {
        match split {
            Split::Test => EvalSplit::Test,
            Split::Val => EvalSplit::Val,
            Split::Train => EvalSplit::Train,
        }
    }
}

/// `trainer eval RUN_OR_SPLAT [--data SCENE] [--split test|val|train] [--json FILE]
/// [--save-images DIR]`.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A run folder (its checkpoint.safetensors, else its splats.ply, on the run's dataset at
    /// the run's resolution), a checkpoint (.safetensors, beside its run's config.toml), or a
    /// splat file (.ply, .compressed.ply, .splat, .spz; give --data).
    scene: PathBuf,
    /// The dataset to measure on (COLMAP, NeRF-Synthetic or nerfstudio folder); default: the
    /// run's.
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,
    /// Which views (default: the run's `data.eval_split`, else test).
    #[arg(long, value_enum)]
    split: Option<Split>,
    /// Shrink the photos by this integer factor (default: the run's `data.downsample`, else 1;
    /// a COLMAP scene's `images_N/` folder is used when there is one).
    #[arg(long, value_name = "N")]
    downsample: Option<u32>,
    /// Raise the downsample factor until no side exceeds this many pixels (default: the run's
    /// `data.max_side`, else no limit).
    #[arg(long, value_name = "PX")]
    max_side: Option<u32>,
    /// The background, RGB in [0, 1]: transparent pixels of the photos are composited on it
    /// and the renders drawn over it (default: the run's, else white as NeRF-Synthetic's
    /// protocol has it).
    #[arg(long, value_name = "R,G,B", value_parser = parse_triple)]
    background: Option<[f64; 3]>,
    /// At most this many views, evenly spaced (default: all).
    #[arg(long, value_name = "N")]
    max_views: Option<usize>,
    /// Draw with the 2D antialiasing filter (default: the run's `raster.antialiased`, else
    /// off): a field trained with it is measured with it.
    #[arg(long)]
    antialiased: bool,
    /// The LPIPS weights (safetensors, see scripts/lpips-weights.py); default: the file
    /// EMBER_LPIPS_WEIGHTS names, else the weights Ember ships. A file that does not load
    /// leaves LPIPS out, with a notice.
    #[arg(long, value_name = "FILE")]
    lpips_weights: Option<PathBuf>,
    /// Also measure each view after fitting its camera's pose and its photo's exposure to the
    /// photo in this many steps, the field frozen (test-time alignment, as methods that refine
    /// poses measure held-out views: ember_train::align); default: the run's
    /// `eval.align_steps`, else none.
    #[arg(long, value_name = "STEPS")]
    align_steps: Option<usize>,
    /// Also write the results (per view and mean) to this JSON file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write every view's render to DIR/renders/<view>.png and the render beside its ground
    /// truth to DIR/pairs/<view>.png.
    #[arg(long, value_name = "DIR")]
    save_images: Option<PathBuf>,
}

impl EvalArgs {
    /// The data config to measure with, the run's (when there is one) with the flags applied,
    /// and the dataset it names.
    fn data_config(&self, run: Option<DataConfig>) -> Result<(DataConfig, PathBuf)> {
        let mut config = match (run, &self.data) {
            (Some(run), Some(path)) => DataConfig {
                path: Some(path.clone()),
                ..run
            },
            (Some(run), None) => match &run.path {
                Some(path) if path.exists() => run,
                Some(path) => bail!(
                    "the run's dataset {} is not there: give the dataset with --data PATH",
                    path.display()
                ),
                None => bail!(
                    "{} was trained on the built-in procedural scene: give a dataset with --data \
                     PATH",
                    self.scene.display()
                ),
            },
            (None, Some(path)) => DataConfig {
                path: Some(path.clone()),
                ..DataConfig::default()
            },
            (None, None) => bail!(
                "{} is not a run folder: give the dataset to measure it on with --data PATH",
                self.scene.display()
            ),
        };
        if let Some(split) = self.split {
            config.eval_split = split.into();
        }
        if let Some(n) = self.downsample {
            if n == 0 {
                bail!("--downsample must be at least 1");
            }
            config.downsample = n;
        }
        if let Some(px) = self.max_side {
            if px == 0 {
                bail!("--max-side must be at least 1 pixel");
            }
            config.max_side = Some(px);
        }
        if let Some(background) = self.background {
            config.background = background.map(|c| c as f32);
        }
        match config.path.clone() {
            Some(path) => Ok((config, path)),
            None => bail!("no dataset to measure on: give one with --data PATH"),
        }
    }
}

/// `trainer eval`: prints every view's metrics and their means; writes `--json` and
/// `--save-images` when given.
pub fn eval<B: SplatBackend>(args: &EvalArgs, device: &B::Device) -> Result<()> {
    let started = Instant::now();
    let (field, run) = load_field::<B>(&args.scene, device)?;
    let antialiased = args.antialiased || run.as_ref().is_some_and(|c| c.raster.antialiased);
    let align_steps = args
        .align_steps
        .or(run.as_ref().map(|c| c.eval.align_steps))
        .unwrap_or(0);
    let (data, dataset) = args.data_config(run.map(|c| c.data))?;
    // The run folder (or the checkpoint's) and the dataset are inputs: nothing goes into them.
    let run_folder = if args.scene.is_dir() {
        Some(args.scene.as_path())
    } else {
        None
    };
    let folders: Vec<&Path> = run_folder.into_iter().chain([dataset.as_path()]).collect();
    if let Some(out) = &args.json {
        not_an_input("--json", out, &[args.scene.as_path()])?;
        not_inside("--json", out, &folders)?;
    }
    if let Some(dir) = &args.save_images {
        not_an_input("--save-images", dir, &[args.scene.as_path()])?;
        not_inside("--save-images", dir, &folders)?;
    }
    let scene = TrainScene::from_dataset(&dataset, &data)
        .with_context(|| format!("loading the dataset {}", dataset.display()))?;
    for note in &scene.notes {
        println!("{note}");
    }
    let split = data.eval_split.name();
    if scene.eval.is_empty() {
        bail!("{} has no {split} views to measure", dataset.display());
    }
    let first = &scene.eval[0].camera;
    println!(
        "{}: {} Gaussians, SH degree {}; {} {split} views of {} (the first {}x{}), loaded in {:.1} s",
        args.scene.display(),
        field.num_gaussians(),
        field.sh_degree(),
        scene.eval.len(),
        dataset.display(),
        first.width,
        first.height,
        started.elapsed().as_secs_f64()
    );
    let config = EvalConfig {
        every: 0,
        max_views: args.max_views,
        save_images: 0,
        cache_mib: 0,
        lpips_weights: args.lpips_weights.clone(),
        lpips: LpipsWhen::Every,
        align_steps,
    };
    let mut evaluator = Evaluator::<B>::new(&config);
    let pairs = if args.save_images.is_some() {
        usize::MAX
    } else {
        0
    };
    if let Some(dir) = &args.save_images {
        for sub in ["renders", "pairs"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
    }
    let mut save = |pair: ember_train::eval::SideBySide| -> Result<(), ember_train::TrainError> {
        if let Some(dir) = &args.save_images {
            let file = format!("{}.png", pair.file_stem());
            pair.save_render_png(&dir.join("renders").join(&file))?;
            pair.save_png(&dir.join("pairs").join(&file))?;
        }
        Ok(())
    };
    let request = EvalRequest {
        generation: 0,
        step: 0,
        sh_degree: field.sh_degree(),
        antialiased,
        lpips: true,
    };
    let report = evaluator.evaluate_with(&scene, &field, request, pairs, &mut save)?;
    if let Some(note) = &report.lpips_off {
        eprintln!("note: {note}");
    }
    for view in &report.views {
        println!(
            "  {}: PSNR {:.2} dB, SSIM {:.4}{}{}{}",
            view.name,
            view.psnr,
            view.ssim,
            lpips_text(view.lpips),
            view.cc_psnr
                .map(|p| format!(", colour-corrected {p:.2} dB"))
                .unwrap_or_default(),
            aligned_text(view.aligned)
        );
    }
    println!(
        "mean over {} {split}{} views: PSNR {:.2} dB, SSIM {:.4}{}, colour-corrected PSNR {:.2} dB, \
         SSIM {:.4} ({:.1} s)",
        report.views.len(),
        if report.masked { " masked" } else { "" },
        report.psnr,
        report.ssim,
        lpips_text(report.lpips),
        report.cc_psnr,
        report.cc_ssim,
        report.seconds
    );
    if let Some(aligned) = report.aligned {
        println!(
            "aligned ({align_steps} steps a view): PSNR {:.2} dB, SSIM {:.4}; the cameras moved \
             {:.3}° and {:.4} scene units on average",
            aligned.psnr, aligned.ssim, aligned.degrees, aligned.shift
        );
    }
    if let Some(out) = &args.json {
        let value = json!({
            "scene": args.scene,
            "data": dataset,
            "split": split,
            "downsample": data.downsample,
            "max_side": data.max_side,
            "background": data.background,
            "gaussians": report.gaussians,
            "psnr": report.psnr,
            "ssim": report.ssim,
            "lpips": report.lpips,
            "cc_psnr": report.cc_psnr,
            "cc_ssim": report.cc_ssim,
            "masked": report.masked,
            "aligned": report.aligned,
            "seconds": report.seconds,
            "views": report.views,
        });
        let text = serde_json::to_string_pretty(&value)? + "\n";
        write_atomically(out, text.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if let Some(dir) = &args.save_images {
        println!("renders and pairs in {}", dir.display());
    }
    Ok(())
}

/// A view's aligned metrics for its line, or nothing.
fn aligned_text(aligned: Option<ember_train::align::AlignedMetrics>) -> String {
    aligned
        .map(|a| {
            format!(
                ", aligned {:.2} dB (moved {:.3}°, {:.4})",
                a.psnr, a.degrees, a.shift
            )
        })
        .unwrap_or_default()
}
