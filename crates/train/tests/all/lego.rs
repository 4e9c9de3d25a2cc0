//! `lego_400` at 100x100: a short run reaches a held-out PSNR that the untrained field cannot.

use std::sync::Arc;

use ember_train::{TrainConfig, TrainScene, Trainer};

use crate::common::{self, B};

#[test]
fn lego_downscaled_learns() {
    let Some(path) = common::data_path("lego_400") else {
        return;
    };
    // configs/lego-100-smoke.toml with fewer Gaussians, more steps and the faster rates short runs
    // need; evaluated on 40 of the 200 test views.
    let config = TrainConfig::from_file(
        &std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../configs/lego-100-smoke.toml"),
    )
    .unwrap()
    .with_overrides(&[
        format!("data.path={:?}", path.display().to_string()),
        "steps=200".to_string(),
        "init.random_count=5000".to_string(),
        "optim.lr_sh_dc=0.01".to_string(),
        "optim.lr_opacity=0.05".to_string(),
        "optim.lr_means=1.6e-3".to_string(),
        "optim.lr_means_steps=2000".to_string(),
        "eval.max_views=40".to_string(),
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
    let mut trainer = Trainer::<B>::new(config.clone(), scene, &Default::default()).unwrap();
    let before = trainer.evaluate().unwrap();
    let started = std::time::Instant::now();
    for _ in 0..config.steps {
        trainer.step().unwrap();
    }
    let after = trainer.evaluate().unwrap();
    eprintln!(
        "lego {}x{}: {} steps in {:.1} s, held-out PSNR {:.2} -> {:.2} dB over {} views, {} Gaussians",
        trainer.scene().train[0].camera.width,
        trainer.scene().train[0].camera.height,
        config.steps,
        started.elapsed().as_secs_f64(),
        before.psnr,
        after.psnr,
        after.views.len(),
        trainer.num_gaussians()
    );
    assert!(before.psnr < 10.0, "untrained {}", before.psnr);
    assert!(after.psnr > 18.0, "trained {}", after.psnr);
}
