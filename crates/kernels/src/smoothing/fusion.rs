//! The fold on `Fusion<B>` (Burn's `Wgpu` and `Cuda`): the default tensor ops, which the fusion
//! stream records and fuses like any elementwise program.

use burn_fusion::{Fusion, FusionBackend};

use super::SmoothingOps;

impl<B: FusionBackend + SmoothingOps> SmoothingOps for Fusion<B> {}
