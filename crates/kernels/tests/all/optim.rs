//! The fused Adam update (`ember_kernels::adam_step`): on ndarray, bit for bit against the
//! same update written as Burn tensor ops (what the trainer ran before, and what the GPU
//! backends run), over several steps, in f32 and f64; on every compiled GPU backend against
//! ndarray; and the refusals.

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};
use ember_kernels::{AdamStep, OptimError, SplatBackend, adam_step};

use crate::common::{fresh_rng, uniform};

const SHAPE: [usize; 2] = [1031, 7];

fn settings(step: u32, lr: f64) -> AdamStep {
    AdamStep {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-15,
        step,
    }
}

fn host<B: Backend>(t: Tensor<B, 2>) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec::<f64>().unwrap()
}

/// A random start and `steps` random gradients.
struct Problem {
    param: Vec<f64>,
    grads: Vec<Vec<f64>>,
}

fn problem(label: &str, steps: usize) -> Problem {
    let mut rng = fresh_rng(label);
    let n = SHAPE[0] * SHAPE[1];
    Problem {
        param: uniform(&mut rng, n, -2.0, 2.0),
        grads: (0..steps)
            .map(|_| uniform(&mut rng, n, -3.0, 3.0))
            .collect(),
    }
}

/// One update: `(param, grad, exp_avg, exp_avg_sq, settings)` to the new three.
type Update<B> =
    fn(Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>, &AdamStep) -> [Tensor<B, 2>; 3];

/// The updates of `p` on `B` with `update`: the parameter and both moments.
fn run_with<B: Backend>(p: &Problem, dtype: DType, update: Update<B>) -> [Vec<f64>; 3] {
    let device: B::Device = Default::default();
    let t =
        |v: &[f64]| Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), SHAPE), (&device, dtype));
    let zeros = vec![0.0; p.param.len()];
    let (mut param, mut m, mut v) = (t(&p.param), t(&zeros), t(&zeros));
    for (step, grad) in (1..).zip(&p.grads) {
        let s = settings(step, 0.01 * f64::from(step));
        [param, m, v] = update(param, t(grad), m, v, &s);
    }
    [host(param), host(m), host(v)]
}

/// The updates of `p` through the op.
fn run<B: SplatBackend>(p: &Problem, dtype: DType) -> [Vec<f64>; 3] {
    run_with::<B>(p, dtype, |param, grad, m, v, s| {
        let u = adam_step(param, grad, m, v, s).unwrap();
        [u.param, u.exp_avg, u.exp_avg_sq]
    })
}

/// The updates of `p` as Burn tensor ops on ndarray, in the order the op documents.
fn reference(p: &Problem, dtype: DType) -> [Vec<f64>; 3] {
    run_with::<NdArray<f64>>(p, dtype, |param, g, m, v, s| {
        let bias1 = 1.0 - s.beta1.powi(s.step as i32);
        let bias2 = 1.0 - s.beta2.powi(s.step as i32);
        let m = m * s.beta1 + g.clone() * (1.0 - s.beta1);
        let v = v * s.beta2 + (g.clone() * g) * (1.0 - s.beta2);
        let denom = v.clone().sqrt() / bias2.sqrt() + s.eps;
        [param - m.clone() / denom * (s.lr / bias1), m, v]
    })
}

#[test]
fn fused_adam_matches_tensor_ops_bit_for_bit() {
    for dtype in [DType::F32, DType::F64] {
        let p = problem(&format!("adam_fused_{dtype:?}"), 6);
        let got = run::<NdArray<f64>>(&p, dtype);
        let want = reference(&p, dtype);
        for (name, (g, w)) in ["param", "exp_avg", "exp_avg_sq"]
            .iter()
            .zip(got.iter().zip(&want))
        {
            assert!(g.iter().any(|x| *x != 0.0), "{dtype:?} {name}: all zero");
            assert_eq!(g, w, "{dtype:?} {name}");
        }
    }
}

#[test]
fn adam_refuses_mismatched_shapes_and_step_zero() {
    type B = NdArray<f32>;
    let device = Default::default();
    let z = |shape: [usize; 2]| Tensor::<B, 2>::zeros(shape, &device);
    let err = adam_step(
        z([3, 2]),
        z([3, 2]),
        z([2, 3]),
        z([3, 2]),
        &settings(1, 0.1),
    );
    assert!(
        matches!(
            err,
            Err(OptimError::Shape {
                name: "exp_avg",
                ..
            })
        ),
        "{err:?}"
    );
    let err = adam_step(
        z([3, 2]),
        z([3, 1]),
        z([3, 2]),
        z([3, 2]),
        &settings(1, 0.1),
    );
    assert!(
        matches!(err, Err(OptimError::Shape { name: "grad", .. })),
        "{err:?}"
    );
    let err = adam_step(
        z([3, 2]),
        z([3, 2]),
        z([3, 2]),
        z([3, 2]),
        &settings(0, 0.1),
    );
    assert_eq!(err.err(), Some(OptimError::StepZero));
}

/// The GPU backends run the tensor-op default; they agree with ndarray to rounding.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_matches_cpu<B: SplatBackend>(label: &str) {
    let p = problem(label, 6);
    let got = run::<B>(&p, DType::F32);
    let want = run::<NdArray<f32>>(&p, DType::F32);
    for (name, (g, w)) in ["param", "exp_avg", "exp_avg_sq"]
        .iter()
        .zip(got.iter().zip(&want))
    {
        let err = crate::common::rel_err(g, w);
        assert!(err < 1e-5, "{label} {name}: relative error {err}");
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn fused_adam_wgpu_matches_cpu() {
    gpu_matches_cpu::<burn::backend::Wgpu<f32, i32, u32>>("adam_wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn fused_adam_cuda_matches_cpu() {
    gpu_matches_cpu::<burn::backend::Cuda<f32, i32>>("adam_cuda");
}
