//! Several views per step (`batch_size`): the batch is deterministic and resumable like a
//! single view, and the rates follow the square-root scaling rule. (That it learns as well as
//! one view per step is measured on lego, BENCHMARKS.md.)

use ember_field::to_host;
use ember_train::params::ParamGroup;
use ember_train::{TrainConfig, Trainer};

use crate::common::{self, B};

fn batched(config: &TrainConfig, batch: usize) -> TrainConfig {
    config
        .clone()
        .with_overrides(&[format!("batch_size={batch}")])
        .expect("batch_size is a config key")
}

fn parameters(trainer: &Trainer<B>) -> Vec<Vec<f32>> {
    ParamGroup::ALL
        .iter()
        .map(|g| to_host(g.columns(trainer.field()), "p").unwrap())
        .collect()
}

/// A run of two views per step, stopped and resumed from a checkpoint inside a densification
/// interval, ends bit-identical to one that never stopped, and its steps walk the epoch's
/// shuffle two views at a time.
#[test]
fn a_batched_run_resumes_exactly() {
    let config = batched(&common::tiny_config(), 2);
    let scene = common::scene(&config);
    let device = Default::default();
    let mut straight = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut losses = Vec::new();
    for step in 0..config.steps {
        let first_view = straight.view_at(2 * step);
        let report = straight.step().unwrap();
        assert_eq!(report.view, first_view, "step {step} starts at view 2 step");
        losses.push(report.loss.expect("every step reads the loss"));
    }
    assert_ne!(straight.num_gaussians(), 200, "densification ran");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let mut first = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut resumed = Vec::new();
    for _ in 0..7 {
        resumed.push(common::step_loss(&mut first));
    }
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = Trainer::<B>::new(config.clone(), scene, &device).unwrap();
    second.load_checkpoint(&path).unwrap();
    while second.step_count() < config.steps {
        resumed.push(common::step_loss(&mut second));
    }
    assert_eq!(losses, resumed, "the same loss at every step");
    assert_eq!(parameters(&straight), parameters(&second));
}

/// `batch_size = 4` multiplies every learning rate by 2 and changes the run; `batch_size = 1`
/// is the single-view step.
#[test]
fn batches_scale_the_rates_and_change_the_run() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let device = Default::default();
    let mut single = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut four = Trainer::<B>::new(batched(&config, 4), scene, &device).unwrap();
    for group in ParamGroup::ALL {
        for step in [0, 5] {
            let (a, b) = (
                single.learning_rate(group, step),
                four.learning_rate(group, step),
            );
            assert!(
                (b - 2.0 * a).abs() <= 1e-12 * a.abs(),
                "{group:?}: {a} -> {b}"
            );
        }
    }
    let before = parameters(&single);
    assert_eq!(before, parameters(&four), "the same initial field");
    single.step().unwrap();
    four.step().unwrap();
    let (one, batch) = (parameters(&single), parameters(&four));
    assert_ne!(one, before, "a single step changes the field");
    assert_ne!(batch, before, "a batched step changes the field");
    assert_ne!(one, batch, "four views move the field differently from one");
}
