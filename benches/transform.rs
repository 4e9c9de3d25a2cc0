//! `cargo bench --bench transform`: a similarity transform (rotation, uniform scale,
//! translation; SH bands rotated) of 100k, 1M and 4M Gaussians, with SH degree 3 and without.
//!
//! Rows, per size and SH setting:
//! - `fused`: [`transform_into`], the rayon kernel writing into preallocated host buffers;
//! - `tensor_ops`: the same maths as separate Burn tensor ops on ndarray (a matmul for the
//!   means, a quaternion product from column slices, an add, one batched matmul per SH band);
//! - `copy`: the memory baseline, a parallel copy of the same input buffers into the same
//!   output buffers (the bytes the transform must move, no arithmetic; plain stores, so every
//!   output line is read before it is overwritten, which `fused`'s streaming stores avoid);
//! - with `--features cuda`: `cuda`, the CubeCL kernel through `transform_gaussians` on CUDA
//!   (device-resident tensors, synchronised; SH rows only).
//!
//! At the end it prints a table of criterion's medians from this run (the same numbers as
//! criterion's report: rows a filter left out print `-`) with Gaussians/s, GB/s, the fraction
//! of the copy's speed and the fused/tensor-op ratio, and writes them as
//! `target/ember-bench/transform.json` (or `$EMBER_BENCH_JSON`), the file `trainer compare`
//! reads. `scripts/transform-vs-numba.py` runs the `fused` and `copy` rows beside a numba
//! kernel in the same run.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, Throughput};
use ember::kernels::Similarity;
use ember::kernels::transform::cpu::{GaussianSlices, GaussianSlicesMut, transform_into};
use ember::kernels::transform::{
    PARAM_LINEAR, PARAM_LOG_SCALE, PARAM_OFFSET, PARAM_QUAT, PARAM_SH1, PARAM_SH2, PARAM_SH3,
    frame_params,
};
use ember_bench::BenchResult;
use ember_bench::criterion::{ReportInfo, collect, criterion_dir, finish};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;

use ember::backend::Cpu;

const SIZES: [usize; 3] = [100_000, 1_000_000, 4_000_000];

fn similarity() -> Similarity {
    Similarity {
        translation: [0.5, -1.0, 2.0],
        scale: 1.7,
        ..Similarity::axis_angle([0.3, -1.0, 0.4], 0.9).about([1.0, 0.0, -1.0])
    }
}

/// Host buffers of one set: inputs and preallocated outputs.
struct Buffers {
    src: [Vec<f32>; 4],
    dst: [Vec<f32>; 4],
}

impl Buffers {
    fn new(n: usize, k: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(1);
        let mut values =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random::<f32>() - 0.5).collect() };
        let src = [
            values(3 * n),
            values(4 * n),
            values(3 * n),
            values(3 * k * n),
        ];
        let dst = src.each_ref().map(|v| vec![0.0f32; v.len()]);
        Buffers { src, dst }
    }

    fn fused(&mut self, s: &Similarity) {
        let [m, q, l, sh] = &self.src;
        let [om, oq, ol, osh] = &mut self.dst;
        transform_into(
            s,
            GaussianSlices {
                means: m,
                quats: q,
                log_scales: l,
                sh_rest: sh,
            },
            GaussianSlicesMut {
                means: om,
                quats: oq,
                log_scales: ol,
                sh_rest: osh,
            },
        )
        .expect("valid sizes");
    }

    fn copy(&mut self) {
        for (d, s) in self.dst.iter_mut().zip(&self.src) {
            d.par_chunks_mut(1 << 16)
                .zip(s.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s));
        }
    }

    fn tensors<B: Backend>(&self, n: usize, k: usize, device: &B::Device) -> [Tensor<B, 3>; 4] {
        let t = |v: &Vec<f32>, shape: [usize; 3]| {
            Tensor::<B, 3>::from_data(TensorData::new(v.clone(), shape), device)
        };
        [
            t(&self.src[0], [n, 3, 1]),
            t(&self.src[1], [n, 4, 1]),
            t(&self.src[2], [n, 3, 1]),
            t(&self.src[3], [n, k, 3]),
        ]
    }
}

/// The transform as separate Burn tensor ops: what one writes without a custom kernel.
fn tensor_ops<B: Backend>(
    inputs: &[Tensor<B, 3>; 4],
    s: &Similarity,
    device: &B::Device,
) -> [Tensor<B, 3>; 4] {
    let p = frame_params(s).expect("valid transform");
    let n = inputs[0].dims()[0];
    let k = inputs[3].dims()[1];
    let matrix = |at: usize, size: usize| -> Tensor<B, 3> {
        let values: Vec<f32> = p[at..at + size * size].iter().map(|&v| v as f32).collect();
        Tensor::from_data(TensorData::new(values, [1, size, size]), device)
    };
    let means = inputs[0].clone().reshape([n, 3]);
    let linear = matrix(PARAM_LINEAR, 3).reshape([3, 3]);
    let offset: Vec<f32> = p[PARAM_OFFSET..PARAM_OFFSET + 3]
        .iter()
        .map(|&v| v as f32)
        .collect();
    let offset = Tensor::<B, 2>::from_data(TensorData::new(offset, [1, 3]), device);
    let means = means.matmul(linear.transpose()) + offset;
    let q = inputs[1].clone().reshape([n, 4]);
    let [aw, ax, ay, az] = [0, 1, 2, 3].map(|i| p[PARAM_QUAT + i] as f32);
    let col = |i: usize| q.clone().slice([0..n, i..i + 1]);
    let (w, x, y, z) = (col(0), col(1), col(2), col(3));
    let quats = Tensor::cat(
        vec![
            w.clone() * aw - x.clone() * ax - y.clone() * ay - z.clone() * az,
            x.clone() * aw + w.clone() * ax + z.clone() * ay - y.clone() * az,
            y.clone() * aw - z.clone() * ax + w.clone() * ay + x.clone() * az,
            z * aw + y * ax - x * ay + w * az,
        ],
        1,
    );
    let log_scales = inputs[2].clone().reshape([n, 3]) + p[PARAM_LOG_SCALE] as f32;
    let sh = if k == 0 {
        inputs[3].clone()
    } else {
        let bands = [(PARAM_SH1, 0, 3), (PARAM_SH2, 3, 5), (PARAM_SH3, 8, 7)];
        Tensor::cat(
            bands
                .iter()
                .filter(|(_, first, size)| first + size <= k)
                .map(|&(at, first, size)| {
                    let band = inputs[3].clone().slice([0..n, first..first + size, 0..3]);
                    matrix(at, size).matmul(band)
                })
                .collect(),
            1,
        )
    };
    [
        means.unsqueeze_dim(2),
        quats.unsqueeze_dim(2),
        log_scales.unsqueeze_dim(2),
        sh,
    ]
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::*;
    pub use ember::backend::Cuda;
    use ember::kernels::transform_gaussians;

    /// The CUDA kernel on device-resident tensors, synchronised after every call.
    pub fn bench_cuda(
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        buffers: &Buffers,
        n: usize,
        k: usize,
        s: &Similarity,
    ) {
        let device = Default::default();
        let [m, q, l, sh] = buffers.tensors::<Cuda>(n, k, &device);
        let (m, q, l) = (m.reshape([n, 3]), q.reshape([n, 4]), l.reshape([n, 3]));
        group.bench_function(BenchmarkId::new("cuda", n), |b| {
            b.iter(|| {
                let out = transform_gaussians(m.clone(), q.clone(), l.clone(), sh.clone(), &[*s])
                    .expect("valid");
                black_box(&out);
                Cuda::sync(&device).expect("sync");
            })
        });
    }
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut criterion = Criterion::default()
        .output_directory(&root)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let s = similarity();
    let device = Default::default();
    for k in [0usize, 15] {
        let mut group = criterion.benchmark_group(format!("transform/{}", sh_label(k)));
        for &n in &SIZES {
            let mut buffers = Buffers::new(n, k);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(BenchmarkId::new("fused", n), |b| {
                b.iter(|| buffers.fused(&s))
            });
            group.bench_function(BenchmarkId::new("copy", n), |b| b.iter(|| buffers.copy()));
            let inputs = buffers.tensors::<Cpu>(n, k, &device);
            group.bench_function(BenchmarkId::new("tensor_ops", n), |b| {
                b.iter(|| black_box(tensor_ops(&inputs, &s, &device)))
            });
            // Burn's CUDA runtime cannot create the `[N, 0, 3]` SH tensor of `K = 0` (zero
            // strides), so the cuda rows are SH rows only.
            #[cfg(feature = "cuda")]
            if k > 0 {
                gpu::bench_cuda(&mut group, &buffers, n, k, &s);
            }
        }
        group.finish();
    }
    criterion.final_summary();
    print_table(&collect(&root, started));
    let info = ReportInfo {
        bench: "transform",
        backend: "ndarray (tensor ops), host (fused, copy)",
        input: "random Gaussians (100k, 1M, 4M; no SH and SH degree 3)",
        gaussians: 0,
    };
    finish(&root, started, &info);
}

fn sh_label(k: usize) -> &'static str {
    if k == 0 { "no_sh" } else { "sh3" }
}

/// The summary of this run's criterion medians (so the table and criterion's report are the
/// same numbers): per row Gaussians/s, GB/s moved, the fraction of the copy's speed and the
/// tensor-op ratio. Rows a filter left out print `-`.
fn print_table(results: &[BenchResult]) {
    let median = |k: usize, row: &str, n: usize| {
        let name = format!("transform/{}/{row}/{n}", sh_label(k));
        results.iter().find(|r| r.name == name).map(|r| r.median_ms)
    };
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    println!();
    println!(
        "| SH | N | fused ms | Gaussians/s | GB/s | of copy speed | copy ms | tensor ops ms | tensor/fused | cuda ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for k in [0usize, 15] {
        for &n in &SIZES {
            let fused = median(k, "fused", n);
            let copy = median(k, "copy", n);
            let tensor = median(k, "tensor_ops", n);
            let ratio = |a: Option<f64>, b: Option<f64>, f: &dyn Fn(f64, f64) -> String| {
                a.zip(b).map_or("-".to_string(), |(a, b)| f(a, b))
            };
            // Every float read once and written once: 10 per Gaussian plus 3 per SH coefficient.
            let bytes = 2 * 4 * (10 + 3 * k) * n;
            println!(
                "| {} | {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
                if k == 0 { "no SH" } else { "SH degree 3" },
                ms(fused),
                fused.map_or("-".to_string(), |f| format!("{:.3e}", n as f64 / (f / 1e3))),
                fused.map_or("-".to_string(), |f| format!(
                    "{:.1}",
                    bytes as f64 / f / 1e6
                )),
                ratio(copy, fused, &|c, f| format!("{:.0}%", 100.0 * c / f)),
                ms(copy),
                ms(tensor),
                ratio(tensor, fused, &|t, f| format!("{:.1}x", t / f)),
                ms(median(k, "cuda", n)),
            );
        }
    }
}
