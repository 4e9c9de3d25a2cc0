//! The learning-rate schedule's end-of-run anneal (`optim.anneal_start`, `anneal_factor`).

use ember_train::Trainer;
use ember_train::params::ParamGroup;

use crate::common::{self, B};

/// Every group's rate is its own schedule's until `anneal_start x (steps - 1)`, then falls
/// log-linearly to `anneal_factor` times it at the last step; `anneal_start = 1` leaves every
/// rate as it was, and an out-of-range setting is refused by name.
#[test]
fn the_anneal_scales_every_rate_down_to_its_factor_at_the_last_step() {
    let mut plain = common::tiny_config();
    plain.steps = 101;
    let mut annealed = plain.clone();
    annealed.optim.anneal_start = 0.5;
    annealed.optim.anneal_factor = 0.1;
    let scene = common::scene(&plain);
    let device = Default::default();
    let plain = Trainer::<B>::new(plain, scene.clone(), &device).unwrap();
    let annealed = Trainer::<B>::new(annealed.clone(), scene, &device).unwrap();
    for group in ParamGroup::ALL {
        let ratio = |step| annealed.learning_rate(group, step) / plain.learning_rate(group, step);
        for (step, expected) in [(0, 1.0), (50, 1.0), (75, 0.1f64.sqrt()), (100, 0.1)] {
            assert!(
                (ratio(step) - expected).abs() < 1e-12,
                "{group:?} at step {step}: {} against {expected}",
                ratio(step)
            );
        }
        assert!(
            (51..100).all(|s| ratio(s + 1) < ratio(s)),
            "{group:?} falls"
        );
    }
    let mut off = annealed.config().clone();
    off.optim.anneal_start = 1.0;
    assert!(off.validate().is_ok());
    for (start, factor, key) in [
        (1.5, 0.1, "optim.anneal_start"),
        (-0.1, 0.1, "optim.anneal_start"),
        (0.5, 0.0, "optim.anneal_factor"),
        (0.5, 2.0, "optim.anneal_factor"),
        (0.5, f64::NAN, "optim.anneal_factor"),
    ] {
        let mut bad = off.clone();
        bad.optim.anneal_start = start;
        bad.optim.anneal_factor = factor;
        let error = bad.validate().expect_err("refused").to_string();
        assert!(error.contains(key), "{error}");
    }
}
