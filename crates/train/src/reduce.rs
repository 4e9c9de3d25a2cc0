//! What a step does across the replicas of a run, between its backward and its Adam update: sum
//! the gradients and the densification statistics of the whole batch, agree on what it reads
//! back, and check the replicas after the update.
//!
//! A [`Reducer`] does it for a [`Trainer`](crate::Trainer): [`OneDevice`], the identity,
//! when it trains alone; [`PeerLink`] (its collective operations are in [`crate::parallel`]) when it is one peer of a
//! data-parallel run. The step itself has no data-parallel branch.

use std::ops::Range;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, Transaction};

use crate::adam::FieldGradients;
use crate::error::TrainError;
use ember_field::GaussianField;

/// A trainer's place among the peers of a data-parallel run: the [`Reducer`] of a peer (its
/// collective operations are in [`crate::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLink {
    /// This peer's rank, `0..peers`, over every node.
    pub rank: usize,
    /// `D`, the number of peers, over every node.
    pub peers: usize,
    /// The processes the peers are spread over (`1`: this one).
    pub nodes: usize,
    /// Steps between replica checks (`0`: never); the run's last step is always checked.
    pub check_every: usize,
    /// The run's last step.
    pub last_step: usize,
    /// How long a collective operation may wait for the other nodes (`None` on one node,
    /// where the peers are threads that fail together).
    pub timeout: Option<std::time::Duration>,
}

/// What a step asks to read back (each `[1]`, on the device, not yet read).
#[derive(Debug, Clone)]
pub struct ReadRequest<B: Backend> {
    /// The device of the step.
    pub device: B::Device,
    /// This replica's share of the loss, on a step that reads it.
    pub loss: Option<Tensor<B, 1>>,
    /// This replica's share of the render's mean squared error, on a logging step.
    pub mse: Option<Tensor<B, 1>>,
    /// The largest tile-pair count of this replica's renders since the last read, when the
    /// tile lists are to be resized (not summed: each replica sizes its own).
    pub tile_pairs: Option<Tensor<B, 1, Int>>,
    /// Whether this replica was asked to stop.
    pub stop: bool,
}

/// What a step read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadValues {
    /// The batch's loss.
    pub loss: Option<f32>,
    /// The batch's mean squared error.
    pub mse: Option<f32>,
    /// This replica's largest tile-pair count.
    pub tile_pairs: Option<u64>,
    /// Whether any replica was asked to stop (then all stop after this step).
    pub stop: bool,
}

/// The reduction over a run's replicas (see the module docs).
pub trait Reducer<B: Backend>: Send {
    /// `D`, the replicas a batch is split over.
    fn replicas(&self) -> usize;

    /// The positions of a batch of `batch` views that this replica renders.
    fn share(&self, batch: usize) -> Range<usize>;

    /// The gradients of the whole batch's loss from this replica's share of them.
    fn gradients(
        &self,
        field: &GaussianField<B>,
        grads: FieldGradients<B>,
    ) -> Result<FieldGradients<B>, TrainError>;

    /// A per-Gaussian quantity `[N]` summed over the replicas, the same on every one: each
    /// Gaussian's weight in the whole batch's views (`optim.visible_adam`), its error scores
    /// over the views densification scored (`densify.error_weight`).
    fn sum_rows(&self, rows: Tensor<B, 1>) -> Result<Tensor<B, 1>, TrainError>;

    /// The densification statistics of the whole batch, `[batch N, 3]` each, from this
    /// replica's rows.
    fn statistics(
        &self,
        screen_grads: Tensor<B, 2>,
        extents: Tensor<B, 2, Int>,
        batch: usize,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 2, Int>), TrainError>;

    /// Reads back what the step asks for, agreed over the replicas: one wait for the device,
    /// or none when nothing is asked.
    fn read(&self, request: ReadRequest<B>) -> Result<ReadValues, TrainError>;

    /// After the update of step `step` (steps completed): what the replicas check.
    fn after_step(&self, field: &GaussianField<B>, step: usize) -> Result<(), TrainError>;

    /// This replica's place in a data-parallel run, if it is one.
    fn peer(&self) -> Option<PeerLink>;
}

/// The reducer of a trainer alone on its device: the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneDevice;

impl<B: Backend> Reducer<B> for OneDevice {
    fn replicas(&self) -> usize {
        1
    }

    fn share(&self, batch: usize) -> Range<usize> {
        0..batch
    }

    fn gradients(
        &self,
        _field: &GaussianField<B>,
        grads: FieldGradients<B>,
    ) -> Result<FieldGradients<B>, TrainError> {
        Ok(grads)
    }

    fn sum_rows(&self, rows: Tensor<B, 1>) -> Result<Tensor<B, 1>, TrainError> {
        Ok(rows)
    }

    fn statistics(
        &self,
        screen_grads: Tensor<B, 2>,
        extents: Tensor<B, 2, Int>,
        _batch: usize,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 2, Int>), TrainError> {
        Ok((screen_grads, extents))
    }

    fn read(&self, request: ReadRequest<B>) -> Result<ReadValues, TrainError> {
        let (has_loss, has_mse) = (request.loss.is_some(), request.mse.is_some());
        let values = read_together(
            request.loss.into_iter().chain(request.mse).collect(),
            request.tile_pairs,
        )?;
        let mut floats = values.floats.into_iter().map(|v| v[0]);
        let loss = if has_loss { floats.next() } else { None };
        let mse = if has_mse { floats.next() } else { None };
        Ok(ReadValues {
            loss,
            mse,
            tile_pairs: values.pairs,
            stop: request.stop,
        })
    }

    fn after_step(&self, _field: &GaussianField<B>, _step: usize) -> Result<(), TrainError> {
        Ok(())
    }

    fn peer(&self) -> Option<PeerLink> {
        None
    }
}

/// The values of [`read_together`].
pub(crate) struct ReadTogether {
    /// The values of each float tensor, in order.
    pub floats: Vec<Vec<f32>>,
    /// The first value of the integer tensor.
    pub pairs: Option<u64>,
}

/// Reads `floats` (each at least one value) and the first value of `pairs` in one transaction:
/// one wait for the device, none when there is nothing to read.
pub(crate) fn read_together<B: Backend>(
    floats: Vec<Tensor<B, 1>>,
    pairs: Option<Tensor<B, 1, Int>>,
) -> Result<ReadTogether, TrainError> {
    if floats.is_empty() && pairs.is_none() {
        return Ok(ReadTogether {
            floats: Vec::new(),
            pairs: None,
        });
    }
    let count = floats.len();
    let has_pairs = pairs.is_some();
    let mut transaction = Transaction::default();
    for tensor in floats {
        transaction = transaction.register(tensor);
    }
    if let Some(pairs) = pairs {
        transaction = transaction.register(pairs);
    }
    let data = transaction
        .try_execute()
        .map_err(|e| TrainError::Readback {
            what: "the step's loss and counters",
            message: e.to_string(),
        })?;
    let values: Vec<Vec<f32>> = data[..count]
        .iter()
        .map(|d| d.iter::<f64>().map(|v| v as f32).collect())
        .collect();
    let pairs = match has_pairs {
        true => data[count].iter::<f64>().next().map(|v| v as u64),
        false => None,
    };
    if values.iter().any(Vec::is_empty) || (has_pairs && pairs.is_none()) {
        return Err(TrainError::Readback {
            what: "the step's loss and counters",
            message: "an empty tensor".to_string(),
        });
    }
    Ok(ReadTogether {
        floats: values,
        pairs,
    })
}
