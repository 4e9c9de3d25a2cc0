//! Data-parallel training (`ember_train::parallel`): two peers sharing a batch of two views
//! against one device batching the same two views, on the CPU and on wgpu; a whole run with
//! its outputs; and resuming its checkpoint on another number of devices.
//!
//! Burn's collective server is one per backend type and process, so each backend's checks run
//! in one test, one after another.

use std::sync::Arc;

use burn::tensor::backend::Backend;
use ember_field::to_host;
use ember_train::parallel::collective_config;
use ember_train::params::ParamGroup;
use ember_train::{
    Quiet, SplatAutodiffBackend, TrainConfig, TrainError, TrainScene, Trainer, run,
    run_data_parallel,
};

use crate::common;

/// The tiny config (densification early and often) with a batch of two views, on `peers`
/// devices.
fn config(peers: usize, steps: usize) -> TrainConfig {
    let devices = vec!["0"; peers].join(",");
    common::tiny_config()
        .with_overrides(&[
            format!("steps={steps}"),
            "batch_size=2".to_string(),
            format!("distributed.devices=[{devices}]"),
        ])
        .expect("valid overrides")
}

fn parameters<B: SplatAutodiffBackend>(trainer: &Trainer<B>) -> Vec<Vec<f32>> {
    ParamGroup::ALL
        .iter()
        .map(|g| to_host(g.columns(trainer.field()), "p").unwrap())
        .collect()
}

/// The largest difference over the largest magnitude, over all parameter groups.
fn relative_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "parameter counts differ");
        let scale = y.iter().fold(1e-12f64, |m, v| m.max(f64::from(v.abs())));
        let diff = x
            .iter()
            .zip(y)
            .fold(0.0f64, |m, (p, q)| m.max(f64::from((p - q).abs())));
        worst = worst.max(diff / scale);
    }
    worst
}

/// `steps` steps of `config` (with `overrides`) on `devices[0]`, and on two peers (threads) on
/// `devices` sharing each step's two views: the parameters of both peers are equal, the first
/// step's loss (the same field and views) within 1e-5 of the one device's, and with
/// `tolerance` the last loss within 1% and the parameters within `tolerance` of the one
/// device's.
fn two_peers_match_one_device<B: SplatAutodiffBackend>(
    label: &str,
    devices: [B::Device; 2],
    steps: usize,
    overrides: &[&str],
    tolerance: Option<f64>,
) where
    B::InnerBackend: Backend<Device = B::Device>,
    B::Device: Send + 'static,
{
    let device = devices[0].clone();
    let single_config = config(1, steps).with_overrides(overrides).unwrap();
    let scene = Arc::new(
        TrainScene::load::<B::InnerBackend>(&single_config.data, single_config.seed, &device)
            .unwrap(),
    );
    let mut single = Trainer::<B>::new(single_config.clone(), scene.clone(), &device).unwrap();
    let mut single_losses = Vec::new();
    for _ in 0..steps {
        single_losses.push(single.step().unwrap().loss.unwrap());
    }

    let parallel_config = config(2, steps).with_overrides(overrides).unwrap();
    let collective = collective_config(&parallel_config).expect("one node");
    let peers: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(rank, device)| {
            let (config, scene, collective) =
                (parallel_config.clone(), scene.clone(), collective.clone());
            std::thread::spawn(move || -> (Vec<Vec<f32>>, usize, Vec<Option<f32>>) {
                let mut trainer = Trainer::<B>::new(config, scene, &device).unwrap();
                trainer.join_peers(rank, collective).unwrap();
                let mut losses = Vec::new();
                for _ in 0..steps {
                    losses.push(trainer.step().unwrap().loss);
                }
                trainer.leave_peers().unwrap();
                (parameters(&trainer), trainer.num_gaussians(), losses)
            })
        })
        .collect();
    let results: Vec<_> = peers.into_iter().map(|p| p.join().unwrap()).collect();
    let (p0, n0, losses0) = &results[0];
    let (p1, n1, losses1) = &results[1];
    assert_eq!(n0, n1, "{label}: the replicas hold as many Gaussians");
    assert_eq!(p0, p1, "{label}: the replicas are identical");
    assert_eq!(
        losses0, losses1,
        "{label}: every peer reports the batch's loss"
    );
    assert_eq!(
        *n0,
        single.num_gaussians(),
        "{label}: densification decided the same"
    );
    let (one, two) = (single_losses[0], losses0[0].unwrap());
    assert!(
        (one - two).abs() <= 1e-5 * one.abs(),
        "{label}: first loss {two} on two peers, {one} on one device"
    );
    assert!(
        losses0.iter().all(|l| l.is_some_and(f32::is_finite)),
        "{label}: finite losses {losses0:?}"
    );
    let difference = relative_difference(p0, &parameters(&single));
    println!("{label}: two peers against one device, relative difference {difference:.2e}");
    if let Some(tolerance) = tolerance {
        let (one, two) = (single_losses[steps - 1], losses0[steps - 1].unwrap());
        assert!(
            (one - two).abs() <= 0.01 * one.abs(),
            "{label}: last loss {two} on two peers, {one} on one device"
        );
        assert!(
            difference <= tolerance,
            "{label}: two peers against one device: relative difference {difference:e}"
        );
    }
}

#[test]
fn data_parallel_on_the_cpu() {
    type B = common::B;
    // On the CPU the two ways add the same numbers in the same pairs: within float rounding
    // of each other (summed per peer, then across peers), here identical or nearly so.
    let cpu = Default::default();
    two_peers_match_one_device::<B>("cpu", [cpu, cpu], 50, &[], Some(1e-5));
    // Visible-only Adam: the replicas update the Gaussians any view of the batch drew, not
    // only their own views' (they would drift apart).
    two_peers_match_one_device::<B>(
        "cpu, visible_adam",
        [cpu, cpu],
        20,
        &["optim.visible_adam=true"],
        Some(1e-5),
    );
    // Error-driven MCMC: each peer scores two of the four views before a refinement and the
    // scores are summed over the peers, so both draw the same copies.
    two_peers_match_one_device::<B>(
        "cpu, error-driven mcmc",
        [cpu, cpu],
        20,
        &[
            "densify.strategy=mcmc",
            "densify.opacity_reset_interval=0",
            "densify.max_gaussians=300",
            "densify.error_weight=1",
            "densify.error_views=4",
        ],
        Some(1e-5),
    );

    // A whole run on two peers writes its outputs once; its checkpoint resumes on one device
    // and on two.
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let device = Default::default();
    let half = config(2, 6);
    let scene = common::scene(&half);
    let summary = run_data_parallel::<B>(
        &half,
        scene.clone(),
        &first,
        None,
        &[device, device],
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(summary.steps, 6);
    assert!(first.join("metrics.jsonl").is_file());
    assert!(first.join("splats.ply").is_file());
    let checkpoint = first.join("checkpoint.safetensors");

    let alone = dir.path().join("alone");
    let resumed_alone = run::<B>(
        &config(1, 12),
        scene.clone(),
        &alone,
        Some(&checkpoint),
        &device,
        &mut Quiet,
    )
    .unwrap();
    let pair = dir.path().join("pair");
    let resumed_pair = run_data_parallel::<B>(
        &config(2, 12),
        scene.clone(),
        &pair,
        Some(&checkpoint),
        &[device, device],
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(resumed_alone.steps, 12);
    assert_eq!(resumed_pair.steps, 12);
    assert_eq!(resumed_alone.gaussians, resumed_pair.gaussians);
    let psnr = |s: &ember_train::RunSummary| s.final_eval.as_ref().map(|e| e.psnr).unwrap();
    assert!(
        (psnr(&resumed_alone) - psnr(&resumed_pair)).abs() < 1e-3,
        "resumed on one device {} dB, on two {} dB",
        psnr(&resumed_alone),
        psnr(&resumed_pair)
    );

    // A training-time budget spent by the first step: peer 0 votes to stop, and both peers
    // end on the step they agree on, the next one, with the final evaluation and outputs.
    let budget = config(2, 12).with_overrides(&["max_seconds=1e-9"]).unwrap();
    let out = dir.path().join("budget");
    let cut = run_data_parallel::<B>(
        &budget,
        scene.clone(),
        &out,
        None,
        &[device, device],
        &mut Quiet,
    )
    .unwrap();
    assert_eq!((cut.steps, cut.out_of_time), (2, true));
    assert_eq!(cut.final_eval.as_ref().map(|e| e.step), Some(2));
    assert!(out.join("splats.ply").is_file());

    // Too few devices for the config is refused before anything runs.
    match run_data_parallel::<B>(
        &config(2, 12),
        scene,
        &dir.path().join("refused"),
        None,
        &[device],
        &mut Quiet,
    ) {
        Err(TrainError::Config { message, .. }) => assert!(message.contains("devices")),
        other => panic!("expected a config error, got {:?}", other.map(|s| s.steps)),
    }
    assert!(!dir.path().join("refused").exists());

    // Two replicas that differ (another seed's initial field) are caught at the first check by
    // both peers: each sees every hash, so neither waits for the other in the next step.
    let diverged = config(2, 1);
    let collective = collective_config(&diverged).expect("one node");
    let peers: Vec<_> = [5u64, 6]
        .into_iter()
        .enumerate()
        .map(|(rank, seed)| {
            let mut config = diverged.clone();
            config.seed = seed;
            let (scene, collective) = (common::scene(&config), collective.clone());
            std::thread::spawn(move || -> Result<(), TrainError> {
                let mut trainer = Trainer::<B>::new(config, scene, &Default::default())?;
                trainer.join_peers(rank, collective)?;
                trainer.step()?;
                trainer.leave_peers()
            })
        })
        .collect();
    let outcomes: Vec<_> = peers.into_iter().map(|p| p.join().unwrap()).collect();
    burn::collective::reset_collective::<ember_train::trainer::Inner<B>>();
    for (rank, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Err(TrainError::ReplicasDiverged {
                step: 1,
                peer: 1,
                hash,
                reference,
            }) => assert_ne!(hash, reference),
            other => panic!("expected peer {rank} to see peer 1 diverge, got {other:?}"),
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn data_parallel_on_wgpu() {
    // Burn's collective engine 0.21 cannot move tensors between two wgpu devices (the wgpu
    // server has no device-to-device transfer), and two peers on one *fused* device mix up the
    // device's fusion streams: wgpu peers share one device on the unfused cube backend.
    type Wgpu = burn::backend::Autodiff<
        burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>,
    >;
    let device = burn::backend::wgpu::WgpuDevice::DefaultDevice;
    // The backward adds with atomics in no fixed order on a GPU, so each run's sums differ in
    // the last bits: Adam's first steps turn such differences in near-zero gradients into
    // whole steps of opposite sign (the last loss of 10 steps was seen 6% apart), and
    // densification into different clones. So the checks are the replicas' equality and the
    // first step's loss, over 10 steps without densification (lavapipe is slow).
    two_peers_match_one_device::<Wgpu>(
        "wgpu",
        [device.clone(), device],
        10,
        &["densify.strategy=\"none\""],
        None,
    );
}
