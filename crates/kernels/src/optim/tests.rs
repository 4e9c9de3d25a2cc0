//! The fused Adam update (`ember_kernels::adam_step`): on ndarray, bit for bit against the
//! same update written as Burn tensor ops, over several steps, in f32 and f64, directly and
//! through `Autodiff`; and the refusals. On every compiled GPU backend (`gpu_tests.rs`), the
//! kernel against ndarray and against the tensor ops on the same backend, at sizes that take
//! vectors of 1, 2 and 4 elements. The visible-rows update against the full one row by row.

use crate::{
    AdamGroup, AdamPrimitives, AdamStep, OptimError, SplatBackend, adam_step, adam_step_tensor_ops,
};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use ember_test_utils::{fresh_rng, uniform};
use rand::rngs::StdRng;

/// 7 217 elements: odd, so the GPU kernel reads one element per unit.
pub(super) const SHAPE: [usize; 2] = [1031, 7];

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

/// A random start of `shape` and `steps` random gradients.
pub(super) struct Problem {
    shape: [usize; 2],
    param: Vec<f64>,
    grads: Vec<Vec<f64>>,
}

pub(super) fn problem(label: &str, shape: [usize; 2], steps: usize) -> Problem {
    let mut rng = fresh_rng(label);
    let n = shape[0] * shape[1];
    Problem {
        shape,
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
    let t = |v: &[f64]| {
        Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), p.shape), (&device, dtype))
    };
    let zeros = vec![0.0; p.param.len()];
    let (mut param, mut m, mut v) = (t(&p.param), t(&zeros), t(&zeros));
    for (step, grad) in (1..).zip(&p.grads) {
        let s = settings(step, 0.01 * f64::from(step));
        [param, m, v] = update(param, t(grad), m, v, &s);
    }
    [host(param), host(m), host(v)]
}

/// The updates of `p` through the op.
pub(super) fn run<B: SplatBackend>(p: &Problem, dtype: DType) -> [Vec<f64>; 3] {
    run_with::<B>(p, dtype, |param, grad, m, v, s| {
        let u = adam_step(param, grad, m, v, s).unwrap();
        [u.param, u.exp_avg, u.exp_avg_sq]
    })
}

/// The updates of `p` through the tensor-op reference on `B`.
pub(super) fn run_tensor_ops<B: Backend>(p: &Problem, dtype: DType) -> [Vec<f64>; 3] {
    run_with::<B>(p, dtype, |param, grad, m, v, s| {
        let primitive = |t: Tensor<B, 2>| t.into_primitive().tensor();
        let tensor = |t| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
        let u = adam_step_tensor_ops::<B>(
            AdamPrimitives {
                param: primitive(param),
                exp_avg: primitive(m),
                exp_avg_sq: primitive(v),
            },
            primitive(grad),
            *s,
        );
        [tensor(u.param), tensor(u.exp_avg), tensor(u.exp_avg_sq)]
    })
}

/// The updates of `p` as Burn tensor ops on ndarray, in the order the op documents.
fn reference(p: &Problem, dtype: DType) -> [Vec<f64>; 3] {
    run_with::<crate::backend::Cpu64>(p, dtype, |param, g, m, v, s| {
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
        let p = problem(&format!("adam_fused_{dtype:?}"), SHAPE, 6);
        let want = reference(&p, dtype);
        for (backend, got) in [
            ("ndarray", run::<crate::backend::Cpu64>(&p, dtype)),
            ("autodiff", run::<Autodiff<crate::backend::Cpu64>>(&p, dtype)),
            ("tensor ops", run_tensor_ops::<crate::backend::Cpu64>(&p, dtype)),
        ] {
            for (name, (g, w)) in ["param", "exp_avg", "exp_avg_sq"]
                .iter()
                .zip(got.iter().zip(&want))
            {
                assert!(
                    g.iter().any(|x| *x != 0.0),
                    "{backend} {dtype:?} {name}: all zero"
                );
                assert_eq!(g, w, "{backend} {dtype:?} {name}");
            }
        }
    }
}

#[test]
fn adam_refuses_mismatched_shapes_and_step_zero() {
    type B = crate::backend::Cpu;
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

/// `values` as an f32 tensor of `shape` on `B`'s default device.
fn f32_tensor<B: Backend>(values: Vec<f64>, shape: &[usize]) -> FloatTensor<B> {
    let flat = Tensor::<B, 1>::from_data(
        TensorData::new(values, [shape.iter().product::<usize>()]),
        (&B::Device::default(), DType::F32),
    );
    B::float_reshape(flat.into_primitive().tensor(), shape.to_vec().into())
}

/// A tensor's values, flattened, as `f64`.
fn host_values<B: Backend>(t: FloatTensor<B>) -> Vec<f64> {
    let n = t.shape().num_elements();
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::float_reshape(t, [n].into())))
        .into_data()
        .convert::<f64>()
        .into_vec::<f64>()
        .unwrap()
}

/// One random group per shape (parameter, moments and gradient drawn from `rng`; the second
/// moment non-negative), group `g` at step `g + 1` with rate `0.01 (g + 1)`.
fn random_groups<B: Backend>(rng: &mut StdRng, shapes: &[Vec<usize>]) -> Vec<AdamGroup<B>> {
    shapes
        .iter()
        .enumerate()
        .map(|(g, shape)| {
            let n = shape.iter().product::<usize>();
            let exp_avg_sq = f32_tensor::<B>(uniform(rng, n, 0.0, 1.0), shape);
            let mut values = || f32_tensor::<B>(uniform(rng, n, -1.0, 1.0), shape);
            AdamGroup {
                state: AdamPrimitives {
                    param: values(),
                    exp_avg: values(),
                    exp_avg_sq,
                },
                grad: values(),
                step: settings(1 + g as u32, 0.01 * (1 + g) as f64),
            }
        })
        .collect()
}

/// `AdamOps::adam_steps`: several groups of different sizes and ranks, each with its own
/// settings, give what `adam_step` gives each group alone: bit for bit on ndarray (one update
/// after another), to rounding on a GPU (one launch for all of them, or one per group when one
/// of them is empty).
pub(super) fn groups_match_single_updates<B: SplatBackend>(label: &str, tolerance: f64) {
    let all = vec![vec![1031, 3], vec![1031], vec![517, 15, 3], vec![2, 1, 3]];
    let mut with_empty = all.clone();
    with_empty.insert(2, vec![0, 4]);
    for shapes in [all, with_empty] {
        groups_of_shapes_match_single_updates::<B>(label, tolerance, &shapes);
    }
}

fn groups_of_shapes_match_single_updates<B: SplatBackend>(
    label: &str,
    tolerance: f64,
    shapes: &[Vec<usize>],
) {
    let mut rng = fresh_rng(label);
    let groups = random_groups::<B>(&mut rng, shapes);
    let together = B::adam_steps(groups.clone());
    assert_eq!(
        together.len(),
        groups.len(),
        "{label}: one update per group"
    );
    for (g, (group, got)) in groups.into_iter().zip(together).enumerate() {
        let want = B::adam_step(group.state, group.grad, group.step);
        for (name, got, want) in [
            ("param", got.param, want.param),
            ("exp_avg", got.exp_avg, want.exp_avg),
            ("exp_avg_sq", got.exp_avg_sq, want.exp_avg_sq),
        ] {
            let (got, want) = (host_values::<B>(got), host_values::<B>(want));
            let err = ember_test_utils::rel_err(&got, &want);
            assert!(
                err <= tolerance,
                "{label}: group {g} {name}: relative error {err}"
            );
        }
    }
}

#[test]
fn grouped_adam_matches_single_updates_cpu() {
    groups_match_single_updates::<crate::backend::Cpu>("adam groups cpu", 0.0);
}

/// `AdamOps::adam_steps_visible`: on rows with a positive weight, what `adam_steps` gives (bit
/// for bit on ndarray, to `tolerance` on a GPU); on the others the old parameter and moments,
/// bit for bit everywhere. Groups of several ranks and widths (1, 3, 45 elements a row), an
/// empty one, weights zero, negative and positive; the tensor-op reference agrees too.
pub(super) fn visible_groups_keep_unseen_rows<B: SplatBackend>(label: &str, tolerance: f64) {
    let rows = 1031;
    let mut rng = fresh_rng(label);
    let shapes = [vec![rows, 3], vec![rows], vec![0, 4], vec![rows, 15, 3]];
    let groups = random_groups::<B>(&mut rng, &shapes);
    // About a third of the rows unseen, some of them by a negative weight.
    let weights: Vec<f64> = uniform(&mut rng, rows, -1.0, 2.0)
        .into_iter()
        .map(|w| if w.abs() < 0.3 { 0.0 } else { w })
        .collect();
    let seen: Vec<bool> = weights.iter().map(|w| *w > 0.0).collect();
    assert!(seen.iter().any(|s| *s) && seen.iter().any(|s| !*s));
    let visible = || f32_tensor::<B>(weights.clone(), &[rows]);
    let full = B::adam_steps(groups.clone());
    for (how, got) in [
        ("op", B::adam_steps_visible(groups.clone(), visible())),
        (
            "tensor ops",
            crate::adam_steps_visible_tensor_ops(groups.clone(), visible()),
        ),
    ] {
        assert_eq!(got.len(), groups.len(), "{label} {how}: one update per group");
        for (g, ((group, got), full)) in groups.iter().zip(got).zip(full.clone()).enumerate() {
            let n = group.state.param.shape().num_elements();
            for (name, got, full, old) in [
                ("param", got.param, full.param, &group.state.param),
                ("exp_avg", got.exp_avg, full.exp_avg, &group.state.exp_avg),
                (
                    "exp_avg_sq",
                    got.exp_avg_sq,
                    full.exp_avg_sq,
                    &group.state.exp_avg_sq,
                ),
            ] {
                let (got, full, old) = (host_values::<B>(got), host_values::<B>(full), host_values::<B>(old.clone()));
                assert_eq!(got.len(), n, "{label} {how} group {g} {name}: length");
                if n == 0 {
                    continue;
                }
                let width = n / rows;
                let (mut got_seen, mut want_seen) = (Vec::new(), Vec::new());
                for (r, seen) in seen.iter().enumerate() {
                    let row = r * width..(r + 1) * width;
                    if *seen {
                        got_seen.extend_from_slice(&got[row.clone()]);
                        want_seen.extend_from_slice(&full[row]);
                    } else {
                        assert_eq!(
                            got[row.clone()],
                            old[row],
                            "{label} {how} group {g} {name}: unseen row {r} changed"
                        );
                    }
                }
                assert_ne!(got_seen, old[..got_seen.len()], "{label}: nothing updated");
                let err = ember_test_utils::rel_err(&got_seen, &want_seen);
                assert!(
                    err <= tolerance,
                    "{label} {how} group {g} {name}: seen rows, relative error {err}"
                );
            }
        }
    }
}

#[test]
fn visible_adam_keeps_unseen_rows_cpu() {
    visible_groups_keep_unseen_rows::<crate::backend::Cpu>("adam visible cpu", 0.0);
    visible_groups_keep_unseen_rows::<Autodiff<crate::backend::Cpu>>("adam visible autodiff", 0.0);
}
