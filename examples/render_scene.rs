//! # Rendering a real scene
//!
//! `cargo run --release --example render_scene [-- --side 800 --out DIR]`
//!
//! A notebook in code, top to bottom. We load the Mip-NeRF 360 *garden* SfM points
//! (`$EMBER_DATA_DIR/garden_points/test_garden.npz`, default `../shared/data`), turn them into a
//! `GaussianField` the way gsplat's tests do (colours from the file, small random scales,
//! rotations and opacities), and render the file's three cameras with `ember::field::render` on
//! `ember::backend::Default` (cuda, else wgpu, else the CPU), once at the cameras' own 648x420
//! and, with `--side N`, at N x N. Each view is written as `garden_cam{i}_{w}x{h}.png` (colour)
//! and `..._depth.png` (expected depth, near = bright).
//!
//! What to notice:
//! - the first render of a backend is slower than the rest: GPU backends compile their kernels
//!   on first use; the median of the next five is the steady state;
//! - the colour image looks like a point-splat garden: these Gaussians are not trained, each
//!   is a small random blob at an SfM point;
//! - the alpha channel is nearly 1 where the points are dense and the depth image shows the
//!   table in front and the bushes behind.

#[path = "common/garden.rs"]
mod garden;

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember::backend::Default as B;
use ember::field::{Camera, GaussianField, RenderOptions, render};
use ember::kernels::ProjectOptions;

/// Command-line settings.
struct Args {
    side: Option<u32>,
    out: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        side: None,
        out: PathBuf::from("target/examples/render_scene"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--side" => {
                let v = value()?;
                let side = v.parse().map_err(|e| format!("--side {v}: {e}"))?;
                if side == 0 {
                    return Err("--side must be at least 1".into());
                }
                args.side = Some(side);
            }
            "--out" => args.out = PathBuf::from(value()?),
            other => {
                return Err(format!(
                    "unknown argument {other} (try --side N, --out DIR)"
                ));
            }
        }
    }
    Ok(args)
}

fn host<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_default()
}

/// Writes an RGB image (`[H, W, 3]` in `[0, 1]`) as PNG, atomically.
fn save_png(path: &Path, width: u32, height: u32, rgb: &[f32]) -> Result<(), String> {
    let bytes: Vec<u8> = rgb
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let image = image::RgbImage::from_raw(width, height, bytes)
        .ok_or_else(|| format!("{}: image size mismatch", path.display()))?;
    let tmp = path.with_extension("png.tmp");
    image
        .save_with_format(&tmp, image::ImageFormat::Png)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The expected depth as grey levels: near (the 2nd percentile) white, far (98th) black,
/// uncovered pixels black.
fn depth_to_rgb(depth: &[f32], alpha: &[f32]) -> Vec<f32> {
    let mut covered: Vec<f32> = depth
        .iter()
        .zip(alpha)
        .filter(|(_, a)| **a > 0.5)
        .map(|(d, _)| *d)
        .collect();
    covered.sort_by(f32::total_cmp);
    let at = |q: f64| covered[((covered.len() - 1) as f64 * q) as usize];
    let (near, far) = if covered.is_empty() {
        (0.0, 1.0)
    } else {
        (at(0.02), at(0.98).max(at(0.02) + 1e-6))
    };
    depth
        .iter()
        .zip(alpha)
        .flat_map(|(d, a)| {
            let v = if *a > 0.5 {
                1.0 - (d - near) / (far - near)
            } else {
                0.0
            };
            [v; 3]
        })
        .collect()
}

fn main() {
    // Keep freed memory for the next render instead of faulting it in again (see
    // `ember::kernels::host_allocator`).
    ember::kernels::host_allocator::keep_freed_memory();
    if let Err(e) = run() {
        eprintln!("render_scene: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let path = garden::data_file();
    if !path.is_file() {
        return Err(format!(
            "{} not found: this example needs the garden points (set EMBER_DATA_DIR)",
            path.display()
        ));
    }

    // 1. The scene: SfM points to Gaussians.
    let data = garden::load(&path)?;
    let scene = garden::scene(&data);
    let device: burn::tensor::Device<B> = Default::default();
    let field: GaussianField<B> = garden::field::<B>(&scene, &device);
    println!(
        "garden: {} SfM points, {} Gaussians inside [-2, 2]^3, rendering on {}",
        data.means.len() / 3,
        field.num_gaussians(),
        B::name(&device)
    );

    // 2. Render every camera; time the first call and the median of five more.
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let options = RenderOptions {
        project: ProjectOptions {
            sh_degree: Some(0),
            ..ProjectOptions::default()
        },
        background: [0.0; 3],
        ..RenderOptions::default()
    };
    let mut sizes = vec![None];
    sizes.extend(args.side.map(Some));
    println!("| camera | resolution | first (ms) | median of 5 (ms) | FPS | visible |");
    println!("|---|---|---|---|---|---|");
    for side in sizes {
        for i in 0..data.viewmats.len() / 16 {
            let camera: Camera = garden::camera(&data, i, side);
            let timed = || -> Result<(f64, _), String> {
                let start = Instant::now();
                let out = render(&field, &camera, &options).map_err(|e| e.to_string())?;
                B::sync(&device).map_err(|e| format!("{e:?}"))?;
                Ok((start.elapsed().as_secs_f64() * 1e3, out))
            };
            let (first, out) = timed()?;
            let mut times = Vec::new();
            for _ in 0..5 {
                times.push(timed()?.0);
            }
            times.sort_by(f64::total_cmp);
            let median = times[2];
            let visible = host(out.aux.visible().float()).iter().sum::<f32>();
            let (w, h) = (camera.width, camera.height);
            println!(
                "| {i} | {w}x{h} | {first:.1} | {median:.1} | {:.1} | {visible} |",
                1e3 / median
            );

            // 3. Write the colour and the depth.
            let rgb = host(out.rgb);
            let alpha = host(out.alpha);
            let depth = host(out.depth);
            let stem = format!("garden_cam{i}_{w}x{h}");
            save_png(&args.out.join(format!("{stem}.png")), w, h, &rgb)?;
            save_png(
                &args.out.join(format!("{stem}_depth.png")),
                w,
                h,
                &depth_to_rgb(&depth, &alpha),
            )?;
        }
    }
    println!("wrote the images to {}", args.out.display());
    Ok(())
}
