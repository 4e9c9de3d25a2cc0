//! Training on `smoke_dataset` (one 50x50 view, an `init.ply` of 100 points).

use std::sync::Arc;

use ember_train::{TrainConfig, TrainScene, Trainer};

use crate::common::{self, B};

#[test]
fn smoke_dataset_trains() {
    let Some(path) = common::data_path("smoke_dataset") else {
        return;
    };
    let config = TrainConfig::default()
        .with_overrides(&[
            format!("data.path={:?}", path.display().to_string()),
            "steps=20".to_string(),
            "data.point_cloud=\"init.ply\"".to_string(),
            "densify.strategy=none".to_string(),
            "init.sh_degree=0".to_string(),
        ])
        .unwrap();
    let scene = TrainScene::load::<burn::backend::NdArray<f32>>(
        &config.data,
        config.seed,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(scene.train.len(), 1);
    let points = scene.points.as_ref().expect("init.ply gives points");
    assert_eq!(points.0.len(), 300);
    let mut trainer = Trainer::<B>::new(config, Arc::new(scene), &Default::default()).unwrap();
    assert_eq!(trainer.num_gaussians(), 100);
    let first = trainer.step().unwrap().loss;
    let mut last = first;
    for _ in 1..20 {
        last = trainer.step().unwrap().loss;
    }
    assert!(first.is_finite() && last < first, "loss {first} -> {last}");
}
