//! Visible-only Adam (`optim.visible_adam`): Gaussians no view of a step draws keep their
//! parameters and moments, through the whole training step, on the CPU and on wgpu.

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};
use ember_field::{GaussianField, to_host};
use ember_train::{SplatAutodiffBackend, Trainer};

use crate::common;

/// Every parameter of `field`'s rows `rows`, flattened in order.
fn rows_of<B: Backend>(field: &GaussianField<B>, rows: std::ops::Range<usize>) -> Vec<f32> {
    let device = field.means.device();
    let index = Tensor::<B, 1, Int>::arange(rows.start as i64..rows.end as i64, &device);
    let part = field.select(&index);
    let mut values = to_host(part.means.val(), "means").unwrap();
    values.extend(to_host(part.quats.val(), "quats").unwrap());
    values.extend(to_host(part.log_scales.val(), "log_scales").unwrap());
    values.extend(to_host(part.opacity_logits.val(), "opacity").unwrap());
    values.extend(to_host(part.sh_dc.val(), "sh_dc").unwrap());
    values.extend(to_host(part.sh_rest.val(), "sh_rest").unwrap());
    values
}

/// The tiny scene's initial field with 5 more Gaussians that no view draws (opacity below
/// 1/255: culled everywhere), and a loss whose regularisers give every Gaussian a gradient.
/// With `optim.visible_adam` those 5 keep every parameter and zero moments over 6 steps while
/// the drawn ones train; without it the regularisers move them.
fn undrawn_gaussians_keep_their_parameters_and_moments<B: SplatAutodiffBackend>()
where
    B::InnerBackend: Backend<Device = B::Device>,
{
    let run = |visible_adam: bool| {
        let config = common::tiny_config()
            .with_overrides(&[
                "densify.strategy=\"none\"".to_string(),
                "loss.opacity_reg=0.01".to_string(),
                "loss.scale_reg=0.01".to_string(),
                format!("optim.visible_adam={visible_adam}"),
            ])
            .unwrap();
        let scene = common::scene(&config);
        let device = B::Device::default();
        let base = ember_train::trainer::initial_field::<B::InnerBackend>(&config, &scene, &device)
            .unwrap();
        let drawn = base.num_gaussians();
        let mut hidden = base.select(&Tensor::arange(0..5, &device));
        hidden.opacity_logits = Param::from_tensor(Tensor::full([5], -10.0, &device));
        let field = base.cat(hidden).unwrap();
        let before = rows_of(&field, drawn..drawn + 5);
        let drawn_before = rows_of(&field, 0..drawn);
        let mut trainer = Trainer::<B>::from_field(config, scene, field, &device).unwrap();
        for _ in 0..6 {
            trainer.step().unwrap();
        }
        let hidden_after = rows_of(trainer.field(), drawn..drawn + 5);
        let hidden_moments = rows_of(&trainer.adam().exp_avg, drawn..drawn + 5);
        assert_ne!(
            rows_of(trainer.field(), 0..drawn),
            drawn_before,
            "nothing trained"
        );
        (before, hidden_after, hidden_moments)
    };
    let (before, after, moments) = run(true);
    assert_eq!(
        after, before,
        "an undrawn Gaussian changed under visible_adam"
    );
    assert!(moments.iter().all(|m| *m == 0.0), "its moments moved");
    let (before, after, moments) = run(false);
    assert_ne!(
        after, before,
        "the regularisers should move undrawn Gaussians in plain Adam"
    );
    assert!(moments.iter().any(|m| *m != 0.0));
}

#[test]
fn gaussians_no_view_draws_keep_their_parameters_and_moments() {
    undrawn_gaussians_keep_their_parameters_and_moments::<common::B>();
}

#[cfg(feature = "wgpu")]
#[test]
fn gaussians_no_view_draws_keep_their_parameters_and_moments_on_wgpu() {
    undrawn_gaussians_keep_their_parameters_and_moments::<
        burn::backend::Autodiff<ember_kernels::backend::Wgpu>,
    >();
}
