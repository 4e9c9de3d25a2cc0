//! # One render, every backend
//!
//! `cargo run --release --example compare_backends [--features wgpu,cuda]`
//!
//! A notebook in code, top to bottom. The same random scene (20 000 Gaussians in front of a
//! 320x240 camera, SH degree 1) is rendered, and differentiated, on every backend compiled into
//! this build: ndarray always, wgpu and cuda with their features. For each we print the time of
//! the first call (which includes compiling the GPU kernels), the median of five more, and the
//! largest difference from the ndarray result, for the image and for the gradient of the means.
//!
//! What to notice:
//! - one kernel source: the wgpu and cuda numbers come from the same CubeCL code;
//! - the images agree to about 1e-6 (f32 rounding, a different `exp`); the gradients to a few
//!   parts in 1e-5 of their largest value (on the GPU they are summed with atomics, in a
//!   different order);
//! - without a GPU, wgpu runs on lavapipe (Mesa's Vulkan on the CPU): correct, but slow.

use std::time::Instant;

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use ember::field::{Camera, GaussianField, RenderOptions, render};
use ember::kernels::SplatBackend;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const N: usize = 20_000;
const WIDTH: u32 = 320;
const HEIGHT: u32 = 240;

/// The scene's parameters, row-major: means, quats, log_scales, logits, sh_dc, sh_rest.
struct Scene {
    tensors: [(Vec<f32>, Vec<usize>); 6],
}

fn scene(seed: u64) -> Scene {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut u = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * rng.random::<f32>())
            .collect()
    };
    let depth = u(N, 2.0, 6.0);
    let xy = u(2 * N, -0.6, 0.6);
    let means: Vec<f32> = (0..N)
        .flat_map(|i| {
            [
                xy[2 * i] * depth[i],
                0.75 * xy[2 * i + 1] * depth[i],
                depth[i],
            ]
        })
        .collect();
    Scene {
        tensors: [
            (means, vec![N, 3]),
            (u(4 * N, -1.0, 1.0), vec![N, 4]),
            (u(3 * N, -4.5, -2.5), vec![N, 3]),
            (u(N, -2.0, 3.0), vec![N]),
            (u(3 * N, -1.5, 1.5), vec![N, 1, 3]),
            (u(9 * N, -0.3, 0.3), vec![N, 3, 3]),
        ],
    }
}

fn camera() -> Camera {
    Camera {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0, 0.0, 0.0],
        fx: 280.0,
        fy: 280.0,
        cx: f64::from(WIDTH) / 2.0,
        cy: f64::from(HEIGHT) / 2.0,
        width: WIDTH,
        height: HEIGHT,
    }
}

/// What one backend produced, on the host.
struct Outcome {
    name: String,
    first_ms: f64,
    median_ms: f64,
    rgb: Vec<f32>,
    d_means: Vec<f32>,
}

fn host<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_default()
}

/// Renders and differentiates the scene on `B`: `L = sum(rgb * w)` with fixed weights.
fn run<B: SplatBackend>(scene: &Scene, device: &B::Device) -> Result<Outcome, String> {
    type Ad<B> = Autodiff<B>;
    let t = |i: usize| TensorData::new(scene.tensors[i].0.clone(), scene.tensors[i].1.clone());
    let field = GaussianField::<Ad<B>>::from_tensors(
        Tensor::from_data(t(0), device),
        Tensor::from_data(t(1), device),
        Tensor::from_data(t(2), device),
        Tensor::from_data(t(3), device),
        Tensor::from_data(t(4), device),
        Tensor::from_data(t(5), device),
        None,
    )
    .map_err(|e| e.to_string())?;
    let pixels = (WIDTH * HEIGHT) as usize;
    let weights: Vec<f32> = (0..3 * pixels)
        .map(|i| ((i * 7919) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let weights = Tensor::<Ad<B>, 3>::from_data(
        TensorData::new(weights, [HEIGHT as usize, WIDTH as usize, 3]),
        device,
    );
    let options = RenderOptions::default().with_background([0.1, 0.1, 0.1]);
    let camera = camera();
    let once = || -> Result<(f64, Vec<f32>, Vec<f32>), String> {
        let start = Instant::now();
        let out = render(&field, &camera, &options).map_err(|e| e.to_string())?;
        let grads = (out.rgb.clone() * weights.clone()).sum().backward();
        let d_means = field
            .means
            .grad(&grads)
            .ok_or("the means got no gradient")?;
        B::sync(device).map_err(|e| format!("{e:?}"))?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        Ok((ms, host(out.rgb.inner()), host(d_means)))
    };
    let (first_ms, rgb, d_means) = once()?;
    let mut times = Vec::new();
    for _ in 0..5 {
        times.push(once()?.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(Outcome {
        name: B::name(device),
        first_ms,
        median_ms: times[2],
        rgb,
        d_means,
    })
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn main() {
    // Keep freed memory for the next render instead of faulting it in again (see
    // `ember::kernels::host_allocator`).
    ember::kernels::host_allocator::keep_freed_memory();
    let scene = scene(7);
    let mut outcomes = Vec::new();
    let mut run_one = |result: Result<Outcome, String>| match result {
        Ok(o) => outcomes.push(o),
        Err(e) => eprintln!("compare_backends: {e}"),
    };
    run_one(run::<ember::backend::Cpu>(&scene, &Default::default()));
    #[cfg(feature = "wgpu")]
    run_one(run::<ember::backend::Wgpu>(&scene, &Default::default()));
    #[cfg(feature = "cuda")]
    run_one(run::<ember::backend::Cuda>(&scene, &Default::default()));

    let Some(reference) = outcomes.first() else {
        eprintln!("compare_backends: no backend ran");
        std::process::exit(1);
    };
    let grad_scale = reference.d_means.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    println!("{N} Gaussians, {WIDTH}x{HEIGHT}, render + backward of every parameter\n");
    println!(
        "| backend | first call (ms) | median of 5 (ms) | max |rgb - ndarray| | max |d_means - ndarray| / max |d_means| |"
    );
    println!("|---|---|---|---|---|");
    for o in &outcomes {
        println!(
            "| {} | {:.1} | {:.1} | {:.2e} | {:.2e} |",
            o.name,
            o.first_ms,
            o.median_ms,
            max_abs_diff(&o.rgb, &reference.rgb),
            max_abs_diff(&o.d_means, &reference.d_means) / grad_scale.max(f32::MIN_POSITIVE),
        );
    }
}
