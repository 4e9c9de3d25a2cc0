//! `cargo bench --bench loss`: the photometric training loss `0.8 L1 + 0.2 (1 - SSIM)` and its
//! gradient with respect to the render (what one training step pays), at 400x400 (lego) and
//! 800x800, two ways in the same process:
//! - `fused`: Ember's op (`ember::kernels::photometric_loss`), the gradient computed in the
//!   forward pass;
//! - `burn_ops`: the same loss as Burn tensor ops (two depthwise convolutions over five stacked
//!   statistics) differentiated by Burn's autodiff (`ember::train::loss::burn_ops`).
//!
//! On ndarray always; with `--features cuda` also on cuda, with `--features wgpu` and
//! `EMBER_BENCH_WGPU=1` also on wgpu (lavapipe on a machine without a GPU is slow). At the end
//! it prints the medians and the burn_ops/fused ratio per size and backend, and writes the
//! medians as `target/ember-bench/loss.json` (`ember_bench::BenchFile`, `trainer compare` reads it).

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use burn::backend::Autodiff;
use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, SamplingMode};
use ember::kernels::{LossOptions, SplatBackend, photometric_loss};
use ember::train::loss::burn_ops;
use ember_bench::criterion::{ReportInfo, criterion_dir, finish, median_ms};

const SIZES: [usize; 2] = [400, 800];
const LAMBDA: f64 = 0.2;

/// Loss and gradient of a fixed random render against a fixed random target on `Autodiff<B>`,
/// synchronised.
fn step<B: SplatBackend>(
    render: &Tensor<Autodiff<B>, 3>,
    target: &Tensor<Autodiff<B>, 3>,
    fused: bool,
    device: &B::Device,
) {
    let x = render.clone().require_grad();
    let loss = if fused {
        let options = LossOptions {
            ssim_lambda: LAMBDA,
        };
        photometric_loss(x.clone(), target.clone(), options).expect("valid images")
    } else {
        burn_ops::photometric_loss(x.clone(), target.clone(), LAMBDA)
    };
    let grads = loss.backward();
    black_box(x.grad(&grads).expect("the render is tracked"));
    B::sync(device).expect("sync");
}

fn bench_backend<B: SplatBackend>(c: &mut Criterion, backend: &str) -> Vec<String> {
    let device: B::Device = Default::default();
    let mut groups = Vec::new();
    for side in SIZES {
        let image = || {
            Tensor::<Autodiff<B>, 3>::random(
                [side, side, 3],
                Distribution::Uniform(0.0, 1.0),
                &device,
            )
        };
        let (render, target) = (image(), image());
        let name = format!("loss_{backend}_{side}x{side}");
        let mut group = c.benchmark_group(&name);
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function("fused", |b| {
            b.iter(|| step::<B>(&render, &target, true, &device))
        });
        group.bench_function("burn_ops", |b| {
            b.iter(|| step::<B>(&render, &target, false, &device))
        });
        group.finish();
        groups.push(name);
    }
    groups
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Criterion::default()
        .output_directory(&root)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
    let (mut groups, mut backends) = (
        bench_backend::<ember::backend::Cpu>(&mut c, "ndarray"),
        vec!["ndarray"],
    );
    #[cfg(feature = "cuda")]
    {
        groups.extend(bench_backend::<ember::backend::Cuda>(&mut c, "cuda"));
        backends.push("cuda");
    }
    #[cfg(feature = "wgpu")]
    if std::env::var_os("EMBER_BENCH_WGPU").is_some() {
        groups.extend(bench_backend::<ember::backend::Wgpu>(&mut c, "wgpu"));
        backends.push("wgpu");
    }
    c.final_summary();
    println!();
    println!("| group | fused ms | burn_ops ms | burn_ops / fused |");
    println!("|---|---|---|---|");
    for group in groups {
        let median = |id: &str| median_ms(&root, &format!("{group}/{id}"));
        let (fused, ops) = (median("fused"), median("burn_ops"));
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        let ratio = match (fused, ops) {
            (Some(f), Some(o)) => format!("{:.1}x", o / f),
            _ => "-".into(),
        };
        println!("| {group} | {} | {} | {ratio} |", ms(fused), ms(ops));
    }
    let info = ReportInfo {
        bench: "loss",
        backend: &backends.join(","),
        input: "random [S, S, 3] images",
        gaussians: 0,
    };
    finish(&root, started, &info);
}
