//! Multi-node training on localhost: `trainer orchestrator` and two `trainer` processes, as two
//! machines run them. Two nodes of one peer each end bit-identical to each other and to one
//! process with two peers, and a resumed group to the uninterrupted one; two nodes of two peers
//! agree with each other; the patched barrier lets global all-reduces follow one another; a
//! node that never comes or dies, and a port already taken, stop the others with a clear error.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{arg, scratch, stdout};

/// A free TCP port on this machine (the OS's pick, released at once).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// A child process killed when dropped (a failed assertion leaves no orchestrator behind).
struct Killed(Option<Child>);

impl Killed {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("a running child")
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `trainer orchestrator --port port`.
fn orchestrator(port: u16) -> Killed {
    Killed(Some(
        crate::common::trainer_command()
            .args(["orchestrator", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the orchestrator starts"),
    ))
}

/// The tiny procedural run (densification every 4 steps from step 3, an opacity reset at 8)
/// with a batch of `batch` views, as a config file in `dir`.
fn config(dir: &Path, batch: usize) -> PathBuf {
    std::fs::create_dir_all(dir).expect("scratch folder");
    let path = dir.join("tiny.toml");
    std::fs::write(
        &path,
        format!(
            r#"steps = 24
seed = 5
batch_size = {batch}
[data.procedural]
resolution = 32
train_views = 8
test_views = 3
gaussians = 600
points = 200
[init]
sh_degree = 1
[optim]
sh_interval = 6
[densify]
start = 3
stop = 100
interval = 4
grad_threshold = 1e-5
opacity_reset_interval = 8
[eval]
every = 12
save_images = 0
[output]
checkpoint_every = 12
log_every = 2
"#
        ),
    )
    .expect("config written");
    path
}

/// `trainer --backend ndarray --config config args...`, started.
fn start(config: &Path, args: &[String]) -> Killed {
    Killed(Some(
        crate::common::trainer_command()
            .args(["--backend", "ndarray", "--config", arg(config)])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("trainer starts"),
    ))
}

/// Waits at most `limit` for `child` to end (killing it after), with its output.
fn finish(mut child: Killed, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    while child.child().try_wait().expect("waiting").is_none() {
        if started.elapsed() > limit {
            let _ = child.child().kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    let inner = child.0.take().expect("a running child");
    (inner.wait_with_output().expect("its output"), elapsed)
}

/// The multi-node keys of node `rank` of `nodes` (orchestrator and node ports on localhost).
fn node_args(
    rank: usize,
    nodes: usize,
    orchestrator: u16,
    port: u16,
    timeout_s: f64,
) -> Vec<String> {
    [
        format!("--node-rank={rank}"),
        format!("--set=distributed.nodes={nodes}"),
        format!("--set=distributed.orchestrator=\"127.0.0.1:{orchestrator}\""),
        format!("--set=distributed.node_address=\"127.0.0.1:{port}\""),
        format!("--set=distributed.timeout_s={timeout_s}"),
    ]
    .into()
}

/// The `parameters hash` a run printed (node 0's summary or another node's last line).
fn parameter_hash(out: &Output) -> String {
    let text = stdout(out);
    let line = text
        .lines()
        .find(|l| l.contains("parameters hash"))
        .unwrap_or_else(|| panic!("no parameters hash in\n{text}\n{out:?}"));
    let after = line.split("parameters hash ").nth(1).expect("the hash");
    after
        .split_whitespace()
        .next()
        .expect("the hash")
        .to_string()
}

/// The successful output of `child`, within 5 minutes.
fn succeeded(child: Killed, what: &str) -> Output {
    let (out, _) = finish(child, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `count` nodes of `devices` peers each train `config` (with `extra` arguments) into
/// `dir/node0`, through the orchestrator on `orchestrator_port`: every node's output, in rank
/// order.
fn nodes(
    config: &Path,
    dir: &Path,
    orchestrator_port: u16,
    count: usize,
    devices: &str,
    extra: &[&str],
) -> Vec<Output> {
    let started: Vec<Killed> = (0..count)
        .map(|rank| {
            let mut args = node_args(rank, count, orchestrator_port, free_port(), 120.0);
            args.extend([
                format!("--devices={devices}"),
                format!("--out={}", dir.join(format!("node{rank}")).display()),
            ]);
            args.extend(extra.iter().map(|s| s.to_string()));
            start(config, &args)
        })
        .collect();
    started
        .into_iter()
        .enumerate()
        .map(|(rank, node)| succeeded(node, &format!("node {rank}")))
        .collect()
}

/// Two nodes of `devices` peers each train `config` (with `extra` arguments) into
/// `dir/node0`: both outputs, node 1's after node 0's.
fn two_nodes(config: &Path, dir: &Path, devices: &str, extra: &[&str]) -> (Output, Output) {
    let orchestrator_port = free_port();
    let _orchestrator = orchestrator(orchestrator_port);
    let mut outputs = nodes(config, dir, orchestrator_port, 2, devices, extra).into_iter();
    let zero = outputs.next().expect("node 0");
    let one = outputs.next().expect("node 1");
    (zero, one)
}

/// One process with the peers of `devices`, into `dir/name`.
fn one_process(config: &Path, dir: &Path, name: &str, devices: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        format!("--devices={devices}"),
        format!("--out={}", dir.join(name).display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    succeeded(start(config, &args), name)
}

#[test]
fn two_nodes_train_bit_identical_to_one_process_and_resume() {
    let dir = scratch("multi-node-1x2");
    let config = config(&dir, 2);
    let (zero, one) = two_nodes(&config, &dir, "0", &[]);
    let hash = parameter_hash(&zero);
    assert_eq!(parameter_hash(&one), hash, "node 1's replica is node 0's");
    assert!(
        stdout(&one).contains("node 1 trained 24 steps"),
        "{}",
        stdout(&one)
    );
    assert!(!dir.join("node1").exists(), "node 1 writes nothing");
    let single = one_process(&config, &dir, "single", "0,0", &[]);
    assert_eq!(parameter_hash(&single), hash, "one process with two peers");
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(
        read(dir.join("node0/splats.ply")),
        read(dir.join("single/splats.ply")),
        "the exported splats of node 0 and of one process"
    );

    // A group stopped at step 12 and resumed from node 0's checkpoint by both nodes ends where
    // the uninterrupted group did.
    // The means' rate decays over the uninterrupted run's 24 steps in both.
    let (early, _) = two_nodes(
        &config,
        &dir.join("first"),
        "0",
        &["--steps=12", "--set=optim.lr_means_steps=24"],
    );
    assert!(early.status.success());
    let checkpoint = dir.join("first/node0/checkpoint.safetensors");
    let resume = format!("--resume={}", checkpoint.display());
    let (zero, one) = two_nodes(&config, &dir.join("resumed"), "0", &[&resume]);
    assert_eq!(parameter_hash(&zero), hash, "node 0 resumed");
    assert_eq!(parameter_hash(&one), hash, "node 1 resumed");
}

#[test]
fn two_nodes_of_two_peers_agree() {
    let dir = scratch("multi-node-2x2");
    let config = config(&dir, 4);
    let (zero, one) = two_nodes(&config, &dir, "0,0", &[]);
    let hash = parameter_hash(&zero);
    assert_eq!(parameter_hash(&one), hash, "node 1's replicas are node 0's");
    // One process with four peers sums three or more tensors per all-reduce in an order of its
    // own (not even the same between two runs of it): the same run to float rounding.
    let single = one_process(&config, &dir, "single", "0,0,0,0", &[]);
    let psnr = |out: &Output| -> f64 {
        let text = stdout(out);
        let line = text
            .lines()
            .find(|l| l.contains("held-out PSNR"))
            .unwrap_or_else(|| panic!("no PSNR in {text}"));
        line.split("held-out PSNR ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .expect("a PSNR")
    };
    let (two, four) = (psnr(&zero), psnr(&single));
    assert!(
        (two - four).abs() < 0.5,
        "two nodes of two peers: {two} dB, one process of four: {four} dB"
    );
}

/// `trainer --backend ndarray bench allreduce --nodes 2 args... --json F` (into `scratch(name)`),
/// which must succeed within `limit`: its output and the JSON it wrote.
fn bench_two_nodes(name: &str, args: &[&str], limit: Duration) -> (Output, serde_json::Value) {
    let json = scratch(name).join("allreduce.json");
    let child = Killed(Some(
        crate::common::trainer_command()
            .args(["--backend", "ndarray", "bench", "allreduce", "--nodes", "2"])
            .args(args)
            .args(["--json", arg(&json)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("trainer starts"),
    ));
    let (out, elapsed) = finish(child, limit);
    assert!(
        out.status.success(),
        "after {elapsed:?}: {}\n{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let file = serde_json::from_slice(&std::fs::read(&json).expect("the JSON")).expect("JSON");
    (out, file)
}

#[test]
fn global_all_reduces_follow_one_another() {
    // burn-collective 0.21.0's barrier hung the second global all-reduce
    // (vendor/burn-collective/PATCHES.md); every sum is checked against the local one.
    let (out, file) = bench_two_nodes(
        "multi-node-allreduce",
        &[
            "--gaussians",
            "500,3000",
            "--repeats",
            "7",
            "--timeout-s",
            "60",
        ],
        Duration::from_secs(180),
    );
    let rows = file["results"].as_array().expect("results");
    assert_eq!(rows.len(), 2, "{file}");
    assert!(stdout(&out).contains("| 2 | 3000 |"), "{}", stdout(&out));
}

#[test]
fn a_node_that_never_comes_stops_the_other_within_the_timeout() {
    let dir = scratch("multi-node-alone");
    let config = config(&dir, 2);
    let orchestrator_port = free_port();
    let _orchestrator = orchestrator(orchestrator_port);
    let mut args = node_args(0, 2, orchestrator_port, free_port(), 4.0);
    args.push(format!("--out={}", dir.join("node0").display()));
    let (out, elapsed) = finish(start(&config, &args), Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("register: no answer from the other nodes within 4 s"),
        "{stderr}"
    );
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    // And with no orchestrator at all.
    let mut args = node_args(0, 2, free_port(), free_port(), 4.0);
    args.push(format!("--out={}", dir.join("lonely").display()));
    let (out, _) = finish(start(&config, &args), Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no answer from the other nodes"),
        "{stderr}"
    );
}

#[test]
fn six_million_gaussians_all_reduce_across_two_nodes() {
    // 6M Gaussians at SH 3 are 1.4 GB a node: each ring slice (708 MB) is past the websocket's
    // 512 MiB frame limit, so it goes round in chunks. Each node checks every element of both
    // sums against the nodes' inputs and fails the run on the first that differs.
    let (_, file) = bench_two_nodes(
        "multi-node-six-million",
        &[
            "--gaussians",
            "6000000",
            "--repeats",
            "1",
            "--skip-local",
            "--timeout-s",
            "300",
        ],
        Duration::from_secs(600),
    );
    let row = &file["results"][0]["metrics"];
    assert_eq!(row["gaussians"], 6_000_000.0, "{file}");
    assert_eq!(row["megabytes_per_node"], 1416.0, "{file}");
    assert!(row["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{file}");
    assert!(row.get("local_ms").is_none(), "{file}");
}

#[test]
fn an_orchestrator_takes_a_run_of_another_node_count_once_one_ends() {
    // burn-collective 0.21.0's orchestrator kept the first run's node count for good
    // (vendor/burn-collective/PATCHES.md): three nodes after two were refused.
    let dir = scratch("multi-node-counts");
    let orchestrator_port = free_port();
    let _orchestrator = orchestrator(orchestrator_port);
    for count in [2, 3] {
        let run = dir.join(format!("{count}-nodes"));
        let outputs = nodes(
            &config(&run, count),
            &run,
            orchestrator_port,
            count,
            "0",
            &[],
        );
        let hash = parameter_hash(&outputs[0]);
        for (rank, out) in outputs.iter().enumerate() {
            assert_eq!(
                parameter_hash(out),
                hash,
                "{count} nodes: node {rank}'s replica"
            );
        }
    }
}

#[test]
fn a_node_that_dies_stops_the_other() {
    let dir = scratch("multi-node-dies");
    let config = config(&dir, 2);
    let orchestrator_port = free_port();
    let _orchestrator = orchestrator(orchestrator_port);
    let start_node = |rank: usize| {
        let mut args = node_args(rank, 2, orchestrator_port, free_port(), 20.0);
        args.extend([
            "--steps=100000".to_string(),
            format!("--out={}", dir.join(format!("node{rank}")).display()),
        ]);
        start(&config, &args)
    };
    let zero = start_node(0);
    let mut one = start_node(1);
    // Node 0 logs every second step once the nodes train together.
    let log = dir.join("node0/metrics.jsonl");
    let started = Instant::now();
    while std::fs::metadata(&log).map_or(true, |m| m.len() == 0) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no step logged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    one.child().kill().expect("node 1 killed");
    let (out, elapsed) = finish(zero, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("data-parallel peer 0"), "{stderr}");
    assert!(
        stderr.contains("no answer from the other nodes")
            || stderr.contains("a node closed its connection"),
        "{stderr}"
    );
    // The vendored engine reports the lost peer as an error: nothing in it panics.
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let dir = scratch("multi-node-port");
    let config = config(&dir, 2);
    let taken = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("a port");
    let port = taken.local_addr().expect("its address").port();
    let mut args = node_args(0, 2, free_port(), port, 4.0);
    args.push(format!("--out={}", dir.join("node0").display()));
    let (out, _) = finish(start(&config, &args), Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on port {port}")),
        "{stderr}"
    );
    let out = crate::common::trainer_command()
        .args(["orchestrator", "--port", &port.to_string()])
        .output()
        .expect("trainer runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on port {port}")),
        "{stderr}"
    );
}
