//! Data-parallel training on `D` devices with Burn's collective engine (`burn::collective`),
//! on one machine or across several.
//!
//! Every peer (one per device, a thread of its node's process) holds a replica of the field and
//! its own [`Trainer`]. A step of batch `B` renders `B / D` views on each peer (peer `r` takes
//! positions `r B / D ..` of the step's views), each scaling its loss by `1 / B`, so that the
//! all-reduced **sum** of the peers' gradients is the gradient of the batch's mean loss. The
//! densification statistics of the whole batch are summed the same way (each peer contributes
//! its views' rows, zeros elsewhere), so every replica observes all `B` views in the batch's
//! order, takes the same Adam step and makes the same clone/split/prune decisions: the replicas
//! never drift, and [`TrainError::ReplicasDiverged`] says so on every peer if they ever do (a
//! hash of every replica's parameter bits compared with peer 0's, gathered with an
//! all-reduce). Checkpoints, evaluation and logs are peer 0's ([`run_data_parallel`]); a checkpoint holds one replica, so
//! a run resumes on any `D`.
//!
//! **Across machines** (`distributed.nodes > 1`) each machine runs one process, a *node*, with
//! its `devices`; node `n`'s peers are the global ranks `n D_n ..`. The nodes register with an
//! orchestrator ([`serve_orchestrator`], `trainer orchestrator`), which tells each the others'
//! addresses; then every all-reduce sums within the node, across the nodes (a ring over
//! websockets, each node serving its tensors on `distributed.node_address`'s port), and back.
//! Node 0 runs [`run_data_parallel`] (it writes the run's files), the others
//! [`follow_data_parallel`] (they write nothing). burn-collective waits on the network without
//! a deadline, so each collective call across nodes is watched: a node that died, never came or
//! cannot be reached stops every other one with [`TrainError::Collective`] within
//! `distributed.timeout_s`.
//!
//! Against one device rendering the same `B` views batched, the parameters agree to float
//! rounding, not bit for bit: the batch's gradient is summed per peer and then across peers
//! instead of over all views at once. Summing two values is exact in either order, so two
//! peers (on one node or two) give the same bits; with more, the engine's order of summation
//! (a map's on one device type) may differ between runs by a rounding.
//!
//! Burn's collective server is one per backend type and process: run one data-parallel run
//! per backend at a time in a process.

use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use burn::collective::{
    AllReduceStrategy, CollectiveConfig, CollectiveError, GlobalCollectiveError, PeerId,
    ReduceOperation, all_reduce, finish_collective, register, reset_collective,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use crate::adam::FieldGradients;
use crate::config::{ReduceStrategyKind, TrainConfig, host_port};
use crate::error::TrainError;
use crate::params::{ParamGroup, parameter_hash};
use crate::reduce::{OneDevice, PeerLink, ReadRequest, ReadValues, Reducer, read_together};
use crate::run::{RunObserver, RunSummary, run_trainer};
use crate::scene::TrainScene;
use crate::trainer::{Inner, Trainer};
use ember_field::to_host;
use ember_field::{GaussianField, SplatAutodiffBackend};

/// Steps between replica checks in debug and test builds when the config sets none.
const DEBUG_CHECK_EVERY: usize = 10;

/// Runs `operation` (a call into the collective engine across nodes) on a helper thread and
/// waits at most `timeout` for it: burn-collective waits on the network without a deadline, so a
/// node that never came or cannot be reached would otherwise block the caller forever. `Err` says which happened. After an error the helper may
/// stay blocked: the process is expected to end (the engine's state is not reusable).
pub fn watched<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    operation: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("ember-collective".to_string())
        .spawn(move || {
            // The receiver is gone only after a timeout: nobody is left to tell.
            let _ = sender.send(operation());
        })
        .map_err(|e| format!("{what}: starting its thread: {e}"))?;
    match receiver.recv_timeout(timeout) {
        Ok(result) => Ok(result),
        Err(RecvTimeoutError::Timeout) => Err(format!(
            "{what}: no answer from the other nodes within {} s: a node stopped, never started, \
             or cannot reach this one or the orchestrator (`distributed.timeout_s`)",
            timeout.as_secs_f64()
        )),
        Err(RecvTimeoutError::Disconnected) => Err(format!(
            "{what}: the collective engine failed: a node closed its connection (it stopped or \
             crashed) or could not be reached"
        )),
    }
}

impl PeerLink {
    fn id(&self) -> PeerId {
        PeerId(self.rank as u32)
    }

    fn error(&self, what: &str, e: impl std::fmt::Debug) -> TrainError {
        TrainError::Collective {
            peer: self.rank,
            message: format!("{what}: {e:?}"),
        }
    }

    /// Runs `operation` of the collective engine, across nodes [`watched`] for
    /// [`PeerLink::timeout`].
    fn call<T: Send + 'static>(
        &self,
        what: &'static str,
        operation: impl FnOnce() -> Result<T, CollectiveError> + Send + 'static,
    ) -> Result<T, TrainError> {
        let outcome = match self.timeout {
            Some(timeout) => watched(what, timeout, operation),
            None => Ok(operation()),
        };
        match outcome {
            // Across nodes a lost connection panics the engine's server, and what is asked of
            // it next finds it gone.
            Ok(Err(CollectiveError::LocalServerMissing)) if self.timeout.is_some() => {
                Err(TrainError::Collective {
                    peer: self.rank,
                    message: format!(
                        "{what}: the collective engine stopped: a node closed its connection \
                         (it stopped or crashed) or could not be reached"
                    ),
                })
            }
            // The vendored engine reports a lost peer instead of panicking.
            Ok(Err(CollectiveError::Global(GlobalCollectiveError::PeerLost(_)))) => {
                Err(TrainError::Collective {
                    peer: self.rank,
                    message: format!(
                        "{what}: a node closed its connection (it stopped or crashed)"
                    ),
                })
            }
            Ok(result) => result.map_err(|e| self.error(what, e)),
            Err(message) => Err(TrainError::Collective {
                peer: self.rank,
                message,
            }),
        }
    }

    /// The element-wise sum of every peer's `tensor` (all of one shape), on every peer.
    pub(crate) fn sum<B: Backend, const D: usize>(
        &self,
        tensor: Tensor<B, D>,
    ) -> Result<Tensor<B, D>, TrainError> {
        let shape = tensor.shape();
        let len = shape.num_elements();
        // A ring across `nodes` splits a tensor into as many slices: pad a smaller one.
        let padded = match self.nodes > 1 && len < self.nodes {
            true => {
                let device = tensor.device();
                Tensor::cat(
                    vec![
                        tensor.reshape([len]),
                        Tensor::zeros([self.nodes - len], &device),
                    ],
                    0,
                )
            }
            false => tensor.reshape([len]),
        };
        let id = self.id();
        let primitive = padded.into_primitive().tensor();
        let reduced = self.call("all-reduce", move || {
            all_reduce::<B>(id, primitive, ReduceOperation::Sum)
        })?;
        let summed = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(reduced));
        Ok(summed.narrow(0, 0, len).reshape(shape))
    }

    /// The peers' gradients summed: one all-reduce of all six, flattened and joined. A
    /// parameter without a gradient (none of its inputs reached the loss) takes part as zeros,
    /// and stays without one.
    pub(crate) fn sum_gradients<B: Backend>(
        &self,
        field: &GaussianField<B>,
        grads: FieldGradients<B>,
    ) -> Result<FieldGradients<B>, TrainError> {
        let device = field.means.device();
        let n = field.num_gaussians();
        let present = [
            grads.means.is_some(),
            grads.quats.is_some(),
            grads.log_scales.is_some(),
            grads.opacity_logits.is_some(),
            grads.sh_dc.is_some(),
            grads.sh_rest.is_some(),
        ];
        let flat = |t: Option<Tensor<B, 1>>, len: usize| {
            t.unwrap_or_else(|| Tensor::zeros([len], &device))
        };
        let sizes = ParamGroup::ALL.map(|g| g.columns(field).dims().iter().product::<usize>());
        let joined = Tensor::cat(
            vec![
                flat(grads.means.map(|t| t.reshape([3 * n])), sizes[0]),
                flat(grads.quats.map(|t| t.reshape([4 * n])), sizes[1]),
                flat(grads.log_scales.map(|t| t.reshape([3 * n])), sizes[2]),
                flat(grads.opacity_logits, sizes[3]),
                flat(grads.sh_dc.map(|t| t.reshape([3 * n])), sizes[4]),
                flat(grads.sh_rest.map(|t| t.reshape([sizes[5]])), sizes[5]),
            ],
            0,
        );
        let summed = self.sum(joined)?;
        let mut start = 0;
        let mut part = |index: usize| {
            let len = sizes[index];
            let piece = summed.clone().narrow(0, start, len);
            start += len;
            present[index].then_some(piece)
        };
        let rest = field.sh_rest.dims();
        Ok(FieldGradients {
            means: part(0).map(|t| t.reshape([n, 3])),
            quats: part(1).map(|t| t.reshape([n, 4])),
            log_scales: part(2).map(|t| t.reshape([n, 3])),
            opacity_logits: part(3),
            sh_dc: part(4).map(|t| t.reshape([n, 1, 3])),
            sh_rest: part(5).map(|t| t.reshape(rest)),
        })
    }

    /// The densification statistics of the whole batch of `batch` views on every peer: this
    /// peer's rows (`screen_grads [S N, 3]`, `extents [S N, 3]`, `S` its share) at its place
    /// among the batch's `batch N` rows, summed with the other peers' (whose rows are zero
    /// here).
    pub(crate) fn gather_statistics<B: Backend>(
        &self,
        screen_grads: Tensor<B, 2>,
        extents: Tensor<B, 2, Int>,
        batch: usize,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 2, Int>), TrainError> {
        let [own, _] = screen_grads.dims();
        let device = screen_grads.device();
        let rows = Tensor::cat(vec![screen_grads, extents.float()], 1);
        let total = own * self.peers;
        debug_assert_eq!(total % batch, 0);
        let before = self.rank * own;
        let after = total - before - own;
        let mut parts = Vec::with_capacity(3);
        if before > 0 {
            parts.push(Tensor::zeros([before, 6], &device));
        }
        parts.push(rows);
        if after > 0 {
            parts.push(Tensor::zeros([after, 6], &device));
        }
        let all = self.sum(Tensor::cat(parts, 0))?;
        Ok((
            all.clone().narrow(1, 0, 3),
            // Extents are integers below 2^24: exact in f32, and zero plus one of them is itself.
            all.narrow(1, 3, 3).round().int(),
        ))
    }

    /// Compares every peer's hash of its parameters ([`crate::params::parameter_hash`]) with
    /// peer 0's: the hashes are gathered with one all-reduce (each peer's four 16-bit parts at
    /// its own slots, zeros elsewhere: sums of one value and zeros are exact), so every peer
    /// sees every hash and all of them stop with the same error, naming the first peer that
    /// differs. Were only the differing peer to stop, the others would wait for it in the next
    /// step's all-reduce (across nodes, until `distributed.timeout_s`).
    pub(crate) fn check_replica<B: Backend>(
        &self,
        field: &GaussianField<B>,
        step: usize,
    ) -> Result<(), TrainError> {
        let hash = parameter_hash(field)?;
        let mut slots = vec![0.0f32; 4 * self.peers];
        for part in 0..4 {
            slots[4 * self.rank + part] = ((hash >> (16 * part)) & 0xffff) as f32;
        }
        let device = field.means.device();
        let shared = Tensor::<B, 1>::from_data(TensorData::new(slots, [4 * self.peers]), &device);
        let all = to_host(self.sum(shared)?, "the replicas' hashes")?;
        let hash_of = |peer: usize| {
            (0..4).fold(0u64, |h, part| {
                h | ((all[4 * peer + part] as u64) << (16 * part))
            })
        };
        let reference = hash_of(0);
        match (1..self.peers).find(|&peer| hash_of(peer) != reference) {
            Some(peer) => Err(TrainError::ReplicasDiverged {
                step,
                peer,
                hash: hash_of(peer),
                reference,
            }),
            None => Ok(()),
        }
    }
}

impl<B: Backend> Reducer<B> for PeerLink {
    fn replicas(&self) -> usize {
        self.peers
    }

    fn share(&self, batch: usize) -> Range<usize> {
        let share = batch / self.peers;
        self.rank * share..(self.rank + 1) * share
    }

    fn gradients(
        &self,
        field: &GaussianField<B>,
        grads: FieldGradients<B>,
    ) -> Result<FieldGradients<B>, TrainError> {
        self.sum_gradients(field, grads)
    }

    /// One all-reduce of `N` floats more a step.
    fn sum_rows(&self, rows: Tensor<B, 1>) -> Result<Tensor<B, 1>, TrainError> {
        self.sum(rows)
    }

    fn statistics(
        &self,
        screen_grads: Tensor<B, 2>,
        extents: Tensor<B, 2, Int>,
        batch: usize,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 2, Int>), TrainError> {
        self.gather_statistics(screen_grads, extents, batch)
    }

    /// Every step: the peers' `(loss, mse, stop votes)` summed, so that every peer stops at
    /// the same step (what was not asked for takes part as zero).
    fn read(&self, request: ReadRequest<B>) -> Result<ReadValues, TrainError> {
        let device = request.device;
        let value = |t: Option<Tensor<B, 1>>| t.unwrap_or_else(|| Tensor::zeros([1], &device));
        let vote = if request.stop { 1.0f32 } else { 0.0 };
        let (has_loss, has_mse) = (request.loss.is_some(), request.mse.is_some());
        let control = Tensor::cat(
            vec![
                value(request.loss),
                value(request.mse),
                Tensor::from_data(TensorData::new(vec![vote], [1]), &device),
            ],
            0,
        );
        let control = self.sum(control)?;
        let read = read_together(vec![control], request.tile_pairs)?;
        let sums = &read.floats[0];
        Ok(ReadValues {
            loss: has_loss.then_some(sums[0]),
            mse: has_mse.then_some(sums[1]),
            tile_pairs: read.pairs,
            stop: sums[2] > 0.0,
        })
    }

    fn after_step(&self, field: &GaussianField<B>, step: usize) -> Result<(), TrainError> {
        let every = if self.check_every == 0 && cfg!(debug_assertions) {
            DEBUG_CHECK_EVERY
        } else {
            self.check_every
        };
        if step == self.last_step || (every > 0 && step.is_multiple_of(every)) {
            self.check_replica(field, step)?;
        }
        Ok(())
    }

    fn peer(&self) -> Option<PeerLink> {
        Some(*self)
    }
}

/// The collective engine's settings for this node's peers: the local strategy, and across
/// nodes the orchestrator's and this node's addresses (a ring between the nodes).
pub fn collective_config(config: &TrainConfig) -> Result<CollectiveConfig, TrainError> {
    let distributed = &config.distributed;
    let strategy = match distributed.strategy {
        ReduceStrategyKind::Tree => AllReduceStrategy::Tree(2),
        ReduceStrategyKind::Ring => AllReduceStrategy::Ring,
        ReduceStrategyKind::Centralized => AllReduceStrategy::Centralized,
    };
    let local = CollectiveConfig::default()
        .with_num_devices(distributed.local_peers())
        .with_local_all_reduce_strategy(strategy);
    if !distributed.is_multi_node() {
        return Ok(local);
    }
    let address = |key: &str, value: &Option<String>| {
        let value = value.as_deref().unwrap_or_default();
        host_port(value)
            .map(|(_, port)| (format!("ws://{value}"), port))
            .map_err(|why| TrainError::Config {
                origin: "config".to_string(),
                message: format!("`distributed.{key}` = {value:?}: {why}"),
            })
    };
    let (orchestrator, _) = address("orchestrator", &distributed.orchestrator)?;
    let (node, port) = address("node_address", &distributed.node_address)?;
    Ok(local
        .with_num_nodes(distributed.nodes as u32)
        .with_global_address(
            orchestrator
                .parse()
                .map_err(|why: String| TrainError::Config {
                    origin: "config".to_string(),
                    message: why,
                })?,
        )
        .with_node_address(node.parse().map_err(|why: String| TrainError::Config {
            origin: "config".to_string(),
            message: why,
        })?)
        .with_data_service_port(port)
        .with_global_all_reduce_strategy(AllReduceStrategy::Ring))
}

/// Keeps burn-communication from installing its own global `tracing` subscriber when a node
/// starts serving, one that prints every tensor transfer (lines a step) at INFO: Ember's
/// device-activity counter, which prints nothing, takes the slot first (unless the application
/// installed a subscriber of its own, which then decides).
pub fn quiet_network_logs() {
    // Err: another subscriber is installed, which is all this needs.
    let _ = ember_kernels::count_device_activity();
}

/// Fails with a clear error when `port` cannot be listened on (another program holds it):
/// burn-collective's servers would fail in a background task and leave the nodes waiting.
pub fn check_port_free(port: u16, what: &str) -> Result<(), TrainError> {
    TcpListener::bind(("0.0.0.0", port))
        .map(drop)
        .map_err(|e| TrainError::Config {
            origin: "config".to_string(),
            message: format!("{what}: cannot listen on port {port}: {e}"),
        })
}

/// Serves the orchestrator of a multi-node run on `port` (every interface) until the process
/// is interrupted (Ctrl-C or SIGTERM): nodes register with it and learn each other's
/// addresses. One orchestrator serves one run at a time.
pub fn serve_orchestrator(port: u16) -> Result<(), TrainError> {
    check_port_free(port, "the orchestrator")?;
    quiet_network_logs();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| TrainError::Config {
            origin: "orchestrator".to_string(),
            message: format!("starting its runtime: {e}"),
        })?;
    runtime.block_on(burn_collective::start_global_orchestrator(port));
    Ok(())
}

impl<B: SplatAutodiffBackend> Trainer<B> {
    /// Makes this trainer peer `rank` (a global rank, over every node) of
    /// `config.distributed.peers()` (registering its device with Burn's collective engine
    /// under `collective`, [`collective_config`]): from now on each step renders this peer's
    /// share of the batch and sums gradients and statistics with the other peers, which must
    /// all join before their first step. Every peer must hold the same field and state (the
    /// same config and seed, or the same checkpoint loaded).
    pub fn join_peers(
        &mut self,
        rank: usize,
        collective: CollectiveConfig,
    ) -> Result<(), TrainError> {
        let distributed = &self.config.distributed;
        let link = PeerLink {
            rank,
            peers: distributed.peers(),
            nodes: distributed.nodes,
            check_every: distributed.check_every,
            last_step: self.config.steps,
            timeout: distributed
                .is_multi_node()
                .then(|| Duration::from_secs_f64(distributed.timeout_s)),
        };
        if link.timeout.is_some() {
            quiet_network_logs();
        }
        let (id, device) = (link.id(), self.device.clone());
        link.call("register", move || {
            register::<Inner<B>>(id, device, collective)
        })?;
        self.set_reducer(Box::new(link));
        Ok(())
    }

    /// Leaves the collective engine (after the last step); the trainer trains alone again.
    pub fn leave_peers(&mut self) -> Result<(), TrainError> {
        if let Some(link) = self.peer() {
            self.set_reducer(Box::new(OneDevice));
            let id = link.id();
            link.call("finish", move || finish_collective::<Inner<B>>(id))?;
        }
        Ok(())
    }
}

/// Trains `scene` with `config` data-parallel on `devices` (this node's, one peer each, as many
/// as `config.distributed.local_peers()`), writing into `out` as [`crate::run`] does: peer 0
/// runs the run's loop (logs, evaluations, checkpoints, the observer), the other peers are
/// threads that only step. Across nodes this is node 0's part; the others run
/// [`follow_data_parallel`]. `resume` loads one checkpoint into every replica (every node
/// loads its own copy). When one peer fails the others are released and the first error
/// returned.
pub fn run_data_parallel<B: SplatAutodiffBackend>(
    config: &TrainConfig,
    scene: Arc<TrainScene>,
    out: &Path,
    resume: Option<&Path>,
    devices: &[B::Device],
    observer: &mut dyn RunObserver<B>,
) -> Result<RunSummary, TrainError>
where
    B::Device: Send + 'static,
{
    if config.distributed.node_rank != 0 {
        return Err(TrainError::Config {
            origin: "config".to_string(),
            message: format!(
                "node {} of a multi-node run follows node 0 (follow_data_parallel): only node 0 \
                 writes the run",
                config.distributed.node_rank
            ),
        });
    }
    run_peers::<B, _>(config, scene, resume, devices, |trainer| {
        run_trainer(trainer, out, resume, observer)
    })
}

/// What a node other than node 0 did in a multi-node run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowSummary {
    /// Steps completed.
    pub steps: usize,
    /// Gaussians at the end.
    pub gaussians: usize,
    /// [`crate::params::parameter_hash`] of its replica at the end: node 0's, unless the run failed.
    pub parameter_hash: u64,
}

/// A node other than node 0 of a multi-node run (`config.distributed.node_rank > 0`): its
/// peers on `devices` step with the others until the run's last step or until the peers agree
/// to stop; nothing is written. `stop` set (Ctrl-C) votes to stop the whole run after the step
/// in progress (node 0 then writes a checkpoint).
pub fn follow_data_parallel<B: SplatAutodiffBackend>(
    config: &TrainConfig,
    scene: Arc<TrainScene>,
    resume: Option<&Path>,
    devices: &[B::Device],
    stop: Arc<AtomicBool>,
) -> Result<FollowSummary, TrainError>
where
    B::Device: Send + 'static,
{
    if config.distributed.node_rank == 0 {
        return Err(TrainError::Config {
            origin: "config".to_string(),
            message: "node 0 runs the run (run_data_parallel), it does not follow".to_string(),
        });
    }
    run_peers::<B, _>(config, scene, resume, devices, |mut trainer| {
        while trainer.step_count() < config.steps {
            trainer.request_stop(stop.load(Ordering::SeqCst));
            if trainer.step()?.stop {
                break;
            }
        }
        let summary = FollowSummary {
            steps: trainer.step_count(),
            gaussians: trainer.num_gaussians(),
            parameter_hash: parameter_hash(trainer.field())?,
        };
        trainer.leave_peers()?;
        Ok(summary)
    })
}

/// This node's peers: the first (on this thread) runs `lead`, the others are threads that
/// step until the run ends.
fn run_peers<B: SplatAutodiffBackend, R>(
    config: &TrainConfig,
    scene: Arc<TrainScene>,
    resume: Option<&Path>,
    devices: &[B::Device],
    lead: impl FnOnce(Trainer<B>) -> Result<R, TrainError>,
) -> Result<R, TrainError>
where
    B::Device: Send + 'static,
{
    let distributed = &config.distributed;
    if devices.len() != distributed.local_peers() {
        return Err(TrainError::Config {
            origin: "config".to_string(),
            message: format!(
                "`distributed.devices` names {} peers, {} devices were given",
                distributed.local_peers(),
                devices.len()
            ),
        });
    }
    config.validate()?;
    let collective = collective_config(config)?;
    if let Some(address) = &distributed.node_address
        && distributed.is_multi_node()
    {
        let (_, port) = host_port(address).map_err(|why| TrainError::Config {
            origin: "config".to_string(),
            message: format!("`distributed.node_address`: {why}"),
        })?;
        check_port_free(port, "`distributed.node_address`")?;
    }
    let first = distributed.first_rank();
    let multi_node = distributed.is_multi_node();
    reset_collective::<Inner<B>>();
    let followers: Vec<_> = devices
        .iter()
        .enumerate()
        .skip(1)
        .map(|(index, device)| {
            let rank = first + index;
            let (config, scene, collective, device) = (
                config.clone(),
                scene.clone(),
                collective.clone(),
                device.clone(),
            );
            let resume = resume.map(Path::to_path_buf);
            std::thread::spawn(move || -> Result<(), TrainError> {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    start_peer::<B>(&config, scene, resume.as_deref(), rank, &device, collective)
                        .and_then(|trainer| follow(trainer, config.steps))
                }))
                .unwrap_or_else(|_| {
                    Err(TrainError::Collective {
                        peer: rank,
                        message: "the peer panicked".to_string(),
                    })
                });
                if result.is_err() {
                    release_peers::<B>(multi_node);
                }
                result
            })
        })
        .collect();
    let leader =
        start_peer::<B>(config, scene, resume, first, &devices[0], collective).and_then(lead);
    if leader.is_err() {
        release_peers::<B>(multi_node);
    }
    let mut first_error = None;
    for (index, follower) in followers.into_iter().enumerate() {
        let outcome = follower.join().unwrap_or_else(|_| {
            Err(TrainError::Collective {
                peer: first + index + 1,
                message: "the peer's thread panicked".to_string(),
            })
        });
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    if leader.is_ok() && first_error.is_none() {
        reset_collective::<Inner<B>>();
    }
    match (leader, first_error) {
        // A follower's own failure explains the leader's collective error.
        (Err(TrainError::Collective { .. }), Some(e))
            if !matches!(e, TrainError::Collective { .. }) =>
        {
            Err(e)
        }
        (Err(e), _) => Err(e),
        (Ok(_), Some(e)) => Err(e),
        (Ok(summary), None) => Ok(summary),
    }
}

/// After a peer failed: releases this node's peers waiting for it. Across nodes there is
/// nothing to do (every call is watched, [`watched`], and fails by itself within the timeout),
/// and the engine may be gone (a lost connection panics its server, whose channel is closed).
fn release_peers<B: SplatAutodiffBackend>(multi_node: bool) {
    if !multi_node {
        reset_collective::<Inner<B>>();
    }
}

/// Peer `rank`'s trainer: the run's initial field, or `resume`'s, joined to the peers.
fn start_peer<B: SplatAutodiffBackend>(
    config: &TrainConfig,
    scene: Arc<TrainScene>,
    resume: Option<&Path>,
    rank: usize,
    device: &B::Device,
    collective: CollectiveConfig,
) -> Result<Trainer<B>, TrainError> {
    let mut trainer = Trainer::<B>::new(config.clone(), scene, device)?;
    if let Some(path) = resume {
        trainer.load_checkpoint(path)?;
    }
    trainer.join_peers(rank, collective)?;
    Ok(trainer)
}

/// A follower peer: steps until the run's last step or until the peers agree to stop.
fn follow<B: SplatAutodiffBackend>(
    mut trainer: Trainer<B>,
    steps: usize,
) -> Result<(), TrainError> {
    while trainer.step_count() < steps {
        if trainer.step()?.stop {
            break;
        }
    }
    trainer.leave_peers()
}
