//! `trainer bench lod`: level of detail against the full render, over orbits at several
//! multiples of the distance the viewer frames the scene at.
//!
//! Per distance, every view of the orbit is rendered full (the leaves, `render_batch_images`)
//! and with level of detail (`render_lod_images` at `--threshold`: the cut included), each read
//! back as a viewer reads its frames, alternating the two `--repeats` times (which of the two
//! goes first alternates from pair to pair). A row holds the medians of the two times, their
//! ratio, the median time of the cut alone (timed apart), the mean number of Gaussians the cut
//! drew, the mean bound on the leaves it may leave out (below the minimum saving the CPU skips
//! weighing the nodes), and the mean PSNR of the LOD image against the full one (and its worst view).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use ember_data::lod::is_hierarchy;
use ember_data::{HierarchyConfig, build_hierarchy, read_hierarchy, read_splats};
use ember_field::splats::field_from_splats;
use ember_field::{
    DEFAULT_LOD_MIN_SAVING, DEFAULT_LOD_THRESHOLD, GaussianField, GaussianHierarchy, RenderOptions,
    drawn_cut, render_batch_images, render_lod_images,
};
use ember_kernels::{CameraParams, SplatBackend};
use ember_viewer::{Mode, SceneInfo};
use serde::Serialize;

use super::view::Orbit;

/// `trainer bench lod --ply FILE [--threshold PX] [--json OUT]`.
#[derive(Args, Debug)]
pub struct LodBenchArgs {
    /// A splat file (its hierarchy is built first, and timed) or a hierarchy from `trainer lod
    /// build`.
    #[arg(long, value_name = "FILE")]
    ply: PathBuf,
    /// The level-of-detail threshold, pixels.
    #[arg(long, default_value_t = DEFAULT_LOD_THRESHOLD)]
    threshold: f32,
    /// Draw the leaves where the cut saves less than this share of them (on the CPU; the
    /// viewer's default); 0 always draws the cut.
    #[arg(long, value_name = "SHARE", default_value_t = DEFAULT_LOD_MIN_SAVING)]
    min_saving: f32,
    /// Frame size.
    #[arg(long, value_name = "WxH", default_value = "800x600", value_parser = super::parse_resolution)]
    resolution: (u32, u32),
    /// Views per orbit.
    #[arg(long, default_value_t = 8)]
    views: usize,
    /// Timed renders of each view, each way (after one untimed pass).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// The orbits' distances, in multiples of the framing distance.
    #[arg(
        long,
        value_name = "K,..",
        value_delimiter = ',',
        default_value = "1,2,4,8"
    )]
    distances: Vec<f64>,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-lod.json"
    )]
    json: PathBuf,
}

/// One distance's results: the JSON row.
#[derive(Debug, Clone, Serialize)]
struct Row {
    /// Multiple of the framing distance.
    distance: f64,
    /// Median ms of a full render (read back).
    full_ms: f64,
    /// Median ms of a level-of-detail render (cut and read-back included).
    lod_ms: f64,
    /// `full_ms / lod_ms`.
    speedup: f64,
    /// Median ms of the cut alone (`drawn_cut`: the bound, the weights, the gather or the
    /// leaves), measured apart from the renders.
    cut_ms: f64,
    /// Gaussians the cut drew, mean over the views.
    drawn: f64,
    /// Leaves the hierarchy's bounds let the cut leave out at most, mean over the views
    /// (`GaussianHierarchy::merged_leaves_at_most`): where that is under `min_saving` of the
    /// leaves, the CPU draws the leaves without weighing a node.
    left_out_at_most: f64,
    /// PSNR of the LOD image against the full one, dB, mean over the views.
    psnr_vs_full: f64,
    /// The lowest PSNR of a view.
    psnr_min: f64,
}

/// The JSON file.
#[derive(Debug, Serialize)]
struct Report {
    tool: &'static str,
    backend: String,
    input: String,
    threshold: f32,
    min_saving: f32,
    width: u32,
    height: u32,
    views: usize,
    leaves: usize,
    nodes: usize,
    /// Time to build the hierarchy, ms (absent when read from a file).
    build_ms: Option<f64>,
    peak_host_mib: Option<f64>,
    rows: Vec<Row>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(x.clamp(0.0, 1.0) - y.clamp(0.0, 1.0)).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (1.0 / mse).log10()
    }
}

/// A render read back to the host, and its milliseconds.
fn timed<B: SplatBackend>(
    render: impl FnOnce() -> Result<burn::tensor::Tensor<B, 4>>,
) -> Result<(Vec<f32>, f64)> {
    let started = Instant::now();
    let rgb = render()?
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| anyhow!("reading the image back: {e:?}"))?;
    Ok((rgb, started.elapsed().as_secs_f64() * 1e3))
}

/// `trainer bench lod` on backend `B`.
pub fn bench_lod<B: SplatBackend>(args: &LodBenchArgs, device: &B::Device) -> Result<()> {
    if args.views == 0 || args.repeats == 0 || args.distances.is_empty() {
        bail!("--views, --repeats and --distances need at least one each");
    }
    if !(0.0..1.0).contains(&args.min_saving) {
        bail!(
            "--min-saving {}: a share of the leaves, at least 0 and under 1",
            args.min_saving
        );
    }
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        bail!(
            "--threshold {}: a number of pixels, 0 or more",
            args.threshold
        );
    }
    let path = &args.ply;
    let (hierarchy, build_ms) = if is_hierarchy(path) {
        (read_hierarchy(path)?, None)
    } else {
        let splats = read_splats(path).with_context(|| format!("reading {}", path.display()))?;
        let started = Instant::now();
        let hierarchy = build_hierarchy(&splats, &HierarchyConfig::default(), path)?;
        (hierarchy, Some(started.elapsed().as_secs_f64() * 1e3))
    };
    let leaves = hierarchy.leaf_splats();
    let means: Vec<f32> = leaves.means.as_flattened().to_vec();
    let info = SceneInfo::framed(
        path.display().to_string(),
        Mode::Scene,
        leaves.sh_degree,
        &means,
        Vec::new(),
        None,
    );
    let field: GaussianField<B> = field_from_splats(&leaves, device)?;
    let lod = GaussianHierarchy::<B>::from_splat_hierarchy(&hierarchy, device)?;
    drop(leaves);
    println!(
        "{}: {} Gaussians, a hierarchy of {} nodes{}; framing distance {:.3}, threshold {} px, \
         {} views of {}x{} per distance, on {}",
        path.display(),
        hierarchy.leaves,
        hierarchy.len(),
        build_ms.map_or(String::new(), |ms| format!(" (built in {:.2} s)", ms / 1e3)),
        info.radius,
        args.threshold,
        args.views,
        args.resolution.0,
        args.resolution.1,
        B::name(device)
    );
    drop(hierarchy);
    let full_options = RenderOptions::default();
    let lod_options = full_options
        .with_lod_threshold(args.threshold)
        .with_lod_min_saving(args.min_saving);
    let mut rows = Vec::new();
    println!(
        "| distance | full ms | LOD ms | speed-up | cut ms | drawn | left out at most (bound) | PSNR vs full (min) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &distance in &args.distances {
        let orbit = Orbit {
            radius: info.radius * distance,
            ..Orbit::of(&info)
        };
        let cameras: Vec<CameraParams> = (0..args.views)
            .map(|i| orbit.camera(i, args.views, args.resolution.0, args.resolution.1))
            .collect();
        let full = |camera: &CameraParams| {
            timed::<B>(|| {
                Ok(render_batch_images(&field, core::slice::from_ref(camera), &full_options)?.rgb)
            })
        };
        let with_lod = |camera: &CameraParams| {
            timed::<B>(|| Ok(render_lod_images(&lod, camera, &lod_options)?.rgb))
        };
        let (mut full_ms, mut lod_ms, mut psnrs, mut drawn, mut left_out) =
            (Vec::new(), Vec::new(), Vec::new(), 0usize, 0usize);
        for camera in &cameras {
            let (want, _) = full(camera)?;
            let (got, _) = with_lod(camera)?;
            psnrs.push(psnr(&got, &want));
            drawn += drawn_cut(&lod, camera, &lod_options)?.drawn();
            left_out += lod.merged_leaves_at_most(camera, args.threshold);
        }
        let mut cut_ms = Vec::new();
        for _ in 0..args.repeats {
            for camera in &cameras {
                let started = Instant::now();
                drawn_cut(&lod, camera, &lod_options)?;
                cut_ms.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        // Which way goes first alternates: with the full render always first, the medians at
        // 1x on biker put the cut's render 3.7 ms behind it, with the cut first 0.7 ms (its own
        // cost, 0.9 ms, measured alone).
        for repeat in 0..args.repeats {
            for (i, camera) in cameras.iter().enumerate() {
                if (repeat + i) % 2 == 0 {
                    full_ms.push(full(camera)?.1);
                    lod_ms.push(with_lod(camera)?.1);
                } else {
                    lod_ms.push(with_lod(camera)?.1);
                    full_ms.push(full(camera)?.1);
                }
            }
        }
        let (full_ms, lod_ms) = (median(full_ms), median(lod_ms));
        let finite: Vec<f64> = psnrs.iter().map(|p| p.min(99.0)).collect();
        let row = Row {
            distance,
            full_ms,
            lod_ms,
            speedup: full_ms / lod_ms,
            cut_ms: median(cut_ms),
            drawn: drawn as f64 / cameras.len() as f64,
            left_out_at_most: left_out as f64 / cameras.len() as f64,
            psnr_vs_full: finite.iter().sum::<f64>() / finite.len() as f64,
            psnr_min: finite.iter().copied().fold(f64::INFINITY, f64::min),
        };
        println!(
            "| {}x | {:.1} | {:.1} | {:.2}x | {:.2} | {:.0} | {:.0} | {:.1} dB ({:.1}) |",
            row.distance,
            row.full_ms,
            row.lod_ms,
            row.speedup,
            row.cut_ms,
            row.drawn,
            row.left_out_at_most,
            row.psnr_vs_full,
            row.psnr_min
        );
        rows.push(row);
    }
    let report = Report {
        tool: "trainer bench lod",
        backend: B::name(device),
        input: path.display().to_string(),
        threshold: args.threshold,
        min_saving: args.min_saving,
        width: args.resolution.0,
        height: args.resolution.1,
        views: args.views,
        leaves: lod.leaves,
        nodes: lod.num_nodes(),
        build_ms,
        peak_host_mib: ember_bench::peak_host_mib(),
        rows,
    };
    if let Some(parent) = args.json.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&report)?;
    ember_train::write_atomically(&args.json, text.as_bytes())
        .with_context(|| format!("writing {}", args.json.display()))?;
    println!("wrote {}", args.json.display());
    Ok(())
}
