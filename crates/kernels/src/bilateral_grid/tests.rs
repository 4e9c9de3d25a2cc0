//! The bilateral grid on the CPU: the identity and a constant map, f64 central differences of
//! both gradients through `Autodiff`, the direct backward against the autodiff one, the
//! grid's gradient independent of the thread count, and bad inputs.

use burn::backend::Autodiff;
use burn::tensor::{DType, Tensor, TensorData};

use super::cpu::{self, Layout};
use crate::{
    AFFINE_ENTRIES, BilateralGridError, identity_grid, slice_bilateral_grid,
    slice_bilateral_grid_backward,
};
use ember_test_utils::{fresh_rng, host, uniform};

type Cpu = crate::backend::Cpu;
type A64 = Autodiff<crate::backend::Cpu64>;

/// A grid near the identity: `[I | 0]` plus uniform noise of `spread` on every entry.
fn grid_values(rng: &mut rand::rngs::StdRng, cells: [usize; 3], spread: f64) -> Vec<f64> {
    let plane: usize = cells.iter().product();
    let noise = uniform(rng, AFFINE_ENTRIES * plane, -spread, spread);
    noise
        .iter()
        .enumerate()
        .map(|(n, v)| v + if (n / plane).is_multiple_of(5) { 1.0 } else { 0.0 })
        .collect()
}

fn tensor64<const D: usize>(v: &[f64], shape: [usize; D]) -> Tensor<A64, D> {
    Tensor::from_data(
        TensorData::new(v.to_vec(), shape),
        (&Default::default(), DType::F64),
    )
}

#[test]
fn identity_grid_leaves_the_image() {
    let mut rng = fresh_rng("identity_grid_leaves_the_image");
    let (h, w) = (9, 14);
    let rgb = uniform(&mut rng, h * w * 3, 0.0, 1.0);
    let image = Tensor::<Cpu, 3>::from_data(TensorData::new(rgb.clone(), [h, w, 3]), &Default::default());
    let out = slice_bilateral_grid(image, identity_grid::<Cpu>([4, 3, 5], &Default::default())).unwrap();
    for (a, b) in host(out).iter().zip(&rgb) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}

#[test]
fn constant_grid_is_one_affine_map() {
    let mut rng = fresh_rng("constant_grid_is_one_affine_map");
    let (h, w, cells) = (6, 11, [3usize, 4, 2]);
    let map = uniform(&mut rng, AFFINE_ENTRIES, -0.5, 1.5);
    let plane: usize = cells.iter().product();
    let grid: Vec<f64> = map.iter().flat_map(|&m| std::iter::repeat_n(m, plane)).collect();
    let rgb = uniform(&mut rng, h * w * 3, -0.2, 1.2);
    let mut out = vec![0.0; rgb.len()];
    cpu::slice(&rgb, &grid, Layout { cells, image: [h, w] }, &mut out);
    for (p, pixel) in rgb.chunks(3).enumerate() {
        for i in 0..3 {
            let want = (0..3).map(|j| map[4 * i + j] * pixel[j]).sum::<f64>() + map[4 * i + 3];
            assert!((out[3 * p + i] - want).abs() < 1e-12, "pixel {p} channel {i}");
        }
    }
}

#[test]
fn f64_gradients_match_central_differences() {
    let mut rng = fresh_rng("f64_gradients_match_central_differences");
    let (h, w, cells) = (7, 10, [4usize, 3, 4]);
    let grid_shape = [AFFINE_ENTRIES, cells[0], cells[1], cells[2]];
    // Luminance strictly inside (0, 1) and away from the levels' edges: the clamp and the
    // cells' boundaries are where the map is not differentiable.
    let rgb = uniform(&mut rng, h * w * 3, 0.05, 0.95);
    let grid = grid_values(&mut rng, cells, 0.3);
    let weights = uniform(&mut rng, h * w * 3, -1.0, 1.0);
    let loss = |rgb: Tensor<A64, 3>, grid: Tensor<A64, 4>| {
        (slice_bilateral_grid(rgb, grid).unwrap() * tensor64(&weights, [h, w, 3])).sum()
    };
    let (rgb_t, grid_t) = (
        tensor64(&rgb, [h, w, 3]).require_grad(),
        tensor64(&grid, grid_shape).require_grad(),
    );
    let grads = loss(rgb_t.clone(), grid_t.clone()).backward();
    let grad_rgb = host(rgb_t.grad(&grads).unwrap());
    let grad_grid = host(grid_t.grad(&grads).unwrap());
    let value = |rgb: &[f64], grid: &[f64]| {
        host(loss(tensor64(rgb, [h, w, 3]), tensor64(grid, grid_shape)))[0]
    };
    let eps = 1e-6;
    let close = |analytic: f64, fd: f64, what: &str| {
        assert!(
            (analytic - fd).abs() < 1e-7 + 1e-5 * fd.abs(),
            "{what}: {analytic} vs {fd}"
        );
    };
    let mut through_luma = 0;
    for k in 0..rgb.len() {
        let (mut plus, mut minus) = (rgb.clone(), rgb.clone());
        plus[k] += eps;
        minus[k] -= eps;
        let fd = (value(&plus, &grid) - value(&minus, &grid)) / (2.0 * eps);
        close(grad_rgb[k], fd, &format!("rgb value {k}"));
        let direct: f64 = (0..3)
            .map(|i| weights[3 * (k / 3) + i] * grid[(4 * i + k % 3) * cells.iter().product::<usize>()])
            .sum();
        through_luma += usize::from((fd - direct).abs() > 1e-3);
    }
    assert!(through_luma > 0, "no gradient flowed through the luminance");
    for k in (0..grid.len()).step_by(5) {
        let (mut plus, mut minus) = (grid.clone(), grid.clone());
        plus[k] += eps;
        minus[k] -= eps;
        let fd = (value(&rgb, &plus) - value(&rgb, &minus)) / (2.0 * eps);
        close(grad_grid[k], fd, &format!("grid entry {k}"));
    }
    assert!(grad_grid.iter().any(|g| *g != 0.0));
}

#[test]
fn direct_backward_matches_autodiff() {
    let mut rng = fresh_rng("direct_backward_matches_autodiff");
    let (h, w, cells) = (13, 17, [8usize, 4, 4]);
    let grid_shape = [AFFINE_ENTRIES, cells[0], cells[1], cells[2]];
    let rgb = uniform(&mut rng, h * w * 3, 0.0, 1.0);
    let grid = grid_values(&mut rng, cells, 0.2);
    let grad = uniform(&mut rng, h * w * 3, -1.0, 1.0);
    let rgb_t = tensor64(&rgb, [h, w, 3]).require_grad();
    let grid_t = tensor64(&grid, grid_shape).require_grad();
    let out = slice_bilateral_grid(rgb_t.clone(), grid_t.clone()).unwrap();
    let grads = (out * tensor64(&grad, [h, w, 3])).sum().backward();
    let (direct_rgb, direct_grid) = slice_bilateral_grid_backward(
        tensor64(&rgb, [h, w, 3]),
        tensor64(&grid, grid_shape),
        tensor64(&grad, [h, w, 3]),
    )
    .unwrap();
    assert_eq!(host(rgb_t.grad(&grads).unwrap()), host(direct_rgb));
    assert_eq!(host(grid_t.grad(&grads).unwrap()), host(direct_grid));
}

#[test]
fn grid_gradient_does_not_depend_on_the_thread_count() {
    let mut rng = fresh_rng("grid_gradient_does_not_depend_on_the_thread_count");
    let (h, w, cells) = (45, 31, [8usize, 5, 6]);
    let layout = Layout { cells, image: [h, w] };
    let rgb: Vec<f32> = uniform(&mut rng, h * w * 3, 0.0, 1.0).iter().map(|&v| v as f32).collect();
    let grid: Vec<f32> = grid_values(&mut rng, cells, 0.2).iter().map(|&v| v as f32).collect();
    let grad: Vec<f32> = uniform(&mut rng, h * w * 3, -1.0, 1.0).iter().map(|&v| v as f32).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let mut grad_rgb = vec![0.0f32; rgb.len()];
        let mut grad_grid = vec![0.0f32; grid.len()];
        pool.install(|| cpu::slice_backward(&rgb, &grid, &grad, layout, &mut grad_rgb, &mut grad_grid));
        (grad_rgb, grad_grid)
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let device = Default::default();
    let image = Tensor::<Cpu, 3>::zeros([4, 5, 3], &device);
    let flat = Tensor::<Cpu, 4>::zeros([AFFINE_ENTRIES, 1, 3, 3], &device);
    assert_eq!(
        slice_bilateral_grid(image.clone(), flat).unwrap_err(),
        BilateralGridError::Grid([AFFINE_ENTRIES, 1, 3, 3])
    );
    let grid = identity_grid::<Cpu>([2, 2, 2], &device);
    let two_channels = Tensor::<Cpu, 3>::zeros([4, 5, 2], &device);
    assert_eq!(
        slice_bilateral_grid(two_channels, grid.clone()).unwrap_err(),
        BilateralGridError::Image([4, 5, 2])
    );
    let grad = Tensor::<Cpu, 3>::zeros([5, 4, 3], &device);
    assert_eq!(
        slice_bilateral_grid_backward(image, grid, grad).unwrap_err(),
        BilateralGridError::Gradient {
            grad: [5, 4, 3],
            image: [4, 5, 3]
        }
    );
}
