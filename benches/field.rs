//! `cargo bench --bench field`: the Gaussian-field query on the CPU (ndarray), the fused rayon
//! kernel next to the same computation written with plain Burn tensor ops.
//!
//! Cases (N Gaussians, P points): (1000, 500), (10 000, 4096) exact, (100 000, 100 000) with a
//! 3-sigma cutoff; forward and forward+backward (autodiff, gradients of every input); full and
//! diagonal covariance. At the end it prints a table of medians with the fused/tensor-op ratio
//! and writes it to `target/criterion/field-summary.json` for comparisons between versions.

use std::time::Duration;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use criterion::{BenchmarkId, Criterion};
use ember::kernels::field::field_query_reference;
use ember::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

type B = NdArray<f32>;
type AD = Autodiff<B>;

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

fn tensors<Bk: burn::tensor::backend::Backend>(
    v: &[Vec<f32>; 5],
    case: Case,
    grad: bool,
) -> [Tensor<Bk, 2>; 5] {
    let shapes = [
        [case.p, 3],
        [case.n, 3],
        [case.n, 4],
        [case.n, 3],
        [case.n, 1],
    ];
    core::array::from_fn(|k| {
        let t = Tensor::<Bk, 2>::from_data(
            TensorData::new(v[k].clone(), shapes[k]),
            &Default::default(),
        );
        if grad { t.require_grad() } else { t }
    })
}

fn bench_field(c: &mut Criterion) {
    for case in CASES {
        let data = inputs(case, 7);
        let name = match case.cutoff {
            None => format!("N{}_P{}", case.n, case.p),
            Some(k) => format!("N{}_P{}_cutoff{k}", case.n, case.p),
        };
        let mut group = c.benchmark_group(format!("field/{name}"));
        let heavy = case.n * case.p > 10_000_000;
        group.sample_size(if heavy { 10 } else { 30 });
        group.measurement_time(Duration::from_secs(if heavy { 20 } else { 5 }));
        group.warm_up_time(Duration::from_secs(1));
        for cov in [Covariance::Full, Covariance::Diagonal] {
            let options = FieldOptions {
                cutoff: case.cutoff,
                covariance: cov,
            };
            let cov_name = match cov {
                Covariance::Full => "full",
                Covariance::Diagonal => "diag",
            };
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
                            let [x, m, q, s, f] = tensors::<B>(&data, case, false);
                            let out = if fused {
                                field_query(x, m, q, s, f, options).expect("valid")
                            } else {
                                field_query_reference(x, m, q, s, f, options)
                            };
                            out.into_data()
                        })
                    },
                );
                group.bench_function(
                    BenchmarkId::new(format!("forward_backward/{cov_name}"), which),
                    |b| {
                        b.iter(|| {
                            let [x, m, q, s, f] = tensors::<AD>(&data, case, true);
                            let out = if fused {
                                field_query(x, m, q, s, f, options).expect("valid")
                            } else {
                                field_query_reference(x, m, q, s, f, options)
                            };
                            out.sum().backward()
                        })
                    },
                );
            }
        }
        group.finish();
    }
}

/// Reads criterion's medians back and prints the fused/tensor-op table.
fn summarise() {
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../criterion");
    let median = |group: &str, id: &str, which: &str| -> Option<f64> {
        let path = root
            .join(group)
            .join(id)
            .join(which)
            .join("new/estimates.json");
        let text = std::fs::read_to_string(path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["median"]["point_estimate"].as_f64().map(|ns| ns / 1e6)
    };
    let mut rows = Vec::new();
    println!("\n| case | pass | covariance | fused (ms) | tensor ops (ms) | speed-up |");
    println!("|---|---|---|---|---|---|");
    for case in CASES {
        let name = match case.cutoff {
            None => format!("N{}_P{}", case.n, case.p),
            Some(k) => format!("N{}_P{}_cutoff{k}", case.n, case.p),
        };
        let group = format!("field_{name}");
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
                println!(
                    "| N={} P={} {} | {pass} | {cov} | {fused:.3} | {base_s} | {ratio_s} |",
                    case.n,
                    case.p,
                    case.cutoff
                        .map(|k| format!("cutoff {k}"))
                        .unwrap_or_else(|| "exact".into())
                );
                rows.push(serde_json::json!({
                    "bench": format!("field/{name}/{pass}/{cov}"),
                    "median_ms": fused,
                    "baseline_median_ms": base,
                }));
            }
        }
    }
    let out = root.join("field-summary.json");
    let tmp = root.join("field-summary.json.tmp");
    if std::fs::write(
        &tmp,
        serde_json::to_string_pretty(&rows).unwrap_or_default(),
    )
    .is_ok()
    {
        let _ = std::fs::rename(&tmp, &out);
        println!("\nwrote {}", out.display());
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_field(&mut c);
    c.final_summary();
    summarise();
}
