//! The fused loss's CubeCL kernels against the CPU kernel on random images (fresh seeds, sizes
//! that are not multiples of anything, a 1x1 image), value and gradient, through `Autodiff` on
//! the fused and the plain cube backends of every compiled GPU runtime.

use crate::{LossOptions, SplatBackend, photometric_loss};
use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};

use ember_test_utils::{fresh_rng, uniform};

#[cfg(feature = "wgpu")]
type WgpuFused = crate::backend::Wgpu;
#[cfg(feature = "wgpu")]
type WgpuPlain = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
#[cfg(feature = "cuda")]
type CudaFused = crate::backend::Cuda;

/// Loss and gradient on `B` (through `Autodiff<B>`).
fn run<B: SplatBackend>(x: &[f32], y: &[f32], shape: [usize; 3], lambda: f64) -> (f64, Vec<f64>) {
    let device: B::Device = Default::default();
    let on = (&device, burn::tensor::DType::F32);
    let t = |v: &[f32]| Tensor::<Autodiff<B>, 3>::from_data(TensorData::new(v.to_vec(), shape), on);
    let render = t(x).require_grad();
    let options = LossOptions {
        ssim_lambda: lambda,
    };
    let loss = photometric_loss(render.clone(), t(y), options).unwrap();
    let grad = render.grad(&loss.clone().backward()).unwrap();
    let host = |d: TensorData| d.convert::<f64>().into_vec::<f64>().unwrap();
    (host(loss.into_data())[0], host(grad.into_data()))
}

fn check<B: SplatBackend>(name: &str) {
    let mut rng = fresh_rng(name);
    for (shape, lambda) in [([37, 53, 3], 0.2), ([1, 1, 3], 0.5), ([64, 20, 3], 1.0)] {
        let n = shape.iter().product();
        let x: Vec<f32> = uniform(&mut rng, n, 0.0, 1.0)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let y: Vec<f32> = uniform(&mut rng, n, 0.0, 1.0)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let (cpu_loss, cpu_grad) = run::<crate::backend::Cpu>(&x, &y, shape, lambda);
        let (gpu_loss, gpu_grad) = run::<B>(&x, &y, shape, lambda);
        assert!(
            (cpu_loss - gpu_loss).abs() < 1e-5,
            "{name} {shape:?}: loss {gpu_loss} vs {cpu_loss}"
        );
        let scale = cpu_grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        for (k, (a, b)) in cpu_grad.iter().zip(&gpu_grad).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * scale,
                "{name} {shape:?} value {k}: {b} vs {a}"
            );
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn loss_wgpu_matches_cpu() {
    check::<WgpuFused>("loss wgpu (fusion)");
    check::<WgpuPlain>("loss wgpu (cube)");
}

#[cfg(feature = "cuda")]
#[test]
fn loss_cuda_matches_cpu() {
    check::<CudaFused>("loss cuda (fusion)");
}
