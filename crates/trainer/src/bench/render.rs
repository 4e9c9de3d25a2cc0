//! `trainer bench render`: frames per second of a splat file over view sets, and with
//! `--batches` batched renders against a loop of single ones; JSON out.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use ember_bench::{BenchFile, BenchResult, peak_host_mib};
use ember_data::{Dataset, DatasetOptions, read_splats};
use ember_field::splats::field_from_splats;
use ember_field::{Camera, RenderOptions, render, render_batch};
use ember_kernels::SplatBackend;
use ember_train::scene::look_at;

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
    #[arg(long, value_name = "WxH", default_value = "800x800", value_parser = super::parse_resolution)]
    resolution: (u32, u32),
    /// Timed renders per view (after one warm-up render of each set).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Also time the first set in batches of these sizes (e.g. `1,4,16`): `render_batch` of
    /// `B` consecutive cameras against `B` single renders, in milliseconds per view.
    #[arg(long, value_name = "B,..", value_delimiter = ',')]
    batches: Vec<usize>,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-render.json"
    )]
    json: PathBuf,
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

/// Renders every camera `repeats` times (after one untimed pass) and summarises. Each render
/// waits for the device by reading one value back; with `read_back` it reads the whole image
/// back to the host instead (what a viewer or an image writer pays).
fn time_set<B: SplatBackend>(
    name: &str,
    field: &ember_field::GaussianField<B>,
    cameras: &[Camera],
    repeats: usize,
    read_back: bool,
    device: &B::Device,
) -> Result<BenchResult> {
    let options = RenderOptions::default();
    let once = |camera: &Camera| -> Result<f64> {
        let started = Instant::now();
        let out = render(field, camera, &options).context("rendering")?;
        if read_back {
            out.rgb
                .try_into_data()
                .map_err(|e| anyhow::anyhow!("reading the image back: {e:?}"))?;
        } else {
            let _ = out.alpha.sum().into_scalar();
        }
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
    BenchResult::from_samples(name, &times).with_context(|| format!("{name}: nothing to time"))
}

/// Times `render_batch` over consecutive groups of `batch` cameras of `cameras` (wrapping
/// around, `repeats` rounds of the whole set after one untimed group) against the same groups
/// rendered one camera at a time, alternating the two so that both see the same machine
/// state. Returns `(batched, loop)`, each sample the milliseconds per view of one group.
fn time_batches<B: SplatBackend>(
    name: &str,
    field: &ember_field::GaussianField<B>,
    cameras: &[Camera],
    batch: usize,
    repeats: usize,
    device: &B::Device,
) -> Result<(BenchResult, BenchResult)> {
    let options = RenderOptions::default();
    let sync = || B::sync(device).map_err(|e| anyhow::anyhow!("{e:?}"));
    let batched = |group: &[Camera]| -> Result<f64> {
        let started = Instant::now();
        let out = render_batch(field, group, &options).context("rendering a batch")?;
        let _ = out.alpha.sum().into_scalar();
        sync()?;
        Ok(started.elapsed().as_secs_f64() * 1e3 / group.len() as f64)
    };
    let looped = |group: &[Camera]| -> Result<f64> {
        let started = Instant::now();
        for camera in group {
            let out = render(field, camera, &options).context("rendering")?;
            let _ = out.alpha.sum().into_scalar();
        }
        sync()?;
        Ok(started.elapsed().as_secs_f64() * 1e3 / group.len() as f64)
    };
    let groups = (cameras.len() * repeats).div_ceil(batch).max(1);
    let group = |g: usize| -> Vec<Camera> {
        (0..batch)
            .map(|j| cameras[(g * batch + j) % cameras.len()])
            .collect()
    };
    batched(&group(0))?;
    looped(&group(0))?;
    let (mut batch_ms, mut loop_ms) = (Vec::new(), Vec::new());
    for g in 0..groups {
        let cams = group(g);
        batch_ms.push(batched(&cams)?);
        loop_ms.push(looped(&cams)?);
    }
    let result = |label: &str, ms: &[f64]| {
        BenchResult::from_samples(format!("{name} B={batch} ({label}, per view)"), ms)
            .with_context(|| format!("{name}: nothing to time"))
    };
    Ok((result("batched", &batch_ms)?, result("loop", &loop_ms)?))
}

/// `trainer bench render` on backend `B`.
pub fn bench_render<B: SplatBackend>(args: &RenderBenchArgs, device: &B::Device) -> Result<()> {
    if args.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    if args.batches.contains(&0) {
        bail!("--batches: every batch size must be at least 1");
    }
    let mut inputs = vec![args.ply.as_path()];
    inputs.extend(args.data.as_deref());
    crate::guard::not_an_input("--json", &args.json, &inputs)?;
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
        for read_back in [false, true] {
            let name = if read_back {
                format!("{name} (image read back)")
            } else {
                name.clone()
            };
            let r = time_set::<B>(&name, &field, cameras, args.repeats, read_back, device)?;
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                r.name, r.frames, r.median_ms, r.min_ms, r.max_ms, r.fps
            );
            results.push(r);
        }
    }
    if let Some((name, cameras)) = sets.iter().find(|(_, c)| !c.is_empty()) {
        for &batch in &args.batches {
            let (batched, looped) =
                time_batches::<B>(name, &field, cameras, batch, args.repeats, device)?;
            for r in [&batched, &looped] {
                println!(
                    "| {} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                    r.name, r.frames, r.median_ms, r.min_ms, r.max_ms, r.fps
                );
            }
            println!(
                "batch {batch}: batched / loop median per view = {:.3}",
                batched.median_ms / looped.median_ms
            );
            results.extend([batched, looped]);
        }
    }
    let file = BenchFile {
        tool: "trainer bench render".into(),
        backend: B::name(device),
        input: args.ply.display().to_string(),
        gaussians: splats.len(),
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    super::write_bench_file(&file, &args.json)
}
