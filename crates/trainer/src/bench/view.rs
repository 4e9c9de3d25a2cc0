//! `trainer bench view`: the viewer as a page sees it, and what it costs a training run.
//!
//! A WebSocket client in this process asks for frames of an orbit around the scene, one at a
//! time (the next request when the previous frame arrived), as a page does while the camera
//! moves. Latency is from the request sent to the frame received: render, read-back, JPEG
//! encoding and the socket, not the browser's decoding. The renderer's share of it says
//! whether the renderer or the encoder limits the frame rate.
//!
//! With `--train`, the config's training steps are timed twice over (alternating, fresh
//! trainers from the same seed): alone, and with the live viewer and that client asking for a
//! frame all the time, the worst case of one connected page.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use burn::backend::Autodiff;
use clap::Args;
use ember_bench::{BenchFile, BenchResult, peak_host_mib};
use ember_kernels::{CameraParams, SplatBackend};
use ember_train::{TrainScene, Trainer};
use ember_viewer::{FrameHeader, LiveRenderer, Mode, SceneInfo, Viewer, ViewerConfig, serve_scene};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::write_bench_file;
use crate::presets::{ConfigArgs, load_config};

/// `trainer bench view SCENE [--data PATH] [--width W --height H] [--frames N] [--train ...]`.
#[derive(Args, Debug)]
pub struct ViewBenchArgs {
    /// A splat file, checkpoint or run folder (as `trainer view` takes).
    scene: PathBuf,
    /// Frame width, pixels.
    #[arg(long, default_value_t = 800)]
    width: u32,
    /// Frame height, pixels.
    #[arg(long, default_value_t = 600)]
    height: u32,
    /// Frames timed (after 3 untimed).
    #[arg(long, default_value_t = 60)]
    frames: usize,
    /// The orbit's distance, in multiples of the distance the viewer frames the scene at.
    #[arg(long, default_value_t = 1.0)]
    distance: f64,
    /// Level of detail, as `trainer view` takes it.
    #[command(flatten)]
    lod: crate::view::LodArgs,
    /// Threads encoding each JPEG frame, one horizontal strip each (default: the machine's
    /// parallelism, as `trainer view` uses).
    #[arg(long, value_name = "N")]
    encode_threads: Option<usize>,
    /// Also time training steps of `--config` with and without a page asking for frames.
    #[arg(long)]
    train: bool,
    /// The training run for `--train` (`--steps`: timed steps per pass, default 30). Its
    /// `--data` also frames the orbit (its cameras' radius and up); without it, the Gaussians'
    /// spread does.
    #[command(flatten)]
    pub(crate) run: ConfigArgs,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-view.json"
    )]
    json: PathBuf,
}

/// The camera `index` of `count` on a circle around the scene, a little above it, framed as
/// the viewer's hello says (its `target`, `up` and `radius`, times `distance`).
fn orbit_camera(
    hello: &Value,
    distance: f64,
    index: usize,
    count: usize,
    width: u32,
    height: u32,
) -> CameraParams {
    let vector = |key: &str| -> [f64; 3] {
        let v = &hello[key];
        [0, 1, 2].map(|i| v[i].as_f64().unwrap_or(0.0))
    };
    let radius = distance * hello["radius"].as_f64().unwrap_or(1.0);
    let orbit = Orbit {
        target: vector("target"),
        up: vector("up"),
        radius,
    };
    orbit.camera(index, count, width, height)
}

/// A circle of cameras around a scene, a little above it, looking at its centre (the orbit
/// `trainer bench view` asks the viewer for, and `trainer bench lod` renders at several
/// distances).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Orbit {
    /// What the cameras look at, world units.
    pub target: [f64; 3],
    /// The scene's up direction.
    pub up: [f64; 3],
    /// The cameras' distance from `target` (before the `0.3 radius` lift), world units.
    pub radius: f64,
}

impl Orbit {
    /// The orbit the viewer frames `info`'s scene with (its target, up and radius).
    pub(crate) fn of(info: &SceneInfo) -> Orbit {
        Orbit {
            target: info.target,
            up: info.up,
            radius: info.radius,
        }
    }

    /// Camera `index` of `count` around the circle, `width x height` pixels, a 50 degree
    /// vertical field of view.
    pub(crate) fn camera(
        &self,
        index: usize,
        count: usize,
        width: u32,
        height: u32,
    ) -> CameraParams {
        let (target, up, radius) = (self.target, self.up, self.radius);
        let cross = |a: [f64; 3], b: [f64; 3]| {
            [
                a[1] * b[2] - a[2] * b[1],
                a[2] * b[0] - a[0] * b[2],
                a[0] * b[1] - a[1] * b[0],
            ]
        };
        let unit = |v: [f64; 3]| {
            let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt().max(1e-12);
            v.map(|x| x / n)
        };
        let side = if up[0].abs() < 0.9 {
            [1.0, 0.0, 0.0]
        } else {
            [0.0, 1.0, 0.0]
        };
        let e1 = unit(cross(up, side));
        let e2 = cross(up, e1);
        let angle = std::f64::consts::TAU * index as f64 / count as f64;
        let eye: [f64; 3] = [0, 1, 2].map(|i| {
            target[i] + radius * (angle.cos() * e1[i] + angle.sin() * e2[i] + 0.3 * up[i])
        });
        // OpenCV axes: forward to the target, right = forward x up, down = forward x right.
        let forward = unit([0, 1, 2].map(|i| target[i] - eye[i]));
        let right = unit(cross(forward, up));
        let down = cross(forward, right);
        let focal = f64::from(height) / (2.0 * (25f64.to_radians()).tan());
        CameraParams {
            rotation: [right, down, forward]
                .concat()
                .try_into()
                .unwrap_or([0.0; 9]),
            translation: [0.0; 3],
            fx: focal,
            fy: focal,
            cx: f64::from(width) / 2.0,
            cy: f64::from(height) / 2.0,
            width,
            height,
        }
        .with_center(eye)
    }
}

/// One frame's timing as the client saw it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    latency_ms: f64,
    render_ms: f64,
}

/// A client asking for orbit frames one after another, until `frames` arrived (or, with
/// `None`, until `stop`); its samples.
async fn orbit_client(
    address: SocketAddr,
    distance: f64,
    width: u32,
    height: u32,
    frames: Option<usize>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>> {
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{address}/ws"))
        .await
        .context("connecting to the viewer")?;
    let hello: Value = loop {
        match socket.next().await {
            Some(Ok(Message::Text(text))) => break serde_json::from_str(&text)?,
            Some(Ok(_)) => continue,
            other => bail!("no hello from the viewer: {other:?}"),
        }
    };
    let count = frames.unwrap_or(120);
    let mut samples = Vec::new();
    for id in 0.. {
        if frames.is_some_and(|n| id as usize >= n) || stop.load(Ordering::SeqCst) {
            break;
        }
        let camera = orbit_camera(&hello, distance, id as usize, count, width, height);
        let request = json!({"type": "render", "id": id, "camera": camera});
        let sent = Instant::now();
        socket
            .send(Message::Text(request.to_string().into()))
            .await?;
        loop {
            let message = tokio::time::timeout(Duration::from_millis(200), socket.next()).await;
            match message {
                Err(_) if stop.load(Ordering::SeqCst) => return Ok(samples),
                Err(_) => continue,
                Ok(Some(Ok(Message::Binary(bytes)))) => {
                    let (header, _) = FrameHeader::parse(&bytes).map_err(|e| anyhow!(e))?;
                    if header.id == id {
                        samples.push(Sample {
                            latency_ms: sent.elapsed().as_secs_f64() * 1e3,
                            render_ms: header.render_ms,
                        });
                        break;
                    }
                }
                Ok(Some(Ok(Message::Text(text)))) if text.contains("\"error\"") => {
                    bail!("the viewer answered: {text}")
                }
                Ok(Some(Ok(_))) => {}
                Ok(other) => bail!("the viewer closed the connection: {other:?}"),
            }
        }
    }
    Ok(samples)
}

/// Runs `orbit_client` on a thread of its own.
fn client_thread(
    address: SocketAddr,
    distance: f64,
    width: u32,
    height: u32,
    frames: Option<usize>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<Vec<Sample>>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let result = runtime.block_on(orbit_client(
            address,
            distance,
            width,
            height,
            frames,
            stop.clone(),
        ));
        stop.store(true, Ordering::SeqCst);
        result
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `trainer bench view` on backend `Bk`.
pub fn bench_view<Bk: SplatBackend>(args: &ViewBenchArgs, device: &Bk::Device) -> Result<()> {
    if args.frames == 0 {
        bail!("--frames must be at least 1");
    }
    if !(args.distance.is_finite() && args.distance > 0.0) {
        bail!(
            "--distance {}: a positive multiple of the framing distance",
            args.distance
        );
    }
    let scene =
        crate::view::load_scene::<Bk>(&args.scene, args.run.data.as_deref(), &args.lod, device)?;
    let field = scene.field;
    let lod = scene.lod;
    let config = viewer_config(args);
    let viewer = Viewer::start(&config, scene.info, None)?;
    let warmup = 3;
    let stop = Arc::new(AtomicBool::new(false));
    let client = client_thread(
        viewer.address(),
        args.distance,
        args.width,
        args.height,
        Some(warmup + args.frames),
        stop.clone(),
    );
    let started = Instant::now();
    serve_scene(&viewer, &field, lod.as_ref(), None, || {
        stop.load(Ordering::SeqCst)
    });
    let seconds = started.elapsed().as_secs_f64();
    let samples = client
        .join()
        .map_err(|_| anyhow!("the client thread panicked"))??;
    let timed = samples.get(warmup..).unwrap_or_default();
    if timed.is_empty() {
        bail!("no frame arrived");
    }
    let mut latency: Vec<f64> = timed.iter().map(|s| s.latency_ms).collect();
    latency.sort_by(f64::total_cmp);
    let render_ms: Vec<f64> = timed.iter().map(|s| s.render_ms).collect();
    let fps = 1e3 * timed.len() as f64 / latency.iter().sum::<f64>();
    let render_share = render_ms.iter().sum::<f64>() / latency.iter().sum::<f64>();
    let limit = if render_share > 0.5 {
        "the renderer"
    } else {
        "encoding and transport"
    };
    println!(
        "{} Gaussians at {}x{} on {} ({} encoding threads): latency p50 {:.1} ms, p95 {:.1} ms, \
         {fps:.1} FPS; rendering is {:.0}% of the latency, so {limit} limits it ({} frames, \
         {seconds:.1} s)",
        field.num_gaussians(),
        args.width,
        args.height,
        Bk::name(device),
        config.encode_threads,
        percentile(&latency, 0.5),
        percentile(&latency, 0.95),
        100.0 * render_share,
        timed.len()
    );
    let mut results = vec![
        BenchResult::from_samples("frame latency", &latency)
            .context("no frame timed")?
            .with_metric("p95_ms", percentile(&latency, 0.95))
            .with_metric("fps", fps)
            .with_metric("render_share", render_share),
        BenchResult::from_samples("render + read-back", &render_ms).context("no frame timed")?,
    ];
    drop(viewer);
    if args.train {
        results.extend(bench_training::<Bk>(args, device)?);
    }
    let file = BenchFile {
        tool: "trainer bench view".into(),
        backend: Bk::name(device),
        input: format!(
            "{} at {}x{}, {} encoding threads, orbit at {}x the framing distance, {}{}",
            args.scene.display(),
            args.width,
            args.height,
            config.encode_threads,
            args.distance,
            lod.as_ref()
                .map_or("no level of detail".to_string(), |lod| format!(
                    "level of detail at {} px ({} nodes)",
                    lod.threshold,
                    lod.hierarchy.num_nodes()
                )),
            if args.train {
                format!("; training: {}", args.run.origin())
            } else {
                String::new()
            }
        ),
        gaussians: field.num_gaussians(),
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    write_bench_file(&file, &args.json)
}

/// The server's settings for `args`: any free port, its encoding threads.
fn viewer_config(args: &ViewBenchArgs) -> ViewerConfig {
    let defaults = ViewerConfig::default();
    ViewerConfig {
        port: 0,
        encode_threads: args
            .encode_threads
            .unwrap_or(defaults.encode_threads)
            .max(1),
        ..defaults
    }
}

/// Steps per second of the config alone and with a page asking for frames all the time,
/// alternating twice.
fn bench_training<Bk: SplatBackend>(
    args: &ViewBenchArgs,
    device: &Bk::Device,
) -> Result<Vec<BenchResult>> {
    let timed = args.run.steps.unwrap_or(30);
    let warmup = 2;
    let mut config = load_config(&args.run)?;
    config.steps = warmup + timed;
    config.validate()?;
    let scene = Arc::new(TrainScene::load::<Bk>(&config.data, config.seed, device)?);
    let budget = crate::view::live_budget(Bk::name(device).contains("ndarray"));
    let mut alone = Vec::new();
    let mut watched = Vec::new();
    let mut shares = Vec::new();
    for pass in 0..4 {
        let with_viewer = pass % 2 == 1;
        let mut trainer = Trainer::<Autodiff<Bk>>::new(config.clone(), scene.clone(), device)?;
        for _ in 0..warmup {
            trainer.step()?;
        }
        let live = if with_viewer {
            let info = SceneInfo::framed(
                scene.name.clone(),
                Mode::Training,
                config.init.sh_degree,
                &[],
                Vec::new(),
                Some(scene.bounds().0.map(f64::from)),
            );
            let config = viewer_config(args);
            let viewer = Viewer::start(&config, info, None)?;
            let stop = Arc::new(AtomicBool::new(false));
            let client = client_thread(
                viewer.address(),
                1.0,
                args.width,
                args.height,
                None,
                stop.clone(),
            );
            // The page is connected before the clock starts.
            while viewer.connections() == 0 && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            Some((viewer, stop, client, LiveRenderer::new(budget)))
        } else {
            None
        };
        let mut live = live;
        let started = Instant::now();
        for _ in 0..timed {
            trainer.step()?;
            if let Some((viewer, _, _, renderer)) = live.as_mut() {
                renderer.between_steps(
                    viewer,
                    &trainer.drawn_field()?,
                    trainer.step_count(),
                    &|| false,
                );
            }
        }
        Bk::sync(device).map_err(|e| anyhow!("{e:?}"))?;
        let steps_per_s = timed as f64 / started.elapsed().as_secs_f64();
        match live {
            Some((viewer, stop, client, renderer)) => {
                stop.store(true, Ordering::SeqCst);
                let frames = client
                    .join()
                    .map_err(|_| anyhow!("the client thread panicked"))??
                    .len();
                drop(viewer);
                shares.push(renderer.share());
                println!(
                    "training with a page asking for frames: {steps_per_s:.2} steps/s, {frames} \
                     frames, rendering {:.1}% of the training time",
                    100.0 * renderer.share()
                );
                watched.push(steps_per_s);
            }
            None => {
                println!("training alone: {steps_per_s:.2} steps/s");
                alone.push(steps_per_s);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let cost = 1.0 - mean(&watched) / mean(&alone);
    println!(
        "one page connected costs {:.1}% of the training speed ({:.2} against {:.2} steps/s)",
        100.0 * cost,
        mean(&watched),
        mean(&alone)
    );
    let ms = |v: &[f64]| v.iter().map(|s| 1e3 / s).collect::<Vec<_>>();
    Ok(vec![
        BenchResult::from_samples("train step alone", &ms(&alone)).context("no pass")?,
        BenchResult::from_samples("train step, page connected", &ms(&watched))
            .context("no pass")?
            .with_metric("cost", cost)
            .with_metric("render_share", mean(&shares)),
    ])
}
