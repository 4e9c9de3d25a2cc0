//! The fold on `CubeBackend`: the default tensor ops (elementwise; fused into a few kernels
//! under Burn's fusion, which is how `Wgpu` and `Cuda` run them).

use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

use super::SmoothingOps;

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> SmoothingOps
    for CubeBackend<R, F, I, BT>
{
}
