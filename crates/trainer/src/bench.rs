//! `trainer bench render` (frames per second of a splat file over view sets, JSON out) and
//! `trainer compare` (two such JSON files side by side).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use ember::data::{Dataset, DatasetOptions, read_splats};
use ember::field::{Camera, RenderOptions, render};
use ember::kernels::SplatBackend;
use ember::splats::field_from_splats;
use ember_train::scene::look_at;
use ember_train::write_atomically;
use serde::{Deserialize, Serialize};

/// `trainer bench render --ply FILE [--data PATH] [--resolution WxH]`.
#[derive(Args, Debug)]
pub struct RenderBenchArgs {
    /// The splats to render (3DGS PLY, .splat, SPZ, compressed PLY).
    #[arg(long, value_name = "FILE")]
    ply: PathBuf,
    /// A dataset whose train and test views are rendered (at their own sizes).
    #[arg(long, value_name = "PATH")]
    data: Option<PathBuf>,
    /// Side of the standard orbit set: 8 views around the splats' centre.
    #[arg(long, value_name = "WxH", default_value = "800x800", value_parser = parse_resolution)]
    resolution: (u32, u32),
    /// Timed renders per view (after one warm-up render of each set).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Where the JSON results go.
    #[arg(long, value_name = "FILE", default_value = "bench-render.json")]
    json: PathBuf,
}

fn parse_resolution(text: &str) -> Result<(u32, u32), String> {
    let (w, h) = text.split_once('x').ok_or("expected WxH, e.g. 800x800")?;
    let side = |v: &str| -> Result<u32, String> {
        match v.trim().parse::<u32>() {
            Ok(0) | Err(_) => Err(format!("`{v}` is not a positive integer")),
            Ok(n) => Ok(n),
        }
    };
    Ok((side(w)?, side(h)?))
}

/// One set's timings, in the JSON `trainer compare` reads.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct BenchResult {
    /// The set (`train`, `test`, `orbit_800x800`).
    pub name: String,
    /// Frames timed.
    pub frames: usize,
    /// Median time per frame, ms.
    pub median_ms: f64,
    /// Fastest frame, ms.
    pub min_ms: f64,
    /// Slowest frame, ms.
    pub max_ms: f64,
    /// `1000 / median_ms`.
    pub fps: f64,
}

/// A benchmark file: what ran, where, and its results.
#[derive(Serialize, Deserialize, Debug)]
pub struct BenchFile {
    /// The command that wrote it.
    pub tool: String,
    /// The backend's name.
    pub backend: String,
    /// The splats rendered.
    pub input: String,
    /// Gaussians rendered.
    pub gaussians: usize,
    /// Peak resident host memory of the process, MiB (`VmHWM`; `null` where unknown).
    pub peak_host_mib: Option<f64>,
    /// One entry per view set.
    pub results: Vec<BenchResult>,
}

/// The process's peak resident memory, MiB, from `/proc/self/status` (Linux).
fn peak_host_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// 8 cameras on a circle around `centre` (radius `1.5 x` the bounds' half-diagonal, slightly
/// above), looking at it, `width x height` pixels.
fn orbit(centre: [f64; 3], radius: f64, (width, height): (u32, u32)) -> Vec<Camera> {
    (0..8)
        .map(|k| {
            let angle = k as f64 * std::f64::consts::TAU / 8.0;
            let eye = [
                centre[0] + radius * angle.cos(),
                centre[1] + radius * angle.sin(),
                centre[2] + 0.3 * radius,
            ];
            let mut camera = look_at(eye, centre, width.max(height));
            camera.width = width;
            camera.height = height;
            camera.cx = f64::from(width) / 2.0;
            camera.cy = f64::from(height) / 2.0;
            camera
        })
        .collect()
}

/// Renders every camera `repeats` times (after one untimed pass) and summarises.
fn time_set<B: SplatBackend>(
    name: &str,
    field: &ember::field::GaussianField<B>,
    cameras: &[Camera],
    repeats: usize,
    device: &B::Device,
) -> Result<BenchResult> {
    let options = RenderOptions::default();
    let once = |camera: &Camera| -> Result<f64> {
        let started = Instant::now();
        let out = render(field, camera, &options).context("rendering")?;
        // Reading one value back waits for the device.
        let _ = out.alpha.sum().into_scalar();
        B::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok(started.elapsed().as_secs_f64() * 1e3)
    };
    for camera in cameras {
        once(camera)?;
    }
    let mut times = Vec::with_capacity(cameras.len() * repeats);
    for _ in 0..repeats {
        for camera in cameras {
            times.push(once(camera)?);
        }
    }
    if times.is_empty() {
        bail!("{name}: nothing to time");
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    Ok(BenchResult {
        name: name.into(),
        frames: times.len(),
        median_ms: median,
        min_ms: times[0],
        max_ms: times[times.len() - 1],
        fps: 1000.0 / median,
    })
}

/// `trainer bench render` on backend `B`.
pub fn bench_render<B: SplatBackend>(args: &RenderBenchArgs, device: &B::Device) -> Result<()> {
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    let splats =
        read_splats(&args.ply).with_context(|| format!("reading {}", args.ply.display()))?;
    let field = field_from_splats::<B>(&splats, device)
        .with_context(|| format!("{} as a field", args.ply.display()))?;
    let mut sets: Vec<(String, Vec<Camera>)> = Vec::new();
    if let Some(data) = &args.data {
        let dataset = Dataset::load(data, &DatasetOptions::default())
            .with_context(|| format!("loading {}", data.display()))?;
        sets.push((
            "train".into(),
            dataset.train.iter().map(|v| v.camera()).collect(),
        ));
        sets.push((
            "test".into(),
            dataset.test.iter().map(|v| v.camera()).collect(),
        ));
    }
    let (lo, hi) = splats
        .means
        .iter()
        .fold(([f64::MAX; 3], [f64::MIN; 3]), |(lo, hi), m| {
            (
                std::array::from_fn(|k| lo[k].min(f64::from(m[k]))),
                std::array::from_fn(|k| hi[k].max(f64::from(m[k]))),
            )
        });
    if splats.is_empty() {
        bail!("{} holds no Gaussians", args.ply.display());
    }
    let centre: [f64; 3] = std::array::from_fn(|k| 0.5 * (lo[k] + hi[k]));
    let half_diagonal = (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt() / 2.0;
    let (w, h) = args.resolution;
    sets.push((
        format!("orbit_{w}x{h}"),
        orbit(centre, 1.5 * half_diagonal.max(1e-3), args.resolution),
    ));

    println!("| set | frames | median (ms) | min (ms) | max (ms) | FPS |");
    println!("|---|---|---|---|---|---|");
    let mut results = Vec::new();
    for (name, cameras) in &sets {
        if cameras.is_empty() {
            continue;
        }
        let r = time_set::<B>(name, &field, cameras, args.repeats, device)?;
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
            r.name, r.frames, r.median_ms, r.min_ms, r.max_ms, r.fps
        );
        results.push(r);
    }
    let file = BenchFile {
        tool: "trainer bench render".into(),
        backend: B::name(device),
        input: args.ply.display().to_string(),
        gaussians: splats.len(),
        peak_host_mib: peak_host_mib(),
        results,
    };
    if let Some(mib) = file.peak_host_mib {
        println!("peak host memory: {mib:.0} MiB");
    }
    let json = serde_json::to_string_pretty(&file).context("serialising the results")?;
    write_atomically(&args.json, json.as_bytes())?;
    println!("wrote {}", args.json.display());
    Ok(())
}

fn read_bench(path: &Path) -> Result<BenchFile> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a `trainer bench` result file (expected tool, backend, input, gaussians, results)",
            path.display()
        )
    })
}

/// `trainer compare A.json B.json`: the sets of both side by side with B's speed-up over A.
pub fn compare(a: &Path, b: &Path) -> Result<()> {
    let (fa, fb) = (read_bench(a)?, read_bench(b)?);
    println!(
        "A: {} ({}, {}, {} Gaussians)",
        a.display(),
        fa.tool,
        fa.backend,
        fa.gaussians
    );
    println!(
        "B: {} ({}, {}, {} Gaussians)",
        b.display(),
        fb.tool,
        fb.backend,
        fb.gaussians
    );
    println!("\n| set | A median (ms) | B median (ms) | speed-up (A / B) |");
    println!("|---|---|---|---|");
    for ra in &fa.results {
        match fb.results.iter().find(|rb| rb.name == ra.name) {
            Some(rb) => println!(
                "| {} | {:.2} | {:.2} | {:.2}x |",
                ra.name,
                ra.median_ms,
                rb.median_ms,
                ra.median_ms / rb.median_ms
            ),
            None => println!("| {} | {:.2} | - | only in A |", ra.name, ra.median_ms),
        }
    }
    for rb in fb
        .results
        .iter()
        .filter(|rb| !fa.results.iter().any(|ra| ra.name == rb.name))
    {
        println!("| {} | - | {:.2} | only in B |", rb.name, rb.median_ms);
    }
    Ok(())
}
