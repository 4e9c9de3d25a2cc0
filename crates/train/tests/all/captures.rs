//! The shared COLMAP captures trained with their preset's MCMC densification: no Gaussian ends
//! far outside the region the cameras and the sparse points span. Before the MCMC noise was
//! made independent of the scene's units, 1000 steps at 128 px left about a hundred of
//! cup_colmap's Gaussians beyond 100 times the median centre distance, the farthest 2x10^5
//! units away.

use ember_train::{TrainConfig, Trainer};

use crate::common::{self, B};

/// Gaussians may lie this many times the cameras' and points' radius from the cameras' centre
/// (the fence is at 3, and the noise after the last relocation may carry one a little past it).
const ALLOWED: f64 = 4.0;

#[test]
fn no_gaussian_escapes_a_capture() {
    for name in ["cup_colmap", "mouse_colmap", "figurine_colmap"] {
        let Some(path) = common::data_path(name) else {
            return;
        };
        let config = TrainConfig::from_file(
            &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../configs/colmap-cpu.toml"),
        )
        .unwrap()
        .with_overrides(&[
            format!("data.path={:?}", path.display().to_string()),
            "data.max_side=128".to_string(),
            "steps=1000".to_string(),
            "densify.stop=900".to_string(),
        ])
        .unwrap();
        let scene = common::scene(&config);
        // The region: a sphere round the cameras' mean centre holding every camera and point.
        let center = scene.center;
        let distance = |p: [f64; 3]| {
            (0..3)
                .map(|a| (p[a] - center[a]).powi(2))
                .sum::<f64>()
                .sqrt()
        };
        let points = &scene.points.as_ref().expect("a capture has points").0;
        let radius = scene
            .train
            .iter()
            .map(|v| distance(v.camera.center()))
            .chain(
                points
                    .chunks_exact(3)
                    .map(|p| distance([p[0], p[1], p[2]].map(f64::from))),
            )
            .fold(0.0, f64::max);
        let mut trainer = Trainer::<B>::new(config.clone(), scene, &Default::default()).unwrap();
        for _ in 0..config.steps {
            trainer.step().unwrap();
        }
        let means = ember_field::to_host(trainer.field().means.val(), "means").unwrap();
        let farthest = means
            .chunks_exact(3)
            .map(|p| distance([p[0], p[1], p[2]].map(f64::from)))
            .fold(0.0, f64::max);
        let outside = means
            .chunks_exact(3)
            .filter(|p| distance([p[0], p[1], p[2]].map(f64::from)) > ALLOWED * radius)
            .count();
        eprintln!(
            "{name}: {} Gaussians, the farthest {:.2} region radii out ({outside} beyond {ALLOWED})",
            means.len() / 3,
            farthest / radius
        );
        assert_eq!(
            outside,
            0,
            "{name}: the farthest at {:.1} radii",
            farthest / radius
        );
    }
}
