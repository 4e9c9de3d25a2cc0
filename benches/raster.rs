//! `cargo bench --bench raster`: the tile rasterizer on the real Mip-NeRF 360 *garden* scene
//! (`garden_points/test_garden.npz` under `EMBER_DATA_DIR`, default `../shared/data`; the scene
//! is gsplat's test setup, see `examples/common/garden.rs`). For each of the file's 3 cameras, at
//! its own 648x420 intrinsics and at 800x800, first the CPU kernels on host arrays:
//! - `forward`: projection forward, binning, raster forward (f32);
//! - `forward_backward`: that, then raster backward (a fixed random `v_rgb`) and projection
//!   backward;
//! - for camera 0 at 648x420, each stage alone (`stages_cam0_648x420`): `project_forward`,
//!   `bin` (the per-tile depth sort), `raster_forward`, `raster_backward`, `project_backward`.
//!
//! Then the same scene through the public op, `ember::field::render` (projection, binning and
//! compositing as Burn ops; forward+backward under `Autodiff` with a loss `sum(v_rgb rgb)` and
//! the gradients of every parameter), on ndarray and, when compiled in, on cuda
//! (`--features cuda`) and wgpu (`--features wgpu` with `EMBER_BENCH_WGPU=1`: on a machine
//! without a GPU wgpu runs on lavapipe, whose timings mean nothing). Each GPU iteration ends
//! with `Backend::sync`.
//!
//! At the end it prints markdown tables of criterion's medians and writes every median as
//! `target/ember-bench/raster.json` (or `$EMBER_BENCH_JSON`), the file `trainer compare` reads.
//! Without the data file it prints `skipped: <path> not found` and exits 0.

#[path = "../examples/common/garden.rs"]
mod garden;

use std::hint::black_box;
use std::path::Path;

use garden::Scene;
use std::time::{Duration, SystemTime};

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use criterion::{Criterion, SamplingMode};
use ember::field::{RenderOptions, render};
use ember::kernels::SplatBackend;
use ember::kernels::project::cpu::{self as project, ProjectOutputGrads};
use ember::kernels::project::{CameraParams, ProjectOptions};
use ember::kernels::raster::cpu::{self as raster, RasterArrays, RasterOutputGrads};
use ember_bench::criterion::{ReportInfo, criterion_dir, finish, median_ms};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use garden::SEED;

const BACKGROUND: [f32; 3] = [0.0; 3];

const OPTIONS: ProjectOptions = ProjectOptions {
    near: 0.01,
    eps2d: 0.3,
    antialiased: false,
    sh_degree: Some(0),
    view_dir_grad: true,
};

type Failure = String;

/// Projection forward, binning, raster forward; returns all three results.
fn forward(
    s: &Scene,
    cam: &CameraParams,
) -> Result<
    (
        project::ProjectOutputs<f32>,
        raster::Bins,
        raster::RasterOutputs<f32>,
    ),
    Failure,
> {
    let p = project::forward(&s.arrays(), cam, &OPTIONS).map_err(|e| e.to_string())?;
    let bins = raster::bin(&p.xy, &p.depth, &p.radius, cam.width, cam.height)
        .map_err(|e| e.to_string())?;
    let out = raster::forward(&raster_arrays(&p), &bins, BACKGROUND).map_err(|e| e.to_string())?;
    Ok((p, bins, out))
}

fn raster_arrays(p: &project::ProjectOutputs<f32>) -> RasterArrays<'_, f32> {
    RasterArrays {
        xy: &p.xy,
        depth: &p.depth,
        conic: &p.conic,
        color: &p.color,
        opacity: &p.opacity,
    }
}

/// [`forward`], raster backward with `v_rgb` (no alpha or depth gradient), projection backward.
fn forward_backward(
    s: &Scene,
    cam: &CameraParams,
    v_rgb: &[f32],
    zeros: &[f32],
) -> Result<project::ProjectGrads<f32>, Failure> {
    let (p, bins, out) = forward(s, cam)?;
    let grads = RasterOutputGrads {
        rgb: v_rgb,
        alpha: zeros,
        depth: zeros,
    };
    let g = raster::backward(&raster_arrays(&p), &bins, BACKGROUND, &out.replay(), &grads)
        .map_err(|e| e.to_string())?;
    let pg = ProjectOutputGrads {
        xy: &g.xy,
        depth: &g.depth,
        conic: &g.conic,
        color: &g.color,
        opacity: &g.opacity,
    };
    project::backward(&s.arrays(), cam, &OPTIONS, &pg).map_err(|e| e.to_string())
}

struct Case {
    camera: usize,
    cam: CameraParams,
    group: String,
}

/// The CPU kernels of camera `cam` one stage at a time, each on the previous stages' outputs:
/// `project_forward`, `bin` (the per-tile depth sort), `raster_forward`, `raster_backward`,
/// `project_backward`. Returns the group's name.
fn bench_stages(c: &mut Criterion, s: &Scene, cam: &CameraParams, rng: &mut StdRng) -> String {
    let name = format!("stages_cam0_{}x{}", cam.width, cam.height);
    let Ok((p, bins, out)) = forward(s, cam) else {
        return name;
    };
    let pixels = cam.width as usize * cam.height as usize;
    let v_rgb: Vec<f32> = (0..3 * pixels).map(|_| rng.random::<f32>() - 0.5).collect();
    let zeros = vec![0.0f32; pixels];
    let grads = RasterOutputGrads {
        rgb: &v_rgb,
        alpha: &zeros,
        depth: &zeros,
    };
    let replay = out.replay();
    let raster_backward = || {
        raster::backward(&raster_arrays(&p), &bins, BACKGROUND, &replay, &grads)
            .expect("the forward accepted this camera")
    };
    let g = raster_backward();
    let pg = ProjectOutputGrads {
        xy: &g.xy,
        depth: &g.depth,
        conic: &g.conic,
        color: &g.color,
        opacity: &g.opacity,
    };
    let mut group = c.benchmark_group(&name);
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("project_forward", |b| {
        b.iter(|| black_box(project::forward(&s.arrays(), cam, &OPTIONS).is_ok()))
    });
    group.bench_function("bin", |b| {
        b.iter(|| black_box(raster::bin(&p.xy, &p.depth, &p.radius, cam.width, cam.height).is_ok()))
    });
    group.bench_function("raster_forward", |b| {
        b.iter(|| black_box(raster::forward(&raster_arrays(&p), &bins, BACKGROUND).is_ok()))
    });
    group.bench_function("raster_backward", |b| {
        b.iter(|| black_box(raster_backward()))
    });
    group.bench_function("project_backward", |b| {
        b.iter(|| black_box(project::backward(&s.arrays(), cam, &OPTIONS, &pg).is_ok()))
    });
    group.finish();
    name
}

/// The markdown table of [`bench_stages`]' medians.
fn print_stages(root: &Path, group: &str) {
    println!("\n### CPU kernels by stage ({group})\n");
    println!("| stage | median (ms) |");
    println!("|---|---|");
    for stage in [
        "project_forward",
        "bin",
        "raster_forward",
        "raster_backward",
        "project_backward",
    ] {
        let ms = median_ms(root, &format!("{group}/{stage}"));
        println!(
            "| {stage} | {} |",
            ms.map_or("n/a".into(), |v| format!("{v:.2}"))
        );
    }
}

/// `render` forward, then forward+backward, of every case on backend `B`.
fn bench_render<B: SplatBackend>(
    c: &mut Criterion,
    backend: &str,
    device: &B::Device,
    scene: &Scene,
    cases: &[Case],
) {
    let options = RenderOptions {
        project: OPTIONS,
        background: BACKGROUND,
        ..RenderOptions::default()
    };
    let plain = garden::field::<B>(scene, device);
    let tracked = garden::field::<Autodiff<B>>(scene, device);
    let mut rng = StdRng::seed_from_u64(SEED ^ 2);
    for case in cases {
        let cam = &case.cam;
        let (h, w) = (cam.height as usize, cam.width as usize);
        let v: Vec<f32> = (0..3 * h * w).map(|_| rng.random::<f32>() - 0.5).collect();
        let v = Tensor::<Autodiff<B>, 3>::from_data(TensorData::new(v, [h, w, 3]), device);
        let forward = || match render(&plain, cam, &options) {
            Ok(out) => {
                black_box(out.rgb);
                B::sync(device).is_ok()
            }
            Err(_) => false,
        };
        let forward_backward = || match render(&tracked, cam, &options) {
            Ok(out) => {
                let grads = (out.rgb * v.clone()).sum().backward();
                black_box(tracked.means.grad(&grads));
                B::sync(device).is_ok()
            }
            Err(_) => false,
        };
        if !(forward() && forward_backward()) {
            eprintln!("render_{backend}_{}: render failed", case.group);
            std::process::exit(1);
        }
        let mut group = c.benchmark_group(format!("render_{backend}_{}", case.group));
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function("forward", |b| b.iter(|| black_box(forward())));
        group.bench_function("forward_backward", |b| {
            b.iter(|| black_box(forward_backward()))
        });
        group.finish();
    }
}

/// The markdown table of one set of groups (`prefix` + each case's group name).
fn print_table(root: &Path, title: &str, prefix: &str, cases: &[Case]) {
    println!("\n{title}\n");
    println!("| camera | resolution | forward (ms) | forward+backward (ms) | FPS (forward) |");
    println!("|---|---|---|---|---|");
    let show = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |ms| format!("{ms:.2}"));
    for case in cases {
        let group = format!("{prefix}{}", case.group);
        let fwd = median_ms(root, &format!("{group}/forward"));
        let both = median_ms(root, &format!("{group}/forward_backward"));
        println!(
            "| {} | {}x{} | {} | {} | {} |",
            case.camera,
            case.cam.width,
            case.cam.height,
            show(fwd),
            show(both),
            fwd.map_or_else(|| "n/a".to_string(), |ms| format!("{:.1}", 1000.0 / ms)),
        );
    }
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let path = garden::data_file();
    if !path.is_file() {
        println!("skipped: {} not found", path.display());
        return;
    }
    let garden = match garden::load(&path) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("raster bench: cannot read {}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let scene = garden::scene(&garden);
    println!(
        "garden: {} points, {} inside [-2, 2]^3",
        garden.means.len() / 3,
        scene.len()
    );

    let cameras = garden.viewmats.len() / 16;
    let mut cases = Vec::new();
    for i in 0..cameras {
        for square in [None, Some(800)] {
            let cam = garden::camera(&garden, i, square);
            let group = format!("raster_cam{i}_{}x{}", cam.width, cam.height);
            cases.push(Case {
                camera: i,
                cam,
                group,
            });
        }
    }

    let mut c = Criterion::default()
        .output_directory(&root)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut rng = StdRng::seed_from_u64(SEED ^ 1);
    for case in &cases {
        let cam = &case.cam;
        match forward(&scene, cam) {
            Ok((p, bins, _)) => println!(
                "{}: {} visible Gaussians, {} tile-Gaussian pairs",
                case.group,
                p.radius.chunks_exact(2).filter(|r| r != &[0, 0]).count(),
                bins.ids().len()
            ),
            Err(e) => {
                eprintln!("{}: refused: {e}", case.group);
                std::process::exit(1);
            }
        }
        let pixels = cam.width as usize * cam.height as usize;
        let v_rgb: Vec<f32> = (0..3 * pixels).map(|_| rng.random::<f32>() - 0.5).collect();
        let zeros = vec![0.0f32; pixels];
        if let Err(e) = forward_backward(&scene, cam, &v_rgb, &zeros) {
            eprintln!("{}: backward refused: {e}", case.group);
            std::process::exit(1);
        }
        let mut group = c.benchmark_group(&case.group);
        // Each iteration takes tens to hundreds of ms: flat sampling runs `sample_size`
        // iterations, not the 55 of linear sampling.
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function("forward", |b| {
            b.iter(|| black_box(forward(&scene, cam).is_ok()))
        });
        group.bench_function("forward_backward", |b| {
            b.iter(|| black_box(forward_backward(&scene, cam, &v_rgb, &zeros).is_ok()))
        });
        group.finish();
    }
    let stages = bench_stages(&mut c, &scene, &cases[0].cam, &mut rng);
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
    let mut backends = vec!["ndarray"];
    bench_render::<ember::backend::Cpu>(&mut c, "ndarray", &Default::default(), &scene, &cases);
    #[cfg(feature = "cuda")]
    {
        bench_render::<ember::backend::Cuda>(&mut c, "cuda", &Default::default(), &scene, &cases);
        backends.push("cuda");
    }
    #[cfg(feature = "wgpu")]
    if std::env::var_os("EMBER_BENCH_WGPU").is_some() {
        bench_render::<ember::backend::Wgpu>(&mut c, "wgpu", &Default::default(), &scene, &cases);
        backends.push("wgpu");
    }
    c.final_summary();

    print_table(
        &root,
        "CPU kernels (`raster::cpu`, host arrays)",
        "",
        &cases,
    );
    print_stages(&root, &stages);
    for backend in &backends {
        print_table(
            &root,
            &format!("`render` on {backend}"),
            &format!("render_{backend}_"),
            &cases,
        );
    }
    let input = path.display().to_string();
    let info = ReportInfo {
        bench: "raster",
        backend: &backends.join(","),
        input: &input,
        gaussians: scene.len(),
    };
    finish(&root, started, &info);
}
