//! `trainer benchmark SUITE.toml`: trains and evaluates a list of scenes, each with its config,
//! and writes the paper-style table of them (`results.md`) and its JSON (`results.json`).
//!
//! A suite file:
//!
//! ```toml
//! name = "cpu"
//! # Where the scenes are, relative to this file (EMBER_DATA_DIR and --data-dir override it).
//! data_dir = "../../../shared/data"
//!
//! [[scene]]
//! name = "lego_400"            # the row's name and its run folder under --out
//! data = "lego_400"            # relative to data_dir
//! config = "../lego-cpu.toml"  # relative to this file
//! set = []                     # overrides, as --set takes them
//! psnr_targets = [27.4, 28.8]  # held-out dB whose time to reach the table reports
//! ```
//!
//! Time to a target is the training time (`elapsed`, see `ember_train::run`) of the first
//! evaluation at or above it: an upper bound at the resolution of the config's `eval.every`,
//! which a suite may tighten with `set` (evaluations are not training time, and do not change
//! the run).
//!
//! Every config and scene folder is checked before the first run starts. Each scene trains in
//! `OUT/<name>/` (a run folder like any other); the tables are rewritten after each scene, so an
//! interrupted suite keeps the rows it finished. Training time leaves out the held-out
//! evaluations and the files the run writes (checkpoints, logs, the export); peak memory is the
//! process's resident peak during the scene (host), and the device allocator's peak on a GPU.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use burn::backend::Autodiff;
use clap::Args;
use ember_kernels::SplatBackend;
use ember_train::{
    EvalReport, SplatAutodiffBackend, TrainConfig, TrainScene, run, write_atomically,
};
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::guard::not_inside;
use crate::presets::{ConfigArgs, load_config};
use crate::progress::{Progress, interrupt_flag, lpips_text};

/// `trainer benchmark SUITE.toml`.
#[derive(Args, Debug)]
pub struct BenchmarkArgs {
    /// The suite (configs/suites/cpu.toml, configs/suites/gpu.toml).
    suite: PathBuf,
    /// Output folder: a run folder per scene, results.md and results.json.
    #[arg(long, value_name = "DIR", default_value = "runs/benchmark")]
    out: PathBuf,
    /// The folder the suite's scenes are in (default: EMBER_DATA_DIR, else the suite's
    /// `data_dir`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Only these scenes of the suite (by name, comma separated).
    #[arg(long, value_name = "NAME,..", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Train every scene this many steps instead of its config's (a quick check of a suite;
    /// the table says so).
    #[arg(long)]
    steps: Option<usize>,
    /// The LPIPS weights (safetensors, scripts/lpips-weights.py); default: the configs'
    /// `eval.lpips_weights`, else the file EMBER_LPIPS_WEIGHTS names, else the weights Ember
    /// ships.
    #[arg(long, value_name = "FILE")]
    lpips_weights: Option<PathBuf>,
    /// Check the suite (every config loads, every scene folder is there), list its runs and
    /// exit without training.
    #[arg(long)]
    check: bool,
    /// The machine as the table names it (default: the CPU's model and cores; name the GPU
    /// here for a GPU suite).
    #[arg(long, value_name = "TEXT")]
    machine: Option<String>,
    /// The backend the suite runs on (the global `--backend`).
    #[arg(skip = Backend::default_compiled())]
    pub(crate) backend: Backend,
}

/// A suite file (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    /// The suite's name, the table's title.
    name: String,
    /// Where the scenes are, relative to the suite file.
    #[serde(default)]
    data_dir: Option<PathBuf>,
    /// The scenes, in the table's order.
    #[serde(rename = "scene")]
    scenes: Vec<SuiteScene>,
}

/// One `[[scene]]` of a suite.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteScene {
    /// The row's name and its run folder's.
    name: String,
    /// The scene folder, relative to the data folder.
    data: PathBuf,
    /// The training config, relative to the suite file.
    config: PathBuf,
    /// `--set` overrides.
    #[serde(default)]
    set: Vec<String>,
    /// Held-out PSNRs (dB) whose time to reach the table reports, in ascending order.
    #[serde(default)]
    psnr_targets: Vec<f32>,
}

/// When a run first reached a held-out PSNR.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct TimeToPsnr {
    /// The target, dB.
    psnr: f32,
    /// The step of the first evaluation at or above it (`null`: never reached).
    step: Option<usize>,
    /// The run's training time at that evaluation, seconds.
    seconds: Option<f64>,
}

/// For each target, the first of `evals` (in step order) at or above it.
fn time_to_psnr(evals: &[EvalReport], targets: &[f32]) -> Vec<TimeToPsnr> {
    targets
        .iter()
        .map(|&psnr| {
            let reached = evals.iter().find(|e| e.psnr >= psnr);
            TimeToPsnr {
                psnr,
                step: reached.map(|e| e.step),
                seconds: reached.map(|e| e.elapsed),
            }
        })
        .collect()
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
struct SceneResult {
    scene: String,
    data: PathBuf,
    config: PathBuf,
    steps: usize,
    /// Mean over the held-out views, dB.
    psnr: f32,
    ssim: f32,
    /// `null` without LPIPS weights.
    lpips: Option<f32>,
    /// Colour-corrected PSNR (`ember_train::eval::colour_corrected`), dB.
    cc_psnr: f32,
    /// Held-out views measured.
    eval_views: usize,
    /// The run's training time (its steps, without its evaluations and output files), seconds.
    train_seconds: f64,
    /// The scene's `psnr_targets`, each with when the run reached it.
    time_to_psnr: Vec<TimeToPsnr>,
    /// Wall time of the run, seconds (scene loading excluded).
    wall_seconds: f64,
    gaussians: usize,
    /// The process's resident peak during the scene, MiB.
    peak_host_mib: Option<f64>,
    /// The device allocator's peak, MiB (GPU backends).
    peak_device_mib: Option<f64>,
    backend: String,
    machine: String,
}

/// What `results.json` holds.
#[derive(Debug, Serialize)]
struct SuiteResults<'a> {
    suite: &'a str,
    file: &'a Path,
    backend: &'a str,
    machine: &'a str,
    date: String,
    version: &'static str,
    /// `--steps` when it replaced the configs' steps.
    steps_override: Option<usize>,
    scenes: &'a [SceneResult],
    /// The means over the scenes (LPIPS only when every scene has it).
    mean: Option<Means>,
}

/// Means over the scenes.
#[derive(Debug, Serialize)]
struct Means {
    psnr: f32,
    ssim: f32,
    lpips: Option<f32>,
    cc_psnr: f32,
}

impl SuiteFile {
    /// Reads and checks a suite file.
    fn read(path: &Path) -> Result<SuiteFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the suite {}", path.display()))?;
        let suite: SuiteFile = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.to_string().trim_end()))?;
        if suite.scenes.is_empty() {
            bail!("{}: no [[scene]] to run", path.display());
        }
        for (i, scene) in suite.scenes.iter().enumerate() {
            let bad = scene.name.is_empty()
                || !scene
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                || scene.name.starts_with('.');
            if bad {
                bail!(
                    "{}: scene {} has the name {:?}: names are folder names (letters, digits, \
                     '-', '_', '.')",
                    path.display(),
                    i + 1,
                    scene.name
                );
            }
            if suite.scenes[..i].iter().any(|s| s.name == scene.name) {
                bail!("{}: two scenes are named {:?}", path.display(), scene.name);
            }
            let targets = &scene.psnr_targets;
            if targets.iter().any(|t| !(t.is_finite() && *t > 0.0))
                || targets.windows(2).any(|w| w[0] >= w[1])
            {
                bail!(
                    "{}: scene {:?} has psnr_targets {targets:?}: dB above 0, ascending",
                    path.display(),
                    scene.name
                );
            }
        }
        Ok(suite)
    }
}

/// Means over `rows` (LPIPS only when every row has it).
fn means(rows: &[SceneResult]) -> Option<Means> {
    if rows.is_empty() {
        return None;
    }
    let n = rows.len() as f32;
    Some(Means {
        psnr: rows.iter().map(|r| r.psnr).sum::<f32>() / n,
        ssim: rows.iter().map(|r| r.ssim).sum::<f32>() / n,
        lpips: rows
            .iter()
            .map(|r| r.lpips)
            .sum::<Option<f32>>()
            .map(|s| s / n),
        cc_psnr: rows.iter().map(|r| r.cc_psnr).sum::<f32>() / n,
    })
}

/// The table as markdown: a caption line (suite, backend, machine, date), the rows, the mean.
fn markdown(results: &SuiteResults<'_>) -> String {
    let lpips = |v: Option<f32>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    let mut out = format!(
        "## Suite `{}` ({})\n\nBackend {}, {}, {}, ember {}{}.\n\n",
        results.suite,
        results.file.display(),
        results.backend,
        results.machine,
        results.date,
        results.version,
        results.steps_override.map_or(String::new(), |n| format!(
            ", every scene cut to {n} steps (--steps)"
        ))
    );
    out.push_str(
        "| scene | steps | PSNR (dB) | SSIM | LPIPS | cc PSNR (dB) | training time | time to PSNR | \
         Gaussians | peak host MiB | peak device MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results.scenes {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.3} | {} | {:.2} | {:.0} s ({:.1} min) | {} | {} | {} | {} |\n",
            r.scene,
            r.steps,
            r.psnr,
            r.ssim,
            lpips(r.lpips),
            r.cc_psnr,
            r.train_seconds,
            r.train_seconds / 60.0,
            time_to_psnr_text(&r.time_to_psnr),
            r.gaussians,
            mib(r.peak_host_mib),
            mib(r.peak_device_mib)
        ));
    }
    if let Some(mean) = &results.mean {
        out.push_str(&format!(
            "| **mean** | | **{:.2}** | **{:.3}** | **{}** | **{:.2}** | | | | | |\n",
            mean.psnr,
            mean.ssim,
            lpips(mean.lpips),
            mean.cc_psnr
        ));
    }
    out
}

/// The time-to-PSNR cell of a row: `27.36 dB: 212 s (step 2000); 28.8 dB: -` (`-` when not
/// reached, `-` alone without targets).
fn time_to_psnr_text(times: &[TimeToPsnr]) -> String {
    if times.is_empty() {
        return "-".to_string();
    }
    times
        .iter()
        .map(|t| match (t.seconds, t.step) {
            (Some(seconds), Some(step)) => format!("{} dB: {seconds:.0} s (step {step})", t.psnr),
            _ => format!("{} dB: -", t.psnr),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A scene of the suite, ready to train.
struct Prepared<'a> {
    scene: &'a SuiteScene,
    config: TrainConfig,
    config_path: PathBuf,
}

/// `trainer benchmark`, training on `Autodiff<B>`.
pub fn benchmark<B: SplatBackend>(args: &BenchmarkArgs, device: &B::Device) -> Result<()> {
    run_suite::<Autodiff<B>>(args, device)
}

/// The suite of `args`, trained on `B`.
fn run_suite<B: SplatAutodiffBackend>(args: &BenchmarkArgs, device: &B::Device) -> Result<()> {
    let backend = args.backend;
    let suite = SuiteFile::read(&args.suite)?;
    let folder = args.suite.parent().unwrap_or(Path::new(""));
    let data_dir = match (
        &args.data_dir,
        std::env::var_os("EMBER_DATA_DIR"),
        &suite.data_dir,
    ) {
        (Some(dir), _, _) => dir.clone(),
        (None, Some(dir), _) => PathBuf::from(dir),
        (None, None, Some(dir)) => folder.join(dir),
        (None, None, None) => bail!(
            "{}: no data_dir, and neither --data-dir nor EMBER_DATA_DIR says where the scenes are",
            args.suite.display()
        ),
    };
    if let Some(only) = &args.only
        && let Some(unknown) = only
            .iter()
            .find(|name| !suite.scenes.iter().any(|s| &&s.name == name))
    {
        bail!(
            "--only {unknown}: {} has no such scene (it has {})",
            args.suite.display(),
            suite
                .scenes
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // Every config and scene is checked before the first run: a suite stops at a typo in its
    // first minute, not after hours of training.
    let mut prepared = Vec::new();
    for scene in &suite.scenes {
        if args
            .only
            .as_ref()
            .is_some_and(|only| !only.contains(&scene.name))
        {
            continue;
        }
        let data = data_dir.join(&scene.data);
        if !data.is_dir() {
            bail!(
                "scene {} of {}: the scene folder {} does not exist (the data folder is {}; \
                 --data-dir or EMBER_DATA_DIR changes it)",
                scene.name,
                args.suite.display(),
                data.display(),
                data_dir.display()
            );
        }
        not_inside("--out", &args.out.join(&scene.name), &[&data])?;
        let config_path = folder.join(&scene.config);
        let config = load_config(&ConfigArgs {
            config: Some(config_path.clone()),
            data: Some(data),
            steps: args.steps,
            seed: None,
            set: scene.set.clone(),
            devices: None,
            node_rank: None,
            lpips_weights: args.lpips_weights.clone(),
            backend,
        })
        .with_context(|| format!("scene {} of {}", scene.name, args.suite.display()))?;
        prepared.push(Prepared {
            scene,
            config,
            config_path,
        });
    }
    if args.check {
        for p in &prepared {
            println!(
                "{}: {} steps of {} on {}",
                p.scene.name,
                p.config.steps,
                p.config_path.display(),
                p.config
                    .data
                    .path
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            );
        }
        println!("{}: {} runs, ready", args.suite.display(), prepared.len());
        return Ok(());
    }
    let machine = args.machine.clone().unwrap_or_else(ember_bench::machine);
    let interrupted = interrupt_flag()?;
    let mut rows: Vec<SceneResult> = Vec::new();
    for (
        k,
        Prepared {
            scene,
            config,
            config_path,
        },
    ) in prepared.iter().enumerate()
    {
        let out = args.out.join(&scene.name);
        println!(
            "[{}/{}] {}: {} steps of {} on {}, into {}",
            k + 1,
            prepared.len(),
            scene.name,
            config.steps,
            config_path.display(),
            config
                .data
                .path
                .as_deref()
                .unwrap_or(Path::new(""))
                .display(),
            out.display()
        );
        ember_bench::reset_peak_host();
        let loaded =
            TrainScene::load::<ember_train::trainer::Inner<B>>(&config.data, config.seed, device)
                .with_context(|| format!("loading the scene of {}", scene.name))?;
        for note in &loaded.notes {
            println!("{note}");
        }
        let mut progress = Progress::new(config.steps, interrupted.clone());
        let summary = run::<B>(config, Arc::new(loaded), &out, None, device, &mut progress)
            .with_context(|| format!("training {}", scene.name))?;
        progress.bar.finish_and_clear();
        let Some(eval) = &summary.final_eval else {
            bail!("{}: the scene has no held-out views to measure", scene.name);
        };
        let row = SceneResult {
            scene: scene.name.clone(),
            data: scene.data.clone(),
            config: scene.config.clone(),
            steps: summary.steps,
            psnr: eval.psnr,
            ssim: eval.ssim,
            lpips: eval.lpips,
            cc_psnr: eval.cc_psnr,
            eval_views: eval.views.len(),
            train_seconds: summary.training_seconds,
            time_to_psnr: time_to_psnr(&summary.evals, &scene.psnr_targets),
            wall_seconds: summary.seconds,
            gaussians: summary.gaussians,
            peak_host_mib: ember_bench::peak_host_mib(),
            peak_device_mib: summary
                .peak_memory
                .map(|m| m.reserved as f64 / (1 << 20) as f64),
            backend: backend.name().to_string(),
            machine: machine.clone(),
        };
        println!(
            "{}: PSNR {:.2} dB, SSIM {:.4}{}, {} Gaussians, {:.1} s of training",
            row.scene,
            row.psnr,
            row.ssim,
            lpips_text(row.lpips),
            row.gaussians,
            row.train_seconds
        );
        rows.push(row);
        let results = SuiteResults {
            suite: &suite.name,
            file: &args.suite,
            backend: backend.name(),
            machine: &machine,
            date: ember_bench::utc_date(),
            version: env!("CARGO_PKG_VERSION"),
            steps_override: args.steps,
            scenes: &rows,
            mean: means(&rows),
        };
        let table = markdown(&results);
        write_atomically(&args.out.join("results.md"), table.as_bytes())?;
        let json = serde_json::to_string_pretty(&results)? + "\n";
        write_atomically(&args.out.join("results.json"), json.as_bytes())?;
        if k + 1 == prepared.len() {
            println!("\n{table}");
        }
    }
    println!(
        "tables in {} and {}",
        args.out.join("results.md").display(),
        args.out.join("results.json").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scene: &str, psnr: f32, lpips: Option<f32>) -> SceneResult {
        SceneResult {
            scene: scene.into(),
            data: scene.into(),
            config: "c.toml".into(),
            steps: 10,
            psnr,
            ssim: 0.5,
            lpips,
            cc_psnr: psnr + 0.5,
            eval_views: 2,
            train_seconds: 90.0,
            time_to_psnr: Vec::new(),
            wall_seconds: 100.0,
            gaussians: 7,
            peak_host_mib: Some(512.4),
            peak_device_mib: None,
            backend: "ndarray".into(),
            machine: "m".into(),
        }
    }

    #[test]
    fn the_table_has_a_row_per_scene_and_their_mean() {
        let rows = [row("a", 20.0, Some(0.2)), row("b", 30.0, Some(0.4))];
        let results = SuiteResults {
            suite: "s",
            file: Path::new("s.toml"),
            backend: "ndarray",
            machine: "m",
            date: "2026-11-29".into(),
            version: "0.1.0",
            steps_override: None,
            scenes: &rows,
            mean: means(&rows),
        };
        let table = markdown(&results);
        assert!(
            table.contains(
                "| a | 10 | 20.00 | 0.500 | 0.200 | 20.50 | 90 s (1.5 min) | - | 7 | 512 | - |"
            ),
            "{table}"
        );
        assert!(table.contains("| **mean** | | **25.00** | **0.500** | **0.300** | **25.50** |"));
        // One scene without LPIPS: no mean LPIPS.
        let rows = [row("a", 20.0, None), row("b", 30.0, Some(0.4))];
        assert_eq!(means(&rows).and_then(|m| m.lpips), None);
        assert!(means(&[]).is_none());
    }

    #[test]
    fn time_to_psnr_is_the_first_evaluation_at_or_above_each_target() {
        let eval = |step: usize, psnr: f32, elapsed: f64| EvalReport {
            step,
            psnr,
            ssim: 0.5,
            lpips: None,
            cc_psnr: psnr,
            cc_ssim: 0.5,
            masked: false,
            aligned: None,
            lpips_off: None,
            gaussians: 1,
            seconds: 1.0,
            elapsed,
            views: Vec::new(),
            images: Vec::new(),
        };
        // A dip after the first crossing does not move it.
        let evals = [
            eval(100, 20.0, 10.0),
            eval(200, 25.5, 21.0),
            eval(300, 24.0, 33.0),
            eval(400, 26.5, 44.0),
        ];
        let times = time_to_psnr(&evals, &[18.0, 25.0, 26.5, 30.25]);
        let reached: Vec<_> = times.iter().map(|t| (t.step, t.seconds)).collect();
        assert_eq!(
            reached,
            [
                (Some(100), Some(10.0)),
                (Some(200), Some(21.0)),
                (Some(400), Some(44.0)),
                (None, None)
            ]
        );
        assert_eq!(
            time_to_psnr_text(&times[2..]),
            "26.5 dB: 44 s (step 400); 30.25 dB: -"
        );
        assert_eq!(time_to_psnr_text(&[]), "-");
    }

    #[test]
    fn suite_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("ember-suite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let write = |text: &str| {
            let path = dir.join("suite.toml");
            std::fs::write(&path, text).expect("written");
            SuiteFile::read(&path).map_err(|e| e.to_string())
        };
        let scene = |name: &str| {
            format!("[[scene]]\nname = \"{name}\"\ndata = \"d\"\nconfig = \"c.toml\"\n")
        };
        assert!(write(&format!("name = \"x\"\n{}{}", scene("a"), scene("b"))).is_ok());
        let twice = write(&format!("name = \"x\"\n{}{}", scene("a"), scene("a"))).unwrap_err();
        assert!(twice.contains("two scenes are named \"a\""), "{twice}");
        let bad = write(&format!("name = \"x\"\n{}", scene("../a"))).unwrap_err();
        assert!(bad.contains("folder names"), "{bad}");
        let none = write("name = \"x\"\nscene = []\n").unwrap_err();
        assert!(none.contains("no [[scene]]"), "{none}");
        let descending = write(&format!(
            "name = \"x\"\n{}psnr_targets = [30.0, 28.0]\n",
            scene("a")
        ))
        .unwrap_err();
        assert!(descending.contains("ascending"), "{descending}");
        let typo = write(&format!("name = \"x\"\n{}steps = 3\n", scene("a"))).unwrap_err();
        assert!(
            typo.contains("steps") && typo.contains("suite.toml"),
            "{typo}"
        );
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
