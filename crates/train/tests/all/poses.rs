//! Camera pose refinement: the procedural scene's training cameras knocked off their poses (a
//! degree of turn, a shift of 1% of their distance) are brought back by `poses.refine` with the
//! true field held still, and the refined poses round-trip through `cameras.json`.

use std::sync::Arc;

use ember_field::Camera;
use ember_train::run::cameras_json;
use ember_train::scene::procedural_field;
use ember_train::{TrainConfig, TrainScene, Trainer};

use crate::common::B;

/// The angle between two cameras' rotations, degrees, and the distance between their centres.
fn pose_error(a: &Camera, b: &Camera) -> (f64, f64) {
    // trace(Ra Rb^T) = 1 + 2 cos(angle).
    let trace: f64 = (0..9).map(|e| a.rotation[e] * b.rotation[e]).sum();
    let angle = ((trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos().to_degrees();
    let (ca, cb) = (a.center(), b.center());
    let shift = (0..3).map(|k| (ca[k] - cb[k]).powi(2)).sum::<f64>().sqrt();
    (angle, shift)
}

/// Trains the procedural scene with its training cameras knocked off their poses and
/// `poses.refine`, the true field held still, `batch` views a step (960 camera visits in all):
/// the trainer, the true cameras, and each one's error before.
fn refine(batch: usize) -> (Trainer<B>, Vec<Camera>, Vec<(f64, f64)>) {
    let steps = 960 / batch;
    let config = TrainConfig::from_toml_str(
        &format!(
            r#"
steps = {steps}
batch_size = {batch}
seed = 5
[data.procedural]
resolution = 96
train_views = 6
test_views = 2
gaussians = 900
[init]
sh_degree = 0
[optim]
lr_means = 0.0
lr_means_final = 0.0
lr_quats = 0.0
lr_scales = 0.0
lr_opacity = 0.0
lr_sh_dc = 0.0
lr_sh_rest = 0.0
[densify]
strategy = "none"
[poses]
refine = true
start = 0
lr_rotation = 0.002
lr_translation = 0.002
# The true field held still has nothing for a camera to walk on: the slower decay lets each
# camera close its whole degree in its 160 visits.
lr_final = 0.1
[eval]
every = 0
lpips = "never"
"#
        ),
        "poses",
    )
    .unwrap();
    let device = Default::default();
    let mut scene = TrainScene::load::<B>(&config.data, config.seed, &device).unwrap();
    let truth: Vec<Camera> = scene.train.iter().map(|v| v.camera).collect();
    let distance = 2.6;
    for (v, view) in scene.train.iter_mut().enumerate() {
        // A degree about an axis, and 1% of the distance along another, both turning with v.
        let a = v as f64 * 2.1;
        let axis = [a.cos() * 0.6, a.sin() * 0.6, 0.8];
        let turn = 1f64.to_radians();
        let b = v as f64 * 1.3 + 0.5;
        let shift = [b.cos() * 0.01 * distance, 0.0, b.sin() * 0.01 * distance];
        view.camera = view.camera.corrected(shift, axis.map(|x| x * turn));
    }
    let before: Vec<(f64, f64)> = scene
        .train
        .iter()
        .zip(&truth)
        .map(|(v, t)| pose_error(&v.camera, t))
        .collect();
    let field = procedural_field(config.data.procedural.gaussians, config.seed, &device).unwrap();
    let mut trainer =
        Trainer::<B>::from_field(config.clone(), Arc::new(scene), field, &device).unwrap();
    for _ in 0..config.steps {
        trainer.step().unwrap();
    }
    (trainer, truth, before)
}

#[test]
fn refinement_brings_knocked_cameras_back() {
    // A batch of two runs the projection's backward once per view.
    for batch in [2, 1] {
        check_refined(batch);
    }
}

/// [`refine`]'s cameras end within a fifth of their errors before, and `cameras.json` holds
/// them.
fn check_refined(batch: usize) {
    let (trainer, truth, before) = refine(batch);
    let cameras = trainer.cameras();
    let after: Vec<(f64, f64)> = cameras
        .iter()
        .zip(&truth)
        .map(|((_, camera, _), t)| pose_error(camera, t))
        .collect();
    for (v, (name, _, _)) in cameras.iter().take(truth.len()).enumerate() {
        println!(
            "batch {batch}, {name}: {:.3} deg, {:.4} off before; {:.3} deg, {:.4} after",
            before[v].0, before[v].1, after[v].0, after[v].1
        );
    }
    for (v, (name, _, refined)) in cameras.iter().take(truth.len()).enumerate() {
        assert!(refined, "{name} is a training camera");
        assert!(
            after[v].0 < 0.2 * before[v].0,
            "{name}: {:.3} degrees off after",
            after[v].0
        );
        assert!(
            after[v].1 < 0.2 * before[v].1,
            "{name}: centre {:.4} off after",
            after[v].1
        );
    }
    let motion = trainer.camera_motion().expect("the run refines its poses");
    assert!(
        (0.8..1.2).contains(&motion.mean_degrees),
        "the cameras turned back about a degree: {motion:?}"
    );
    assert!(
        cameras[truth.len()..]
            .iter()
            .all(|(_, _, refined)| !refined)
    );

    // cameras.json holds them, and `trainer render --camera cameras.json --name` reads them.
    let json = cameras_json(&cameras);
    let path = std::path::Path::new("cameras.json");
    for (name, camera, _) in &cameras {
        let read = ember_data::find_camera(json.as_bytes(), path, name).unwrap();
        // serde_json parses floats to within an ulp or so, not always to the bit.
        let pose = |c: &Camera| [c.rotation.to_vec(), c.translation.to_vec()].concat();
        let worst = pose(&read)
            .iter()
            .zip(pose(camera))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-12, "{name} round-trips ({worst:e} off)");
        assert_eq!((read.fx, read.width), (camera.fx, camera.width));
    }
    let missing = ember_data::find_camera(json.as_bytes(), path, "nope").unwrap_err();
    assert!(
        missing.to_string().contains("no camera named `nope`"),
        "{missing}"
    );
}
