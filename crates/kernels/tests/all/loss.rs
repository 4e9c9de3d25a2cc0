//! The fused photometric loss through the `LossOps` impls on the CPU: the `Autodiff` backward's
//! scaling, f64 central differences through the tensor API, and bad inputs. (The comparison with
//! the same loss written as Burn ops is in the root tests, beside `ember-train`'s `burn_ops`.)

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{Tensor, TensorData};
use ember_kernels::{LossError, LossOptions, photometric_loss};

use crate::common::{fresh_rng, uniform};

type A = Autodiff<NdArray<f32>>;
type A64 = Autodiff<NdArray<f64>>;

/// A render and a correlated target, `[h, w, 3]`, values in `[0, 1]`.
fn pair(test: &str, h: usize, w: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = fresh_rng(test);
    let n = h * w * 3;
    let x = uniform(&mut rng, n, 0.0, 1.0);
    let noise = uniform(&mut rng, n, -0.3, 0.3);
    let y = x
        .iter()
        .zip(&noise)
        .map(|(a, b)| (a + b).clamp(0.0, 1.0) as f32);
    (x.iter().map(|&v| v as f32).collect(), y.collect())
}

fn image<B: burn::tensor::backend::Backend>(v: &[f32], h: usize, w: usize) -> Tensor<B, 3> {
    let device = Default::default();
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(
        TensorData::new(v.to_vec(), [h, w, 3]).convert_dtype(dtype),
        (&device, dtype),
    )
}

fn host<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec().unwrap()
}

#[test]
fn backward_scales_by_the_incoming_gradient() {
    let (h, w) = (12, 9);
    let (x, y) = pair("backward_scales_by_the_incoming_gradient", h, w);
    let options = LossOptions::default();
    let grad_of = |factor: f64| {
        let render = image::<A>(&x, h, w).require_grad();
        let loss = photometric_loss(render.clone(), image::<A>(&y, h, w), options).unwrap();
        host(render.grad(&(loss * factor).backward()).unwrap())
    };
    let (one, three) = (grad_of(1.0), grad_of(-3.0));
    assert!(one.iter().any(|g| *g != 0.0));
    for (a, b) in one.iter().zip(&three) {
        assert!((b + 3.0 * a).abs() <= 1e-6 * a.abs().max(1e-6), "{a} {b}");
    }
}

#[test]
fn f64_gradient_matches_central_differences() {
    let (h, w) = (7, 10);
    let (x, y) = pair("f64_gradient_matches_central_differences", h, w);
    let (x, y): (Vec<f64>, Vec<f64>) = (
        x.iter().map(|&v| v.into()).collect(),
        y.iter().map(|&v| v.into()).collect(),
    );
    let device = Default::default();
    let t = |v: &[f64]| {
        Tensor::<A64, 3>::from_data(
            TensorData::new(v.to_vec(), [h, w, 3]),
            (&device, burn::tensor::DType::F64),
        )
    };
    let options = LossOptions { ssim_lambda: 0.4 };
    let render = t(&x).require_grad();
    let loss = photometric_loss(render.clone(), t(&y), options).unwrap();
    let grad = host(render.grad(&loss.backward()).unwrap());
    let value = |v: &[f64]| host(photometric_loss(t(v), t(&y), options).unwrap())[0];
    let eps = 1e-6;
    for k in (0..x.len()).step_by(7) {
        let (mut plus, mut minus) = (x.clone(), x.clone());
        plus[k] += eps;
        minus[k] -= eps;
        let fd = (value(&plus) - value(&minus)) / (2.0 * eps);
        assert!(
            (grad[k] - fd).abs() < 1e-9 + 1e-5 * fd.abs(),
            "value {k}: {} vs {fd}",
            grad[k]
        );
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let a = image::<NdArray<f32>>(&[0.5; 12], 2, 2);
    let b = image::<NdArray<f32>>(&[0.5; 18], 3, 2);
    assert_eq!(
        photometric_loss(a.clone(), b, LossOptions::default()).unwrap_err(),
        LossError::ShapeMismatch {
            rendered: [2, 2, 3],
            target: [3, 2, 3]
        }
    );
    let bad = LossOptions { ssim_lambda: -0.1 };
    assert_eq!(
        photometric_loss(a.clone(), a, bad).unwrap_err(),
        LossError::Lambda(-0.1)
    );
}
