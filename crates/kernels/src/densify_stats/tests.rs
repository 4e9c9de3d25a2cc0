//! The densification statistics (`ember_kernels::accumulate_densify_stats`): the formula
//! against a direct f64 evaluation; on ndarray, bit for bit against the same totals written as
//! Burn tensor ops, in f32 and f64, directly and through `Autodiff`; and the refusals. On every
//! compiled GPU backend, the kernel against ndarray and the tensor ops: `gpu_tests.rs`.

use crate::{
    DensifyStats, DensifyStatsError, DensifyStatsPrimitives, SplatBackend, ViewSize,
    accumulate_densify_stats, densify_stats_tensor_ops,
};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use rand::RngExt;

use ember_test_utils::{fresh_rng, uniform};

// Every ndarray run here is `NdArray<f32>` with the dtype given per tensor: Burn's default
// float dtype is a per-device setting that the first backend to use it fixes, NdArray<f32> and
// NdArray<f64> share one device, and the tests beside these create tensors in that default.

/// Odd, so no row count lines up with a GPU block.
const N: usize = 1031;

/// The views a problem adds, in order: landscape and portrait, as a capture mixes them.
const VIEWS: [ViewSize; 3] = [
    ViewSize {
        width: 800,
        height: 600,
    },
    ViewSize {
        width: 600,
        height: 800,
    },
    ViewSize {
        width: 97,
        height: 61,
    },
];

/// Per view, `screen_grads [N, 3]` and `extents [N, 3]`: about a third of the Gaussians not
/// drawn (no tiles; some of those with a radius, as a box off the image has), some drawn with a
/// zero radius.
pub(super) struct Problem {
    grads: Vec<Vec<f64>>,
    extents: Vec<Vec<i64>>,
}

pub(super) fn problem(label: &str) -> Problem {
    let mut rng = fresh_rng(label);
    let mut grads = Vec::new();
    let mut extents = Vec::new();
    for _ in VIEWS {
        grads.push(uniform(&mut rng, 3 * N, -2e-3, 2e-3));
        extents.push(
            (0..N)
                .flat_map(|_| {
                    let tiles = if rng.random::<f64>() < 0.35 {
                        0
                    } else {
                        rng.random_range(1..40i64)
                    };
                    [
                        rng.random_range(0..60i64),
                        rng.random_range(0..60i64),
                        tiles,
                    ]
                })
                .collect(),
        );
    }
    Problem { grads, extents }
}

/// `(grad_sum, visible_steps, max_radius)` after every view of `p`, on the host.
pub(super) type Totals = [Vec<f64>; 3];

/// One view added: `(totals, screen_grads, extents, view)` to the new totals.
type Add<B> = fn(DensifyStats<B>, Tensor<B, 2>, Tensor<B, 2, Int>, ViewSize) -> DensifyStats<B>;

fn run_with<B: Backend>(p: &Problem, dtype: DType, add: Add<B>) -> Totals {
    let device: B::Device = Default::default();
    let zeros = || Tensor::<B, 1>::zeros([N], (&device, dtype));
    let mut totals = DensifyStats {
        grad_sum: zeros(),
        visible_steps: zeros(),
        max_radius: zeros(),
    };
    for ((grads, extents), view) in p.grads.iter().zip(&p.extents).zip(VIEWS) {
        let grads = Tensor::from_data(TensorData::new(grads.clone(), [N, 3]), (&device, dtype));
        let extents = Tensor::from_data(TensorData::new(extents.clone(), [N, 3]), &device);
        totals = add(totals, grads, extents, view);
    }
    let host = |t: Tensor<B, 1>| t.into_data().convert::<f64>().into_vec::<f64>().unwrap();
    [
        host(totals.grad_sum),
        host(totals.visible_steps),
        host(totals.max_radius),
    ]
}

/// The totals of `p` through the op.
pub(super) fn run<B: SplatBackend>(p: &Problem, dtype: DType) -> Totals {
    run_with::<B>(p, dtype, |totals, grads, extents, view| {
        accumulate_densify_stats(totals, grads, extents, view).unwrap()
    })
}

/// The totals of `p` through the tensor-op reference on `B`.
pub(super) fn run_tensor_ops<B: Backend>(p: &Problem, dtype: DType) -> Totals {
    run_with::<B>(p, dtype, |totals, grads, extents, view| {
        let float = |t: Tensor<B, 1>| t.into_primitive().tensor();
        let out = densify_stats_tensor_ops::<B>(
            DensifyStatsPrimitives {
                grad_sum: float(totals.grad_sum),
                visible_steps: float(totals.visible_steps),
                max_radius: float(totals.max_radius),
            },
            grads.into_primitive().tensor(),
            extents.into_primitive(),
            view,
        );
        let tensor = |p| Tensor::from_primitive(TensorPrimitive::Float(p));
        DensifyStats {
            grad_sum: tensor(out.grad_sum),
            visible_steps: tensor(out.visible_steps),
            max_radius: tensor(out.max_radius),
        }
    })
}

/// The module docs' formula, evaluated directly in f64.
fn oracle(p: &Problem) -> Totals {
    let mut totals = [vec![0.0; N], vec![0.0; N], vec![0.0; N]];
    for ((grads, extents), view) in p.grads.iter().zip(&p.extents).zip(VIEWS) {
        for i in 0..N {
            let e = &extents[3 * i..3 * i + 3];
            if e[2] == 0 {
                continue;
            }
            let gx = grads[3 * i] * f64::from(view.width) / 2.0;
            let gy = grads[3 * i + 1] * f64::from(view.height) / 2.0;
            totals[0][i] += gx.hypot(gy);
            totals[1][i] += 1.0;
            totals[2][i] = totals[2][i].max(e[0].max(e[1]) as f64);
        }
    }
    totals
}

#[test]
fn totals_follow_the_formula() {
    let p = problem("densify_stats_formula");
    let want = oracle(&p);
    let got = run::<crate::backend::Cpu>(&p, DType::F64);
    assert!(ember_test_utils::rel_err(&got[0], &want[0]) < 1e-12);
    assert_eq!(got[1], want[1]);
    assert_eq!(got[2], want[2]);
    // Not a vacuous check: some Gaussians are drawn in none, some in every view.
    assert!(want[1].contains(&0.0) && want[1].contains(&3.0));
}

#[test]
fn ndarray_matches_tensor_ops_bit_for_bit() {
    let p = problem("densify_stats_ndarray");
    for dtype in [DType::F32, DType::F64] {
        let want = run_tensor_ops::<crate::backend::Cpu>(&p, dtype);
        assert_eq!(run::<crate::backend::Cpu>(&p, dtype), want, "{dtype:?}");
        assert_eq!(
            run::<Autodiff<crate::backend::Cpu>>(&p, dtype),
            want,
            "{dtype:?} through Autodiff"
        );
    }
}

#[test]
fn refuses_shapes_that_do_not_fit() {
    type B = crate::backend::Cpu;
    let device = Default::default();
    let totals = |n: usize| DensifyStats::<B> {
        grad_sum: Tensor::zeros([n], &device),
        visible_steps: Tensor::zeros([n], &device),
        max_radius: Tensor::zeros([n], &device),
    };
    let view = VIEWS[0];
    let grads = |rows: usize, cols: usize| Tensor::<B, 2>::zeros([rows, cols], &device);
    let extents = |rows: usize, cols: usize| Tensor::<B, 2, Int>::zeros([rows, cols], &device);
    let err = accumulate_densify_stats(totals(4), grads(5, 3), extents(4, 3), view);
    assert!(
        matches!(
            err,
            Err(DensifyStatsError::Shape {
                name: "screen_grads",
                ..
            })
        ),
        "{err:?}"
    );
    let err = accumulate_densify_stats(totals(4), grads(4, 3), extents(4, 2), view);
    assert!(
        matches!(
            err,
            Err(DensifyStatsError::Shape {
                name: "extents",
                ..
            })
        ),
        "{err:?}"
    );
    let mut uneven = totals(4);
    uneven.max_radius = Tensor::zeros([3], &device);
    let err = accumulate_densify_stats(uneven, grads(4, 3), extents(4, 3), view);
    assert!(
        matches!(
            err,
            Err(DensifyStatsError::Shape {
                name: "max_radius",
                ..
            })
        ),
        "{err:?}"
    );
    let empty = accumulate_densify_stats(totals(0), grads(0, 3), extents(0, 3), view).unwrap();
    assert_eq!(empty.grad_sum.dims(), [0]);
}
