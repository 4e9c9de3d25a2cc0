//! The fused photometric loss (`ember-kernels`) against the same loss written as Burn ops in
//! `ember-train` (value and autodiff gradient). The kernel's own tests are in
//! `crates/kernels/src/loss/tests.rs`.

use burn::backend::Autodiff;
use ember::kernels::{LossOptions, photometric_loss, ssim};
use ember::train::loss::burn_ops;

use crate::common::{host, image, image_pair};

type A = Autodiff<ember::backend::Cpu>;

#[test]
fn fused_loss_matches_burn_ops() {
    let (h, w) = (23, 31);
    let (x, y) = image_pair("fused_loss_matches_burn_ops", h, w);
    for lambda in [0.0, 0.2, 1.0] {
        let options = LossOptions {
            ssim_lambda: lambda,
        };
        let render = image::<A>(&x, h, w).require_grad();
        let fused = photometric_loss(render.clone(), image::<A>(&y, h, w), options).unwrap();
        let fused_grad = host(render.grad(&fused.backward()).unwrap());
        let render = image::<A>(&x, h, w).require_grad();
        let reference = burn_ops::photometric_loss(render.clone(), image::<A>(&y, h, w), lambda);
        let reference_grad = host(render.grad(&reference.clone().backward()).unwrap());
        let (a, b) = (host(fused)[0], host(reference)[0]);
        assert!(
            (a - b).abs() < 1e-5,
            "lambda {lambda}: fused {a} vs burn ops {b}"
        );
        let scale = reference_grad.iter().fold(0.0f64, |m, g| m.max(g.abs()));
        for (k, (g, r)) in fused_grad.iter().zip(&reference_grad).enumerate() {
            assert!(
                (g - r).abs() < 1e-3 * scale,
                "lambda {lambda} value {k}: {g} vs {r}"
            );
        }
    }
    let s = host(ssim(image::<ember::backend::Cpu>(&x, h, w), image(&y, h, w)).unwrap())[0];
    let r = host(burn_ops::ssim(
        image::<ember::backend::Cpu>(&x, h, w),
        image(&y, h, w),
    ))[0];
    assert!((s - r).abs() < 1e-5, "ssim {s} vs {r}");
}
