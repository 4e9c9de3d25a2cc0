//! Shared helpers: the data folder, a tiny procedural config, the CPU backend.

use std::path::PathBuf;
use std::sync::Arc;

use ember_train::{TrainConfig, TrainScene};

/// The CPU autodiff backend.
pub type B = burn::backend::Autodiff<ember_kernels::backend::Cpu>;

/// `EMBER_DATA_DIR`, default `<workspace root>/../shared/data`.
pub fn data_dir() -> PathBuf {
    std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"))
}

/// The path of `relative` under the data folder, or `None` (after saying so) when it is missing;
/// with `EMBER_REQUIRE_DATA=1` a missing file fails the test instead.
pub fn data_path(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("EMBER_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_DATA=1 but {} does not exist", path.display());
    }
    eprintln!("skipped: test data {} not found", path.display());
    None
}

/// A small procedural scene (32x32, 8 train and 3 held-out views) with densification early and
/// often, so a few steps exercise every part of the loop.
pub fn tiny_config() -> TrainConfig {
    TrainConfig::from_toml_str(
        r#"
steps = 12
seed = 5
[data.procedural]
resolution = 32
train_views = 8
test_views = 3
gaussians = 600
points = 200
[init]
sh_degree = 1
[optim]
sh_interval = 6
[densify]
start = 3
stop = 100
interval = 4
grad_threshold = 1e-5
opacity_reset_interval = 8
[eval]
every = 6
save_images = 2
[output]
checkpoint_every = 5
log_every = 2
"#,
        "tiny",
    )
    .expect("the tiny config parses")
}

/// The scene of a config.
pub fn scene(config: &TrainConfig) -> Arc<TrainScene> {
    Arc::new(
        TrainScene::load::<ember_kernels::backend::Cpu>(
            &config.data,
            config.seed,
            &Default::default(),
        )
        .expect("the scene loads"),
    )
}

/// The loss of one step of `trainer` (the test configs read it back every step).
pub fn step_loss<B: ember_train::SplatAutodiffBackend>(
    trainer: &mut ember_train::Trainer<B>,
) -> f32 {
    trainer
        .step()
        .unwrap()
        .loss
        .expect("every step reads the loss")
}
