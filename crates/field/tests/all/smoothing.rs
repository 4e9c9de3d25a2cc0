//! The 3D smoothing filter (`ember_field::SmoothingFilter`): the sampling it measures from the
//! cameras, its chain rule (the ndarray op) against Burn's autodiff of the fold, and the GPU
//! backends against the CPU. The fold's own tests (the integral kept, the backward against f64
//! central differences) are the op's, in `ember-kernels`.

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use ember_field::*;
use rand::RngExt;
use rand::rngs::StdRng;

use crate::common::fresh_rng;

type B = ember_kernels::backend::Cpu;
type AD = Autodiff<B>;

fn tensor<Bk: burn::tensor::backend::Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
) -> Tensor<Bk, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn host<Bk: burn::tensor::backend::Backend, const D: usize>(t: Tensor<Bk, D>) -> Vec<f32> {
    to_host(t, "test").unwrap()
}

/// A camera at `(0, 0, -distance)` looking along `+z`, 100 x 100 pixels.
fn camera(distance: f64, fx: f64, fy: f64) -> Camera {
    Camera {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0, 0.0, distance],
        fx,
        fy,
        cx: 50.0,
        cy: 50.0,
        width: 100,
        height: 100,
    }
}

#[test]
fn the_filter_follows_the_finest_camera_that_sees_each_centre() {
    let near = camera(2.0, 100.0, 100.0);
    let far = camera(5.0, 100.0, 120.0);
    let means = tensor::<B, 2>(
        vec![
            0.0, 0.0, 0.0, // both: the near camera's 2 / 100
            3.0, 0.0, 0.0, // the near camera's u = 200 is past 115: the far one's 5 / 120
            0.0, 0.0, -10.0, // behind both: the coarsest seen, 5 / 120
            0.0, 0.0, -1.995, // in front of the near camera by less than its near plane
        ],
        [4, 3],
    );
    let options = SmoothingOptions::default();
    let filter = SmoothingFilter::from_cameras(means, &[near, far], options);
    let interval = [2.0 / 100.0, 5.0 / 120.0, 5.0 / 120.0, 3.005 / 120.0];
    let got = host(filter.variance);
    for (k, (got, t)) in got.iter().zip(interval).enumerate() {
        let want = options.strength * t * t;
        assert!(
            (*got as f64 - want).abs() <= 1e-5 * want,
            "Gaussian {k}: {got} against {want}"
        );
    }
    let none = SmoothingFilter::<B>::from_cameras(tensor(vec![], [0, 3]), &[near], options);
    assert!(none.is_empty());
}

#[test]
fn a_field_that_no_camera_sees_is_not_filtered() {
    let means = tensor::<B, 2>(vec![0.0, 0.0, -10.0, 1.0, 2.0, -30.0], [2, 3]);
    let filter =
        SmoothingFilter::from_cameras(means, &[camera(2.0, 100.0, 100.0)], Default::default());
    assert_eq!(host(filter.variance), vec![0.0, 0.0]);
}

/// Random raw parameters: log-scales `[N, 3]`, logits `[N]` (the last two saturated) and
/// variances `[N]` (one zero, one far below every scale).
fn parameters(rng: &mut StdRng, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let log_scales = (0..3 * n).map(|_| rng.random_range(-6.0..-1.0)).collect();
    let mut logits: Vec<f32> = (0..n).map(|_| rng.random_range(-5.0..5.0)).collect();
    logits[n - 1] = 25.0;
    logits[n - 2] = 16.0;
    let mut variance: Vec<f32> = (0..n).map(|_| rng.random_range(0.0..1e-4)).collect();
    variance[0] = 0.0;
    variance[1] = 1e-12;
    (log_scales, logits, variance)
}

fn field<Bk: burn::tensor::backend::Backend>(
    log_scales: Tensor<Bk, 2>,
    logits: Tensor<Bk, 1>,
) -> GaussianField<Bk> {
    let n = logits.dims()[0];
    let device = logits.device();
    GaussianField::from_tensors(
        Tensor::zeros([n, 3], &device),
        Tensor::zeros([n, 4], &device),
        log_scales,
        logits,
        Tensor::zeros([n, 1, 3], &device),
        Tensor::zeros([n, 0, 3], &device),
        None,
    )
    .unwrap()
}

/// Burn's autodiff of the fold's tensor ops (what `Autodiff` runs) agrees with the chain rule
/// (the ndarray op) to within its own rounding: its terms grow with `e^o` and cancel, so it is
/// off by up to ~2e-5 where the result is far smaller than the weights (the op's f64 test is
/// the accuracy test).
#[test]
fn the_chain_rule_is_burns_autodiff_of_the_fold() {
    let n = 64;
    let mut rng = fresh_rng("smoothing chain rule against autodiff");
    let (l, o, var) = parameters(&mut rng, n);
    let w_l: Vec<f32> = (0..3 * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let w_o: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let raw = field(
        tensor::<AD, 2>(l.clone(), [n, 3]),
        tensor::<AD, 1>(o.clone(), [n]),
    );
    let drawn = SmoothingFilter::from_variance(tensor::<AD, 1>(var.clone(), [n]))
        .apply(&raw)
        .unwrap();
    let loss = (drawn.log_scales.val() * tensor::<AD, 2>(w_l.clone(), [n, 3])).sum()
        + (drawn.opacity_logits.val() * tensor::<AD, 1>(w_o.clone(), [n])).sum();
    let grads = loss.backward();
    let autodiff = (
        host(raw.log_scales.grad(&grads).unwrap()),
        host(raw.opacity_logits.grad(&grads).unwrap()),
    );
    let (g_l, g_o) = SmoothingFilter::from_variance(tensor::<B, 1>(var, [n]))
        .backward(
            tensor(l, [n, 3]),
            tensor(o, [n]),
            tensor(w_l, [n, 3]),
            tensor(w_o, [n]),
        )
        .unwrap();
    for (name, got, want) in [
        ("log-scales", host(g_l), autodiff.0),
        ("logits", host(g_o), autodiff.1),
    ] {
        for (j, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs() + 1e-4,
                "{name}[{j}]: chain rule {a}, autodiff {b}"
            );
        }
    }
}

/// The filter measured and folded on a GPU backend against the CPU's: the same ops, to within
/// float differences.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn matches_cpu<G: ember_kernels::SmoothingOps>(name: &str, device: &G::Device) {
    let n = 256;
    let mut rng = fresh_rng(name);
    let means: Vec<f32> = (0..3 * n).map(|_| rng.random_range(-2.0..2.0)).collect();
    let (l, o, _) = parameters(&mut rng, n);
    let cameras = [camera(2.0, 100.0, 100.0), camera(5.0, 90.0, 120.0)];
    let drawn = |device: &G::Device| {
        let upload2 =
            |v: &[f32]| Tensor::<G, 2>::from_data(TensorData::new(v.to_vec(), [n, 3]), device);
        let raw = field(
            upload2(&l),
            Tensor::from_data(TensorData::new(o.clone(), [n]), device),
        );
        let filter = SmoothingFilter::from_cameras(upload2(&means), &cameras, Default::default());
        let drawn = filter.apply(&raw).unwrap();
        [
            host(filter.variance),
            host(drawn.log_scales.val()),
            host(drawn.opacity_logits.val()),
        ]
    };
    let reference = {
        let raw = field(tensor::<B, 2>(l.clone(), [n, 3]), tensor(o.clone(), [n]));
        let filter = SmoothingFilter::from_cameras(
            tensor::<B, 2>(means.clone(), [n, 3]),
            &cameras,
            Default::default(),
        );
        let drawn = filter.apply(&raw).unwrap();
        [
            host(filter.variance),
            host(drawn.log_scales.val()),
            host(drawn.opacity_logits.val()),
        ]
    };
    for (what, (gpu, cpu)) in ["variance", "log-scales", "logits"]
        .iter()
        .zip(drawn(device).iter().zip(&reference))
    {
        for (j, (a, b)) in gpu.iter().zip(cpu).enumerate() {
            // The variances relative to their size; the folded parameters also absolutely (a
            // GPU's exp and log are a few ulps off).
            let tolerance = match *what {
                "variance" => 1e-5 * b.abs(),
                _ => 1e-5 * b.abs() + 1e-5,
            };
            assert!(
                (a - b).abs() <= tolerance,
                "{name} {what}[{j}]: {a} against the CPU's {b}"
            );
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_smoothing_filter_matches_cpu() {
    matches_cpu::<crate::render::WgpuFused>("wgpu (fusion) smoothing filter", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_smoothing_filter_matches_cpu() {
    matches_cpu::<crate::render::CudaFused>("cuda (fusion) smoothing filter", &Default::default());
}
