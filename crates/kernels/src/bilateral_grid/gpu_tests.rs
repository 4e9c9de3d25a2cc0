//! The bilateral grid's CubeCL kernels against the CPU kernel on random inputs (fresh seeds,
//! sizes that are not multiples of the grid, a one-pixel image): the slice and both gradients,
//! through `Autodiff` on the fused and the plain cube backends of every compiled GPU runtime.

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};

use crate::{AFFINE_ENTRIES, SplatBackend, slice_bilateral_grid};
use ember_test_utils::{fresh_rng, uniform};

#[cfg(feature = "wgpu")]
type WgpuFused = crate::backend::Wgpu;
#[cfg(feature = "wgpu")]
type WgpuPlain = crate::WgpuCube;
#[cfg(feature = "cuda")]
type CudaFused = crate::backend::Cuda;

/// The slice, `dL/drgb` and `dL/dgrid` of `L = sum(out * weights)` on `B`.
fn run<B: SplatBackend>(
    rgb: &[f32],
    grid: &[f32],
    weights: &[f32],
    image: [usize; 3],
    grid_shape: [usize; 4],
) -> [Vec<f64>; 3] {
    let device: B::Device = Default::default();
    let on = (&device, burn::tensor::DType::F32);
    let rgb_t = Tensor::<Autodiff<B>, 3>::from_data(TensorData::new(rgb.to_vec(), image), on)
        .require_grad();
    let grid_t =
        Tensor::<Autodiff<B>, 4>::from_data(TensorData::new(grid.to_vec(), grid_shape), on)
            .require_grad();
    let w = Tensor::<Autodiff<B>, 3>::from_data(TensorData::new(weights.to_vec(), image), on);
    let out = slice_bilateral_grid(rgb_t.clone(), grid_t.clone()).unwrap();
    let grads = (out.clone() * w).sum().backward();
    let host = |d: TensorData| d.convert::<f64>().into_vec::<f64>().unwrap();
    [
        host(out.into_data()),
        host(rgb_t.grad(&grads).unwrap().into_data()),
        host(grid_t.grad(&grads).unwrap().into_data()),
    ]
}

fn check<B: SplatBackend>(name: &str) {
    let mut rng = fresh_rng(name);
    for (image, cells) in [
        ([37, 53, 3], [8, 16, 16]),
        ([1, 1, 3], [2, 2, 2]),
        ([64, 20, 3], [4, 5, 3]),
    ] {
        let pixels = image.iter().product();
        let plane: usize = cells.iter().product();
        let f32s = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<_>>();
        let rgb = f32s(uniform(&mut rng, pixels, -0.1, 1.1));
        let grid: Vec<f32> = uniform(&mut rng, AFFINE_ENTRIES * plane, -0.2, 0.2)
            .iter()
            .enumerate()
            .map(|(n, v)| (v + if (n / plane).is_multiple_of(5) { 1.0 } else { 0.0 }) as f32)
            .collect();
        let weights = f32s(uniform(&mut rng, pixels, -1.0, 1.0));
        let grid_shape = [AFFINE_ENTRIES, cells[0], cells[1], cells[2]];
        let cpu = run::<crate::backend::Cpu>(&rgb, &grid, &weights, image, grid_shape);
        let gpu = run::<B>(&rgb, &grid, &weights, image, grid_shape);
        for (what, (want, got)) in ["slice", "rgb gradient", "grid gradient"]
            .iter()
            .zip(cpu.iter().zip(&gpu))
        {
            let scale = want.iter().fold(1e-3f64, |m, g| m.max(g.abs()));
            for (k, (a, b)) in want.iter().zip(got).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * scale,
                    "{name} {image:?} {cells:?} {what} value {k}: {b} vs {a}"
                );
            }
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn bilateral_grid_wgpu_matches_cpu() {
    check::<WgpuFused>("bilateral grid wgpu (fusion)");
    check::<WgpuPlain>("bilateral grid wgpu (cube)");
}

#[cfg(feature = "cuda")]
#[test]
fn bilateral_grid_cuda_matches_cpu() {
    check::<CudaFused>("bilateral grid cuda (fusion)");
}
