//! The smoothing fold (`ember_kernels::smoothing_fold`): the CPU pass's backward against f64
//! central differences of its own fold, the ndarray op against the default tensor ops, and
//! refused shapes.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_test_utils::{fresh_rng, uniform};
use rand::rngs::StdRng;

use crate::backend::Cpu;
use crate::smoothing::cpu;
use crate::{
    SmoothingError, smoothing_fold, smoothing_fold_backward, smoothing_fold_backward_tensor_ops,
    smoothing_fold_tensor_ops,
};

/// `n` Gaussians: log-scales in `[-6, -1]`, logits in `[-5, 5]` (the last two 16 and 25: an
/// opacity of 1 to `f32`), variances in `[0, 1e-4]` (the first 0, the second far below every
/// scale's square).
fn gaussians(rng: &mut StdRng, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let log_scales = uniform(rng, 3 * n, -6.0, -1.0);
    let mut logits = uniform(rng, n, -5.0, 5.0);
    logits[n - 2] = 16.0;
    logits[n - 1] = 25.0;
    let mut variance = uniform(rng, n, 0.0, 1e-4);
    variance[0] = 0.0;
    variance[1] = 1e-12;
    (log_scales, logits, variance)
}

#[test]
fn the_cpu_backward_matches_central_differences_of_the_fold_in_f64() {
    let n = 64;
    let mut rng = fresh_rng("smoothing fold: central differences");
    let (l, o, var) = gaussians(&mut rng, n);
    let (w_l, w_o) = (uniform(&mut rng, 3 * n, -1.0, 1.0), uniform(&mut rng, n, -1.0, 1.0));
    // L = sum w_l l' + w_o o', one Gaussian at a time.
    let loss = |k: usize, ls: [f64; 3], logit: f64| {
        let (mut ls, mut logit) = (ls.to_vec(), [logit]);
        cpu::fold(&mut ls, &mut logit, &var[k..k + 1]);
        (0..3).map(|a| w_l[3 * k + a] * ls[a]).sum::<f64>() + w_o[k] * logit[0]
    };
    let (mut g_l, mut g_o) = (w_l.clone(), w_o.clone());
    cpu::fold_backward(&l, &o, &var, &mut g_l, &mut g_o);
    let h = 1e-6;
    for k in 0..n {
        let ls: [f64; 3] = std::array::from_fn(|a| l[3 * k + a]);
        let check = |name: String, got: f64, want: f64| {
            assert!(
                (got - want).abs() <= 1e-6 * want.abs() + 1e-8,
                "{name}: backward {got}, central differences {want} (log-scales {ls:?}, logit \
                 {}, variance {})",
                o[k],
                var[k]
            );
        };
        for a in 0..3 {
            let (mut up, mut down) = (ls, ls);
            up[a] += h;
            down[a] -= h;
            let want = (loss(k, up, o[k]) - loss(k, down, o[k])) / (2.0 * h);
            check(format!("d/dl[{k}][{a}]"), g_l[3 * k + a], want);
        }
        let want = (loss(k, ls, o[k] + h) - loss(k, ls, o[k] - h)) / (2.0 * h);
        check(format!("d/do[{k}]"), g_o[k], want);
    }
}

#[test]
fn the_fold_keeps_each_gaussians_integral() {
    let n = 64;
    let (l, o, var) = gaussians(&mut fresh_rng("smoothing fold: integral"), n);
    let (mut l2, mut o2) = (l.clone(), o.clone());
    cpu::fold(&mut l2, &mut o2, &var);
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    for k in 0..n {
        let mut integral = [sigmoid(o[k]), sigmoid(o2[k])];
        for a in 0..3 {
            let (s, s2) = (l[3 * k + a].exp(), l2[3 * k + a].exp());
            assert!((s2 * s2 - (s * s + var[k])).abs() <= 1e-12 * s2 * s2);
            integral[0] *= s;
            integral[1] *= s2;
        }
        assert!(
            (integral[1] - integral[0]).abs() <= 1e-9 * integral[0],
            "Gaussian {k}: opacity times volume {} against {}",
            integral[1],
            integral[0]
        );
    }
}

fn tensor<B: Backend, const D: usize>(values: &[f64], shape: [usize; D]) -> Tensor<B, D> {
    let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().expect("f32")
}

/// The ndarray op (the CPU pass, in `f64` inside) against the default tensor ops in `f32`, on
/// the same inputs: to within `f32`'s rounding of the tensor ops' terms.
#[test]
fn the_ndarray_op_matches_the_default_tensor_ops() {
    let n = 256;
    let mut rng = fresh_rng("smoothing fold: ndarray against tensor ops");
    let (l, o, var) = gaussians(&mut rng, n);
    let (w_l, w_o) = (uniform(&mut rng, 3 * n, -1.0, 1.0), uniform(&mut rng, n, -1.0, 1.0));
    let inputs = || {
        (
            tensor::<Cpu, 2>(&l, [n, 3]),
            tensor::<Cpu, 1>(&o, [n]),
            tensor::<Cpu, 1>(&var, [n]),
        )
    };
    let (ls, os, vs) = inputs();
    let op = smoothing_fold(ls, os, vs).unwrap();
    let (ls, os, vs) = inputs();
    let (dl, dov) = (tensor::<Cpu, 2>(&w_l, [n, 3]), tensor::<Cpu, 1>(&w_o, [n]));
    let op_grads = smoothing_fold_backward(ls, os, vs, dl.clone(), dov.clone()).unwrap();
    let (ls, os, vs) = inputs();
    let float = |t: Tensor<Cpu, 2>| t.into_primitive().tensor();
    let reference = smoothing_fold_tensor_ops::<Cpu>(
        float(ls.clone()),
        os.clone().into_primitive().tensor(),
        vs.clone().into_primitive().tensor(),
    );
    let reference_grads = smoothing_fold_backward_tensor_ops::<Cpu>(
        float(ls),
        os.into_primitive().tensor(),
        vs.into_primitive().tensor(),
        float(dl),
        dov.into_primitive().tensor(),
    );
    let back2 = |p| host(Tensor::<Cpu, 2>::from_primitive(burn::tensor::TensorPrimitive::Float(p)));
    let back1 = |p| host(Tensor::<Cpu, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(p)));
    for (name, got, want) in [
        ("l'", host(op.0), back2(reference.0)),
        ("o'", host(op.1), back1(reference.1)),
        ("dL/dl", host(op_grads.0), back2(reference_grads.0)),
        ("dL/do", host(op_grads.1), back1(reference_grads.1)),
    ] {
        for (j, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs() + 1e-5,
                "{name}[{j}]: ndarray op {a}, tensor ops {b}"
            );
        }
    }
}

#[test]
fn shapes_that_do_not_match_are_refused() {
    let n = 4;
    let (l, o) = (vec![-2.0; 3 * n], vec![0.0; n]);
    let err = smoothing_fold(
        tensor::<Cpu, 2>(&l, [n, 3]),
        tensor::<Cpu, 1>(&o, [n]),
        tensor::<Cpu, 1>(&o[..3], [3]),
    )
    .unwrap_err();
    assert_eq!(
        err,
        SmoothingError::Shape {
            name: "variance",
            got: vec![3],
            expected: vec![n],
        }
    );
    let err = smoothing_fold_backward(
        tensor::<Cpu, 2>(&l, [n, 3]),
        tensor::<Cpu, 1>(&o, [n]),
        tensor::<Cpu, 1>(&o, [n]),
        tensor::<Cpu, 2>(&l[..6], [2, 3]),
        tensor::<Cpu, 1>(&o, [n]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("grad_log_scales"), "{err}");
}
