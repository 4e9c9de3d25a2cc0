//! The procedural scene: a whole run through `run()` (the PSNR rises and every output is
//! written), and random backgrounds.

use ember_train::{Quiet, Trainer, run};

use crate::common::{self, B};

#[test]
fn run_learns_and_writes_every_output() {
    let mut config = common::tiny_config();
    config.steps = 80;
    config.eval.every = 20;
    config.densify.start = 20;
    config.densify.interval = 20;
    config.densify.opacity_reset_interval = 0;
    config.densify.grad_threshold = 2e-4;
    // Short runs need faster colours and opacities than the 30k-step 3DGS rates.
    config.optim.lr_sh_dc = 0.01;
    config.optim.lr_opacity = 0.05;
    config.optim.lr_scales = 0.01;
    let scene = common::scene(&config);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut untrained =
        ember_train::Trainer::<B>::new(config.clone(), scene.clone(), &Default::default()).unwrap();
    let before = untrained.evaluate().unwrap().psnr;
    let summary = run::<B>(&config, scene, &out, None, &Default::default(), &mut Quiet).unwrap();
    assert_eq!(summary.steps, 80);
    assert_eq!(summary.evals.len(), 4);
    // Every evaluation of a run follows a step, so no render is reused.
    assert_eq!(
        (summary.eval_cache.hits, summary.eval_cache.misses),
        (0, 4 * 3)
    );
    let after = summary.final_eval.as_ref().expect("held-out views").psnr;
    assert!(after > before + 2.0, "PSNR {before:.2} -> {after:.2}");
    for file in [
        "config.toml",
        "metrics.jsonl",
        "train.csv",
        "eval.csv",
        "curve.svg",
        "checkpoint.safetensors",
        "splats.ply",
        "eval/step_000080_test_000.png",
        "eval/step_000020_test_001.png",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let jsonl = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(
        jsonl
            .lines()
            .filter(|l| l.contains("\"kind\":\"eval\""))
            .count(),
        4
    );
    assert_eq!(
        jsonl
            .lines()
            .filter(|l| l.contains("\"kind\":\"train\""))
            .count(),
        40
    );
    let ply = std::fs::read(out.join("splats.ply")).unwrap();
    let header = String::from_utf8_lossy(&ply[..200]);
    assert!(
        header.contains(&format!("element vertex {}", summary.gaussians)),
        "{header}"
    );
    // No temporary files are left behind.
    for entry in std::fs::read_dir(&out).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        assert!(!name.ends_with(".tmp"), "{name}");
    }

    // Resuming the finished run's checkpoint for 20 more steps continues the logs.
    let mut more = config.clone();
    more.steps = 100;
    let ckpt = out.join("checkpoint.safetensors");
    let copy = dir.path().join("ckpt.safetensors");
    std::fs::copy(&ckpt, &copy).unwrap();
    let resumed = run::<B>(
        &more,
        common::scene(&config),
        &out,
        Some(&copy),
        &Default::default(),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(resumed.steps, 100);
    let jsonl = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(
        jsonl
            .lines()
            .filter(|l| l.contains("\"kind\":\"train\""))
            .count(),
        50
    );
}

#[test]
fn random_backgrounds_are_drawn_from_the_seed_and_used() {
    let losses = |random: bool| -> Vec<f32> {
        let config = common::tiny_config()
            .with_overrides(&[
                format!("data.random_background={random}"),
                "densify.strategy=none".to_string(),
            ])
            .unwrap();
        let scene = common::scene(&config);
        let image = scene.train_image(0).unwrap();
        let transparency = image
            .transparency
            .as_ref()
            .expect("rendered views keep alpha");
        assert!(
            transparency.iter().any(|&t| t > 200),
            "the floor does not fill every view"
        );
        let mut trainer = Trainer::<B>::new(config, scene, &Default::default()).unwrap();
        (0..4).map(|_| common::step_loss(&mut trainer)).collect()
    };
    let fixed = losses(false);
    let random = losses(true);
    assert_eq!(
        random,
        losses(true),
        "the same seed draws the same backgrounds"
    );
    assert!(random.iter().all(|l| l.is_finite()));
    assert_ne!(
        fixed, random,
        "a random background changes the target and the render"
    );
}

/// `init.mode = "view_volume"`: every point is seen by the required share of the training
/// cameras and takes its colour from the photos; the same seed gives the same points.
#[test]
fn a_loss_read_every_few_steps_changes_nothing_but_the_reports() {
    let run = |loss_every: usize| {
        let config = common::tiny_config()
            .with_overrides(&[
                "steps=12".to_string(),
                "output.log_every=6".to_string(),
                format!("output.loss_every={loss_every}"),
            ])
            .unwrap();
        let scene = common::scene(&config);
        let mut trainer = Trainer::<B>::new(config, scene, &Default::default()).unwrap();
        let losses: Vec<Option<f32>> = (0..12).map(|_| trainer.step().unwrap().loss).collect();
        let means: Vec<f32> = trainer.field().means.val().into_data().to_vec().unwrap();
        (losses, means)
    };
    let (every, means_every) = run(1);
    let (some, means_some) = run(4);
    assert!(every.iter().all(Option::is_some));
    let read: Vec<usize> = (1..=12).filter(|s| some[s - 1].is_some()).collect();
    // Multiples of 4, the logging steps (6, 12) and the last.
    assert_eq!(read, [4, 6, 8, 12]);
    for step in read {
        assert_eq!(some[step - 1], every[step - 1], "step {step}");
    }
    assert_eq!(means_some, means_every, "the reads change the training");
}

#[test]
fn view_volume_points_are_seen_by_enough_cameras_and_coloured_from_the_photos() {
    let config = common::tiny_config();
    let scene = common::scene(&config);
    let bounds = scene.bounds();
    let sample = |seed: u64| {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        scene
            .view_volume_points(500, (bounds.0, 2.0 * bounds.1), 0.75, &mut rng)
            .unwrap()
    };
    let (xyz, rgb) = sample(1);
    assert_eq!((xyz.len(), rgb.len()), (1500, 1500));
    assert!(rgb.iter().all(|c| (0.0..=1.0).contains(c)));
    let needed = (0.75 * scene.train.len() as f64).ceil() as usize;
    for p in xyz.chunks_exact(3) {
        let seen = scene
            .train
            .iter()
            .filter(|view| {
                let cam = &view.camera;
                let (r, t) = (&cam.rotation, &cam.translation);
                let c: Vec<f64> = (0..3)
                    .map(|k| (0..3).map(|j| r[3 * k + j] * f64::from(p[j])).sum::<f64>() + t[k])
                    .collect();
                let (u, v) = (cam.fx * c[0] / c[2] + cam.cx, cam.fy * c[1] / c[2] + cam.cy);
                c[2] > 0.0 && u >= 0.0 && v >= 0.0 && u < cam.width as f64 && v < cam.height as f64
            })
            .count();
        assert!(
            seen >= needed,
            "{p:?} is seen by {seen} of {} cameras",
            scene.train.len()
        );
    }
    // Reproducible from the seed.
    assert_eq!(sample(1), (xyz, rgb));
    // A box no camera sees is an error that says what to change.
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(2);
    let err = scene
        .view_volume_points(10, ([1e6, 1e6, 1e6], 1.0), 0.75, &mut rng)
        .unwrap_err()
        .to_string();
    assert!(err.contains("init.view_fraction"), "{err}");
}

/// An observer that asks for a checkpoint between steps 3 and 4 and counts the steps it was
/// shown between.
struct CheckpointAtThree {
    shown: Vec<usize>,
    messages: Vec<String>,
}

impl ember_train::RunObserver<B> for CheckpointAtThree {
    fn on_message(&mut self, message: &str) {
        self.messages.push(message.to_string());
    }

    fn between_steps(&mut self, trainer: &Trainer<B>) -> ember_train::ObserverAction {
        let step = trainer.step_count();
        let asked = self.shown.last() == Some(&step);
        self.shown.push(step);
        if step == 3 && !asked {
            ember_train::ObserverAction::Checkpoint
        } else {
            ember_train::ObserverAction::Continue
        }
    }
}

#[test]
fn an_observer_sees_every_step_and_gets_its_checkpoint() {
    let mut config = common::tiny_config();
    config.steps = 5;
    config.eval.every = 0;
    config.output.checkpoint_every = 0;
    let scene = common::scene(&config);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut observer = CheckpointAtThree {
        shown: Vec::new(),
        messages: Vec::new(),
    };
    run::<B>(
        &config,
        scene,
        &out,
        None,
        &Default::default(),
        &mut observer,
    )
    .unwrap();
    // Shown after each step, and once more after the checkpoint it asked for.
    assert_eq!(observer.shown, vec![1, 2, 3, 3, 4, 5]);
    let written = format!(
        "wrote {} at step 3",
        out.join("checkpoint.safetensors").display()
    );
    assert!(
        observer.messages.contains(&written),
        "{:?}",
        observer.messages
    );
    // The checkpoint file holds the field the trainer had: viewable without a trainer.
    let path = out.join("checkpoint.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let file = ember_train::checkpoint::CheckpointFile::parse(&bytes, &path).unwrap();
    let field = file
        .field::<ember_train::trainer::Inner<B>>(&Default::default(), &path)
        .unwrap();
    assert_eq!(field.sh_rest.dims()[1], file.sh_rest_coefficients);
    // The same centres as the PLY the run exported at the end.
    let splats = ember_data::read_splats(&out.join("splats.ply")).unwrap();
    let from_ply = ember_field::splats::field_from_splats::<ember_train::trainer::Inner<B>>(
        &splats,
        &Default::default(),
    )
    .unwrap();
    let means = |f: &ember_field::GaussianField<ember_train::trainer::Inner<B>>| {
        f.means.val().into_data().into_vec::<f32>().unwrap()
    };
    assert_eq!(means(&field), means(&from_ply));
}
