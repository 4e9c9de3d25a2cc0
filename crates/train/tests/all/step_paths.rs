//! The training step's two paths (`ember_train::pass`): the ops' forwards and backwards called
//! directly (the default) and the same photometric loss through Burn's autodiff
//! (`Trainer::set_loss`) give the same bits on the CPU: a batch of one and of two, with the
//! regularisers on, through densification, opacity resets and SH bands switching on, with and
//! without each photo's appearance learned (exposure, bilateral grid), with and without masks (the procedural photos'
//! alpha as their masks), and coarse to fine (the first steps on photos shrunk 4x and 2x).

use ember_field::to_host;
use ember_train::params::ParamGroup;
use ember_train::{TrainConfig, Trainer};

use crate::common::{self, B};

/// Every step's loss and PSNR, and the parameters and densification state at the end.
struct Run {
    steps: Vec<(f32, Option<f32>)>,
    state: Vec<Vec<f32>>,
}

fn run(config: &TrainConfig, autodiff: bool) -> Run {
    let scene = common::scene(config);
    let mut trainer = Trainer::<B>::new(config.clone(), scene, &Default::default()).unwrap();
    if autodiff {
        let options = ember_train::loss::LossOptions {
            ssim_lambda: config.loss.ssim_lambda,
        };
        trainer.set_loss(Some(Box::new(ember_train::pass::photometric::<B>(options))));
    }
    let mut steps = Vec::new();
    for _ in 0..config.steps {
        let report = trainer.step().unwrap();
        steps.push((report.loss.expect("every step reads the loss"), report.psnr));
    }
    let mut state: Vec<Vec<f32>> = ParamGroup::ALL
        .iter()
        .map(|g| to_host(g.columns(trainer.field()), "parameters").unwrap())
        .collect();
    for (_, values) in trainer.strategy().state() {
        state.push(to_host(values, "densification state").unwrap());
    }
    if let Some(appearance) = trainer.appearance() {
        state.push(to_host(appearance.params(), "appearance").unwrap());
    }
    Run { steps, state }
}

#[test]
fn the_direct_step_matches_the_autodiff_step_bit_for_bit() {
    for (batch, appearance, masked, coarse) in [
        (1, "none", false, 1),
        (2, "none", false, 1),
        (1, "exposure", false, 1),
        (2, "exposure", false, 1),
        (1, "none", true, 1),
        (2, "exposure", true, 1),
        (1, "bilateral_grid", false, 1),
        (2, "bilateral_grid", true, 1),
        (1, "none", false, 4),
        (2, "bilateral_grid", true, 4),
    ] {
        let config = common::tiny_config()
            .with_overrides(&[
                format!("batch_size={batch}"),
                "loss.opacity_reg=0.01".to_string(),
                "loss.scale_reg=0.01".to_string(),
                "output.loss_every=1".to_string(),
                format!("appearance.kind={appearance}"),
                "appearance.start=3".to_string(),
                "appearance.grid=[3, 4, 5]".to_string(),
                format!("data.alpha_as_mask={masked}"),
                format!("resolution.start={coarse}"),
                "resolution.full_at=8".to_string(),
            ])
            .unwrap();
        let direct = run(&config, false);
        let autodiff = run(&config, true);
        assert!(
            direct.steps.iter().any(|(_, psnr)| psnr.is_some()),
            "PSNR read"
        );
        assert_eq!(
            direct.steps, autodiff.steps,
            "batch {batch}, appearance {appearance}, masked {masked}, coarse {coarse}: losses and \
             PSNRs per step"
        );
        assert_eq!(
            direct.state, autodiff.state,
            "batch {batch}, appearance {appearance}, masked {masked}, coarse {coarse}: parameters \
             and densification state"
        );
        if appearance != "none" {
            let learned = direct.state.last().expect("the appearance");
            assert!(learned.iter().any(|&p| p != 0.0), "the appearance learned");
        }
    }
}

#[test]
fn coarse_steps_train_on_the_shrunk_photos() {
    let config = |start: u32| {
        common::tiny_config()
            .with_overrides(&[
                format!("resolution.start={start}"),
                "resolution.full_at=8".to_string(),
                "output.log_every=1".to_string(),
            ])
            .unwrap()
    };
    let full = run(&config(1), false);
    let coarse = run(&config(4), false);
    // The first step renders the same field: only the size it is compared at differs.
    assert_ne!(full.steps[0], coarse.steps[0]);
    assert!(
        coarse
            .steps
            .iter()
            .all(|(loss, psnr)| loss.is_finite() && psnr.is_some_and(f32::is_finite)),
        "{:?}",
        coarse.steps
    );
}
