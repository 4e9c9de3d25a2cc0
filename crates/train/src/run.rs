//! [`run`]: a whole training run with its outputs, for the `trainer` binary and for tests.
//!
//! Files in the output folder: `config.toml` (the effective config, its `data.path` made
//! absolute so that the folder names its dataset wherever it is read from), `metrics.jsonl`
//! (one JSON object per logged step, `"kind": "train"`, and per evaluation, `"kind": "eval"`,
//! with each view's PSNR, SSIM and LPIPS), `train.csv` and `eval.csv` (the same rows as CSV;
//! `eval.csv` has a row per held-out view and one for their means, `view` = `mean`, with
//! `lpips` empty where it was off), `curve.svg` (loss and PSNR against the step),
//! `eval/step_NNNNNN_<view>.png` (render left, ground truth right), `checkpoint.safetensors`
//! (every `output.checkpoint_every` steps and at the end), `splats.ply` (3DGS PLY, at the
//! end) and, when the run refines the camera poses, `cameras.json` (every camera as the run
//! drew it, at each evaluation and at the end: [`cameras_json`]) with a `"kind": "poses"`
//! record in `metrics.jsonl` per evaluation (how far the training cameras moved). The three
//! logs get each row appended as it is logged, so a killed run keeps them up to its last
//! logged step; every other file is written atomically (rewritten as the run goes).
//!
//! Time: `seconds` in `train.csv` is the step's own wall time, in `eval.csv` the evaluation's;
//! `elapsed` in both (and in `metrics.jsonl`) is the run's training time at that step
//! ([`Trainer::training_seconds`]: the steps without the evaluations and outputs, carried over
//! a resume), the axis to read time-to-PSNR from. With `max_seconds` set, the run ends after
//! the first step that brings `elapsed` to it, as it would have at its last step (the final
//! evaluation, checkpoint and export); a data-parallel run ends one step later, on the step
//! its peers agree on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ember_field::SplatAutodiffBackend;
use ember_kernels::MemoryUsage;
use serde::Deserialize;
use serde_json::json;

use crate::align::AlignedMetrics;
use crate::config::TrainConfig;
use crate::curve::{CurvePoint, curve_svg};
use crate::error::{TrainError, write_atomically};
use crate::eval::{EvalReport, ViewMetrics};
use crate::poses::CameraMotion;
use crate::scene::TrainScene;
use crate::timing::{Phase, PhaseTimes};
use crate::trainer::{StepReport, Trainer};
use crate::view_cache::CacheStats;
use ember_field::splats::write_field;

/// Hooks for progress display, and for showing the field as it trains (the live viewer).
pub trait RunObserver<B: SplatAutodiffBackend> {
    /// After every step.
    fn on_step(&mut self, _report: &StepReport, _total_steps: usize) {}
    /// After every evaluation.
    fn on_eval(&mut self, _report: &EvalReport) {}
    /// A line worth showing (files written, resume).
    fn on_message(&mut self, _message: &str) {}
    /// After every step (after [`RunObserver::on_step`], before evaluation and checkpoints),
    /// with the trainer as the step left it: an observer that shows the field renders it
    /// here, and holds the run while it does not return (a paused viewer).
    /// [`ObserverAction::Checkpoint`] writes a checkpoint now and asks again.
    fn between_steps(&mut self, _trainer: &Trainer<B>) -> ObserverAction {
        ObserverAction::Continue
    }
    /// Checked after every step: `true` ends the run there, with a checkpoint and the logs
    /// written, as [`TrainError::Interrupted`] (the `trainer` binary answers Ctrl-C so).
    fn stop_requested(&self) -> bool {
        false
    }
}

/// What the run does after [`RunObserver::between_steps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserverAction {
    /// The next step.
    Continue,
    /// Write the checkpoint now (the observer was asked for one), then ask the observer again.
    Checkpoint,
}

/// An observer that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Quiet;

impl<B: SplatAutodiffBackend> RunObserver<B> for Quiet {}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Steps completed.
    pub steps: usize,
    /// Gaussians at the end.
    pub gaussians: usize,
    /// The final evaluation; `None` when the scene has no held-out views.
    pub final_eval: Option<EvalReport>,
    /// Every evaluation, in order.
    pub evals: Vec<EvalReport>,
    /// Time per phase.
    pub times: PhaseTimes,
    /// Wall time of the run, seconds (scene loading excluded).
    pub seconds: f64,
    /// The run's training time, seconds ([`Trainer::training_seconds`]; from the checkpoint's
    /// start when it resumed one).
    pub training_seconds: f64,
    /// Whether `max_seconds` ended the run before its `steps`.
    pub out_of_time: bool,
    /// The last checkpoint written.
    pub checkpoint: PathBuf,
    /// The evaluation renders' cache: every evaluation of a run follows a change of the
    /// field, so a run's own hit rate is zero unless something evaluated twice at one step.
    pub eval_cache: CacheStats,
    /// The largest device memory the allocator held during the steps (`None` on the CPU).
    pub peak_memory: Option<MemoryUsage>,
    /// In a data-parallel run, [`crate::params::parameter_hash`] of the final parameters:
    /// every node's replica has the same.
    pub parameter_hash: Option<u64>,
    /// How far pose refinement moved the training cameras (`None` unless `poses.refine`).
    pub camera_motion: Option<CameraMotion>,
}

/// `cameras.json`: `{"cameras": [{"name", "refined", "camera"}, ...]}`, every camera of the
/// scene as [`Trainer::cameras`] lists them, `camera` in the camera JSON of `trainer render
/// --camera` (which reads one of these entries with `--name`); `trainer view` of the run shows
/// the dataset's cameras at these poses.
pub fn cameras_json(cameras: &[(String, ember_field::Camera, bool)]) -> String {
    let entries: Vec<serde_json::Value> = cameras
        .iter()
        .map(|(name, camera, refined)| json!({"name": name, "refined": refined, "camera": camera}))
        .collect();
    serde_json::to_string_pretty(&json!({ "cameras": entries })).expect("JSON values serialise")
}

/// `config` as a run folder's `config.toml`: a relative `data.path` is relative to the
/// directory the run started in, which a later reader of the folder does not know.
fn written_config(config: &TrainConfig) -> String {
    let mut config = config.clone();
    if let Some(path) = &config.data.path
        && let Ok(absolute) = std::path::absolute(path)
    {
        config.data.path = Some(absolute);
    }
    config.to_toml_string()
}

/// One log file, appended to row by row.
struct LogFile {
    path: PathBuf,
    file: File,
}

impl LogFile {
    /// Writes `rows` (header and resumed rows) atomically, then opens the file for appending.
    fn start(path: PathBuf, rows: &[String]) -> Result<LogFile, TrainError> {
        write_atomically(&path, lines(rows).as_bytes())?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| TrainError::io(&path, e))?;
        Ok(LogFile { path, file })
    }

    /// Appends one row; unbuffered, so it is in the file when this returns.
    fn append(&mut self, row: &str) -> Result<(), TrainError> {
        self.file
            .write_all(format!("{row}\n").as_bytes())
            .map_err(|e| TrainError::io(&self.path, e))
    }
}

fn lines(rows: &[String]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

/// `eval.csv`'s header: a row per view, then the evaluation's means as the view `mean`.
/// `cc_psnr` and `cc_ssim` are the colour-corrected metrics
/// ([`colour_corrected`](crate::eval::colour_corrected)), `aligned_psnr` and `aligned_ssim`
/// those after test-time alignment (with `eval.align_steps`: [`crate::align`]).
const EVAL_CSV_HEADER: &str =
    "step,view,psnr,ssim,lpips,cc_psnr,cc_ssim,gaussians,seconds,elapsed,aligned_psnr,aligned_ssim";

/// `train.csv`'s header.
const TRAIN_CSV_HEADER: &str = "step,loss,psnr,gaussians,sh_degree,lr_means,seconds,elapsed";

/// An evaluation as `metrics.jsonl` holds it (its `"kind": "eval"` records).
#[derive(Debug, Deserialize)]
struct LoggedEval {
    step: usize,
    psnr: f32,
    ssim: f32,
    lpips: Option<f32>,
    #[serde(default)]
    cc_psnr: Option<f32>,
    #[serde(default)]
    cc_ssim: Option<f32>,
    gaussians: usize,
    seconds: f64,
    /// Missing in the logs of runs from before it was recorded.
    #[serde(default)]
    elapsed: Option<f64>,
    #[serde(default)]
    views: Vec<ViewMetrics>,
    #[serde(default)]
    aligned: Option<AlignedMetrics>,
}

impl LoggedEval {
    /// Its `eval.csv` rows ([`EVAL_CSV_HEADER`]): one per view (without the Gaussians and the
    /// times, which are the evaluation's), then the means.
    fn csv_rows(&self) -> Vec<String> {
        let optional = |v: Option<f32>| v.map(|v| v.to_string()).unwrap_or_default();
        let aligned = |a: Option<AlignedMetrics>| {
            let (psnr, ssim) = (a.map(|a| a.psnr), a.map(|a| a.ssim));
            format!("{},{}", optional(psnr), optional(ssim))
        };
        let mut rows: Vec<String> = self
            .views
            .iter()
            .map(|v| {
                format!(
                    "{},{},{},{},{},{},{},,,,{}",
                    self.step,
                    csv_field(&v.name),
                    v.psnr,
                    v.ssim,
                    optional(v.lpips),
                    optional(v.cc_psnr),
                    optional(v.cc_ssim),
                    aligned(v.aligned)
                )
            })
            .collect();
        rows.push(format!(
            "{},mean,{},{},{},{},{},{},{},{},{}",
            self.step,
            self.psnr,
            self.ssim,
            optional(self.lpips),
            optional(self.cc_psnr),
            optional(self.cc_ssim),
            self.gaussians,
            self.seconds,
            self.elapsed.map(|v| v.to_string()).unwrap_or_default(),
            aligned(self.aligned)
        ));
        rows
    }
}

/// `text` as one CSV field: quoted (quotes doubled) when it holds a comma, quote or line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The metric logs of a run.
struct Logs {
    out: PathBuf,
    jsonl: LogFile,
    train_csv: LogFile,
    eval_csv: LogFile,
    curve: Vec<CurvePoint>,
}

/// The rows an output folder starts with: the headers, then (when resuming at `resume` into
/// the same folder) the earlier run's rows up to that step.
#[derive(Default)]
struct StartRows {
    jsonl: Vec<String>,
    train_csv: Vec<String>,
    eval_csv: Vec<String>,
    curve: Vec<CurvePoint>,
}

impl Logs {
    fn start(out: &Path, resume: Option<usize>) -> Result<Logs, TrainError> {
        let mut rows = StartRows {
            train_csv: vec![TRAIN_CSV_HEADER.to_string()],
            eval_csv: vec![EVAL_CSV_HEADER.to_string()],
            ..StartRows::default()
        };
        if let Some(step) = resume {
            rows.resume(out, step);
        }
        Ok(Logs {
            out: out.to_path_buf(),
            jsonl: LogFile::start(out.join("metrics.jsonl"), &rows.jsonl)?,
            train_csv: LogFile::start(out.join("train.csv"), &rows.train_csv)?,
            eval_csv: LogFile::start(out.join("eval.csv"), &rows.eval_csv)?,
            curve: rows.curve,
        })
    }
}

impl StartRows {
    /// Rows of an earlier run in `out` up to `step`.
    fn resume(&mut self, out: &Path, step: usize) {
        let Ok(text) = std::fs::read_to_string(out.join("metrics.jsonl")) else {
            return;
        };
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let row_step = value["step"].as_u64().unwrap_or(u64::MAX) as usize;
            if row_step > step {
                continue;
            }
            let num = |k: &str| value[k].as_f64().unwrap_or(f64::NAN);
            let optional = |k: &str| value[k].as_f64().map(|v| v.to_string()).unwrap_or_default();
            match value["kind"].as_str() {
                Some("train") => {
                    self.train_csv.push(format!(
                        "{row_step},{},{},{},{},{},{},{}",
                        num("loss"),
                        optional("psnr"),
                        num("gaussians"),
                        num("sh_degree"),
                        num("lr_means"),
                        num("seconds"),
                        optional("elapsed")
                    ));
                    self.curve.push(CurvePoint::train(
                        row_step,
                        num("loss") as f32,
                        value["psnr"].as_f64().map(|v| v as f32),
                    ));
                }
                Some("eval") => {
                    let Ok(logged) = serde_json::from_value::<LoggedEval>(value.clone()) else {
                        continue;
                    };
                    self.eval_csv.extend(logged.csv_rows());
                    self.curve.push(CurvePoint::eval(row_step, logged.psnr));
                }
                _ => continue,
            }
            self.jsonl.push(line.to_string());
        }
    }
}

impl Logs {
    fn step(&mut self, r: &StepReport) -> Result<(), TrainError> {
        self.jsonl.append(
            &json!({
                "kind": "train", "step": r.step, "loss": r.loss, "psnr": r.psnr,
                "gaussians": r.gaussians, "sh_degree": r.sh_degree, "lr_means": r.lr_means,
                "seconds": r.seconds, "elapsed": r.elapsed, "cloned": r.refine.cloned, "split": r.refine.split,
                "pruned": r.refine.pruned, "relocated": r.refine.relocated,
                "added": r.refine.added, "escaped": r.refine.escaped,
            })
            .to_string(),
        )?;
        self.train_csv.append(&format!(
            "{},{},{},{},{},{},{},{}",
            r.step,
            r.loss.map(|l| l.to_string()).unwrap_or_default(),
            r.psnr.map(|p| p.to_string()).unwrap_or_default(),
            r.gaussians,
            r.sh_degree,
            r.lr_means,
            r.seconds,
            r.elapsed
        ))?;
        if let Some(loss) = r.loss {
            self.curve.push(CurvePoint::train(r.step, loss, r.psnr));
        }
        Ok(())
    }

    fn eval(&mut self, e: &EvalReport) -> Result<(), TrainError> {
        self.jsonl.append(
            &json!({
                "kind": "eval", "step": e.step, "psnr": e.psnr, "ssim": e.ssim,
                "lpips": e.lpips, "cc_psnr": e.cc_psnr, "cc_ssim": e.cc_ssim, "masked": e.masked, "gaussians": e.gaussians, "seconds": e.seconds,
                "elapsed": e.elapsed, "aligned": e.aligned, "views": e.views,
            })
            .to_string(),
        )?;
        let logged = LoggedEval {
            step: e.step,
            psnr: e.psnr,
            ssim: e.ssim,
            lpips: e.lpips,
            cc_psnr: Some(e.cc_psnr),
            cc_ssim: Some(e.cc_ssim),
            gaussians: e.gaussians,
            seconds: e.seconds,
            elapsed: Some(e.elapsed),
            views: e.views.clone(),
            aligned: e.aligned,
        };
        for row in logged.csv_rows() {
            self.eval_csv.append(&row)?;
        }
        self.curve.push(CurvePoint::eval(e.step, e.psnr));
        Ok(())
    }

    /// Rewrites the loss curve from the rows so far (the logs themselves are appended as
    /// they come).
    fn write_curve(&self) -> Result<(), TrainError> {
        write_atomically(
            &self.out.join("curve.svg"),
            curve_svg(&self.curve).as_bytes(),
        )
    }
}

/// Trains `scene` with `config`, writing into `out` (see the module docs); `resume` continues
/// from a checkpoint. A non-finite loss stops the run before the bad step is applied, with the
/// last checkpoint on disk untouched and named in the error.
pub fn run<B: SplatAutodiffBackend>(
    config: &TrainConfig,
    scene: Arc<TrainScene>,
    out: &Path,
    resume: Option<&Path>,
    device: &B::Device,
    observer: &mut dyn RunObserver<B>,
) -> Result<RunSummary, TrainError> {
    // Everything that can refuse the run (the config, the scene, the checkpoint) is checked
    // before the first file is written.
    let mut trainer = Trainer::<B>::new(config.clone(), scene, device)?;
    if let Some(path) = resume {
        trainer.load_checkpoint(path)?;
    }
    run_trainer(trainer, out, resume, observer)
}

/// [`run`] with the trainer made (and `resume`, if given, already loaded into it): in a
/// data-parallel run, peer 0's (see [`crate::parallel::run_data_parallel`]).
pub(crate) fn run_trainer<B: SplatAutodiffBackend>(
    mut trainer: Trainer<B>,
    out: &Path,
    resume: Option<&Path>,
    observer: &mut dyn RunObserver<B>,
) -> Result<RunSummary, TrainError> {
    let started = Instant::now();
    let config = &trainer.config().clone();
    let held_out = !trainer.scene().eval.is_empty();
    std::fs::create_dir_all(out.join("eval")).map_err(|e| TrainError::io(out, e))?;
    write_atomically(&out.join("config.toml"), written_config(config).as_bytes())?;
    let mut logs = Logs::start(out, resume.map(|_| trainer.step_count()))?;
    let checkpoint_path = out.join("checkpoint.safetensors");
    let mut last_checkpoint = None;
    if !held_out {
        observer.on_message("no held-out views: nothing to evaluate (no PSNR or SSIM is reported)");
    }
    if let Some(path) = resume {
        last_checkpoint = Some(path.to_path_buf());
        observer.on_message(&format!(
            "resumed {} at step {} with {} Gaussians",
            path.display(),
            trainer.step_count(),
            trainer.num_gaussians()
        ));
    }
    let mut evals = Vec::new();
    let total = config.steps;
    let evaluate = |trainer: &mut Trainer<B>,
                    logs: &mut Logs,
                    evals: &mut Vec<EvalReport>,
                    observer: &mut dyn RunObserver<B>|
     -> Result<(), TrainError> {
        if !held_out {
            return Ok(());
        }
        let report = trainer.evaluate()?;
        if let Some(note) = &report.lpips_off {
            observer.on_message(note);
        }
        let t = Instant::now();
        for image in &report.images {
            let path =
                out.join("eval")
                    .join(format!("step_{:06}_{}.png", report.step, image.file_stem()));
            image.save_png(&path)?;
        }
        logs.eval(&report)?;
        if let Some(motion) = trainer.camera_motion() {
            logs.jsonl.append(
                &json!({"kind": "poses", "step": report.step, "mean_degrees": motion.mean_degrees,
                    "max_degrees": motion.max_degrees, "mean_shift": motion.mean_shift,
                    "max_shift": motion.max_shift, "common_degrees": motion.common_degrees,
                    "common_shift": motion.common_shift})
                .to_string(),
            )?;
            write_atomically(
                &out.join("cameras.json"),
                cameras_json(&trainer.cameras()).as_bytes(),
            )?;
        }
        logs.write_curve()?;
        trainer.times_mut().add(Phase::Output, t.elapsed());
        observer.on_eval(&report);
        evals.push(report);
        Ok(())
    };
    while trainer.step_count() < total {
        // Out of time, a peer votes to stop: the peers agree and end after the next step.
        trainer.request_stop(observer.stop_requested() || trainer.out_of_time());
        let report = match trainer.step() {
            Ok(report) => report,
            Err(TrainError::NonFiniteLoss {
                step, view, loss, ..
            }) => {
                logs.write_curve()?;
                return Err(TrainError::NonFiniteLoss {
                    step,
                    view,
                    loss,
                    last_checkpoint,
                });
            }
            Err(e) => return Err(e),
        };
        let step = report.step;
        // Alone, the budget ends the run at this step; among peers, at the step they agree on.
        let out_of_time = trainer.out_of_time() && (trainer.peer().is_none() || report.stop);
        if step.is_multiple_of(config.output.log_every) || step == total || out_of_time {
            logs.step(&report)?;
        }
        observer.on_step(&report, total);
        while observer.between_steps(&trainer) == ObserverAction::Checkpoint {
            trainer.save_checkpoint(&checkpoint_path)?;
            last_checkpoint = Some(checkpoint_path.clone());
            observer.on_message(&format!(
                "wrote {} at step {step}",
                checkpoint_path.display()
            ));
        }
        if out_of_time {
            break;
        }
        // Alone, a request made during the step counts now; peers stop where they agreed to.
        let stop = report.stop || (trainer.peer().is_none() && observer.stop_requested());
        if stop && step < total {
            if !step.is_multiple_of(config.output.log_every) {
                logs.step(&report)?;
            }
            logs.write_curve()?;
            trainer.save_checkpoint(&checkpoint_path)?;
            trainer.leave_peers()?;
            return Err(TrainError::Interrupted {
                step,
                checkpoint: checkpoint_path,
            });
        }
        if config.eval.every > 0 && step.is_multiple_of(config.eval.every) && step < total {
            evaluate(&mut trainer, &mut logs, &mut evals, observer)?;
        }
        if config.output.checkpoint_every > 0
            && step.is_multiple_of(config.output.checkpoint_every)
            && step < total
        {
            trainer.save_checkpoint(&checkpoint_path)?;
            last_checkpoint = Some(checkpoint_path.clone());
        }
    }
    evaluate(&mut trainer, &mut logs, &mut evals, observer)?;
    let parameter_hash = match trainer.peer() {
        Some(_) => Some(crate::params::parameter_hash(trainer.field())?),
        None => None,
    };
    trainer.leave_peers()?;
    let t = Instant::now();
    logs.write_curve()?;
    trainer.save_checkpoint(&checkpoint_path)?;
    observer.on_message(&format!("wrote {}", checkpoint_path.display()));
    if trainer.camera_motion().is_some() {
        let path = out.join("cameras.json");
        write_atomically(&path, cameras_json(&trainer.cameras()).as_bytes())?;
        observer.on_message(&format!("wrote {}", path.display()));
    }
    if config.output.ply {
        let ply = out.join("splats.ply");
        write_field(&trainer.drawn_field()?, &ply)?;
        observer.on_message(&format!("wrote {}", ply.display()));
    }
    trainer.times_mut().add(Phase::Output, t.elapsed());
    let final_eval = evals.last().cloned();
    if trainer.step_count() < total {
        observer.on_message(&format!(
            "max_seconds = {} s of training reached at step {} of {total}",
            config.max_seconds,
            trainer.step_count()
        ));
    }
    Ok(RunSummary {
        steps: trainer.step_count(),
        gaussians: trainer.num_gaussians(),
        final_eval,
        evals,
        times: *trainer.times(),
        seconds: started.elapsed().as_secs_f64(),
        training_seconds: trainer.training_seconds(),
        out_of_time: trainer.step_count() < total,
        checkpoint: checkpoint_path,
        eval_cache: trainer.eval_cache_stats(),
        peak_memory: trainer.peak_memory(),
        parameter_hash,
        camera_motion: trainer.camera_motion(),
    })
}
