//! The level-of-detail op on the GPU backends: the default tensor ops, which run on the
//! device (fused into a few launches under `Fusion`) and never read back.

use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionBackend};

use super::LodOps;

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> LodOps
    for CubeBackend<R, F, I, BT>
{
}

impl<B: FusionBackend> LodOps for Fusion<B> {}
