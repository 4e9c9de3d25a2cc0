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
    let scene = TrainScene::load::<ember_kernels::backend::Cpu>(
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
    let first = common::step_loss(&mut trainer);
    let mut last = first;
    for _ in 1..20 {
        last = common::step_loss(&mut trainer);
    }
    assert!(first.is_finite() && last < first, "loss {first} -> {last}");
}

#[test]
fn a_run_folder_names_its_dataset_by_an_absolute_path() {
    let Some(path) = common::data_path("smoke_dataset") else {
        return;
    };
    // The path as a user would type it, relative to the working directory.
    let cwd = std::env::current_dir().unwrap();
    let relative = relative_to(&std::path::absolute(&path).unwrap(), &cwd);
    let config = TrainConfig::default()
        .with_overrides(&[
            format!("data.path={:?}", relative.display().to_string()),
            "steps=2".to_string(),
            "data.point_cloud=\"init.ply\"".to_string(),
            "densify.strategy=none".to_string(),
            "output.ply=false".to_string(),
        ])
        .unwrap();
    let scene = Arc::new(
        TrainScene::load::<ember_kernels::backend::Cpu>(
            &config.data,
            config.seed,
            &Default::default(),
        )
        .unwrap(),
    );
    let out = tempfile::tempdir().unwrap();
    ember_train::run::<B>(
        &config,
        scene,
        out.path(),
        None,
        &Default::default(),
        &mut ember_train::Quiet,
    )
    .unwrap();
    let written = TrainConfig::from_file(&out.path().join("config.toml")).unwrap();
    let named = written.data.path.expect("the run's dataset");
    assert!(named.is_absolute(), "{}", named.display());
    assert_eq!(named, std::path::absolute(&relative).unwrap());
}

/// `target` relative to `base` (both absolute), through `..` where needed.
fn relative_to(target: &std::path::Path, base: &std::path::Path) -> std::path::PathBuf {
    let (t, b): (Vec<_>, Vec<_>) = (target.components().collect(), base.components().collect());
    let common = t.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for part in &t[common..] {
        out.push(part);
    }
    out
}
