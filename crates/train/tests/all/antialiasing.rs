//! `raster.antialiased`: Mip-Splatting's 2D filter reached from a config, in training and in its
//! evaluations, and what it is for: a far view drawn with it is closer to a supersampled
//! reference than the plain render.

use burn::tensor::Tensor;
use ember_field::{RenderOptions, render, to_host};
use ember_train::Trainer;
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
