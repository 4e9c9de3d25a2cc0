//! A run resumed from a checkpoint equals an uninterrupted one, bit for bit on the CPU (also
//! with each photo's appearance, with refined camera poses and with the 3D smoothing filter), and so does a run that waits
//! for the device after every phase; a NaN loss stops the run and leaves
//! the last checkpoint intact.

use ember_field::to_host;
use ember_train::checkpoint::CheckpointFile;
use ember_train::params::ParamGroup;
use ember_train::{Phase, TrainError, Trainer};

use crate::common::{self, B};

fn state(trainer: &Trainer<B>) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for group in ParamGroup::ALL {
        let adam = trainer.adam();
        out.push(to_host(group.columns(trainer.field()), "p").unwrap());
        out.push(to_host(group.columns(&adam.exp_avg), "m").unwrap());
        out.push(to_host(group.columns(&adam.exp_avg_sq), "v").unwrap());
        out.push(vec![adam.steps[group.index()] as f32]);
    }
    for (_, t) in trainer.strategy().state() {
        out.push(to_host(t, "strategy").unwrap());
    }
    if let Some(appearance) = trainer.appearance() {
        let saved = appearance.state().unwrap();
        out.extend([saved.params, saved.exp_avg, saved.exp_avg_sq]);
        out.push(saved.steps.iter().map(|&s| s as f32).collect());
    }
    if let Some(motion) = trainer.camera_motion() {
        let moved = [
            motion.mean_degrees,
            motion.max_degrees,
            motion.mean_shift,
            motion.max_shift,
        ];
        out.push(moved.iter().map(|&m| m as f32).collect());
    }
    out
}

#[test]
fn phase_sync_changes_timing_not_results() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let device = Default::default();
    let mut plain = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut synced = Trainer::<B>::new(config.clone(), scene, &device).unwrap();
    synced.set_phase_sync(true);
    for _ in 0..config.steps {
        assert_eq!(
            common::step_loss(&mut plain),
            common::step_loss(&mut synced)
        );
    }
    assert_eq!(state(&plain), state(&synced), "identical final state");
    for phase in Phase::STEP {
        assert!(synced.times().get(phase) > 0.0, "{} timed", phase.name());
    }
}

#[test]
fn resume_equals_uninterrupted() {
    resume_equals_uninterrupted_with(common::tiny_config());
}

#[test]
fn resume_with_the_3d_filter_equals_uninterrupted() {
    resume_equals_uninterrupted_with(
        common::tiny_config()
            .with_overrides(&["raster.antialiased=true"])
            .unwrap(),
    );
}

#[test]
fn resume_with_each_photos_appearance_equals_uninterrupted() {
    let config = common::tiny_config()
        .with_overrides(&["appearance.kind=exposure"])
        .unwrap();
    resume_equals_uninterrupted_with(config.clone());
    let grid = common::tiny_config()
        .with_overrides(&[
            "appearance.kind=bilateral_grid",
            "appearance.grid=[2, 3, 4]",
        ])
        .unwrap();
    resume_equals_uninterrupted_with(grid.clone());
    // A checkpoint and a run that disagree on the appearance are refused, naming it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let device = Default::default();
    let mut with = Trainer::<B>::new(config.clone(), common::scene(&config), &device).unwrap();
    with.step().unwrap();
    with.save_checkpoint(&path).unwrap();
    let plain = common::tiny_config();
    let mut without = Trainer::<B>::new(plain.clone(), common::scene(&plain), &device).unwrap();
    let e = without.load_checkpoint(&path).unwrap_err();
    assert!(e.to_string().contains("appearance"), "{e}");
    assert_eq!(without.step_count(), 0, "nothing changed");
    // ... and so are an exposure checkpoint and a bilateral-grid run.
    let mut other = Trainer::<B>::new(grid.clone(), common::scene(&grid), &device).unwrap();
    let e = other.load_checkpoint(&path).unwrap_err();
    assert!(
        e.to_string().contains("appearance parameters per photo"),
        "{e}"
    );
    assert_eq!(other.step_count(), 0, "nothing changed");
}

#[test]
fn resume_with_refined_poses_equals_uninterrupted() {
    let config = common::tiny_config()
        .with_overrides(&["poses.refine=true", "poses.start=2"])
        .unwrap();
    resume_equals_uninterrupted_with(config.clone());
    // A checkpoint and a run that disagree on refining the poses are refused, naming them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    let device = Default::default();
    let mut with = Trainer::<B>::new(config.clone(), common::scene(&config), &device).unwrap();
    for _ in 0..3 {
        with.step().unwrap();
    }
    with.save_checkpoint(&path).unwrap();
    let plain = common::tiny_config();
    let mut without = Trainer::<B>::new(plain.clone(), common::scene(&plain), &device).unwrap();
    let e = without.load_checkpoint(&path).unwrap_err();
    assert!(e.to_string().contains("poses.refine"), "{e}");
    assert_eq!(without.step_count(), 0, "nothing changed");
}

fn resume_equals_uninterrupted_with(config: ember_train::TrainConfig) {
    let scene = common::scene(&config);
    let device = Default::default();
    let mut straight = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut losses = Vec::new();
    for _ in 0..config.steps {
        losses.push(common::step_loss(&mut straight));
    }

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    // Stop at step 7: inside a densification interval (accumulators non-zero), after a
    // refinement (step 4) and before the opacity reset (step 8) and an SH band change (step 6).
    let mut first = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let mut resumed_losses = Vec::new();
    for _ in 0..7 {
        resumed_losses.push(common::step_loss(&mut first));
    }
    first.save_checkpoint(&path).unwrap();
    drop(first);
    let mut second = Trainer::<B>::new(config.clone(), scene, &device).unwrap();
    second.load_checkpoint(&path).unwrap();
    assert_eq!(second.step_count(), 7);
    while second.step_count() < config.steps {
        resumed_losses.push(common::step_loss(&mut second));
    }
    assert_eq!(losses, resumed_losses, "the same loss at every step");
    assert_eq!(state(&straight), state(&second), "identical final state");
    assert_ne!(
        straight.num_gaussians(),
        200,
        "densification changed the count"
    );
}

#[test]
fn non_finite_loss_stops_with_the_checkpoint_intact() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let mut trainer = Trainer::<B>::new(config, scene, &Default::default()).unwrap();
    for _ in 0..3 {
        trainer.step().unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("last.safetensors");
    trainer.save_checkpoint(&path).unwrap();
    let saved = std::fs::read(&path).unwrap();

    // Poison the colours.
    let mut field = trainer.field().clone();
    let dc = field.sh_dc.val();
    let n = dc.dims()[0];
    let mut values = to_host(dc, "dc").unwrap();
    // (The projection culls Gaussians with non-finite parameters; a huge finite colour
    // overflows in the loss, as a diverging run would.)
    values.fill(1e30);
    field.sh_dc = burn::module::Param::from_tensor(burn::tensor::Tensor::from_data(
        burn::tensor::TensorData::new(values, [n, 1, 3]),
        &Default::default(),
    ));
    trainer.replace_field(field).unwrap();
    let err = trainer.step().unwrap_err();
    match &err {
        TrainError::NonFiniteLoss { step, loss, .. } => {
            assert_eq!(*step, 4);
            assert!(!loss.is_finite());
        }
        other => panic!("unexpected error {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("step 4") && message.contains("not applied"),
        "{message}"
    );
    assert_eq!(trainer.step_count(), 3, "the bad step was not counted");
    assert_eq!(std::fs::read(&path).unwrap(), saved, "checkpoint untouched");
    // ... and it still loads into a fresh trainer.
    let config = common::tiny_config();
    let mut fresh =
        Trainer::<B>::new(config.clone(), common::scene(&config), &Default::default()).unwrap();
    fresh.load_checkpoint(&path).unwrap();
    assert_eq!(fresh.step_count(), 3);
    fresh.step().unwrap();
}

#[test]
fn bad_checkpoints_are_refused() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let mut trainer = Trainer::<B>::new(config, scene, &Default::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.safetensors");
    std::fs::write(&path, b"not a checkpoint").unwrap();
    let err = trainer.load_checkpoint(&path).unwrap_err();
    assert!(err.to_string().contains("junk.safetensors"), "{err}");
    let err = trainer
        .load_checkpoint(&dir.path().join("absent"))
        .unwrap_err();
    assert!(matches!(err, TrainError::Io { .. }), "{err}");
    assert_eq!(trainer.step_count(), 0);

    // A checkpoint of a run with other settings: parsed on its own, then refused by this
    // trainer with what differs and what to do, and nothing changes.
    let before = state(&trainer);
    for (key, value, expected) in [
        ("densify.strategy", "none", "densification strategy"),
        ("init.sh_degree", "2", "SH coefficients beyond DC"),
    ] {
        let other = common::tiny_config()
            .with_overrides(&[format!("{key}={value}")])
            .unwrap();
        let mut writer =
            Trainer::<B>::new(other.clone(), common::scene(&other), &Default::default()).unwrap();
        writer.step().unwrap();
        let path = dir.path().join(format!("{value}.safetensors"));
        writer.save_checkpoint(&path).unwrap();
        let file = CheckpointFile::parse(&std::fs::read(&path).unwrap(), &path).unwrap();
        assert_eq!(file.step, 1);
        assert_eq!(file.gaussians, writer.num_gaussians());
        assert_eq!(file.groups.len(), ParamGroup::ALL.len());
        let err = trainer.load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            err.contains(expected) && err.contains("resume with the config"),
            "{err}"
        );
        assert!(
            state(&trainer) == before,
            "a refused checkpoint changed the trainer"
        );
    }
}
