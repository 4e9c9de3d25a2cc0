//! Data-parallel training on `D` devices with Burn's collective engine (`burn::collective`).
//!
//! Every peer (one per device, a thread of this process) holds a replica of the field and its
//! own [`Trainer`]. A step of batch `B` renders `B / D` views on each peer (peer `r` takes
//! positions `r B / D ..` of the step's views), each scaling its loss by `1 / B`, so that the
//! all-reduced **sum** of the peers' gradients is the gradient of the batch's mean loss. The
//! densification statistics of the whole batch are summed the same way (each peer contributes
//! its views' rows, zeros elsewhere), so every replica observes all `B` views in the batch's
//! order, takes the same Adam step and makes the same clone/split/prune decisions: the replicas
//! never drift, and [`TrainError::ReplicasDiverged`] says so if they ever do (a checksum of the
//! parameters compared with peer 0's). Checkpoints, evaluation and logs are peer 0's
//! ([`run_data_parallel`]); a checkpoint holds one replica, so a run resumes on any `D`.
//!
//! Against one device rendering the same `B` views batched, the parameters agree to float
//! rounding, not bit for bit: the batch's gradient is summed per peer and then across peers
//! instead of over all views at once.
//!
//! Burn's collective server is one per backend type and process: run one data-parallel run
//! per backend at a time in a process.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use burn::collective::{
    AllReduceStrategy, CollectiveConfig, PeerId, ReduceOperation, all_reduce, broadcast,
    finish_collective, register, reset_collective,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use crate::adam::FieldGradients;
use crate::config::{ReduceStrategyKind, TrainConfig};
use crate::error::TrainError;
use crate::params::ParamGroup;
use crate::reduce::{OneDevice, PeerLink, ReadRequest, ReadValues, Reducer, read_together};
use crate::run::{RunObserver, RunSummary, run_trainer};
use crate::scene::TrainScene;
use crate::trainer::{Inner, Trainer};
use ember_field::to_host;
use ember_field::{GaussianField, SplatAutodiffBackend};

/// Steps between replica checks in debug and test builds when the config sets none.
const DEBUG_CHECK_EVERY: usize = 10;

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

    /// The element-wise sum of every peer's `tensor` (all of one shape), on every peer.
    pub(crate) fn sum<B: Backend, const D: usize>(
        &self,
        tensor: Tensor<B, D>,
    ) -> Result<Tensor<B, D>, TrainError> {
        let reduced = all_reduce::<B>(
            self.id(),
            tensor.into_primitive().tensor(),
            ReduceOperation::Sum,
        )
        .map_err(|e| self.error("all-reduce", e))?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
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

    /// Compares a checksum of `field` with peer 0's.
    pub(crate) fn check_replica<B: Backend>(
        &self,
        field: &GaussianField<B>,
        step: usize,
    ) -> Result<(), TrainError> {
        let mut checksum = 0.0f64;
        for group in ParamGroup::ALL {
            let values = to_host(group.columns(field), "parameters")?;
            // Weighted by position, so that two swapped rows do not cancel out.
            checksum += values
                .iter()
                .enumerate()
                .map(|(i, v)| f64::from(*v) * (1.0 + (i % 7) as f64))
                .sum::<f64>();
        }
        let device = field.means.device();
        let mine = Tensor::<B, 1>::from_data(TensorData::new(vec![checksum], [1]), &device);
        let shared = broadcast::<B>(
            self.id(),
            (self.rank == 0).then(|| mine.into_primitive().tensor()),
        )
        .map_err(|e| self.error("broadcast", e))?;
        let reference: f64 = to_host(
            Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(shared)),
            "checksum",
        )?[0]
            .into();
        // The checksum travels as the backend's float type: compare it rounded the same way.
        let rounded = f64::from(checksum as f32);
        if rounded != reference {
            return Err(TrainError::ReplicasDiverged {
                step,
                peer: self.rank,
                checksum: rounded,
                reference,
            });
        }
        Ok(())
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
        if every > 0 && step.is_multiple_of(every) {
            self.check_replica(field, step)?;
        }
        Ok(())
    }

    fn peer(&self) -> Option<PeerLink> {
        Some(*self)
    }
}

/// The collective engine's settings for `peers` local peers.
pub fn collective_config(config: &TrainConfig) -> CollectiveConfig {
    let strategy = match config.distributed.strategy {
        ReduceStrategyKind::Tree => AllReduceStrategy::Tree(2),
        ReduceStrategyKind::Ring => AllReduceStrategy::Ring,
        ReduceStrategyKind::Centralized => AllReduceStrategy::Centralized,
    };
    CollectiveConfig::default()
        .with_num_devices(config.distributed.peers())
        .with_local_all_reduce_strategy(strategy)
}

impl<B: SplatAutodiffBackend> Trainer<B> {
    /// Makes this trainer peer `rank` of `config.distributed.peers()` (registering its device
    /// with Burn's collective engine under `collective`): from now on each step renders this
    /// peer's share of the batch and sums gradients and statistics with the other peers, which
    /// must all join before their first step. Every peer must hold the same field and state
    /// (the same config and seed, or the same checkpoint loaded).
    pub fn join_peers(
        &mut self,
        rank: usize,
        collective: CollectiveConfig,
    ) -> Result<(), TrainError> {
        let link = PeerLink {
            rank,
            peers: self.config.distributed.peers(),
            check_every: self.config.distributed.check_every,
        };
        register::<Inner<B>>(link.id(), self.device.clone(), collective)
            .map_err(|e| link.error("register", e))?;
        self.set_reducer(Box::new(link));
        Ok(())
    }

    /// Leaves the collective engine (after the last step); the trainer trains alone again.
    pub fn leave_peers(&mut self) -> Result<(), TrainError> {
        if let Some(link) = self.peer() {
            self.set_reducer(Box::new(OneDevice));
            finish_collective::<Inner<B>>(link.id()).map_err(|e| link.error("finish", e))?;
        }
        Ok(())
    }
}

/// Trains `scene` with `config` data-parallel on `devices` (one peer each, `D =
/// devices.len()`, which must be `config.distributed.peers()`), writing into `out` as
/// [`crate::run`] does: peer 0 runs the run's loop (logs, evaluations, checkpoints, the
/// observer), the other peers are threads that only step. `resume` loads one checkpoint into
/// every replica. When one peer fails the others are released and the first error returned.
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
    if devices.len() != config.distributed.peers() {
        return Err(TrainError::Config {
            origin: "config".to_string(),
            message: format!(
                "`distributed.devices` names {} peers, {} devices were given",
                config.distributed.peers(),
                devices.len()
            ),
        });
    }
    config.validate()?;
    let collective = collective_config(config);
    reset_collective::<Inner<B>>();
    let followers: Vec<_> = devices
        .iter()
        .enumerate()
        .skip(1)
        .map(|(rank, device)| {
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
                    // Release the peers waiting for this one.
                    reset_collective::<Inner<B>>();
                }
                result
            })
        })
        .collect();
    let leader = start_peer::<B>(config, scene, resume, 0, &devices[0], collective)
        .and_then(|trainer| run_trainer(trainer, out, resume, observer));
    if leader.is_err() {
        reset_collective::<Inner<B>>();
    }
    let mut first_error = None;
    for (index, follower) in followers.into_iter().enumerate() {
        let outcome = follower.join().unwrap_or_else(|_| {
            Err(TrainError::Collective {
                peer: index + 1,
                message: "the peer's thread panicked".to_string(),
            })
        });
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    reset_collective::<Inner<B>>();
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
