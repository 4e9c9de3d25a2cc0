//! The MCMC noise on the centres (`ember_kernels::perturb_means`): the ndarray pass bit for bit
//! against the op's tensor-op reference, the normals' statistics and the refusals (every
//! compiled GPU backend against ndarray: `gpu_tests.rs`).

use crate::noise::cpu::standard_normals;
use crate::noise::perturb_means_tensor_ops;
use crate::{MeanNoise, NoiseError, NoiseInputs, NoiseOps, perturb_means};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

use ember_test_utils::{fresh_rng, uniform};

use crate::backend::Cpu;

/// A random field of `n` Gaussians as `f32` rows: means, quats, log-scales, opacity logits. Row
/// 1 has a zero quaternion, row 2 a NaN centre, row 3 a NaN log-scale, row 4 a scale whose
/// square overflows; the logits cover both sides of the gate (opacity 0.005).
pub(super) fn field(label: &str, n: usize) -> [Vec<f32>; 4] {
    let mut rng = fresh_rng(label);
    let f32s = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    let means = f32s(uniform(&mut rng, 3 * n, -2.0, 2.0));
    let mut quats = f32s(uniform(&mut rng, 4 * n, -1.0, 1.0));
    let mut log_scales = f32s(uniform(&mut rng, 3 * n, -5.0, -1.0));
    let logits = f32s(uniform(&mut rng, n, -9.0, 3.0));
    quats[4..8].fill(0.0);
    let mut means = means;
    means[6] = f32::NAN;
    log_scales[10] = f32::NAN;
    log_scales[12] = 100.0;
    [means, quats, log_scales, logits]
}

fn tensors<B: Backend>(
    f: &[Vec<f32>; 4],
) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>) {
    let device = Default::default();
    let n = f[3].len();
    let t2 = |v: &[f32], k: usize| {
        Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), [n, k]), &device)
    };
    (
        t2(&f[0], 3),
        t2(&f[1], 4),
        t2(&f[2], 3),
        Tensor::<B, 1>::from_data(TensorData::new(f[3].clone(), [n]), &device),
    )
}

fn host<B: Backend>(t: Tensor<B, 2>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

/// The moved centres through the op on `B`.
pub(super) fn moved<B: NoiseOps>(f: &[Vec<f32>; 4], noise: &MeanNoise) -> Vec<f32> {
    let (means, quats, log_scales, logits) = tensors::<B>(f);
    host(perturb_means(means, quats, log_scales, logits, noise).unwrap())
}

#[test]
fn ndarray_pass_matches_the_tensor_ops_bit_for_bit() {
    // More Gaussians than one rayon task takes, and an odd count (the last pair's sine half
    // unused).
    let f = field("noise_bits", 5_003);
    let noise = MeanNoise {
        seed: 0x9e37_79b9,
        scale: 1.6e-4 * 5e5,
    };
    let got = moved::<Cpu>(&f, &noise);
    let (means, quats, log_scales, logits) = tensors::<Cpu>(&f);
    let reference = perturb_means_tensor_ops::<Cpu>(
        NoiseInputs {
            means: means.into_primitive().tensor(),
            quats: quats.into_primitive().tensor(),
            log_scales: log_scales.into_primitive().tensor(),
            opacity_logits: logits.into_primitive().tensor(),
        },
        noise,
    );
    let want = host(Tensor::<Cpu, 2>::from_primitive(TensorPrimitive::Float(
        reference,
    )));
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "coordinate {i}: {g} against the tensor ops' {w} (from {})",
            f[0][i]
        );
    }
    // The NaN centre stays NaN, the NaN and the overflowing log-scales leave their centres in
    // place, and transparent Gaussians move.
    assert!(got[6].is_nan());
    assert_eq!(got[9..15], f[0][9..15]);
    let moves = got
        .iter()
        .zip(&f[0])
        .filter(|(a, b)| a.is_finite() && (*a - *b).abs() > 1e-4)
        .count();
    assert!(moves > 1000, "{moves} coordinates moved");
}

#[test]
fn normals_are_standard_and_depend_only_on_the_seed() {
    let n: usize = 20_001;
    let draw = |seed: u32| -> Vec<f32> {
        let z = standard_normals(n, seed);
        (0..3 * n).map(|k| z[(k % 3) * n + k / 3]).collect()
    };
    // `a` is Gaussian-major: each chunk of three is one Gaussian's `z`.
    let a = draw(7);
    assert_eq!(a, draw(7));
    let b = draw(8);
    assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 59_000);
    let count = a.len() as f64;
    let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / count;
    let moment = |p: i32| {
        a.iter()
            .map(|&v| (f64::from(v) - mean).powi(p))
            .sum::<f64>()
            / count
    };
    let (var, fourth) = (moment(2), moment(4));
    assert!(mean.abs() < 0.02, "mean {mean}");
    assert!((var - 1.0).abs() < 0.03, "variance {var}");
    // A normal's kurtosis is 3 (a uniform's is 1.8).
    let kurtosis = fourth / (var * var);
    assert!((kurtosis - 3.0).abs() < 0.15, "kurtosis {kurtosis}");
    let beyond = a.iter().filter(|v| v.abs() > 3.0).count() as f64 / count;
    assert!((0.001..0.005).contains(&beyond), "{beyond} beyond 3 sigma");
    // The three axes of a Gaussian are uncorrelated, and its squared norm is chi-square with 3
    // degrees of freedom (mean 3, variance 6).
    for (p, q) in [(0, 1), (0, 2), (1, 2)] {
        let c = a
            .chunks(3)
            .map(|z| f64::from(z[p]) * f64::from(z[q]))
            .sum::<f64>()
            / n as f64;
        assert!(c.abs() < 0.03, "axes {p} and {q}: correlation {c}");
    }
    let norms: Vec<f64> = a
        .chunks(3)
        .map(|z| z.iter().map(|&v| f64::from(v).powi(2)).sum())
        .collect();
    let norm_mean = norms.iter().sum::<f64>() / n as f64;
    let norm_var = norms.iter().map(|v| (v - norm_mean).powi(2)).sum::<f64>() / n as f64;
    assert!(
        (norm_mean - 3.0).abs() < 0.1,
        "mean squared norm {norm_mean}"
    );
    assert!(
        (norm_var - 6.0).abs() < 0.5,
        "variance of the squared norm {norm_var}"
    );
    // Neighbouring samples are uncorrelated.
    let lag = a
        .windows(2)
        .map(|w| f64::from(w[0]) * f64::from(w[1]))
        .sum::<f64>()
        / count;
    assert!(lag.abs() < 0.02, "lag-1 correlation {lag}");
}

#[test]
fn noise_refuses_mismatched_shapes() {
    let device = Default::default();
    let z2 = |shape: [usize; 2]| Tensor::<Cpu, 2>::zeros(shape, &device);
    let noise = MeanNoise {
        seed: 1,
        scale: 1.0,
    };
    let err = perturb_means(
        z2([5, 3]),
        z2([5, 3]),
        z2([5, 3]),
        Tensor::<Cpu, 1>::zeros([5], &device),
        &noise,
    );
    assert!(
        matches!(&err, Err(NoiseError::Shape { name: "quats", .. })),
        "{err:?}"
    );
    let err = perturb_means(
        z2([5, 3]),
        z2([5, 4]),
        z2([5, 3]),
        Tensor::<Cpu, 1>::zeros([4], &device),
        &noise,
    );
    assert!(
        matches!(
            &err,
            Err(NoiseError::Shape {
                name: "opacity_logits",
                ..
            })
        ),
        "{err:?}"
    );
    let empty = perturb_means(
        z2([0, 3]),
        z2([0, 4]),
        z2([0, 3]),
        Tensor::<Cpu, 1>::zeros([0], &device),
        &noise,
    )
    .unwrap();
    assert_eq!(empty.dims(), [0, 3]);
}
