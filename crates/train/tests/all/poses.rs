//! Camera pose refinement: the procedural scene's training cameras knocked off their poses (a
//! degree of turn, a shift of 1% of their distance) are brought back by `poses.refine` with the
//! true field held still, and the refined poses round-trip through `cameras.json`; anchored
//! corrections keep the cameras' common frame.

use std::sync::Arc;

use ember_field::Camera;
use ember_kernels::project::pose::{compose, invert, rotation_matrix, rotation_vector};
use ember_train::config::{PoseAnchor, PosesConfig};
use ember_train::poses::{CameraPoses, STATE_PER_CAMERA};
use ember_train::run::cameras_json;
use ember_train::scene::procedural_field;
use ember_train::{TrainConfig, TrainScene, Trainer};

use rand::RngExt;

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

/// Training cameras at random poses around the origin, 8 units out.
fn random_cameras(rng: &mut impl RngExt, count: usize) -> Vec<Camera> {
    (0..count)
        .map(|_| Camera {
            rotation: rotation_matrix(core::array::from_fn(|_| rng.random_range(-2.0..2.0))),
            translation: [
                rng.random_range(-1.0..1.0),
                rng.random_range(-1.0..1.0),
                8.0,
            ],
            fx: 100.0,
            fy: 100.0,
            cx: 50.0,
            cy: 40.0,
            width: 100,
            height: 80,
        })
        .collect()
}

/// `CameraPoses` over `given` whose corrections move camera `v` to `moved[v]`.
fn poses_moving(given: &[Camera], moved: &[Camera], anchor: PoseAnchor) -> CameraPoses {
    let config = PosesConfig {
        refine: true,
        anchor,
        ..PosesConfig::default()
    };
    let mut poses =
        CameraPoses::new(&config, given.len(), (0.9, 0.999, 1e-15), 1.0, 100).expect("refines");
    let state: Vec<f64> = given
        .iter()
        .zip(moved)
        .flat_map(|(g, m)| {
            let (r, t) = invert(&g.rotation, &g.translation);
            let (rotation, translation) = compose(&m.rotation, &m.translation, &r, &t);
            rotation
                .into_iter()
                .chain(translation)
                .chain([0.0; STATE_PER_CAMERA - 12])
        })
        .collect();
    poses.load_state(&state).expect("the cameras' state");
    poses
}

/// The rig's common motion: the mean rotation vector of the cameras' turns in the world's
/// frame (`R'^T R`), and how far the centroid of their centres moved.
fn common_motion(poses: &CameraPoses, given: &[Camera]) -> [f64; 6] {
    let mut mean = [0.0; 6];
    for (v, g) in given.iter().enumerate() {
        let drawn = poses.camera(v, g);
        let (drawn_to_world, _) = invert(&drawn.rotation, &[0.0; 3]);
        let (turn, _) = compose(&drawn_to_world, &[0.0; 3], &g.rotation, &[0.0; 3]);
        let omega = rotation_vector(&turn);
        let (a, b) = (g.center(), drawn.center());
        for k in 0..3 {
            mean[k] += omega[k] / given.len() as f64;
            mean[3 + k] += (b[k] - a[k]) / given.len() as f64;
        }
    }
    mean
}

/// `poses.anchor = "mean"`: one rigid motion of the world shared by every camera (which no
/// photo can see) is taken out exactly; cameras each moved their own way keep their own
/// motions and lose only the common part (the mean left is second order); `"none"` leaves
/// the corrections as they are, bit for bit.
#[test]
fn anchored_corrections_keep_the_cameras_common_frame() {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(54);
    let given = random_cameras(&mut rng, 12);
    let world = (rotation_matrix([0.012, -0.02, 0.008]), [0.05, -0.03, 0.02]);
    let shared: Vec<Camera> = given
        .iter()
        .map(|g| {
            let (rotation, translation) = compose(&g.rotation, &g.translation, &world.0, &world.1);
            Camera {
                rotation,
                translation,
                ..*g
            }
        })
        .collect();
    let mut poses = poses_moving(&given, &shared, PoseAnchor::Mean);
    poses.hold_frame(given.iter());
    for (v, g) in given.iter().enumerate() {
        let (turn, shift) = pose_error(&poses.camera(v, g), g);
        assert!(
            turn < 1e-5 && shift < 1e-10,
            "camera {v}: {turn}° / {shift} off"
        );
    }

    // Each camera moved its own way (up to ~1°, 0.05 units) and all by `world` on top.
    let own: Vec<Camera> = shared
        .iter()
        .map(|s| {
            let omega = core::array::from_fn(|_| rng.random_range(-0.01..0.01));
            let tau = core::array::from_fn(|_| rng.random_range(-0.03..0.03));
            s.moved_by(&rotation_matrix(omega), &tau)
        })
        .collect();
    let free = poses_moving(&given, &own, PoseAnchor::None);
    let before = common_motion(&free, &given);
    let mut held = poses_moving(&given, &own, PoseAnchor::Mean);
    held.hold_frame(given.iter());
    let after = common_motion(&held, &given);
    let norm = |m: &[f64]| m.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!(
        norm(&after[..3]) < 0.01 * norm(&before[..3]) && norm(&after[3..]) < 1e-12,
        "common motion {before:?} held to {after:?}"
    );
    let (free_turn, held_turn) = (
        free.motion(&given).common_degrees,
        held.motion(&given).common_degrees,
    );
    assert!(
        free_turn > 1.0 && held_turn < 0.01 * free_turn,
        "the rig's common turn: {free_turn}° free, {held_turn}° held"
    );
    // Every camera is moved by the same motion of the world, so the cameras stand to one another
    // as they did.
    for v in 1..given.len() {
        let pair = |p: &CameraPoses| {
            let (a, b) = (p.camera(v - 1, &given[v - 1]), p.camera(v, &given[v]));
            pose_error(&a, &b)
        };
        let (free_pair, held_pair) = (pair(&free), pair(&held));
        assert!(
            (free_pair.0 - held_pair.0).abs() < 1e-6 && (free_pair.1 - held_pair.1).abs() < 1e-9,
            "cameras {} and {v}: {free_pair:?} apart free, {held_pair:?} held",
            v - 1
        );
    }

    let mut untouched = free.clone();
    untouched.hold_frame(given.iter());
    assert_eq!(untouched.state(), free.state(), "`none` holds nothing");
}
