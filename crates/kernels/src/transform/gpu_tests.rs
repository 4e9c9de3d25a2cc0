//! The CubeCL transform kernel against the CPU kernel: every SH degree, several frames, on the
//! fused and the plain cube backends of every compiled GPU runtime.

use crate::{Similarity, SplatBackend, transform_gaussians};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand::rngs::StdRng;

use ember_test_utils::uniform;

#[cfg(feature = "wgpu")]
type WgpuFused = crate::backend::Wgpu;
#[cfg(feature = "wgpu")]
type WgpuPlain = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
#[cfg(feature = "cuda")]
type CudaFused = crate::backend::Cuda;

fn frames(count: usize) -> Vec<Similarity> {
    let all = vec![
        Similarity::identity(),
        Similarity::axis_angle([0.3, -1.0, 0.2], 2.1).about([0.5, 0.5, -0.5]),
        Similarity {
            scale: 0.25,
            translation: [3.0, -1.0, 2.0],
            ..Similarity::axis_angle([1.0, 0.0, 0.0], -0.7)
        },
    ];
    all.into_iter().take(count).collect()
}

/// Transformed `[means, quats, log_scales, sh_rest]` of a fixed random set under the first
/// `frame_count` of [`frames`], on `B`.
fn run<B: SplatBackend>(n: usize, k: usize, frame_count: usize) -> [Vec<f32>; 4] {
    let mut rng = StdRng::seed_from_u64(42 + k as u64);
    let device: B::Device = Default::default();
    // Explicit dtype: the default float dtype is a per-device setting other tests change.
    let on = (&device, <B::FloatElem as burn::tensor::Element>::dtype());
    let mut t = |len: usize, lo: f64, hi: f64| uniform(&mut rng, len, lo, hi);
    let (m, q, l, sh) = (
        t(3 * n, -5.0, 5.0),
        t(4 * n, -1.0, 1.0),
        t(3 * n, -4.0, 0.0),
        t(3 * k * n, -0.5, 0.5),
    );
    let out = transform_gaussians(
        Tensor::<B, 2>::from_data(TensorData::new(m, [n, 3]).convert::<f32>(), on),
        Tensor::<B, 2>::from_data(TensorData::new(q, [n, 4]).convert::<f32>(), on),
        Tensor::<B, 2>::from_data(TensorData::new(l, [n, 3]).convert::<f32>(), on),
        Tensor::<B, 3>::from_data(TensorData::new(sh, [n, k, 3]).convert::<f32>(), on),
        &frames(frame_count),
    )
    .unwrap();
    fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().into_vec().unwrap()
    }
    let sh = if k == 0 {
        Vec::new()
    } else {
        host(out.sh_rest)
    };
    [host(out.means), host(out.quats), host(out.log_scales), sh]
}

/// The transform on `B` against the CPU for each SH coefficient count in `coefficients`, under
/// the first `frame_count` frames.
fn check<B: SplatBackend>(name: &str, coefficients: &[usize], frame_count: usize) {
    for &k in coefficients {
        let n = 1000 + k;
        let cpu = run::<crate::backend::Cpu>(n, k, frame_count);
        let gpu = run::<B>(n, k, frame_count);
        for (what, (a, b)) in ["means", "quats", "log_scales", "sh_rest"]
            .iter()
            .zip(cpu.iter().zip(&gpu))
        {
            assert_eq!(a.len(), b.len(), "{name} K={k} {what}");
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs() / x.abs().max(1.0))
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{name} K={k} {what}: {worst}");
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn transform_wgpu_matches_cpu() {
    check::<WgpuFused>("wgpu (fusion)", &[0, 3, 8, 15], 3);
    check::<WgpuPlain>("wgpu (cube)", &[0, 3, 8, 15], 3);
}

// The cuda checks are three tests, so that one device run tells the fusion wrapper, the kernel
// and the frame loop apart (the fused one has failed on an H200: BENCHMARKS.md, README). Without
// SH (`K = 0`) the input `sh_rest [N, 0, 3]` has zero strides, which Burn's CUDA runtime refuses
// to create ("the provided strides are not supported"): that case runs on wgpu only.

#[cfg(feature = "cuda")]
#[test]
fn transform_cuda_fused_matches_cpu() {
    check::<CudaFused>("cuda (fusion)", &[3, 8, 15], 3);
}

#[cfg(feature = "cuda")]
#[test]
fn transform_cuda_plain_matches_cpu() {
    check::<crate::CudaCube>("cuda (cube)", &[3, 8, 15], 3);
}

#[cfg(feature = "cuda")]
#[test]
fn transform_cuda_plain_one_frame_matches_cpu() {
    check::<crate::CudaCube>("cuda (cube, one frame)", &[3], 1);
}
