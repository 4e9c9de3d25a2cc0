//! `cargo bench --bench sort`: the GPU radix sort and prefix sum the rasterizer bins with
//! (`ember::kernels::sort`), on their own, against Burn's own sort in the same process.
//!
//! For `N` = 2^16, 2^20 and 2^22 random `(key, value)` pairs of `u32`:
//! - `radix_32bit`, `radix_16bit`: [`sort_pairs`] on 32-bit keys (the rasterizer's depth sort) and
//!   on 16-bit keys (its tile-id sort on images up to 65 536 tiles), 8 and 4 passes;
//! - `burn_sort_32bit`: the same pairs sorted with Burn's `sort_with_indices` and the values
//!   gathered by the permutation (what the rasterizer would pay without its own sort);
//! - `exclusive_sum`: [`exclusive_sum`] of `N` random counts below 256.
//!
//! The GPU groups run on the unfused CubeCL backend (`ember::backend::WgpuCube`,
//! `CudaCube`): with `--features cuda` on cuda, with
//! `--features wgpu` and `EMBER_BENCH_WGPU=1` on wgpu (lavapipe on a machine without a GPU: its
//! timings mean nothing). Each GPU iteration ends with `Backend::sync`. The `cpu` groups always
//! run: the same pairs sorted on the host with rayon's `par_sort_unstable` and the standard
//! library's single-threaded `sort_unstable` (as packed `u64`), the reference a CPU user has.
//!
//! At the end it prints the medians and the burn/radix ratio, and writes every median as
//! `target/ember-bench/sort.json` (or `$EMBER_BENCH_JSON`), the file `trainer compare` reads.

use std::time::{Duration, SystemTime};

use criterion::{BatchSize, Criterion, SamplingMode};
use ember_bench::criterion::{ReportInfo, criterion_dir, finish, median_ms};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rayon::slice::ParallelSliceMut;

const SIZES: [usize; 3] = [1 << 16, 1 << 20, 1 << 22];
const SEED: u64 = 0x5027_b0a7;

/// `n` random keys (full 32 bits) and their indices as values.
fn pairs(n: usize) -> (Vec<u32>, Vec<u32>) {
    let mut rng = StdRng::seed_from_u64(SEED ^ n as u64);
    (
        (0..n).map(|_| rng.random::<u32>()).collect(),
        (0..n as u32).collect(),
    )
}

fn bench_cpu(c: &mut Criterion) -> Vec<String> {
    let mut groups = Vec::new();
    for n in SIZES {
        let (keys, values) = pairs(n);
        let packed: Vec<u64> = keys
            .iter()
            .zip(&values)
            .map(|(&k, &v)| (u64::from(k) << 32) | u64::from(v))
            .collect();
        let name = format!("sort_cpu_{n}");
        let mut group = c.benchmark_group(&name);
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function("par_sort_unstable_32bit", |b| {
            b.iter_batched_ref(
                || packed.clone(),
                |p| p.par_sort_unstable(),
                BatchSize::LargeInput,
            )
        });
        group.bench_function("sort_unstable_32bit", |b| {
            b.iter_batched_ref(
                || packed.clone(),
                |p| p.sort_unstable(),
                BatchSize::LargeInput,
            )
        });
        group.finish();
        groups.push(name);
    }
    groups
}

#[cfg(any(feature = "cuda", feature = "wgpu"))]
mod gpu {
    use super::*;
    use burn::tensor::backend::Backend;
    use burn::tensor::{DType, Int, Tensor, TensorData};
    use ember::kernels::sort::{RadixSortBackend, exclusive_sum, sort_pairs};
    use std::hint::black_box;

    type U32s<B> = Tensor<B, 1, Int>;

    fn upload<B: Backend>(values: Vec<u32>, device: &B::Device) -> U32s<B> {
        let n = values.len();
        U32s::<B>::from_data(TensorData::new(values, [n]), (device, DType::U32))
    }

    /// The groups of one unfused CubeCL backend, named `sort_{backend}_{n}`.
    pub fn bench<B: RadixSortBackend>(c: &mut Criterion, backend: &str) -> Vec<String> {
        let device: B::Device = Default::default();
        let sync = || B::sync(&device).expect("sync");
        let mut groups = Vec::new();
        for n in SIZES {
            let (keys, values) = pairs(n);
            let low: Vec<u32> = keys.iter().map(|k| k & 0xffff).collect();
            let mut rng = StdRng::seed_from_u64(SEED ^ 0x5ca7 ^ n as u64);
            let counts: Vec<u32> = (0..n).map(|_| rng.random_range(0..256u32)).collect();
            let keys = upload::<B>(keys, &device);
            let low = upload::<B>(low, &device);
            let values = upload::<B>(values, &device);
            let counts = upload::<B>(counts, &device);
            sync();
            let name = format!("sort_{backend}_{n}");
            let mut group = c.benchmark_group(&name);
            group.sampling_mode(SamplingMode::Flat);
            group.bench_function("radix_32bit", |b| {
                b.iter(|| {
                    let sorted = sort_pairs(keys.clone(), values.clone(), 32);
                    black_box(sorted.expect("u32 pairs"));
                    sync();
                })
            });
            group.bench_function("radix_16bit", |b| {
                b.iter(|| {
                    let sorted = sort_pairs(low.clone(), values.clone(), 16);
                    black_box(sorted.expect("u32 pairs"));
                    sync();
                })
            });
            group.bench_function("burn_sort_32bit", |b| {
                b.iter(|| {
                    let (sorted, order) = keys.clone().sort_with_indices(0);
                    black_box((sorted, values.clone().select(0, order)));
                    sync();
                })
            });
            group.bench_function("exclusive_sum", |b| {
                b.iter(|| {
                    black_box(exclusive_sum(counts.clone()).expect("u32 counts"));
                    sync();
                })
            });
            group.finish();
            groups.push(name);
        }
        groups
    }
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Criterion::default()
        .output_directory(&root)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    #[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(unused_mut))]
    let (mut groups, mut backends) = (bench_cpu(&mut c), vec!["cpu"]);
    #[cfg(feature = "cuda")]
    {
        groups.extend(gpu::bench::<ember::backend::CudaCube>(&mut c, "cuda"));
        backends.push("cuda");
    }
    #[cfg(feature = "wgpu")]
    if std::env::var_os("EMBER_BENCH_WGPU").is_some() {
        groups.extend(gpu::bench::<ember::backend::WgpuCube>(&mut c, "wgpu"));
        backends.push("wgpu");
    }
    c.final_summary();
    println!();
    println!("| group | entry | median ms |");
    println!("|---|---|---|");
    for group in &groups {
        for entry in [
            "par_sort_unstable_32bit",
            "sort_unstable_32bit",
            "radix_32bit",
            "radix_16bit",
            "burn_sort_32bit",
            "exclusive_sum",
        ] {
            if let Some(ms) = median_ms(&root, &format!("{group}/{entry}")) {
                println!("| {group} | {entry} | {ms:.3} |");
            }
        }
        let radix = median_ms(&root, &format!("{group}/radix_32bit"));
        let burn = median_ms(&root, &format!("{group}/burn_sort_32bit"));
        if let (Some(r), Some(b)) = (radix, burn) {
            println!("| {group} | burn_sort / radix (32-bit) | {:.3}x |", b / r);
        }
    }
    let info = ReportInfo {
        bench: "sort",
        backend: &backends.join(","),
        input: "random u32 (key, value) pairs",
        gaussians: 0,
    };
    finish(&root, started, &info);
}
