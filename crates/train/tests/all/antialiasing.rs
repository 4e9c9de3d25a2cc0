//! `raster.antialiased`: Mip-Splatting's 2D filter reached from a config, in training and in its
//! evaluations, and what it is for: a far view drawn with it is closer to a supersampled
//! reference than the plain render; its 3D filter measured from the training cameras, kept
//! up with densification, and folded into what the run evaluates, saves and exports.

use burn::tensor::Tensor;
use ember_field::{RenderOptions, render, to_host};
use ember_train::Trainer;
use ember_train::checkpoint::CheckpointFile;
use ember_train::scene::{look_at_origin, procedural_field};

use crate::common::{self, B};

use ember_kernels::backend::Cpu;

/// The mean of each `k x k` block of an `[H, W, 3]` image.
fn box_down(image: &[f32], size: usize, k: usize) -> Vec<f32> {
    let small = size / k;
    let mut out = vec![0.0f32; small * small * 3];
    for y in 0..size {
        for x in 0..size {
            for c in 0..3 {
                out[((y / k) * small + x / k) * 3 + c] += image[(y * size + x) * 3 + c];
            }
        }
    }
    out.iter().map(|v| v / (k * k) as f32).collect()
}

fn mse(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64
}

#[test]
fn a_far_view_drawn_antialiased_is_closer_to_a_supersampled_one() {
    let device = Default::default();
    let field = procedural_field::<Cpu>(4000, 3, &device).unwrap();
    let (size, k) = (48usize, 4usize);
    // Far enough that the scene covers about a fifth of the frame and most Gaussians are
    // smaller than a pixel.
    let eye = [7.0, -5.0, 3.0];
    let draw = |pixels: usize, antialiased: bool| -> Vec<f32> {
        let camera = look_at_origin(eye, pixels as u32);
        let options = RenderOptions::default().with_antialiased(antialiased);
        let rgb: Tensor<Cpu, 3> = render(&field, &camera, &options).unwrap().rgb;
        to_host(rgb.clamp(0.0, 1.0), "render").unwrap()
    };
    let reference = box_down(&draw(size * k, true), size * k, k);
    let (plain, filtered) = (
        mse(&draw(size, false), &reference),
        mse(&draw(size, true), &reference),
    );
    eprintln!(
        "far view against 4x4 supersampling: MSE plain {plain:.3e}, antialiased {filtered:.3e}"
    );
    assert!(
        filtered < 0.7 * plain,
        "antialiased {filtered:e}, plain {plain:e}"
    );
}

#[test]
fn the_config_key_reaches_training_and_its_evaluations() {
    let plain = common::tiny_config().with_overrides(&["steps=3"]).unwrap();
    let filtered = plain.with_overrides(&["raster.antialiased=true"]).unwrap();
    let device = Default::default();
    let mut runs = [&plain, &filtered]
        .map(|config| Trainer::<B>::new(config.clone(), common::scene(config), &device).unwrap());
    let evals: Vec<f32> = runs
        .iter_mut()
        .map(|trainer| trainer.evaluate().unwrap().psnr)
        .collect();
    assert_ne!(
        evals[0], evals[1],
        "the same field evaluated with and without the filter"
    );
    let losses: Vec<f32> = runs.iter_mut().map(common::step_loss).collect();
    assert_ne!(
        losses[0], losses[1],
        "the same first step with and without the filter"
    );
}

#[test]
fn the_3d_filter_follows_the_gaussians_and_is_what_the_run_saves() {
    let config = common::tiny_config()
        .with_overrides(&["raster.antialiased=true", "output.ply=true"])
        .unwrap();
    let scene = common::scene(&config);
    let device = Default::default();
    let trainer = Trainer::<B>::new(config.clone(), scene.clone(), &device).unwrap();
    let filter = trainer
        .smoothing()
        .expect("antialiased runs draw through the 3D filter");
    assert_eq!(filter.len(), trainer.num_gaussians());
    let variance = to_host(filter.variance.clone(), "variance").unwrap();
    assert!(variance.iter().all(|v| *v > 0.0), "every Gaussian is seen");
    let drawn = trainer.drawn_field().unwrap();
    let (raw, wider) = (
        to_host(trainer.field().log_scales.val(), "raw").unwrap(),
        to_host(drawn.log_scales.val(), "drawn").unwrap(),
    );
    assert!(
        raw.iter().zip(&wider).all(|(r, w)| w > r),
        "the filter widens every axis"
    );

    let out = tempfile::tempdir().unwrap();
    let summary = ember_train::run::<B>(
        &config,
        scene.clone(),
        out.path(),
        None,
        &device,
        &mut ember_train::Quiet,
    )
    .unwrap();
    assert_ne!(
        summary.gaussians,
        variance.len(),
        "densification changed the count"
    );
    let bytes = std::fs::read(out.path().join("checkpoint.safetensors")).unwrap();
    let file = CheckpointFile::parse(&bytes, out.path()).unwrap();
    let saved = file
        .smoothing
        .as_ref()
        .expect("the checkpoint holds the filter");
    assert_eq!(
        saved.len(),
        file.gaussians,
        "measured again for the new Gaussians"
    );
    // The checkpoint resumes the raw field; what it shows is the field as drawn.
    let mut resumed = Trainer::<B>::new(config.clone(), scene, &device).unwrap();
    resumed
        .load_checkpoint(&out.path().join("checkpoint.safetensors"))
        .unwrap();
    let shown = file.field::<Cpu>(&device, out.path()).unwrap();
    let exported = ember_data::read_splats(&out.path().join("splats.ply")).unwrap();
    let drawn = resumed.drawn_field().unwrap();
    assert_eq!(
        to_host(shown.log_scales.val(), "shown").unwrap(),
        to_host(drawn.log_scales.val(), "drawn").unwrap()
    );
    assert_eq!(
        to_host(shown.opacity_logits.val(), "shown").unwrap(),
        to_host(drawn.opacity_logits.val(), "drawn").unwrap()
    );
    let drawn_scales = to_host(drawn.log_scales.val(), "drawn").unwrap();
    assert_eq!(exported.log_scales.len(), file.gaussians);
    for (written, drawn) in exported.log_scales.iter().flatten().zip(&drawn_scales) {
        assert!(
            (written - drawn).abs() <= 1e-5,
            "splats.ply {written}, drawn {drawn}"
        );
    }
}

#[test]
fn the_3d_filter_key_is_checked_and_can_be_left_out() {
    let only_2d = common::tiny_config()
        .with_overrides(&["raster.antialiased=true", "raster.filter_3d=0"])
        .unwrap();
    let trainer = Trainer::<B>::new(
        only_2d.clone(),
        common::scene(&only_2d),
        &Default::default(),
    )
    .unwrap();
    assert!(trainer.smoothing().is_none());
    let err = common::tiny_config()
        .with_overrides(&["raster.filter_3d=-1"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("raster.filter_3d"), "{err}");
}
