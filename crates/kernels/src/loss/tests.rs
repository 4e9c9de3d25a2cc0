//! The fused photometric loss through the `LossOps` impls on the CPU: the `Autodiff` backward's
//! scaling, f64 central differences through the tensor API, and bad inputs. (The comparison with
//! the same loss written as Burn ops is in the root tests, beside `ember-train`'s `burn_ops`.)

use crate::{LossError, LossOptions, photometric_loss};
use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};

use ember_test_utils::{host, image, image_pair};

type A = Autodiff<crate::backend::Cpu>;
type A64 = Autodiff<crate::backend::Cpu64>;

#[test]
fn backward_scales_by_the_incoming_gradient() {
    let (h, w) = (12, 9);
    let (x, y) = image_pair("backward_scales_by_the_incoming_gradient", h, w);
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
    let (x, y) = image_pair("f64_gradient_matches_central_differences", h, w);
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
    let a = image::<crate::backend::Cpu>(&[0.5; 12], 2, 2);
    let b = image::<crate::backend::Cpu>(&[0.5; 18], 3, 2);
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
