//! The CPU field op: f64 finite-difference gradients, agreement with the plain Burn
//! formulation, determinism, edge cases and bad input.

use crate::field::cpu;
use crate::field::field_query_reference;
use crate::{Covariance, FieldOptions, SplatBackend, field_query};
use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use rand::RngExt;

use ember_test_utils::{Problem, fresh_rng, rel_err, to_f32, to_f64, uniform};

/// A test problem's arrays as the CPU kernels take them.
pub(super) trait AsArrays {
    fn arrays(&self) -> cpu::FieldArrays<'_, f64>;
}

impl AsArrays for Problem {
    fn arrays(&self) -> cpu::FieldArrays<'_, f64> {
        cpu::FieldArrays {
            points: &self.points,
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            features: &self.features,
            channels: self.c,
        }
    }
}

/// Loss weights: the analytic gradient is `backward(grad_values = weights)`.
fn loss(values: &[f64], weights: &[f64]) -> f64 {
    values.iter().zip(weights).map(|(v, w)| v * w).sum()
}

/// Picks one input array of a problem.
type Selector = fn(&mut Problem) -> &mut Vec<f64>;

/// Central differences of `sum(values * weights)` against the analytic backward, every input.
fn check_gradients(problem: &Problem, options: FieldOptions) {
    let mut rng = fresh_rng("weights");
    let weights = uniform(&mut rng, problem.p * problem.c, -1.0, 1.0);
    let analytic = cpu::backward(&problem.arrays(), &weights, &options, true);
    let eps = 1e-6;
    let numeric = |select: Selector| -> Vec<f64> {
        let len = select(&mut problem.clone()).len();
        (0..len)
            .map(|k| {
                let mut plus = problem.clone();
                select(&mut plus)[k] += eps;
                let mut minus = problem.clone();
                select(&mut minus)[k] -= eps;
                let fp = loss(&cpu::forward(&plus.arrays(), &options), &weights);
                let fm = loss(&cpu::forward(&minus.arrays(), &options), &weights);
                (fp - fm) / (2.0 * eps)
            })
            .collect()
    };
    let cases: [(&str, &[f64], Selector); 5] = [
        ("points", &analytic.points, |p| &mut p.points),
        ("means", &analytic.means, |p| &mut p.means),
        ("quats", &analytic.quats, |p| &mut p.quats),
        ("log_scales", &analytic.log_scales, |p| &mut p.log_scales),
        ("features", &analytic.features, |p| &mut p.features),
    ];
    for (name, got, select) in cases {
        let want = numeric(select);
        let err = rel_err(got, &want);
        println!("{options:?} d/d{name}: relative error {err:.2e}");
        assert!(
            err < 1e-6,
            "{name}: analytic {got:?} vs numeric {want:?} (rel err {err:e})"
        );
        if options.covariance == Covariance::Full || name != "quats" {
            assert!(
                want.iter().any(|v| v.abs() > 1e-8),
                "{name}: the check must see a non-zero gradient"
            );
        }
    }
}

/// Smallest `|d^2 - k^2|` over all pairs under `covariance` (the distance the op compares with
/// `k`), and how many pairs are inside `k`.
fn cutoff_margin(problem: &Problem, k: f64, covariance: Covariance) -> (f64, usize) {
    let mut margin = f64::INFINITY;
    let mut inside = 0;
    for i in 0..problem.n {
        // d^2 of pair (p, i) is -2 ln(value) of a one-Gaussian, one-channel problem with weight 1.
        let single = Problem {
            means: problem.means[3 * i..3 * i + 3].to_vec(),
            quats: problem.quats[4 * i..4 * i + 4].to_vec(),
            log_scales: problem.log_scales[3 * i..3 * i + 3].to_vec(),
            features: vec![1.0],
            n: 1,
            c: 1,
            ..problem.clone()
        };
        let exact = FieldOptions::default().with_covariance(covariance);
        for v in cpu::forward(&single.arrays(), &exact) {
            let d2 = -2.0 * v.ln();
            margin = margin.min((d2 - k * k).abs());
            inside += usize::from(d2 < k * k);
        }
    }
    (margin, inside)
}

#[test]
fn gradients_match_central_differences_exact() {
    let mut rng = fresh_rng("gradcheck_exact");
    for covariance in [Covariance::Full, Covariance::Diagonal] {
        for (p, n, c) in [(7, 5, 1), (4, 6, 3), (1, 1, 2)] {
            let problem = Problem::random(&mut rng, p, n, c, 1.0, (-0.7, 0.3));
            check_gradients(
                &problem,
                FieldOptions::default().with_covariance(covariance),
            );
        }
    }
}

#[test]
fn gradients_match_central_differences_cutoff() {
    let mut rng = fresh_rng("gradcheck_cutoff");
    for covariance in [Covariance::Full, Covariance::Diagonal] {
        let mut checked = 0;
        while checked < 3 {
            let problem = Problem::random(&mut rng, 9, 7, 2, 1.0, (-1.2, -0.3));
            let k = 1.5 + rng.random::<f64>();
            let (margin, inside) = cutoff_margin(&problem, k, covariance);
            // The cutoff is a discontinuity: keep every pair clear of it, and some inside.
            if margin < 1e-3 || inside == 0 || inside == 63 {
                continue;
            }
            let options = FieldOptions::default()
                .with_cutoff(k as f32)
                .with_covariance(covariance);
            // Check against the exact problem with the same k in f64 (k as f32 is what the op sees).
            check_gradients(&problem, options);
            checked += 1;
        }
    }
}

/// The fused op and the tensor-op reference through autodiff on backend `Bk`:
/// the values and the gradients of all five inputs.
pub fn run_autodiff<Bk: SplatBackend>(
    problem: &Problem,
    weights: &[f64],
    options: FieldOptions,
    fused: bool,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let device = Default::default();
    let (p, n, c) = (problem.p, problem.n, problem.c);
    // Explicit dtype: Burn's default float dtype is a per-device setting that the first backend
    // to touch the device fixes, and NdArray<f32> and NdArray<f64> share one device.
    let dtype = <Bk::FloatElem as burn::tensor::Element>::dtype();
    let t = |v: &[f64], shape: [usize; 2]| {
        Tensor::<Autodiff<Bk>, 2>::from_data(TensorData::new(v.to_vec(), shape), (&device, dtype))
            .require_grad()
    };
    let inputs = [
        t(&problem.points, [p, 3]),
        t(&problem.means, [n, 3]),
        t(&problem.quats, [n, 4]),
        t(&problem.log_scales, [n, 3]),
        t(&problem.features, [n, c]),
    ];
    let w = Tensor::<Autodiff<Bk>, 2>::from_data(
        TensorData::new(weights.to_vec(), [p, c]),
        (&device, dtype),
    );
    let [x, m, q, s, f] = inputs.clone();
    let out = if fused {
        field_query(x, m, q, s, f, options).expect("valid shapes")
    } else {
        field_query_reference(x, m, q, s, f, options)
    };
    let grads = (out.clone() * w).sum().backward();
    let read = |t: Tensor<Bk, 2>| t.into_data().convert::<f64>().to_vec::<f64>().expect("f64");
    let values = read(out.inner());
    // An input the output does not depend on (quaternions in diagonal mode) has no gradient.
    let g = inputs
        .iter()
        .map(|i| {
            i.grad(&grads)
                .map(read)
                .unwrap_or_else(|| vec![0.0; i.dims().iter().product()])
        })
        .collect();
    (values, g)
}

/// Three-way agreement on one problem: the fused op in f32 and the tensor-op formulation in f32
/// (both through Burn autodiff on ndarray) against the f64 CPU op (itself checked by finite
/// differences above). Forward and all five gradients; `tol` for the fused op, 1e-3 for the
/// tensor ops, whose f32 round-off in the quaternion chain reaches ~1e-4.
fn compare_with_reference(problem: &Problem, options: FieldOptions, tol: f64) {
    let mut rng = fresh_rng("reference_weights");
    // Round the inputs to f32 first, so that every run sees the same problem.
    let round = |v: &[f64]| to_f64(&to_f32(v));
    let problem = Problem {
        points: round(&problem.points),
        means: round(&problem.means),
        quats: round(&problem.quats),
        log_scales: round(&problem.log_scales),
        features: round(&problem.features),
        ..problem.clone()
    };
    // With one Gaussian and one channel, d/dfeatures is a single sum of P terms: weights of
    // both signs can cancel it to near zero, and the f32 rounding relative to what is left
    // reached 1.8e-4 (2026-11-27, reference_weights seed 11044200678451667064). Positive weights
    // keep that case about the shapes.
    let lowest = if problem.n * problem.c == 1 {
        0.1
    } else {
        -1.0
    };
    let weights = round(&uniform(&mut rng, problem.p * problem.c, lowest, 1.0));
    let oracle_values = cpu::forward(&problem.arrays(), &options);
    let g = cpu::backward(&problem.arrays(), &weights, &options, true);
    let oracle_grads = [g.points, g.means, g.quats, g.log_scales, g.features];
    for (what, (values, grads), tol) in [
        (
            "fused f32",
            run_autodiff::<crate::backend::Cpu>(&problem, &weights, options, true),
            tol,
        ),
        // Burn's tensor ops in f32 lose more on d/dquats (the normalisation and the matrix
        // entries cancel): up to 1.84e-3 against the f64 op over 80 random runs of this test,
        // 2026-11-26 (1e-3 failed 12 of those 80).
        (
            "tensor ops f32",
            run_autodiff::<crate::backend::Cpu>(&problem, &weights, options, false),
            4e-3,
        ),
    ] {
        let err = rel_err(&values, &oracle_values);
        assert!(err < tol, "{what} forward: rel err {err:e}");
        for (name, (a, b)) in ["points", "means", "quats", "log_scales", "features"]
            .iter()
            .zip(grads.iter().zip(&oracle_grads))
        {
            let err = rel_err(a, b);
            println!(
                "{options:?} P={} N={} C={} {what} d/d{name}: rel err vs f64 op {err:.2e}",
                problem.p, problem.n, problem.c
            );
            assert!(err < tol, "{what} d/d{name}: rel err {err:e}");
        }
    }
}

#[test]
fn fused_op_matches_tensor_op_formulation() {
    let mut rng = fresh_rng("vs_reference");
    for covariance in [Covariance::Full, Covariance::Diagonal] {
        let options = FieldOptions::default().with_covariance(covariance);
        compare_with_reference(
            &Problem::random(&mut rng, 37, 53, 4, 1.0, (-1.0, 0.0)),
            options,
            1e-4,
        );
        // N = 1 and P = 1.
        compare_with_reference(
            &Problem::random(&mut rng, 29, 1, 1, 1.0, (-1.0, 0.0)),
            options,
            1e-4,
        );
        compare_with_reference(
            &Problem::random(&mut rng, 1, 41, 16, 1.0, (-1.0, 0.0)),
            options,
            1e-4,
        );
        // Very large and very small scales, far apart: exp(-d^2/2) spans the whole f32 range.
        // The means' gradient scales with 1/sigma^2 (up to e^12 between Gaussians), and the
        // f32 rounding of the whitened offsets of the smallest ones reaches ~1e-3 of the
        // largest gradient on some draws (seed 8246881316494703541: 1.7e-4; another: 1.3e-3).
        compare_with_reference(
            &Problem::random(&mut rng, 23, 31, 2, 1.0, (-6.0, 4.0)),
            options,
            3e-3,
        );
        // Cutoff: pairs beyond 2.5 sigma are zero in both.
        compare_with_reference(
            &Problem::random(&mut rng, 37, 53, 3, 1.0, (-1.5, -0.5)),
            options.with_cutoff(2.5),
            1e-4,
        );
    }
}

#[test]
fn cutoff_grid_matches_masked_reference_on_a_larger_cloud() {
    // Thousands of points and small Gaussians: the grid has many cells, each Gaussian spans few.
    let mut rng = fresh_rng("cutoff_grid");
    let problem = Problem::random(&mut rng, 1500, 2000, 2, 1.0, (-3.5, -2.5));
    compare_with_reference(&problem, FieldOptions::default().with_cutoff(3.0), 1e-4);
}

#[test]
fn backward_is_bit_identical_across_runs_and_thread_counts() {
    let mut rng = fresh_rng("determinism");
    let problem = Problem::random(&mut rng, 300, 700, 3, 1.0, (-1.5, -0.5));
    let a = problem.clone();
    let fa: Vec<f32> = to_f32(&a.points);
    let (m, q, s, f) = (
        to_f32(&a.means),
        to_f32(&a.quats),
        to_f32(&a.log_scales),
        to_f32(&a.features),
    );
    let g = to_f32(&uniform(&mut rng, a.p * a.c, -1.0, 1.0));
    for options in [
        FieldOptions::default(),
        FieldOptions::default().with_cutoff(3.0),
    ] {
        let run = || {
            let arr = cpu::FieldArrays {
                points: &fa,
                means: &m,
                quats: &q,
                log_scales: &s,
                features: &f,
                channels: a.c,
            };
            (
                cpu::forward(&arr, &options),
                cpu::backward(&arr, &g, &options, true),
            )
        };
        let first = run();
        let second = run();
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool")
            .install(run);
        let three_threads = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("pool")
            .install(run);
        assert_eq!(first, second, "{options:?}: repeat differs");
        assert_eq!(first, one_thread, "{options:?}: 1 thread differs");
        assert_eq!(first, three_threads, "{options:?}: 3 threads differ");
    }
}
