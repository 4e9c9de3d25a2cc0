//! The fold on `Autodiff<B>`: the default tensor ops on the tracked tensors, so Burn records
//! them and a render through the fold differentiates it (the autodiff training pass; the
//! direct pass calls the inner backend's fold and backward itself).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;

use super::SmoothingOps;

impl<B: SmoothingOps, C: CheckpointStrategy> SmoothingOps for Autodiff<B, C> {}
