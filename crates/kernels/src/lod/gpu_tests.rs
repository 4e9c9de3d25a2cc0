//! The cut's weights on every compiled GPU backend against ndarray's.

use super::tests::{close, hierarchy, views, weights};
use crate::LodOps;
use crate::backend::Cpu;

/// The tensor ops on the device give the CPU's weights to rounding.
fn gpu_matches_cpu<B: LodOps>(label: &str) {
    let leaves = 4_000;
    let h = hierarchy(label, leaves);
    for view in views() {
        let got = weights::<B>(&h, leaves, &view);
        let want = weights::<Cpu>(&h, leaves, &view);
        close(&format!("{label} {view:?}"), &got, &want);
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn lod_wgpu_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Wgpu>("lod_wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn lod_cuda_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Cuda>("lod_cuda");
}
