//! The CubeCL field kernels on every compiled GPU backend, with fusion (`burn::backend::Wgpu`,
//! `burn::backend::Cuda`) and without (`CubeBackend<Runtime, ..>`), against the ndarray (CPU)
//! implementation: forward values and the gradients of all five inputs through `Autodiff`,
//! exact, cutoff and diagonal modes. With `--features wgpu` this runs on wgpu (lavapipe in CI);
//! with `--features cuda` also on CUDA (needs an NVIDIA GPU: CI only builds it).

use crate::{Covariance, FieldOptions, SplatBackend, field_query};
use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::RngExt;
use rand::rngs::StdRng;

use ember_test_utils::{Problem, fresh_rng, rel_err, to_f32, to_f64, uniform};

use crate::backend::Cpu;
#[cfg(feature = "wgpu")]
type WgpuFused = crate::backend::Wgpu;
#[cfg(feature = "wgpu")]
type WgpuPlain = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
#[cfg(feature = "cuda")]
type CudaFused = crate::backend::Cuda;

/// Relative error allowed between the f32 GPU and f32 CPU results.
const TOL: f64 = 1e-4;

/// The tolerance of `extreme_scales_match_cpu`: standard deviations from e^-6 to e^4 make the
/// inverse covariances' condition numbers reach e^20, and the GPU computes in `f32` while the
/// CPU reference keeps the test's `f64` data. Over 40 runs the worst relative error there was
/// 2.2e-5 (d/dpoints, full covariance); one seed in a few hundred reaches 3.3e-4 (seed
/// 508080117055906547).
const EXTREME_TOL: f64 = 1e-3;

const NAMES: [&str; 5] = ["points", "means", "quats", "log_scales", "features"];

/// What one backend computes for a problem: the plain forward, the forward under autodiff, and
/// the gradients of `sum(values * weights)` (`None` for an input that is not tracked).
struct Outcome {
    values: Vec<f64>,
    tracked_values: Vec<f64>,
    grads: [Option<Vec<f64>>; 5],
}

/// How the inputs are laid out in memory.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// Row-major, as created.
    Contiguous,
    /// Each `[rows, cols]` input is the transpose of a `[cols, rows]` tensor (a strided view).
    Transposed,
}

fn host<B: Backend>(t: Tensor<B, 2>) -> Vec<f64> {
    to_f64(
        &t.into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 data"),
    )
}

/// A `[rows, cols]` input; with [`Layout::Transposed`] the returned leaf is `[cols, rows]` and
/// the view handed to the op is its transpose.
fn leaf<B: Backend>(
    data: &[f64],
    shape: [usize; 2],
    layout: Layout,
    device: &B::Device,
) -> Tensor<B, 2> {
    match layout {
        Layout::Contiguous => Tensor::from_data(TensorData::new(to_f32(data), shape), device),
        Layout::Transposed => {
            let [rows, cols] = shape;
            let t: Vec<f64> = (0..cols)
                .flat_map(|c| (0..rows).map(move |r| data[r * cols + c]))
                .collect();
            Tensor::from_data(TensorData::new(to_f32(&t), [cols, rows]), device)
        }
    }
}

fn view<B: Backend>(leaf: Tensor<B, 2>, layout: Layout) -> Tensor<B, 2> {
    match layout {
        Layout::Contiguous => leaf,
        Layout::Transposed => leaf.transpose(),
    }
}

fn run<B: SplatBackend>(
    problem: &Problem,
    weights: &[f64],
    options: FieldOptions,
    points_grad: bool,
    layout: Layout,
    device: &B::Device,
) -> Outcome {
    let (p, n, c) = (problem.p, problem.n, problem.c);
    let data: [(&[f64], [usize; 2]); 5] = [
        (&problem.points, [p, 3]),
        (&problem.means, [n, 3]),
        (&problem.quats, [n, 4]),
        (&problem.log_scales, [n, 3]),
        (&problem.features, [n, c]),
    ];

    let [x, m, q, s, f] = data.map(|(d, shape)| view(leaf::<B>(d, shape, layout, device), layout));
    let values = host(field_query(x, m, q, s, f, options).expect("valid shapes"));

    let leaves = data.map(|(d, shape)| leaf::<Autodiff<B>>(d, shape, layout, device));
    let leaves: Vec<_> = leaves
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            if k == 0 && !points_grad {
                t
            } else {
                t.require_grad()
            }
        })
        .collect();
    let [x, m, q, s, f]: [Tensor<Autodiff<B>, 2>; 5] = leaves
        .iter()
        .map(|t| view(t.clone(), layout))
        .collect::<Vec<_>>()
        .try_into()
        .unwrap_or_else(|_| unreachable!("five inputs"));
    let out = field_query(x, m, q, s, f, options).expect("valid shapes");
    let w = Tensor::<Autodiff<B>, 2>::from_data(TensorData::new(to_f32(weights), [p, c]), device);
    let grads = (out.clone() * w).sum().backward();
    let tracked_values = host(out.inner());
    let grads = core::array::from_fn(|k| leaves[k].grad(&grads).map(|g| host(view(g, layout))));
    Outcome {
        values,
        tracked_values,
        grads,
    }
}

/// Runs the problem on ndarray and on both wgpu variants and checks every output.
fn check(label: &str, problem: &Problem, options: FieldOptions, points_grad: bool, layout: Layout) {
    check_within(label, problem, options, points_grad, layout, TOL);
}

/// [`check`] with the relative tolerance `tol`.
fn check_within(
    label: &str,
    problem: &Problem,
    options: FieldOptions,
    points_grad: bool,
    layout: Layout,
    tol: f64,
) {
    let mut rng = fresh_rng(label);
    let weights = uniform(&mut rng, problem.p * problem.c, -1.0, 1.0);
    let want = run::<Cpu>(
        problem,
        &weights,
        options,
        points_grad,
        layout,
        &Default::default(),
    );
    check_against(
        label,
        problem,
        &weights,
        &want,
        options,
        points_grad,
        layout,
        tol,
    );
}

/// Runs the problem on both wgpu variants and compares every output with `want`, to the
/// relative tolerance `tol`.
// The problem's description and the expectation, as the tests spell them out.
#[allow(clippy::too_many_arguments)]
fn check_against(
    label: &str,
    problem: &Problem,
    weights: &[f64],
    want: &Outcome,
    options: FieldOptions,
    points_grad: bool,
    layout: Layout,
    tol: f64,
) {
    let mut outcomes: Vec<(&str, Outcome)> = Vec::new();
    #[cfg(feature = "wgpu")]
    {
        let gpu = burn::backend::wgpu::WgpuDevice::default();
        outcomes.push((
            "wgpu+fusion",
            run::<WgpuFused>(problem, weights, options, points_grad, layout, &gpu),
        ));
        outcomes.push((
            "wgpu",
            run::<WgpuPlain>(problem, weights, options, points_grad, layout, &gpu),
        ));
    }
    #[cfg(feature = "cuda")]
    {
        let gpu = burn::backend::cuda::CudaDevice::default();
        outcomes.push((
            "cuda+fusion",
            run::<CudaFused>(problem, weights, options, points_grad, layout, &gpu),
        ));
    }
    let (p, n, c) = (problem.p, problem.n, problem.c);
    for (backend, got) in &outcomes {
        let mut line = format!("{label} P={p} N={n} C={c} {backend}:");
        for (what, a, b) in [
            ("values", &got.values, &want.values),
            ("values (autodiff)", &got.tracked_values, &want.values),
        ] {
            let err = rel_err(a, b);
            line += &format!(" {what} {err:.1e}");
            assert!(
                err < tol,
                "{label} {backend} {what}: relative error {err:e}"
            );
        }
        for (k, name) in NAMES.iter().enumerate() {
            match (&got.grads[k], &want.grads[k]) {
                (Some(a), Some(b)) => {
                    let err = rel_err(a, b);
                    line += &format!(" d{name} {err:.1e}");
                    assert!(
                        err < tol,
                        "{label} {backend} d/d{name}: relative error {err:e}"
                    );
                }
                (None, None) => line += &format!(" d{name} untracked"),
                _ => panic!("{label} {backend} d/d{name}: tracked on one backend only"),
            }
        }
        println!("{line}");
    }
    // Every tracked gradient must be exercised (a zero tensor compares equal to anything small).
    for (k, name) in NAMES.iter().enumerate() {
        if let Some(g) = &want.grads[k]
            && !(k == 2 && options.covariance == Covariance::Diagonal)
        {
            assert!(
                g.iter().any(|v| v.abs() > 1e-6),
                "{label}: d/d{name} is all zero"
            );
        }
    }
}

/// `d^2` of pair `(p, i)` in f64, straight from the definition (independent of both kernels).
fn pair_d2(problem: &Problem, p: usize, i: usize, covariance: Covariance) -> f64 {
    let q = &problem.quats[4 * i..4 * i + 4];
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let [w, x, y, z] = [q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm];
    let r = match covariance {
        Covariance::Full => [
            [
                1.0 - 2.0 * (y * y + z * z),
                2.0 * (x * y - w * z),
                2.0 * (x * z + w * y),
            ],
            [
                2.0 * (x * y + w * z),
                1.0 - 2.0 * (x * x + z * z),
                2.0 * (y * z - w * x),
            ],
            [
                2.0 * (x * z - w * y),
                2.0 * (y * z + w * x),
                1.0 - 2.0 * (x * x + y * y),
            ],
        ],
        Covariance::Diagonal => [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    };
    let v: [f64; 3] =
        core::array::from_fn(|b| problem.points[3 * p + b] - problem.means[3 * i + b]);
    (0..3)
        .map(|a| {
            let za =
                (0..3).map(|b| r[b][a] * v[b]).sum::<f64>() / problem.log_scales[3 * i + a].exp();
            za * za
        })
        .sum()
}

/// A random problem (log-scales in `ls`) whose pairs all keep a margin from the cutoff sphere
/// (so f32 rounding on either side cannot flip a pair in or out), with some pairs inside and
/// some outside.
fn cutoff_problem(
    rng: &mut StdRng,
    [p, n, c]: [usize; 3],
    ls: (f64, f64),
    k: f64,
    covariance: Covariance,
) -> Problem {
    loop {
        let problem = Problem::random(rng, p, n, c, 1.0, ls);
        let mut inside = 0;
        let mut margin = f64::INFINITY;
        for pi in 0..p {
            for i in 0..n {
                let d2 = pair_d2(&problem, pi, i, covariance);
                margin = margin.min((d2 - k * k).abs());
                inside += usize::from(d2 < k * k);
            }
        }
        if margin > 1e-4 && inside > 0 && inside < p * n {
            println!(
                "cutoff problem: {inside} of {} pairs inside, margin {margin:.1e}",
                p * n
            );
            return problem;
        }
    }
}

#[test]
fn exact_full_covariance_matches_cpu() {
    let mut rng = fresh_rng("wgpu_exact");
    for c in [1, 5] {
        let problem = Problem::random(&mut rng, 37, 53, c, 1.0, (-1.0, 0.0));
        check(
            "exact",
            &problem,
            FieldOptions::default(),
            true,
            Layout::Contiguous,
        );
    }
}

#[test]
fn cutoff_matches_cpu() {
    let mut rng = fresh_rng("wgpu_cutoff");
    for (c, covariance) in [
        (5, Covariance::Full),
        (1, Covariance::Full),
        (2, Covariance::Diagonal),
    ] {
        let problem = cutoff_problem(&mut rng, [37, 53, c], (-1.3, -0.5), 3.0, covariance);
        let options = FieldOptions::default()
            .with_cutoff(3.0)
            .with_covariance(covariance);
        check("cutoff k=3", &problem, options, true, Layout::Contiguous);
    }
}

#[test]
fn cutoff_grid_on_larger_clouds_matches_cpu() {
    let mut rng = fresh_rng("wgpu_cutoff_grid");
    // Small Gaussians of similar size: most boxes span a few cells, so the backward visits
    // cells rather than all points.
    let problem = cutoff_problem(
        &mut rng,
        [1000, 1500, 2],
        (-3.5, -2.5),
        3.0,
        Covariance::Full,
    );
    check(
        "grid",
        &problem,
        FieldOptions::default().with_cutoff(3.0),
        true,
        Layout::Contiguous,
    );
    // Sizes spread over two orders of magnitude (several grid levels), away from the origin.
    let mut problem = cutoff_problem(&mut rng, [700, 900, 3], (-5.0, 0.0), 3.0, Covariance::Full);
    for (k, x) in problem
        .points
        .iter_mut()
        .chain(problem.means.iter_mut())
        .enumerate()
    {
        *x += [7.0, -11.0, 5.0][k % 3];
    }
    check(
        "grid, many levels",
        &problem,
        FieldOptions::default().with_cutoff(3.0),
        true,
        Layout::Contiguous,
    );
    let problem = cutoff_problem(
        &mut rng,
        [700, 900, 1],
        (-4.0, -1.0),
        3.0,
        Covariance::Diagonal,
    );
    let options = FieldOptions::default()
        .with_cutoff(3.0)
        .with_covariance(Covariance::Diagonal);
    check(
        "grid, diagonal",
        &problem,
        options,
        false,
        Layout::Contiguous,
    );
}

#[test]
fn cutoff_keeps_a_gaussian_whose_scale_overflows() {
    // exp(100) is infinite in f32: W = 0, so this Gaussian has d^2 = 0 at every point and adds
    // exactly its features there; its box is not finite, so the grid keeps it in the bucket every
    // point visits. Expected: the problem without it, plus that constant, plus its own gradients
    // (features: the column sums of the weights; zero for the rest, as z = 0 and W = 0).
    let mut rng = fresh_rng("wgpu_huge_scale");
    let problem = cutoff_problem(&mut rng, [300, 400, 2], (-3.0, -2.0), 3.0, Covariance::Full);
    let (p, n, c) = (problem.p, problem.n, problem.c);
    let huge = rng.random_range(0..n);
    let weights = uniform(&mut rng, p * c, -1.0, 1.0);
    let options = FieldOptions::default().with_cutoff(3.0);

    let drop_row = |v: &[f64], width: usize| -> Vec<f64> {
        v.iter()
            .enumerate()
            .filter(|(k, _)| k / width != huge)
            .map(|(_, x)| *x)
            .collect()
    };
    let rest = Problem {
        means: drop_row(&problem.means, 3),
        quats: drop_row(&problem.quats, 4),
        log_scales: drop_row(&problem.log_scales, 3),
        features: drop_row(&problem.features, c),
        n: n - 1,
        ..problem.clone()
    };
    let mut want = run::<Cpu>(
        &rest,
        &weights,
        options,
        true,
        Layout::Contiguous,
        &Default::default(),
    );
    let own = &problem.features[c * huge..c * huge + c];
    for (k, v) in want.values.iter_mut().enumerate() {
        *v += own[k % c];
    }
    let column_sums: Vec<f64> = (0..c)
        .map(|ch| (0..p).map(|row| weights[row * c + ch]).sum())
        .collect();
    for (k, (width, row)) in [
        (3, vec![0.0; 3]),
        (4, vec![0.0; 4]),
        (3, vec![0.0; 3]),
        (c, column_sums),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(g) = want.grads[k + 1].as_mut() {
            let at = huge * width;
            g.splice(at..at, row);
        }
    }
    want.tracked_values = want.values.clone();

    let mut problem = problem;
    problem.log_scales[3 * huge..3 * huge + 3].fill(100.0);
    check_against(
        "overflowing scale",
        &problem,
        &weights,
        &want,
        options,
        true,
        Layout::Contiguous,
        TOL,
    );
}

#[test]
fn diagonal_covariance_matches_cpu() {
    let mut rng = fresh_rng("wgpu_diagonal");
    for c in [1, 5] {
        let problem = Problem::random(&mut rng, 37, 53, c, 1.0, (-1.0, 0.0));
        let options = FieldOptions::default().with_covariance(Covariance::Diagonal);
        check("diagonal", &problem, options, true, Layout::Contiguous);
    }
}

#[test]
fn untracked_points_get_no_gradient() {
    let mut rng = fresh_rng("wgpu_points_data");
    let problem = Problem::random(&mut rng, 37, 53, 5, 1.0, (-1.0, 0.0));
    check(
        "points as data",
        &problem,
        FieldOptions::default(),
        false,
        Layout::Contiguous,
    );
    let problem = cutoff_problem(&mut rng, [37, 53, 3], (-1.3, -0.5), 3.0, Covariance::Full);
    check(
        "points as data, cutoff",
        &problem,
        FieldOptions::default().with_cutoff(3.0),
        false,
        Layout::Contiguous,
    );
}

#[test]
fn many_tiles_and_channel_chunks_match_cpu() {
    // More points and Gaussians than one cube stages at once, and more channels than one
    // register chunk, none of them multiples of the cube size.
    let mut rng = fresh_rng("wgpu_tiles");
    let problem = Problem::random(&mut rng, 301, 263, 11, 1.5, (-1.0, 0.0));
    check(
        "tiles",
        &problem,
        FieldOptions::default(),
        true,
        Layout::Contiguous,
    );
}

#[test]
fn strided_inputs_match_cpu() {
    let mut rng = fresh_rng("wgpu_strided");
    let problem = Problem::random(&mut rng, 37, 53, 5, 1.0, (-1.0, 0.0));
    check(
        "transposed inputs",
        &problem,
        FieldOptions::default(),
        true,
        Layout::Transposed,
    );
}

#[test]
fn degenerate_quaternion_is_identity_with_zero_gradient() {
    let mut rng = fresh_rng("wgpu_zero_quat");
    let mut problem = Problem::random(&mut rng, 37, 53, 2, 1.0, (-1.0, 0.0));
    let zero = rng.random_range(0..problem.n);
    problem.quats[4 * zero..4 * zero + 4].fill(0.0);
    check(
        "zero quaternion",
        &problem,
        FieldOptions::default(),
        true,
        Layout::Contiguous,
    );
}

#[test]
fn backward_is_bit_identical_across_runs() {
    let mut rng = fresh_rng("wgpu_determinism");
    let problem = Problem::random(&mut rng, 200, 150, 3, 1.0, (-1.0, 0.0));
    let weights = uniform(&mut rng, problem.p * problem.c, -1.0, 1.0);
    for options in [
        FieldOptions::default(),
        FieldOptions::default().with_cutoff(3.0),
    ] {
        let mut pairs: Vec<(&str, [Outcome; 2])> = Vec::new();
        #[cfg(feature = "wgpu")]
        {
            let gpu = burn::backend::wgpu::WgpuDevice::default();
            let once =
                || run::<WgpuPlain>(&problem, &weights, options, true, Layout::Contiguous, &gpu);
            pairs.push(("wgpu", [once(), once()]));
        }
        #[cfg(feature = "cuda")]
        {
            let gpu = burn::backend::cuda::CudaDevice::default();
            let once =
                || run::<CudaFused>(&problem, &weights, options, true, Layout::Contiguous, &gpu);
            pairs.push(("cuda+fusion", [once(), once()]));
        }
        for (backend, [a, b]) in pairs {
            assert_eq!(a.values, b.values, "{backend}: values differ between runs");
            for ((name, ga), gb) in NAMES.iter().zip(&a.grads).zip(&b.grads) {
                assert_eq!(ga, gb, "{backend}: d/d{name} differs between runs");
            }
        }
    }
}

/// The field at the Gaussians' own centres, `means` passed as both `points` and `means` (one
/// tensor read twice by the recorded fusion op); the means' gradient sums both roles.
fn query_at_means<B: SplatBackend>(
    problem: &Problem,
    weights: &[f64],
    device: &B::Device,
) -> [Vec<f64>; 2] {
    let (n, c) = (problem.n, problem.c);
    let t = |d: &[f64], shape: [usize; 2]| {
        Tensor::<Autodiff<B>, 2>::from_data(TensorData::new(to_f32(d), shape), device)
            .require_grad()
    };
    let means = t(&problem.means, [n, 3]);
    let out = field_query(
        means.clone(),
        means.clone(),
        t(&problem.quats, [n, 4]),
        t(&problem.log_scales, [n, 3]),
        t(&problem.features, [n, c]),
        FieldOptions::default(),
    )
    .expect("valid shapes");
    let w = Tensor::<Autodiff<B>, 2>::from_data(TensorData::new(to_f32(weights), [n, c]), device);
    let grads = (out.clone() * w).sum().backward();
    [
        host(out.inner()),
        host(means.grad(&grads).expect("tracked")),
    ]
}

#[test]
fn one_tensor_as_points_and_means_matches_cpu() {
    let mut rng = fresh_rng("wgpu_shared_input");
    let problem = Problem::random(&mut rng, 1, 53, 3, 1.0, (-1.0, 0.0));
    let weights = uniform(&mut rng, problem.n * problem.c, -1.0, 1.0);
    let [want_values, want_grad] = query_at_means::<Cpu>(&problem, &weights, &Default::default());
    let mut results: Vec<(&str, [Vec<f64>; 2])> = Vec::new();
    #[cfg(feature = "wgpu")]
    {
        let gpu = burn::backend::wgpu::WgpuDevice::default();
        results.push((
            "wgpu+fusion",
            query_at_means::<WgpuFused>(&problem, &weights, &gpu),
        ));
        results.push((
            "wgpu",
            query_at_means::<WgpuPlain>(&problem, &weights, &gpu),
        ));
    }
    #[cfg(feature = "cuda")]
    {
        let gpu = burn::backend::cuda::CudaDevice::default();
        results.push((
            "cuda+fusion",
            query_at_means::<CudaFused>(&problem, &weights, &gpu),
        ));
    }
    for (backend, [values, grad]) in results {
        let (ev, eg) = (rel_err(&values, &want_values), rel_err(&grad, &want_grad));
        println!("shared input {backend}: values {ev:.1e} dmeans {eg:.1e}");
        assert!(
            ev < TOL && eg < TOL,
            "{backend}: values {ev:e}, dmeans {eg:e}"
        );
    }
}

#[test]
fn extreme_scales_match_cpu() {
    // Standard deviations from e^-6 to e^4 (elongations up to e^10): the backward sums in the
    // whitened frame to stay accurate here.
    let mut rng = fresh_rng("gpu_extreme_scales");
    for covariance in [Covariance::Full, Covariance::Diagonal] {
        let problem = Problem::random(&mut rng, 23, 31, 2, 1.0, (-6.0, 4.0));
        let options = FieldOptions::default().with_covariance(covariance);
        check_within(
            "extreme scales",
            &problem,
            options,
            true,
            Layout::Contiguous,
            EXTREME_TOL,
        );
    }
}
