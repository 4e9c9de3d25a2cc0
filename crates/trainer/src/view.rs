//! `trainer view SCENE` (a splat file, a checkpoint or a run folder in the browser) and
//! `trainer --view [PORT]` (the training run, live): the glue between `ember-train` and
//! `ember-viewer`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::inputs::load_field;
use crate::progress::interrupt_flag;
use anyhow::{Context, Result, bail};
use clap::Args;
use ember_data::Splats;
use ember_data::lod::is_hierarchy;
use ember_data::{HierarchyConfig, parse_camera_list, read_hierarchy};
use ember_field::splats::splats_from_field;
use ember_field::{DEFAULT_LOD_THRESHOLD, GaussianField, GaussianHierarchy};
use ember_kernels::SplatBackend;
use ember_train::config::DataConfig;
use ember_train::scene::cameras_focus;
use ember_train::{
    EvalReport, ObserverAction, RunObserver, SplatAutodiffBackend, StepReport, TrainConfig,
    TrainScene, Trainer,
};
use ember_viewer::{
    DatasetCamera, EVALS_KEPT, EvalViews, Frame, LiveAction, LiveRenderer, Mode, PhotoSource,
    SceneEditor, SceneInfo, SceneLod, Split, Status, Viewer, ViewerConfig, serve_editable,
};

/// Where the viewer listens.
#[derive(Args, Debug, Clone)]
pub struct ListenArgs {
    /// Port (7878 unless given; 0 picks a free one).
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Address to listen on. The default serves this machine only; another address (e.g.
    /// 0.0.0.0) lets the network in, to whoever has the URL printed at start-up (it carries a
    /// random access token).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
}

impl ListenArgs {
    /// The port: `--port`, or the one given as `--view PORT` (`view_port`); both only when
    /// they agree.
    pub fn port(&self, view_port: Option<u16>) -> Result<u16> {
        match (view_port, self.port) {
            (Some(view), Some(port)) if view != port => {
                bail!("--view {view} and --port {port} name two ports: give one")
            }
            (view, port) => Ok(view.or(port).unwrap_or(ember_viewer::DEFAULT_PORT)),
        }
    }

    /// The server's config on `port`, with a warning when it is reachable from the network.
    pub fn config(&self, port: u16) -> ViewerConfig {
        if !self.host.is_loopback() {
            eprintln!(
                "warning: the viewer listens on {}: anyone who can reach this machine and has \
                 the URL below (its access token) can watch and pause the run, and plain HTTP \
                 does not hide the token on the network; prefer SSH port forwarding (see the \
                 README)",
                self.host
            );
        }
        ViewerConfig {
            host: self.host,
            port,
            ..ViewerConfig::default()
        }
    }
}

/// `trainer view SCENE`.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// A splat file (.ply, .compressed.ply, .splat, .spz), a checkpoint (.safetensors) or a
    /// run folder (its checkpoint.safetensors, else its splats.ply; its dataset's cameras).
    scene: PathBuf,
    /// A dataset whose cameras (and photos) the page can jump to; a run folder's own
    /// dataset is used without it.
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    lod: LodArgs,
}

/// Scenes of at least this many Gaussians are drawn through a level-of-detail hierarchy, built
/// when they are loaded (153k Gaussians: about a second on two cores). Smaller ones draw fast
/// enough whole.
pub const LOD_MIN_GAUSSIANS: usize = 100_000;

/// How a viewed scene uses level of detail.
#[derive(Args, Debug, Clone)]
pub struct LodArgs {
    /// Level-of-detail threshold, pixels, of a scene drawn through a hierarchy (a `trainer lod
    /// build` file, or a scene of at least 100 000 Gaussians, whose hierarchy is built when it
    /// is loaded); 0 draws every Gaussian. The page can change it per frame.
    #[arg(long = "lod", value_name = "PX", default_value_t = DEFAULT_LOD_THRESHOLD)]
    pub threshold: f32,
    /// Never draw through a hierarchy (none is built; a hierarchy file's leaves are drawn).
    #[arg(long)]
    pub no_lod: bool,
}

/// The dataset cameras (train, then held-out) and their photos.
fn dataset_cameras(scene: Arc<TrainScene>) -> (Vec<DatasetCamera>, PhotoSource) {
    let cameras = scene
        .train
        .iter()
        .map(|v| (v, Split::Train))
        .chain(scene.eval.iter().map(|v| (v, Split::Test)))
        .map(|(view, split)| DatasetCamera {
            name: view.name.clone(),
            split,
            camera: view.camera,
        })
        .collect();
    let photos: PhotoSource = Box::new(move |index| {
        let n = scene.train.len();
        let image = if index < n {
            scene.train_image(index)
        } else {
            scene.eval_image(index - n)
        };
        image.map_err(|e| e.to_string())
    });
    (cameras, photos)
}

/// The dataset cameras as a run that refined its poses drew them: each camera named in the
/// run's `cameras.json` (`list`) takes the pose written there.
fn refined_cameras(cameras: &mut [DatasetCamera], list: &Path) -> Result<()> {
    let bytes = std::fs::read(list).with_context(|| format!("reading {}", list.display()))?;
    let refined = parse_camera_list(&bytes, list)?;
    let mut moved = 0;
    for camera in cameras.iter_mut() {
        if let Some((_, pose)) = refined.iter().find(|(name, _)| *name == camera.name) {
            camera.camera = *pose;
            moved += 1;
        }
    }
    println!(
        "the dataset cameras as the run refined them ({}): {moved} of {}",
        list.display(),
        cameras.len()
    );
    Ok(())
}

fn focus(cameras: &[DatasetCamera]) -> Option<[f64; 3]> {
    let cameras: Vec<_> = cameras.iter().map(|c| c.camera).collect();
    cameras_focus(&cameras)
}

/// A SCENE argument loaded for the viewer: the field, what the page is told, the photos.
pub struct ViewedScene<B: SplatBackend> {
    /// The field.
    pub field: GaussianField<B>,
    /// Its Gaussians on the host, in the order of the file (what an edit starts from).
    pub splats: Splats,
    /// Its name, size, framing and dataset cameras.
    pub info: SceneInfo,
    /// The dataset cameras' photos.
    pub photos: Option<PhotoSource>,
    /// Its level-of-detail hierarchy, when it is drawn through one.
    pub lod: Option<SceneLod<B>>,
}

/// The level of detail `scene` (whose field `field` was loaded) is drawn with, as `args` says;
/// returns it and the field to draw without it (a hierarchy's leaves, not a second copy).
fn scene_lod<B: SplatBackend>(
    scene: &Path,
    field: GaussianField<B>,
    args: &LodArgs,
    device: &B::Device,
) -> Result<(GaussianField<B>, Option<SceneLod<B>>)> {
    if args.no_lod {
        return Ok((field, None));
    }
    if !(args.threshold.is_finite()
        && (0.0..=ember_viewer::MAX_LOD_THRESHOLD).contains(&args.threshold))
    {
        bail!(
            "--lod {}: pixels from 0 (off) to {}",
            args.threshold,
            ember_viewer::MAX_LOD_THRESHOLD
        );
    }
    let started = Instant::now();
    let hierarchy = if scene.is_file() && is_hierarchy(scene) {
        let host = read_hierarchy(scene)?;
        GaussianHierarchy::from_splat_hierarchy(&host, device)?
    } else if field.num_gaussians() >= LOD_MIN_GAUSSIANS {
        field
            .hierarchy(&HierarchyConfig::default())
            .context("building the level-of-detail hierarchy")?
    } else {
        return Ok((field, None));
    };
    println!(
        "level of detail: {} nodes over {} Gaussians ({:.1} s), drawn at {} px (--lod PX; 0 or \
         the page turns it off)",
        hierarchy.num_nodes(),
        hierarchy.leaves,
        started.elapsed().as_secs_f64(),
        args.threshold
    );
    let leaves = hierarchy.leaf_field();
    Ok((
        leaves,
        Some(SceneLod {
            hierarchy,
            threshold: args.threshold,
        }),
    ))
}

/// Loads `scene` (see [`ViewArgs`]) with the cameras of `data`, else of the run folder's
/// dataset when it is there.
pub fn load_scene<B: SplatBackend>(
    scene: &Path,
    data: Option<&Path>,
    lod: &LodArgs,
    device: &B::Device,
) -> Result<ViewedScene<B>> {
    let (field, run) = load_field::<B>(scene, device)?;
    let antialiased = run.as_ref().is_some_and(|config| config.raster.antialiased);
    let splats = splats_from_field(&field).context("reading the field back")?;
    let run_data = run.map(|config| config.data);
    let (field, lod) = scene_lod(scene, field, lod, device)?;
    let data = match (data, run_data) {
        (Some(path), _) => Some(DataConfig {
            path: Some(path.to_path_buf()),
            ..DataConfig::default()
        }),
        (None, Some(data)) if data.path.as_ref().is_some_and(|p| p.exists()) => Some(data),
        (None, Some(data)) => {
            if let Some(path) = &data.path {
                println!(
                    "note: the run's dataset {} is not there: no dataset cameras (give --data PATH)",
                    path.display()
                );
            }
            None
        }
        (None, None) => None,
    };
    let (mut cameras, photos) = match data.as_ref().and_then(|d| d.path.as_ref().map(|p| (p, d))) {
        Some((path, config)) => {
            let dataset = TrainScene::from_dataset(path, config)
                .with_context(|| format!("loading the dataset {}", path.display()))?;
            let (cameras, photos) = dataset_cameras(Arc::new(dataset));
            (cameras, Some(photos))
        }
        None => (Vec::new(), None),
    };
    if let Some(list) = run_folder(scene)
        .map(|f| f.join("cameras.json"))
        .filter(|f| f.is_file())
    {
        refined_cameras(&mut cameras, &list)?;
    }
    let means = ember_field::to_host(field.means.val(), "the Gaussian centres")?;
    let focus = focus(&cameras);
    let name = scene.display().to_string();
    let info = SceneInfo::framed(name, Mode::Scene, field.sh_degree(), &means, cameras, focus)
        .with_lod(lod.as_ref().map(SceneLod::info))
        .with_antialiased(antialiased);
    Ok(ViewedScene {
        field,
        splats,
        info,
        photos,
        lod,
    })
}

/// `trainer view SCENE`: serves until Ctrl-C.
pub fn view<B: SplatBackend>(args: &ViewArgs, device: &B::Device) -> Result<()> {
    let started = Instant::now();
    let scene = load_scene::<B>(&args.scene, args.data.as_deref(), &args.lod, device)?;
    let camera_count = scene.info.cameras.len();
    let (count, sh_degree) = (scene.field.num_gaussians(), scene.field.sh_degree());
    let viewer = Viewer::start(
        &args.listen.config(args.listen.port(None)?),
        scene.info,
        scene.photos,
    )?;
    println!(
        "{}: {} Gaussians, SH degree {}, {} dataset cameras, on {} ({:.1} s to load)",
        args.scene.display(),
        count,
        sh_degree,
        camera_count,
        B::name(device),
        started.elapsed().as_secs_f64()
    );
    if let Some(folder) = run_folder(&args.scene) {
        publish_run_record(&viewer, &folder)?;
    }
    println!("viewer: open {} (Ctrl-C stops)", viewer.url());
    let interrupted = interrupt_flag()?;
    let mut editor = SceneEditor::new(scene.splats, scene.field, scene.lod);
    if !args.lod.no_lod {
        // A file dropped on the page is drawn as one given here would be.
        editor = editor.with_lod_for_opened(args.lod.threshold, LOD_MIN_GAUSSIANS);
    }
    serve_editable(&viewer, &mut editor, None, || {
        interrupted.load(Ordering::SeqCst)
    });
    // The open pages are told, rather than left reconnecting to nothing.
    let text = format!(
        "the viewer was stopped; to open it again: trainer view {}",
        args.scene.display()
    );
    viewer.end(&text, Duration::from_secs(2));
    Ok(())
}

/// The run folder a SCENE argument is or lies in (a checkpoint beside its `metrics.jsonl`).
fn run_folder(scene: &Path) -> Option<PathBuf> {
    let folder = if scene.is_dir() {
        scene
    } else {
        scene.parent()?
    };
    folder
        .join("metrics.jsonl")
        .is_file()
        .then(|| folder.to_path_buf())
}

/// Gives the pages what a finished run recorded (`metrics.jsonl` in `folder`): its curves, its
/// last state and its held-out evaluations, with the images of the latest [`EVALS_KEPT`] from
/// `eval/`. Lines that do not parse are skipped with a note: a run killed mid-write leaves one.
fn publish_run_record(viewer: &Viewer, folder: &Path) -> Result<()> {
    let path = folder.join("metrics.jsonl");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let total_steps = TrainConfig::from_file(&folder.join("config.toml"))
        .map(|config| config.steps)
        .ok();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .filter_map(|(i, line)| match serde_json::from_str(line) {
            Ok(row) => Some(row),
            Err(e) => {
                println!("note: {} line {}: {e}: skipped", path.display(), i + 1);
                None
            }
        })
        .collect();
    let number = |row: &serde_json::Value, key: &str| row[key].as_f64();
    let last_step = rows
        .iter()
        .filter_map(|row| row["step"].as_u64())
        .max()
        .unwrap_or(0) as usize;
    for row in rows.iter().filter(|row| row["kind"] == "train") {
        let Some(step) = row["step"].as_u64() else {
            continue;
        };
        viewer.set_status(Status {
            step: step as usize,
            total_steps: total_steps.unwrap_or(last_step),
            gaussians: row["gaussians"].as_u64().unwrap_or(0) as usize,
            loss: number(row, "loss").map(|v| v as f32),
            psnr: number(row, "psnr").map(|v| v as f32),
            paused: false,
            steps_per_second: 0.0,
        });
    }
    let evals: Vec<&serde_json::Value> = rows.iter().filter(|row| row["kind"] == "eval").collect();
    let with_images = evals.len().saturating_sub(EVALS_KEPT);
    for (i, row) in evals.iter().enumerate() {
        let (Some(step), Some(psnr), Some(ssim)) = (
            row["step"].as_u64(),
            number(row, "psnr"),
            number(row, "ssim"),
        ) else {
            continue;
        };
        let step = step as usize;
        let views = if i >= with_images {
            eval_images(&folder.join("eval"), step)
        } else {
            Vec::new()
        };
        viewer.publish_eval(EvalViews {
            step,
            psnr: psnr as f32,
            ssim: ssim as f32,
            lpips: number(row, "lpips").map(|v| v as f32),
            views,
        })?;
    }
    Ok(())
}

/// The images a run saved for its evaluation at `step` (`eval/step_NNNNNN_<view>.png`), by
/// name; one that does not decode is left out with a note.
fn eval_images(folder: &Path, step: usize) -> Vec<(String, Frame)> {
    let prefix = format!("step_{step:06}_");
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut files: Vec<(String, PathBuf)> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let view = name.strip_prefix(&prefix)?.strip_suffix(".png")?;
            Some((view.to_string(), path.clone()))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|(view, path)| match image::open(&path) {
            Ok(image) => {
                let rgb = image.to_rgb8();
                let mut frame = Frame::from_rgb(rgb.width(), rgb.height(), rgb.into_raw());
                frame.step = Some(step);
                Some((view, frame))
            }
            Err(e) => {
                println!("note: {}: {e}: left out", path.display());
                None
            }
        })
        .collect()
}

/// The share of the training time the live viewer may render in: the targets are 15% on the
/// CPU and 5% on a GPU for the whole cost, which includes encoding and sending.
pub fn live_budget(cpu: bool) -> f64 {
    if cpu { 0.10 } else { 0.04 }
}

/// Starts the live viewer for a run on `scene`.
pub fn start_live(
    listen: &ListenArgs,
    port: u16,
    scene: &Arc<TrainScene>,
    config: &TrainConfig,
) -> Result<Viewer> {
    let (cameras, photos) = dataset_cameras(scene.clone());
    let focus = focus(&cameras);
    let info = SceneInfo::framed(
        scene.name.clone(),
        Mode::Training,
        config.init.sh_degree,
        &[],
        cameras,
        focus,
    )
    .with_antialiased(config.raster.antialiased);
    Ok(Viewer::start(&listen.config(port), info, Some(photos))?)
}

/// A run's observer with the live viewer: progress as before, plus status, evaluations and
/// renders for the pages, pause and checkpoint from them.
pub struct LiveObserver<O> {
    /// The observer it adds the viewer to.
    pub inner: O,
    viewer: Viewer,
    renderer: LiveRenderer,
    /// The last step's end and its number, for the speed.
    last: Option<(Instant, usize)>,
    steps_per_second: f64,
    interrupted: Arc<AtomicBool>,
    /// Whether a page held the run paused at the last look (the terminal is told of changes).
    paused: bool,
}

impl<O> LiveObserver<O> {
    /// `inner` with `viewer`, rendering within `budget` of the training time.
    pub fn new(inner: O, viewer: Viewer, budget: f64, interrupted: Arc<AtomicBool>) -> Self {
        LiveObserver {
            inner,
            viewer,
            renderer: LiveRenderer::new(budget),
            last: None,
            steps_per_second: 0.0,
            interrupted,
            paused: false,
        }
    }

    /// Rendering time against training time so far.
    pub fn render_share(&self) -> f64 {
        self.renderer.share()
    }

    /// Tells the open pages how the run writing to `out` ended (`how`) and how to keep viewing
    /// its result, and lets them go (two seconds at most).
    pub fn end(&self, how: &str, out: &Path) {
        end_viewing(&self.viewer, how, out);
    }

    /// The observer it wraps and the viewer, for what comes after the run.
    pub fn into_parts(self) -> (O, Viewer) {
        (self.inner, self.viewer)
    }
}

/// Tells the open pages how the run writing to `out` ended (`how`) and how to view its result
/// again, and lets them go (two seconds at most).
fn end_viewing(viewer: &Viewer, how: &str, out: &Path) {
    let text = format!(
        "{how}; to keep viewing its result: trainer view {}",
        out.display()
    );
    viewer.end(&text, Duration::from_secs(2));
}

/// After a run with the live viewer that ended by itself (its last step, or its time budget,
/// after `steps` steps): the pages go on showing its final field, and a reload gets it too,
/// until Ctrl-C (`interrupted`); then they are let go. The field is read back from the run's
/// outputs in `out` as `trainer view OUT` reads them, so the pages show what that command
/// would. A run stopped by Ctrl-C ends the viewer at once, as the user asked.
pub fn show_result<B: SplatBackend>(
    viewer: &Viewer,
    out: &Path,
    steps: usize,
    device: &B::Device,
    interrupted: &AtomicBool,
) -> Result<()> {
    if interrupted.load(Ordering::SeqCst) {
        end_viewing(viewer, &format!("the run was stopped at step {steps}"), out);
        return Ok(());
    }
    let field = match load_field::<B>(out, device) {
        Ok((field, _)) => field,
        Err(error) => {
            end_viewing(
                viewer,
                &format!("the run ended at step {steps}, its result could not be read: {error}"),
                out,
            );
            return Err(error);
        }
    };
    viewer.finish(&format!(
        "Training ended at step {steps}: this is its final field. Ctrl-C in the terminal stops \
         the viewer."
    ));
    println!(
        "viewer: training ended; {} still shows the final field (Ctrl-C stops)",
        viewer.url()
    );
    let splats = splats_from_field(&field).context("reading the final field back")?;
    let mut editor = SceneEditor::new(splats, field, None);
    serve_editable(viewer, &mut editor, Some(steps), || {
        interrupted.load(Ordering::SeqCst)
    });
    end_viewing(viewer, "the viewer was stopped", out);
    Ok(())
}

impl<B: SplatAutodiffBackend, O: RunObserver<B>> RunObserver<B> for LiveObserver<O> {
    fn on_step(&mut self, report: &StepReport, total_steps: usize) {
        self.inner.on_step(report, total_steps);
        let now = Instant::now();
        if let Some((then, step)) = self.last {
            let seconds = now.duration_since(then).as_secs_f64();
            let rate = (report.step - step) as f64 / seconds.max(1e-9);
            // Smoothed over about ten steps: one step's time jumps with evaluations.
            self.steps_per_second = if self.steps_per_second > 0.0 {
                0.9 * self.steps_per_second + 0.1 * rate
            } else {
                rate
            };
        }
        self.last = Some((now, report.step));
        self.viewer.set_status(Status {
            step: report.step,
            total_steps,
            gaussians: report.gaussians,
            loss: report.loss,
            psnr: report.psnr,
            paused: self.viewer.paused(),
            steps_per_second: self.steps_per_second,
        });
    }

    fn on_eval(&mut self, report: &EvalReport) {
        self.inner.on_eval(report);
        let views = report
            .images
            .iter()
            .map(|image| {
                let mut frame = Frame::from_rgb(image.width, image.height, image.rgb.clone());
                frame.step = Some(report.step);
                (image.name.clone(), frame)
            })
            .collect();
        let eval = EvalViews {
            step: report.step,
            psnr: report.psnr,
            ssim: report.ssim,
            lpips: report.lpips,
            views,
        };
        if let Err(e) = self.viewer.publish_eval(eval) {
            self.inner.on_message(&format!("viewer: {e}"));
        }
    }

    fn on_message(&mut self, message: &str) {
        self.inner.on_message(message);
        self.viewer.message(message);
    }

    fn between_steps(&mut self, trainer: &Trainer<B>) -> ObserverAction {
        if self.inner.between_steps(trainer) == ObserverAction::Checkpoint {
            return ObserverAction::Checkpoint;
        }
        let unattended = self.viewer.take_unattended_resume();
        if unattended {
            self.inner
                .on_message("viewer: the last page left while training was paused: resumed");
        }
        let paused_now = self.viewer.paused();
        if paused_now != self.paused && !unattended {
            self.inner.on_message(&format!(
                "viewer: a page {} training at step {}",
                if paused_now { "paused" } else { "resumed" },
                trainer.step_count()
            ));
        }
        self.paused = paused_now;
        let interrupted = &self.interrupted;
        let stop = || interrupted.load(Ordering::SeqCst);
        let paused = self.viewer.paused();
        let field = match trainer.drawn_field() {
            Ok(field) => field,
            Err(e) => {
                self.on_message(&format!("viewer: the field cannot be drawn: {e}"));
                return ObserverAction::Continue;
            }
        };
        let action = self
            .renderer
            .between_steps(&self.viewer, &field, trainer.step_count(), &stop);
        // The time paused does not count towards the speed.
        if let Some((_, step)) = self.last.filter(|_| paused) {
            self.last = Some((Instant::now(), step));
        }
        match action {
            LiveAction::Continue => ObserverAction::Continue,
            LiveAction::Checkpoint => ObserverAction::Checkpoint,
        }
    }

    fn stop_requested(&self) -> bool {
        self.inner.stop_requested()
    }
}
