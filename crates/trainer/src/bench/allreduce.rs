//! `trainer bench allreduce`: what summing a Gaussian field's gradients across `D` local peers,
//! or across `--nodes` processes, costs with Burn's collective engine (`burn::collective`), the
//! term data-parallel training adds to every step.
//!
//! Each peer is a thread holding one flat tensor of `N x (11 + 3 (d + 1)^2)` floats (the
//! gradients of means, quaternions, log-scales, opacity logits and SH coefficients of `N`
//! Gaussians at SH degree `d`) on the backend's default device; every peer calls
//! `all_reduce(.., Mean)` at once, and the time of one all-reduce is the slowest peer's.
//!
//! With `--nodes K` the peers are `K` processes on this machine, one peer each, meeting at an
//! orchestrator on localhost, as the nodes of a multi-node run do over a network: this process
//! is node 0 (and hosts the orchestrator), the others are copies of it started with
//! `--node-rank`. Every all-reduce is a sum checked, on every node, against the sum computed
//! locally from every node's input; the time is node 0's, from a gradient tensor it owns (as
//! training's joined gradients are) to the sum read back. Before the nodes start, node 0 times
//! the same sums between `K` threads of its own process (`local_ms`): what the network costs.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use burn::collective::{
    AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation, all_reduce, finish_collective,
    register, reset_collective,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use clap::{Args, ValueEnum};
use ember_bench::{BenchFile, BenchResult, peak_host_mib};

use super::write_bench_file;
use crate::backend::Backend as BackendName;

/// `trainer bench allreduce [--peers 2,4] [--gaussians 100000,1000000] [--sh-degree 3]`.
#[derive(Args, Debug)]
pub struct AllReduceBenchArgs {
    /// Local peers (threads, each a device) per all-reduce, comma separated (default 2,4;
    /// with `--nodes`, one per node).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<usize>,
    /// Processes on this machine, one peer each, summing over localhost as the nodes of a
    /// multi-node run do over a network (`1`: threads of this process).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Seconds a node waits for the others at any step before it gives up with an error.
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
    /// A node started by node 0 (`--nodes`): its rank, and the ports of the orchestrator and
    /// of every node, comma separated.
    #[arg(long, hide = true)]
    node_rank: Option<usize>,
    #[arg(long, hide = true, value_delimiter = ',')]
    ports: Vec<u16>,
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
    /// With `--nodes`: leave out the same sums between threads of one process (`local_ms`),
    /// which hold every node's tensor in one process (the rows then carry no ratio).
    #[arg(long)]
    skip_local: bool,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-allreduce.json"
    )]
    json: PathBuf,
    /// The backend (the global `--backend`), which the other nodes are started with.
    #[arg(skip = BackendName::default_compiled())]
    pub(crate) backend: BackendName,
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

/// `D` peers combining one tensor each with `operation`, `repeats + 1` times (the first
/// untimed): the slowest peer's time of each timed all-reduce, ms, and peer 0's last result.
pub fn time_all_reduce<B: Backend>(
    inputs: Vec<Tensor<B, 1>>,
    strategy: AllReduceStrategy,
    operation: ReduceOperation,
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
                    let reduced =
                        all_reduce::<B>(id, input.clone().into_primitive().tensor(), operation)
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
    if args.repeats == 0 || args.peers.contains(&0) || args.sh_degree > 3 || args.nodes == 0 {
        bail!("--repeats, --peers and --nodes must be at least 1, --sh-degree at most 3");
    }
    if args.nodes > 1 {
        if !args.peers.is_empty() {
            bail!("--peers: with --nodes every node is one peer");
        }
        return bench_nodes::<Bk>(args, device);
    }
    let peers = match args.peers.is_empty() {
        true => vec![2, 4],
        false => args.peers.clone(),
    };
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
        for &peers in &peers {
            let inputs: Vec<Tensor<Bk, 1>> = (0..peers)
                .map(|_| Tensor::<Bk, 1>::random([floats], Distribution::Default, device))
                .collect();
            let local = time_local_mean(&inputs, device, args.repeats)?;
            let (times, _) = time_all_reduce(
                inputs,
                args.strategy.collective(),
                ReduceOperation::Mean,
                args.repeats,
            )?;
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

/// Values in a node's gradient pattern before it repeats: a prime, so that no chunk or slice of
/// the ring (a power of two of bytes, or an even split) matches another one's place.
const PATTERN: usize = 1021;

/// Value `i` of node `rank`'s gradients: a pattern every node can recompute, of values in
/// `[-0.5, 0.5)` on a 1/1024 grid (so that sums of a few are exact in f32), repeating every
/// [`PATTERN`] values.
fn node_value(rank: usize, i: usize) -> f32 {
    let i = i % PATTERN;
    ((i.wrapping_mul(2_654_435_761) ^ (rank + 1).wrapping_mul(40_503)) % 1024) as f32 / 1024.0 - 0.5
}

/// `floats` values of `pattern` (of [`PATTERN`] values), repeated: built a pattern at a time,
/// which keeps 6M Gaussians' inputs quick in unoptimised test builds.
fn repeated(pattern: &[f32], floats: usize) -> Vec<f32> {
    let mut values = Vec::with_capacity(floats);
    while values.len() < floats {
        let take = (floats - values.len()).min(pattern.len());
        values.extend_from_slice(&pattern[..take]);
    }
    values
}

/// Node `rank`'s gradients of `floats` values ([`node_value`]).
fn node_input(rank: usize, floats: usize) -> Vec<f32> {
    let pattern: Vec<f32> = (0..PATTERN).map(|i| node_value(rank, i)).collect();
    repeated(&pattern, floats)
}

/// The first element of `sum` (f32, native byte order) that is not the sum of the `nodes`
/// nodes' inputs, with its value and the expected one. Compared a pattern at a time, as bytes
/// (the sums are exact: every node adds the same values).
fn first_wrong_sum(sum: &[u8], nodes: usize) -> Option<(usize, f32, f32)> {
    let expected = |i: usize| (0..nodes).map(|r| node_value(r, i)).sum::<f32>();
    let pattern: Vec<u8> = (0..PATTERN)
        .flat_map(|i| expected(i).to_ne_bytes())
        .collect();
    let block = sum
        .chunks(pattern.len())
        .position(|block| block != &pattern[..block.len()])?;
    let start = block * PATTERN;
    sum[block * pattern.len()..]
        .chunks_exact(4)
        .take(PATTERN)
        .enumerate()
        .map(|(offset, bytes)| {
            let got = f32::from_ne_bytes(bytes.try_into().expect("4 bytes"));
            (start + offset, got, expected(start + offset))
        })
        .find(|&(_, got, expected)| got.to_bits() != expected.to_bits())
}

/// The same sums between `args.nodes` threads of this process (one peer each, the ring
/// strategy), for every case of `args.gaussians`: the median ms of each.
fn time_local_sums<Bk: Backend>(
    args: &AllReduceBenchArgs,
    device: &Bk::Device,
) -> Result<Vec<f64>> {
    let per = floats_per_gaussian(args.sh_degree);
    let mut medians = Vec::with_capacity(args.gaussians.len());
    for &gaussians in &args.gaussians {
        let floats = gaussians * per;
        let inputs = (0..args.nodes)
            .map(|r| {
                let values = burn::tensor::TensorData::new(node_input(r, floats), [floats]);
                Tensor::<Bk, 1>::from_data(values, device)
            })
            .collect();
        let (times, _) = time_all_reduce(
            inputs,
            AllReduceStrategy::Ring,
            ReduceOperation::Sum,
            args.repeats,
        )?;
        let median = BenchResult::from_samples("local sum", &times)
            .map(|r| r.median_ms)
            .ok_or_else(|| anyhow!("no local sum timed"))?;
        medians.push(median);
    }
    Ok(medians)
}

/// A free TCP port on this machine (the OS's pick, released at once).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// `--nodes K`: node 0 (this process, hosting the orchestrator) starts nodes `1..K`, and every
/// node sums each case's tensors `repeats + 1` times with the others, checking each sum.
fn bench_nodes<Bk: Backend>(args: &AllReduceBenchArgs, device: &Bk::Device) -> Result<()> {
    let rank = args.node_rank.unwrap_or(0);
    let timeout = Duration::from_secs_f64(args.timeout_s);
    let mut children: Vec<Child> = Vec::new();
    let local = match rank == 0 && !args.skip_local {
        true => time_local_sums::<Bk>(args, device)?,
        false => Vec::new(),
    };
    let ports = match rank {
        0 => {
            let ports = (0..=args.nodes)
                .map(|_| free_port())
                .collect::<Result<Vec<u16>>>()?;
            let orchestrator = ports[0];
            std::thread::spawn(move || {
                if let Err(e) = ember_train::parallel::serve_orchestrator(orchestrator) {
                    eprintln!("orchestrator: {e}");
                }
            });
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            let gaussians: Vec<String> = args.gaussians.iter().map(usize::to_string).collect();
            for node in 1..args.nodes {
                let child = Command::new(std::env::current_exe()?)
                    .args(["--backend", args.backend.name(), "bench", "allreduce"])
                    .args(["--nodes", &args.nodes.to_string()])
                    .args(["--node-rank", &node.to_string()])
                    .args(["--ports", &list.join(",")])
                    .args(["--gaussians", &gaussians.join(",")])
                    .args(["--sh-degree", &args.sh_degree.to_string()])
                    .args(["--repeats", &args.repeats.to_string()])
                    .args(["--timeout-s", &args.timeout_s.to_string()])
                    .spawn()
                    .map_err(|e| anyhow!("starting node {node}: {e}"))?;
                children.push(child);
            }
            ports
        }
        _ => args.ports.clone(),
    };
    if ports.len() != args.nodes + 1 {
        bail!("--ports: the orchestrator's and one per node");
    }
    let outcome = run_node::<Bk>(args, device, rank, &ports, &local, timeout);
    let mut failed = Vec::new();
    for (index, mut child) in children.into_iter().enumerate() {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if !status.is_some_and(|s| s.success()) {
            failed.push(index + 1);
        }
    }
    let results = outcome?;
    if !failed.is_empty() {
        bail!("node(s) {failed:?} failed or did not finish (their errors are above)");
    }
    if rank > 0 {
        return Ok(());
    }
    let file = BenchFile {
        tool: "trainer bench allreduce --nodes".into(),
        backend: Bk::name(device),
        input: format!(
            "{} processes on localhost, one peer each, SH degree {}, ring between the nodes, {} \
             timed all-reduces per case",
            args.nodes, args.sh_degree, args.repeats
        ),
        gaussians: args.gaussians.iter().copied().max().unwrap_or(0),
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    write_bench_file(&file, &args.json)
}

/// One node of `bench_nodes`: registers, sums every case, checks every sum, leaves. Node 0
/// reports each case against `local`, the same sums' median ms between threads (if measured).
fn run_node<Bk: Backend>(
    args: &AllReduceBenchArgs,
    device: &Bk::Device,
    rank: usize,
    ports: &[u16],
    local: &[f64],
    timeout: Duration,
) -> Result<Vec<BenchResult>> {
    let id = PeerId(rank as u32);
    let config = CollectiveConfig::default()
        .with_num_devices(1)
        .with_num_nodes(args.nodes as u32)
        .with_global_address(
            format!("ws://127.0.0.1:{}", ports[0])
                .parse()
                .map_err(|e: String| anyhow!(e))?,
        )
        .with_node_address(
            format!("ws://127.0.0.1:{}", ports[rank + 1])
                .parse()
                .map_err(|e: String| anyhow!(e))?,
        )
        .with_data_service_port(ports[rank + 1])
        .with_global_all_reduce_strategy(AllReduceStrategy::Ring);
    reset_collective::<Bk>();
    ember_train::parallel::quiet_network_logs();
    let register_device = device.clone();
    ember_train::parallel::watched("register", timeout, move || {
        register::<Bk>(id, register_device, config).map_err(|e| format!("register: {e:?}"))
    })
    .and_then(|r| r)
    .map_err(|e| anyhow!("node {rank}: {e}"))?;
    let per = floats_per_gaussian(args.sh_degree);
    if rank == 0 {
        println!(
            "all-reduce (sum) of the gradients of N Gaussians at SH degree {} ({per} floats \
             each) across {} processes on localhost, one peer each, on {}:",
            args.sh_degree,
            args.nodes,
            Bk::name(device)
        );
        println!(
            "| nodes | Gaussians | MB per node | median (ms) | min (ms) | max (ms) | GB/s per \
             node | {} threads of one process (ms) | ratio |",
            args.nodes
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    let mut results = Vec::new();
    for (case, &gaussians) in args.gaussians.iter().enumerate() {
        let floats = gaussians * per;
        let values = node_input(rank, floats);
        let mut times = Vec::with_capacity(args.repeats);
        for round in 0..=args.repeats {
            // A tensor of its own, as training's joined gradients are: reading a shared one
            // would copy it first.
            let input = Tensor::<Bk, 1>::from_data(
                burn::tensor::TensorData::new(values.clone(), [floats]),
                device,
            );
            Bk::sync(device).map_err(|e| anyhow!("sync: {e:?}"))?;
            let started = Instant::now();
            let primitive = input.into_primitive().tensor();
            let what = format!("all-reduce {round} of {gaussians} Gaussians' gradients");
            let reduced = ember_train::parallel::watched(&what, timeout, {
                let what = what.clone();
                move || {
                    all_reduce::<Bk>(id, primitive, ReduceOperation::Sum)
                        .map_err(|e| format!("{what}: {e:?}"))
                }
            })
            .and_then(|r| r)
            .map_err(|e| anyhow!("node {rank}: {e}"))?;
            let reduced = Tensor::<Bk, 1>::from_primitive(TensorPrimitive::Float(reduced));
            Bk::sync(device).map_err(|e| anyhow!("sync: {e:?}"))?;
            if round > 0 {
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
            let sum = reduced.into_data().convert::<f32>();
            let context = format!("node {rank}: all-reduce {round} of {gaussians} Gaussians");
            if sum.num_elements() != floats {
                bail!("{context}: {} values, not {floats}", sum.num_elements());
            }
            if let Some((i, got, expected)) = first_wrong_sum(&sum.bytes, args.nodes) {
                bail!("{context}: [{i}] is {got}, the nodes' inputs sum to {expected}");
            }
        }
        if rank > 0 {
            continue;
        }
        let megabytes = (4 * floats) as f64 / 1e6;
        let result = BenchResult::from_samples(
            format!("{} nodes, {gaussians} Gaussians", args.nodes),
            &times,
        )
        .ok_or_else(|| anyhow!("no all-reduce timed"))?;
        let ms = result.median_ms;
        let mut result = result
            .with_metric("nodes", args.nodes as f64)
            .with_metric("gaussians", gaussians as f64)
            .with_metric("megabytes_per_node", megabytes)
            .with_metric("ms", ms)
            .with_metric("gigabytes_per_s_per_node", megabytes / ms);
        let (local_column, ratio_column) = match local.get(case) {
            Some(&local) => {
                result = result
                    .with_metric("local_ms", local)
                    .with_metric("ratio_to_local", ms / local);
                (format!("{local:.2}"), format!("{:.2}x", ms / local))
            }
            None => ("-".to_string(), "-".to_string()),
        };
        println!(
            "| {} | {gaussians} | {megabytes:.1} | {ms:.2} | {:.2} | {:.2} | {:.2} | {local_column} | {ratio_column} |",
            args.nodes,
            result.min_ms,
            result.max_ms,
            megabytes / ms,
        );
        results.push(result);
    }
    ember_train::parallel::watched("finish", timeout, move || {
        finish_collective::<Bk>(id).map_err(|e| format!("finish: {e:?}"))
    })
    .and_then(|r| r)
    .map_err(|e| anyhow!("node {rank}: {e}"))?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    use crate::backend::Cpu;

    /// The nodes' summed inputs pass the check; a value off, or two chunks of the ring put at
    /// each other's place, are found.
    #[test]
    fn a_wrong_or_misplaced_sum_is_found() {
        let floats = 4 * PATTERN + 17;
        let sums: Vec<f32> = (0..floats)
            .map(|i| node_value(0, i) + node_value(1, i) + node_value(2, i))
            .collect();
        let bytes =
            |values: &[f32]| -> Vec<u8> { values.iter().flat_map(|v| v.to_ne_bytes()).collect() };
        let inputs: Vec<Vec<f32>> = (0..3).map(|rank| node_input(rank, floats)).collect();
        assert!((0..floats).all(|i| inputs[1][i] == node_value(1, i)));
        assert_eq!(first_wrong_sum(&bytes(&sums), 3), None);
        let mut off = sums.clone();
        off[PATTERN + 5] += 1.0 / 1024.0;
        let (i, got, expected) = first_wrong_sum(&bytes(&off), 3).expect("found");
        assert_eq!(
            (i, got, expected),
            (PATTERN + 5, off[PATTERN + 5], sums[PATTERN + 5])
        );
        let mut swapped = sums.clone();
        let chunk = 1024;
        let (head, tail) = swapped.split_at_mut(chunk);
        head.swap_with_slice(&mut tail[..chunk]);
        assert!(first_wrong_sum(&bytes(&swapped), 3).is_some_and(|(i, ..)| i < chunk));
        assert!(first_wrong_sum(&bytes(&sums), 2).is_some());
    }

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
                let (times, result) =
                    time_all_reduce(inputs, strategy.collective(), ReduceOperation::Mean, 2)
                        .unwrap();
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
