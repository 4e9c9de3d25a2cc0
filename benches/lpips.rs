//! `cargo bench --bench lpips`: what LPIPS (`ember::train::lpips`, v0.1 AlexNet) costs an
//! evaluation per held-out view, at 400x400 (lego) and 800x800, beside SSIM (the metric it sits
//! next to, Ember's fused op) in the same process. Needs the weights (`lpips/alex.safetensors`
//! in the shared data folder, `EMBER_DATA_DIR`); says so and measures nothing without them.
//!
//! On ndarray always; with `--features cuda` also on cuda, with `--features wgpu` and
//! `EMBER_BENCH_WGPU=1` also on wgpu. At the end it prints the medians and the LPIPS/SSIM ratio
//! per size and backend, and writes them as `target/ember-bench/lpips.json`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, SamplingMode};
use ember::kernels::SplatBackend;
use ember::train::loss::ssim;
use ember::train::lpips::Lpips;
use ember_bench::criterion::{ReportInfo, criterion_dir, finish, median_ms};

const SIZES: [usize; 2] = [400, 800];

fn weights() -> Option<PathBuf> {
    let dir = std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let path = dir.join("lpips/alex.safetensors");
    path.is_file().then_some(path)
}

fn bench_backend<B: SplatBackend>(c: &mut Criterion, backend: &str, weights: &Path) -> Vec<String> {
    let device: B::Device = Default::default();
    let lpips = Lpips::<B>::load(weights, &device).expect("the LPIPS weights");
    let mut groups = Vec::new();
    for side in SIZES {
        let image =
            || Tensor::<B, 3>::random([side, side, 3], Distribution::Uniform(0.0, 1.0), &device);
        let (render, photo) = (image(), image());
        let name = format!("lpips_{backend}_{side}x{side}");
        let mut group = c.benchmark_group(&name);
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function("lpips", |b| {
            b.iter(|| {
                black_box(
                    lpips
                        .image_distance(render.clone(), photo.clone())
                        .expect("one size"),
                )
            })
        });
        group.bench_function("ssim", |b| {
            b.iter(|| {
                let value = ssim(render.clone(), photo.clone()).expect("one size");
                black_box(value.into_scalar());
            })
        });
        group.finish();
        groups.push(name);
    }
    groups
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let Some(weights) = weights() else {
        println!("skipped: no lpips/alex.safetensors in the data folder (EMBER_DATA_DIR)");
        return;
    };
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Criterion::default()
        .output_directory(&root)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
    let (mut groups, mut backends) = (
        bench_backend::<ember::backend::Cpu>(&mut c, "ndarray", &weights),
        vec!["ndarray"],
    );
    #[cfg(feature = "cuda")]
    {
        groups.extend(bench_backend::<ember::backend::Cuda>(
            &mut c, "cuda", &weights,
        ));
        backends.push("cuda");
    }
    #[cfg(feature = "wgpu")]
    if std::env::var_os("EMBER_BENCH_WGPU").is_some() {
        groups.extend(bench_backend::<ember::backend::Wgpu>(
            &mut c, "wgpu", &weights,
        ));
        backends.push("wgpu");
    }
    c.final_summary();
    println!();
    println!("| group | LPIPS ms | SSIM ms | LPIPS / SSIM |");
    println!("|---|---|---|---|");
    for group in groups {
        let median = |id: &str| median_ms(&root, &format!("{group}/{id}"));
        let (lpips, ssim) = (median("lpips"), median("ssim"));
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        let ratio = match (lpips, ssim) {
            (Some(l), Some(s)) => format!("{:.1}x", l / s),
            _ => "-".into(),
        };
        println!("| {group} | {} | {} | {ratio} |", ms(lpips), ms(ssim));
    }
    let info = ReportInfo {
        bench: "lpips",
        backend: &backends.join(","),
        input: "random [S, S, 3] images",
        gaussians: 0,
    };
    finish(&root, started, &info);
}
