//! # Training lego through the library
//!
//! `cargo run --release --example train_lego [-- --steps 400]`
//!
//! A notebook in code, top to bottom: what `trainer --config configs/lego-100-1k.toml` does, written
//! against `ember::train` directly. We load NeRF-Synthetic *lego* (`lego_400` under
//! `$EMBER_DATA_DIR`) downscaled 4x to 100x100 on white, start from 20 000 random Gaussians
//! around the point the cameras look at, and run the 3DGS step (render, L1 + SSIM, per-group
//! Adam, densification) for a few hundred steps on `ember::backend::DefaultAutodiff`, training on
//! 25 of the 100 train views and evaluating on 25 of the 200 test views, before and after.
//!
//! What to notice:
//! - the held-out PSNR climbs from ~7 dB (a grey fog) to ~21 dB in 400 steps (about 30 s on 2
//!   CPU cores); the full lego-100-1k preset (100 training views, 1000 steps) reaches 28.9 dB;
//! - densification grows the set (clone, split, prune), visible in the Gaussian count;
//! - `train_lego_eval.png` shows a test view beside its ground truth.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ember::backend::DefaultAutodiff as Train;
use ember::train::{TrainConfig, TrainScene, trainer::Trainer};

/// The run's settings: the lego-100-1k preset, shortened.
const CONFIG: &str = r#"
steps = 400
seed = 0

[data]
path = "../shared/data/lego_400"
downsample = 4
max_images = 25
background = [1.0, 1.0, 1.0]

[init]
mode = "random"
random_count = 20000
random_box = 0.25
sh_degree = 1

[optim]
lr_sh_dc = 0.01
lr_opacity = 0.05
lr_means = 1.6e-3
lr_means_final = 1.6e-5
lr_means_steps = 4000
sh_interval = 500

[densify]
start = 100
stop = 350
interval = 100
opacity_reset_interval = 0
max_gaussians = 100000

[eval]
save_images = 1
"#;

fn main() {
    // Keep freed memory for the next render instead of faulting it in again (see
    // `ember::kernels::host_allocator`).
    ember::kernels::host_allocator::keep_freed_memory();
    if let Err(e) = run() {
        eprintln!("train_lego: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let steps: usize = match std::env::args().skip_while(|a| a != "--steps").nth(1) {
        Some(v) => v.parse().map_err(|e| format!("--steps {v}: {e}"))?,
        None => 400,
    };
    let mut config =
        TrainConfig::from_toml_str(CONFIG, "train_lego's config").map_err(|e| e.to_string())?;
    config.steps = steps;
    if let Ok(dir) = std::env::var("EMBER_DATA_DIR") {
        config.data.path = Some(PathBuf::from(dir).join("lego_400"));
    }
    let device = Default::default();

    // 1. The scene: views, images (decoded once), the extent that scales the learning rates.
    let started = Instant::now();
    let scene = TrainScene::load::<ember::train::trainer::Inner<Train>>(&config.data, 0, &device)
        .map_err(|e| format!("{e} (this example needs lego_400: set EMBER_DATA_DIR)"))?;
    println!(
        "scene {}: {} training views, {} test views at {}x{}, extent {:.2} ({:.1} s)",
        scene.name,
        scene.train.len(),
        scene.eval.len(),
        scene.train[0].camera.width,
        scene.train[0].camera.height,
        scene.extent,
        started.elapsed().as_secs_f64()
    );

    // 2. The trainer, and the untrained field's score.
    let mut trainer =
        Trainer::<Train>::new(config, Arc::new(scene), &device).map_err(|e| e.to_string())?;
    let before = trainer.evaluate().map_err(|e| e.to_string())?;
    println!(
        "step    0: test PSNR {:.2} dB, {} Gaussians",
        before.psnr, before.gaussians
    );

    // 3. The steps.
    let started = Instant::now();
    for _ in 0..steps {
        let report = trainer.step().map_err(|e| e.to_string())?;
        if report.step % 100 == 0 {
            println!(
                "step {:4}: loss {:.4}, {} Gaussians ({:.1} steps/s)",
                report.step,
                report.loss.unwrap_or(f32::NAN),
                report.gaussians,
                report.step as f64 / started.elapsed().as_secs_f64()
            );
        }
    }

    // 4. The trained field's score, a test view and the time per phase.
    let after = trainer.evaluate().map_err(|e| e.to_string())?;
    println!(
        "step {:4}: test PSNR {:.2} dB, SSIM {:.3}, {} Gaussians, {:.1} s of training",
        steps,
        after.psnr,
        after.ssim,
        after.gaussians,
        started.elapsed().as_secs_f64()
    );
    let out = PathBuf::from("target/examples/train_lego");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if let Some(image) = after.images.first() {
        let path = out.join("train_lego_eval.png");
        image.save_png(&path).map_err(|e| e.to_string())?;
        println!("wrote {} (render left, ground truth right)", path.display());
    }
    println!("\n{}", trainer.times().table());
    Ok(())
}
