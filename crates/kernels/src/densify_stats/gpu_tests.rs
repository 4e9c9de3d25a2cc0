//! The densification statistics' GPU kernel on every compiled GPU backend, against ndarray and
//! against the tensor ops on the same backend.

use burn::tensor::DType;

use super::tests::{problem, run, run_tensor_ops};
use crate::SplatBackend;

/// The GPU kernel agrees with ndarray and with the tensor ops on its own backend: the sums to
/// rounding, the counts and radii exactly.
fn gpu_matches_cpu<B: SplatBackend>(label: &str) {
    let p = problem(label);
    let got = run::<B>(&p, DType::F32);
    for (reference, want) in [
        ("ndarray", run::<crate::backend::Cpu>(&p, DType::F32)),
        ("tensor ops", run_tensor_ops::<B>(&p, DType::F32)),
    ] {
        let err = ember_test_utils::rel_err(&got[0], &want[0]);
        assert!(err < 1e-5, "{label} grad_sum against {reference}: {err}");
        assert_eq!(got[1], want[1], "{label} visible_steps against {reference}");
        assert_eq!(got[2], want[2], "{label} max_radius against {reference}");
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn densify_stats_wgpu_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Wgpu>("densify_stats_wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn densify_stats_cuda_matches_cpu() {
    gpu_matches_cpu::<crate::backend::Cuda>("densify_stats_cuda");
}
