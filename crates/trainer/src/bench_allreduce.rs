//! `trainer bench allreduce`: what averaging a Gaussian field's gradients across `D` local peers
//! costs with Burn's collective engine (`burn::collective`), the term data-parallel training adds
//! to every step.
//!
//! Each peer is a thread holding one flat tensor of `N x (11 + 3 (d + 1)^2)` floats (the
//! gradients of means, quaternions, log-scales, opacity logits and SH coefficients of `N`
//! Gaussians at SH degree `d`) on the backend's default device; every peer calls
//! `all_reduce(.., Mean)` at once, and the time of one all-reduce is the slowest peer's.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use burn::collective::{
    AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation, all_reduce, finish_collective,
    register, reset_collective,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use clap::{Args, ValueEnum};
use ember_bench::{BenchFile, BenchResult, peak_host_mib};

use crate::bench::write_bench_file;

/// `trainer bench allreduce [--peers 2,4] [--gaussians 100000,1000000] [--sh-degree 3]`.
#[derive(Args, Debug)]
pub struct AllReduceBenchArgs {
    /// Local peers (threads, each a device) per all-reduce, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [2usize, 4])]
    peers: Vec<usize>,
    /// Gaussian counts whose gradients are averaged, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [100_000usize, 1_000_000])]
    gaussians: Vec<usize>,
    /// SH degree of the field (floats per Gaussian: 11 + 3 (d + 1)^2, 59 at degree 3).
    #[arg(long, default_value_t = 3)]
    sh_degree: u32,
    /// How the peers combine their tensors.
    #[arg(long, value_enum, default_value_t = Strategy::Ring)]
    strategy: Strategy,
    /// Timed all-reduces per case (after one untimed).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-allreduce.json"
    )]
    json: PathBuf,
}

/// burn-collective's local all-reduce algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    /// Every peer sends to one, which reduces and sends the result back.
    Centralized,
    /// A binary tree: reduced towards the root, the result sent back down.
    Tree,
    /// A ring: each peer reduces one slice, then the slices go round.
    Ring,
}

impl Strategy {
    fn collective(self) -> AllReduceStrategy {
        match self {
            Strategy::Centralized => AllReduceStrategy::Centralized,
            Strategy::Tree => AllReduceStrategy::Tree(2),
            Strategy::Ring => AllReduceStrategy::Ring,
        }
    }
}

/// Floats of one Gaussian's gradients at SH degree `degree`.
pub fn floats_per_gaussian(degree: u32) -> usize {
    11 + 3 * ((degree as usize + 1) * (degree as usize + 1))
}

/// `D` peers averaging one tensor each, `repeats + 1` times (the first untimed): the slowest
/// peer's time of each timed all-reduce, ms, and peer 0's last result.
pub fn time_all_reduce<B: Backend>(
    inputs: Vec<Tensor<B, 1>>,
    strategy: AllReduceStrategy,
    repeats: usize,
) -> Result<(Vec<f64>, Tensor<B, 1>)> {
    let peers = inputs.len();
    if peers == 0 {
        bail!("an all-reduce needs at least one peer");
    }
    reset_collective::<B>();
    let config = CollectiveConfig::default()
        .with_num_devices(peers)
        .with_local_all_reduce_strategy(strategy);
    let barrier = Arc::new(Barrier::new(peers));
    let threads: Vec<_> = inputs
        .into_iter()
        .enumerate()
        .map(|(index, input)| {
            let (config, barrier) = (config.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<(Vec<f64>, Tensor<B, 1>)> {
                let id = PeerId(index as u32);
                let device = input.device();
                register::<B>(id, device.clone(), config)
                    .map_err(|e| anyhow!("peer {index}: register: {e:?}"))?;
                let mut times = Vec::with_capacity(repeats);
                let mut result = input.clone();
                for round in 0..=repeats {
                    barrier.wait();
                    let started = Instant::now();
                    let reduced = all_reduce::<B>(
                        id,
                        input.clone().into_primitive().tensor(),
                        ReduceOperation::Mean,
                    )
                    .map_err(|e| anyhow!("peer {index}: all-reduce: {e:?}"))?;
                    result = Tensor::from_primitive(TensorPrimitive::Float(reduced));
                    B::sync(&device).map_err(|e| anyhow!("peer {index}: sync: {e:?}"))?;
                    if round > 0 {
                        times.push(started.elapsed().as_secs_f64() * 1e3);
                    }
                }
                finish_collective::<B>(id).map_err(|e| anyhow!("peer {index}: finish: {e:?}"))?;
                Ok((times, result))
            })
        })
        .collect();
    let mut slowest = vec![0.0f64; repeats];
    let mut first = None;
    for thread in threads {
        let (times, result) = thread
            .join()
            .map_err(|_| anyhow!("a peer thread panicked"))??;
        for (worst, t) in slowest.iter_mut().zip(times) {
            *worst = worst.max(t);
        }
        first.get_or_insert(result);
    }
    reset_collective::<B>();
    let result = first.ok_or_else(|| anyhow!("no peer"))?;
    Ok((slowest, result))
}

/// The baseline of the same process: the mean of the peers' tensors computed by one thread on
/// one device (what an all-reduce must do at least, without moving anything), median ms.
fn time_local_mean<B: Backend>(
    inputs: &[Tensor<B, 1>],
    device: &B::Device,
    repeats: usize,
) -> Result<f64> {
    let mut times = Vec::with_capacity(repeats);
    for round in 0..=repeats {
        let started = Instant::now();
        let sum = inputs
            .iter()
            .cloned()
            .reduce(|acc, t| acc + t)
            .ok_or_else(|| anyhow!("no peer"))?;
        let mean = sum / inputs.len() as f64;
        B::sync(device).map_err(|e| anyhow!("sync: {e:?}"))?;
        drop(mean);
        if round > 0 {
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    BenchResult::from_samples("local mean", &times)
        .map(|r| r.median_ms)
        .ok_or_else(|| anyhow!("no mean timed"))
}

/// `trainer bench allreduce` on backend `Bk` (every peer on its default device).
pub fn bench_allreduce<Bk: Backend>(args: &AllReduceBenchArgs, device: &Bk::Device) -> Result<()> {
    if args.repeats == 0 || args.peers.contains(&0) || args.sh_degree > 3 {
        bail!("--repeats and --peers must be at least 1, --sh-degree at most 3");
    }
    let per = floats_per_gaussian(args.sh_degree);
    let mut results = Vec::new();
    println!(
        "all-reduce (mean) of the gradients of N Gaussians at SH degree {} ({per} floats each), \
         {:?} strategy, on {}:",
        args.sh_degree,
        args.strategy,
        Bk::name(device)
    );
    println!(
        "| peers | Gaussians | MB per peer | median (ms) | min (ms) | max (ms) | GB/s per peer | \
         mean on one thread (ms) | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &gaussians in &args.gaussians {
        let floats = gaussians * per;
        for &peers in &args.peers {
            let inputs: Vec<Tensor<Bk, 1>> = (0..peers)
                .map(|_| Tensor::<Bk, 1>::random([floats], Distribution::Default, device))
                .collect();
            let local = time_local_mean(&inputs, device, args.repeats)?;
            let (times, _) = time_all_reduce(inputs, args.strategy.collective(), args.repeats)?;
            let megabytes = (4 * floats) as f64 / 1e6;
            let result =
                BenchResult::from_samples(format!("{peers} peers, {gaussians} Gaussians"), &times)
                    .ok_or_else(|| anyhow!("no all-reduce timed"))?
                    .with_metric("peers", peers as f64)
                    .with_metric("gaussians", gaussians as f64)
                    .with_metric("megabytes_per_peer", megabytes)
                    .with_metric("local_mean_ms", local);
            let ratio = result.median_ms / local;
            let result = result.with_metric("ratio_to_local_mean", ratio);
            println!(
                "| {peers} | {gaussians} | {megabytes:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {local:.2} | {:.1}x |",
                result.median_ms,
                result.min_ms,
                result.max_ms,
                megabytes / result.median_ms,
                ratio
            );
            results.push(result);
        }
    }
    let file = BenchFile {
        tool: "trainer bench allreduce".into(),
        backend: Bk::name(device),
        input: format!(
            "SH degree {}, {:?} strategy, {} timed all-reduces per case",
            args.sh_degree, args.strategy, args.repeats
        ),
        gaussians: args.gaussians.iter().copied().max().unwrap_or(0),
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    write_bench_file(&file, &args.json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    type Cpu = burn::backend::NdArray<f32>;

    /// Two and three CPU peers average their tensors with every strategy: each gets the
    /// element-wise mean. (One test: the collective server is one per backend and process.)
    #[test]
    fn peers_get_the_mean_with_every_strategy() {
        let device = Default::default();
        for strategy in [Strategy::Centralized, Strategy::Tree, Strategy::Ring] {
            for peers in [2usize, 3] {
                let values: Vec<Vec<f32>> = (0..peers)
                    .map(|p| {
                        (0..1000)
                            .map(|i| (i * (p + 1)) as f32 * 0.5 - p as f32)
                            .collect()
                    })
                    .collect();
                let inputs = values
                    .iter()
                    .map(|v| {
                        Tensor::<Cpu, 1>::from_data(TensorData::new(v.clone(), [1000]), &device)
                    })
                    .collect();
                let (times, result) = time_all_reduce(inputs, strategy.collective(), 2).unwrap();
                assert_eq!(times.len(), 2);
                let got: Vec<f32> = result.into_data().to_vec().unwrap();
                for (i, g) in got.iter().enumerate() {
                    let want = values.iter().map(|v| v[i]).sum::<f32>() / peers as f32;
                    assert!(
                        (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                        "{strategy:?} {peers} peers, [{i}]: {g} vs {want}"
                    );
                }
            }
        }
    }
}
