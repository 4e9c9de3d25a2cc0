//! The fused Adam update's GPU kernel on every compiled GPU backend, against ndarray and
//! against the tensor ops on the same backend, alone and in groups.

use burn::tensor::DType;

use super::tests::{
    SHAPE, groups_match_single_updates, problem, run, run_tensor_ops,
    visible_groups_keep_unseen_rows,
};
use crate::SplatBackend;

/// The GPU kernel agrees with ndarray and with the tensor ops on its own backend to rounding,
/// whatever the vector width its element count allows (7 217: 1, 1 542: 2, 3 000: 4).
fn gpu_matches_cpu<B: SplatBackend>(label: &str) {
    for shape in [SHAPE, [514, 3], [1000, 3]] {
        let p = problem(&format!("{label}_{shape:?}"), shape, 6);
        let got = run::<B>(&p, DType::F32);
        for (reference, want) in [
            ("ndarray", run::<crate::backend::Cpu>(&p, DType::F32)),
            ("tensor ops", run_tensor_ops::<B>(&p, DType::F32)),
        ] {
            for (name, (g, w)) in ["param", "exp_avg", "exp_avg_sq"]
                .iter()
                .zip(got.iter().zip(&want))
            {
                let err = ember_test_utils::rel_err(g, w);
                assert!(
                    err < 1e-5,
                    "{label} {shape:?} {name} against {reference}: relative error {err}"
                );
            }
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn fused_adam_wgpu_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Wgpu>("adam_wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn fused_adam_cuda_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Cuda>("adam_cuda");
}

#[cfg(feature = "wgpu")]
#[test]
fn grouped_adam_matches_single_updates_wgpu() {
    groups_match_single_updates::<crate::backend::Wgpu>("adam groups wgpu", 1e-6);
    groups_match_single_updates::<crate::WgpuCube>("adam groups wgpu (cube)", 1e-6);
}

#[cfg(feature = "cuda")]
#[test]
fn grouped_adam_matches_single_updates_cuda() {
    groups_match_single_updates::<crate::backend::Cuda>("adam groups cuda", 1e-6);
}

#[cfg(feature = "wgpu")]
#[test]
fn visible_adam_keeps_unseen_rows_wgpu() {
    visible_groups_keep_unseen_rows::<crate::backend::Wgpu>("adam visible wgpu", 1e-6);
    visible_groups_keep_unseen_rows::<crate::WgpuCube>("adam visible wgpu (cube)", 1e-6);
}

#[cfg(feature = "cuda")]
#[test]
fn visible_adam_keeps_unseen_rows_cuda() {
    visible_groups_keep_unseen_rows::<crate::backend::Cuda>("adam visible cuda", 1e-6);
}
