//! The training loop on wgpu (lavapipe in CI) against the same run on the CPU: 40 steps of a
//! tiny procedural scene with aggressive densification and random backgrounds. The first
//! step's loss agrees (same initialisation, image and background) and so does the held-out
//! PSNR at the end, after densification has reshaped both fields. The rasterizer, the loss and
//! the Adam steps run as CubeCL kernels or Burn's wgpu ops. (Learning itself is tested on the
//! CPU, `procedural.rs`: this config is too short and too aggressive to raise the PSNR.)

use std::sync::Arc;

use burn::tensor::backend::Backend;
use ember_train::{Phase, SplatAutodiffBackend, TrainScene, Trainer};

use crate::common;

use ember_kernels::backend::Cpu;
use ember_kernels::backend::Wgpu;

/// The first step's loss, the held-out PSNR before and after 40 steps, and whether the count
/// of Gaussians changed.
fn run<B: SplatAutodiffBackend>() -> (f32, f32, f32, bool)
where
    B::InnerBackend: Backend<Device = B::Device>,
{
    let mut config = common::tiny_config()
        .with_overrides(&["steps=40", "data.random_background=true"])
        .unwrap();
    config.densify.opacity_reset_interval = 0;
    config.optim.lr_sh_dc = 0.01;
    config.optim.lr_opacity = 0.05;
    let device = B::Device::default();
    let scene = TrainScene::load::<B::InnerBackend>(&config.data, config.seed, &device).unwrap();
    let mut trainer = Trainer::<B>::new(config, Arc::new(scene), &device).unwrap();
    let start = trainer.num_gaussians();
    let before = trainer.evaluate().unwrap().psnr;
    let first = common::step_loss(&mut trainer);
    for _ in 1..40 {
        assert!(common::step_loss(&mut trainer).is_finite());
    }
    let after = trainer.evaluate().unwrap().psnr;
    (first, before, after, trainer.num_gaussians() != start)
}

#[test]
fn tiny_run_on_wgpu_matches_the_cpu() {
    let (cpu_first, cpu_before, cpu_after, _) = run::<burn::backend::Autodiff<Cpu>>();
    let (first, before, after, densified) = run::<burn::backend::Autodiff<Wgpu>>();
    assert!(
        (first - cpu_first).abs() <= 1e-3 * cpu_first.abs(),
        "first loss: wgpu {first} vs cpu {cpu_first}"
    );
    assert!(densified, "densification ran on wgpu");
    assert!(
        (before - cpu_before).abs() < 1e-3,
        "the initial field: wgpu {before} vs cpu {cpu_before} dB"
    );
    assert!(
        (after - cpu_after).abs() < 0.05,
        "held-out PSNR after 40 steps: wgpu {after} vs cpu {cpu_after}"
    );
}

/// With phase sync the wgpu steps wait for the device after each phase (a real wait there, a
/// no-op on the CPU) and still train.
#[test]
fn phase_synced_steps_run_on_wgpu() {
    type B = burn::backend::Autodiff<Wgpu>;
    let config = common::tiny_config();
    let device = Default::default();
    let scene = TrainScene::load::<Wgpu>(&config.data, config.seed, &device).unwrap();
    let mut trainer = Trainer::<B>::new(config, Arc::new(scene), &device).unwrap();
    trainer.set_phase_sync(true);
    for _ in 0..3 {
        assert!(common::step_loss(&mut trainer).is_finite());
    }
    for phase in Phase::STEP {
        assert!(trainer.times().get(phase) > 0.0, "{} timed", phase.name());
    }
}

/// Between two reads of the loss a training step waits for nothing on wgpu: no read of device
/// memory (the tile lists are sized from earlier counts, read with the loss), while the device
/// runs its kernels. Densification observes every step; it refines (and reads) only past the
/// steps counted here.
#[test]
fn steps_between_loss_reads_do_not_wait_for_the_device() {
    type B = burn::backend::Autodiff<Wgpu>;
    let counter = ember_kernels::count_device_activity().expect("no other tracing subscriber");
    let config = common::tiny_config()
        .with_overrides(&[
            "steps=100",
            "output.loss_every=5",
            "output.log_every=1000",
            "densify.start=3",
            "densify.interval=50",
        ])
        .unwrap();
    let device = Default::default();
    let scene = TrainScene::load::<Wgpu>(&config.data, config.seed, &device).unwrap();
    let mut trainer = Trainer::<B>::new(config, Arc::new(scene), &device).unwrap();
    // Steps 1 to 5: the first sizes the lists exactly (and reads the count), the fifth reads
    // the loss.
    for step in 1..=5 {
        let report = trainer.step().unwrap();
        assert_eq!(
            report.loss.is_some(),
            step == 5,
            "step {step} reads the loss"
        );
    }
    assert!(
        trainer.tile_list_stats().capacity > 0,
        "the lists are sized"
    );
    let reads = counter.reads_on_this_thread();
    let launches = counter.now().launches;
    for step in 6..=9 {
        let report = trainer.step().unwrap();
        assert!(report.loss.is_none(), "step {step} reads nothing");
    }
    assert_eq!(
        counter.reads_on_this_thread() - reads,
        0,
        "steps 6 to 9 read the device"
    );
    assert!(
        counter.now().launches > launches,
        "steps 6 to 9 launched kernels"
    );
    let report = trainer.step().unwrap();
    assert!(
        report.loss.is_some_and(f32::is_finite),
        "step 10 reads the loss"
    );
    assert!(
        counter.reads_on_this_thread() > reads,
        "step 10 read the loss back"
    );
}
