//! `cargo bench --bench field`: the Gaussian-field query, the fused kernel next to the same
//! computation written with plain Burn tensor ops, on the CPU (ndarray) and, when compiled with
//! `--features cuda`, on CUDA (`--features wgpu` adds wgpu rows only with `EMBER_BENCH_WGPU=1`:
//! on a machine without a GPU wgpu runs on lavapipe, whose timings mean nothing).
//!
//! Cases (N Gaussians, P points): (1000, 500), (10 000, 4096) exact, (100 000, 100 000) with a
//! 3-sigma cutoff; forward and forward+backward (autodiff, gradients of every input); full and
//! diagonal covariance. At the end it prints a table of medians with the fused/tensor-op ratio
//! and writes every median as `target/ember-bench/field.json` (or `$EMBER_BENCH_JSON`), the
//! file `trainer compare` reads.

use std::time::{Duration, SystemTime};

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use criterion::{BenchmarkId, Criterion};
use ember::kernels::field::field_query_reference;
use ember::prelude::*;
use ember_bench::criterion::{ReportInfo, criterion_dir, finish, median_ms};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[derive(Clone, Copy)]
struct Case {
    n: usize,
    p: usize,
    cutoff: Option<f32>,
    /// The tensor-op formulation materialises [N, P, 3]: skip it where that cannot fit.
    with_baseline: bool,
}

const CASES: [Case; 3] = [
    Case {
        n: 1000,
        p: 500,
        cutoff: None,
        with_baseline: true,
    },
    Case {
        n: 10_000,
        p: 4096,
        cutoff: None,
        with_baseline: true,
    },
    Case {
        n: 100_000,
        p: 100_000,
        cutoff: Some(3.0),
        with_baseline: false,
    },
];

/// Inputs in a unit cube, scales such that a Gaussian's 3-sigma ball holds a few dozen points
/// at the largest size (the regime the cutoff is for).
fn inputs(case: Case, seed: u64) -> [Vec<f32>; 5] {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut u = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * rng.random::<f32>())
            .collect()
    };
    let spacing = (1.0 / case.n as f32).cbrt();
    [
        u(3 * case.p, -0.5, 0.5),
        u(3 * case.n, -0.5, 0.5),
        u(4 * case.n, -1.0, 1.0),
        u(3 * case.n, (0.5 * spacing).ln(), (1.5 * spacing).ln()),
        u(case.n, 0.1, 1.0),
    ]
}

fn tensors<Bk: Backend>(
    v: &[Vec<f32>; 5],
    case: Case,
    grad: bool,
    device: &Bk::Device,
) -> [Tensor<Bk, 2>; 5] {
    let shapes = [
        [case.p, 3],
        [case.n, 3],
        [case.n, 4],
        [case.n, 3],
        [case.n, 1],
    ];
    core::array::from_fn(|k| {
        let t = Tensor::<Bk, 2>::from_data(TensorData::new(v[k].clone(), shapes[k]), device);
        if grad { t.require_grad() } else { t }
    })
}

/// Every case on backend `B`, named `backend` in the report.
fn bench_backend<B: SplatBackend>(c: &mut Criterion, backend: &str, device: &B::Device) {
    for case in CASES {
        let data = inputs(case, 7);
        let name = case_name(case);
        let mut group = c.benchmark_group(format!("field/{backend}/{name}"));
        let heavy = case.n * case.p > 10_000_000;
        group.sample_size(if heavy { 10 } else { 30 });
        group.measurement_time(Duration::from_secs(if heavy { 20 } else { 5 }));
        group.warm_up_time(Duration::from_secs(1));
        for cov in [Covariance::Full, Covariance::Diagonal] {
            let options = FieldOptions {
                cutoff: case.cutoff,
                covariance: cov,
            };
            let cov_name = covariance_name(cov);
            let mut impls = vec![true];
            if case.with_baseline {
                impls.push(false);
            }
            for fused in impls {
                let which = if fused { "fused" } else { "tensor_ops" };
                group.bench_function(
                    BenchmarkId::new(format!("forward/{cov_name}"), which),
                    |b| {
                        b.iter(|| {
                            let [x, m, q, s, f] = tensors::<B>(&data, case, false, device);
                            let out = if fused {
                                field_query(x, m, q, s, f, options).expect("valid")
                            } else {
                                field_query_reference(x, m, q, s, f, options)
                            };
                            // Reading the result back waits for a GPU.
                            out.into_data()
                        })
                    },
                );
                group.bench_function(
                    BenchmarkId::new(format!("forward_backward/{cov_name}"), which),
                    |b| {
                        b.iter(|| {
                            let [x, m, q, s, f] = tensors::<Autodiff<B>>(&data, case, true, device);
                            let out = if fused {
                                field_query(x, m, q, s, f, options).expect("valid")
                            } else {
                                field_query_reference(x, m, q, s, f, options)
                            };
                            let grads = out.sum().backward();
                            // Wait for a GPU to finish the backward (a no-op on the CPU).
                            B::sync(device).expect("device sync");
                            grads
                        })
                    },
                );
            }
        }
        group.finish();
    }
}

fn case_name(case: Case) -> String {
    match case.cutoff {
        None => format!("N{}_P{}", case.n, case.p),
        Some(k) => format!("N{}_P{}_cutoff{k}", case.n, case.p),
    }
}

fn covariance_name(cov: Covariance) -> &'static str {
    match cov {
        Covariance::Full => "full",
        Covariance::Diagonal => "diag",
    }
}

/// Reads criterion's medians back and prints the fused/tensor-op table.
fn summarise(root: &std::path::Path, backends: &[&str]) {
    let median = |group: &str, id: &str, which: &str| -> Option<f64> {
        median_ms(root, &format!("{group}/{id}/{which}"))
    };
    println!("\n| backend | case | pass | covariance | fused (ms) | tensor ops (ms) | speed-up |");
    println!("|---|---|---|---|---|---|---|");
    for backend in backends {
        for case in CASES {
            let name = case_name(case);
            let group = format!("field_{backend}_{name}");
            for pass in ["forward", "forward_backward"] {
                for cov in ["full", "diag"] {
                    let id = format!("{pass}_{cov}");
                    let Some(fused) = median(&group, &id, "fused") else {
                        continue;
                    };
                    let base = median(&group, &id, "tensor_ops");
                    let (base_s, ratio_s) = match base {
                        Some(b) => (format!("{b:.2}"), format!("{:.1}x", b / fused)),
                        None => ("n/a".into(), "n/a".into()),
                    };
                    let mode = case
                        .cutoff
                        .map(|k| format!("cutoff {k}"))
                        .unwrap_or_else(|| "exact".into());
                    println!(
                        "| {backend} | N={} P={} {mode} | {pass} | {cov} | {fused:.3} | {base_s} | {ratio_s} |",
                        case.n, case.p
                    );
                }
            }
        }
    }
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Criterion::default()
        .output_directory(&root)
        .configure_from_args();
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
    let mut backends = vec!["ndarray"];
    bench_backend::<ember::backend::Cpu>(&mut c, "ndarray", &Default::default());
    #[cfg(feature = "cuda")]
    {
        bench_backend::<ember::backend::Cuda>(&mut c, "cuda", &Default::default());
        backends.push("cuda");
    }
    #[cfg(feature = "wgpu")]
    if std::env::var_os("EMBER_BENCH_WGPU").is_some() {
        bench_backend::<ember::backend::Wgpu>(&mut c, "wgpu", &Default::default());
        backends.push("wgpu");
    }
    c.final_summary();
    summarise(&root, &backends);
    let info = ReportInfo {
        bench: "field",
        backend: &backends.join(","),
        input: "random Gaussians and points (seed 7)",
        gaussians: 0,
    };
    finish(&root, started, &info);
}
