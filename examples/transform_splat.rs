//! # Moving a trained splat
//!
//! `cargo run --release --example transform_splat`
//!
//! A notebook in code, top to bottom. We read a trained tile in the standard 3DGS PLY layout
//! (`splats/gaussiansplats3d-pr477/lod2_tile_0.ply` under `$EMBER_DATA_DIR`: 6831 Gaussians, SH
//! degree 3), turn it into a `GaussianField`, rotate it by 40 degrees about the vertical axis
//! through its centre and scale it by 1.25, and render before and after from the same camera.
//! Then we render the moved field from the correspondingly moved camera.
//!
//! What to notice:
//! - `transform_splat.png`: before (left), after (middle): the tile turned and grew;
//! - right: the moved field seen from the moved camera is the original image again (largest
//!   difference ~1e-3 of the colour range: f32 rounding), which only holds because the SH bands
//!   were rotated with the Gaussians (view-dependent colour follows the rotation);
//! - the transform is one fused kernel over the Gaussians (see BENCHMARKS.md for its speed).

use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use ember::backend::Default as B;
use ember::data::read_splats;
use ember::field::{Camera, RenderOptions, Similarity, render, transform_camera};
use ember::splats::field_from_splats;
use ember::train::scene::look_at;

const SIZE: u32 = 256;

fn host(t: Tensor<B, 3>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_default()
}

fn save_row(path: &Path, images: &[Vec<f32>]) -> Result<(), String> {
    let s = SIZE as usize;
    let mut out = image::RgbImage::new((images.len() * (s + 4)) as u32, SIZE);
    for (k, img) in images.iter().enumerate() {
        for y in 0..s {
            for x in 0..s {
                let i = 3 * (y * s + x);
                let px = [0, 1, 2].map(|c| (img[i + c].clamp(0.0, 1.0) * 255.0).round() as u8);
                out.put_pixel((k * (s + 4) + x) as u32, y as u32, image::Rgb(px));
            }
        }
    }
    let tmp = path.with_extension("png.tmp");
    out.save_with_format(&tmp, image::ImageFormat::Png)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn main() {
    if let Err(e) = run() {
        eprintln!("transform_splat: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let dir = std::env::var("EMBER_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let path = Path::new(&dir).join("splats/gaussiansplats3d-pr477/lod2_tile_0.ply");

    // 1. The splats, as a field on the default backend.
    let splats = read_splats(&path).map_err(|e| format!("{e} (set EMBER_DATA_DIR)"))?;
    let device = Default::default();
    let field = field_from_splats::<B>(&splats, &device).map_err(|e| e.to_string())?;
    let (lo, hi) = splats
        .means
        .iter()
        .fold(([f64::MAX; 3], [f64::MIN; 3]), |(lo, hi), m| {
            (
                std::array::from_fn(|k| lo[k].min(f64::from(m[k]))),
                std::array::from_fn(|k| hi[k].max(f64::from(m[k]))),
            )
        });
    let centre: [f64; 3] = std::array::from_fn(|k| 0.5 * (lo[k] + hi[k]));
    let size = (0..3).map(|k| hi[k] - lo[k]).fold(0.0, f64::max);
    println!(
        "{}: {} Gaussians, SH degree {}, centre {centre:.2?}, size {size:.2}",
        path.display(),
        splats.len(),
        splats.sh_degree
    );

    // 2. A camera looking at the tile, and the similarity: 40 degrees about +z through the
    //    centre, scale 1.25.
    let eye = [
        centre[0] - 1.6 * size,
        centre[1] - 1.2 * size,
        centre[2] + 1.0 * size,
    ];
    let camera: Camera = look_at(eye, centre, SIZE);
    let similarity = Similarity {
        rotation: Similarity::axis_angle([0.0, 0.0, 1.0], 40f64.to_radians()).rotation,
        scale: 1.25,
        translation: [0.0; 3],
        centre,
    };
    let moved = field.transformed(&similarity).map_err(|e| e.to_string())?;

    // 3. Before, after, and after from the moved camera.
    let options = RenderOptions::default();
    let draw = |f: &ember::field::GaussianField<B>, cam: &Camera| -> Result<Vec<f32>, String> {
        Ok(host(
            render(f, cam, &options).map_err(|e| e.to_string())?.rgb,
        ))
    };
    let before = draw(&field, &camera)?;
    let after = draw(&moved, &camera)?;
    let moved_camera = transform_camera(&camera, &similarity);
    let again = draw(&moved, &moved_camera)?;
    let differs = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    };
    println!(
        "max |after - before| = {:.3} (the tile moved); max |moved camera - before| = {:.2e}",
        differs(&after, &before),
        differs(&again, &before)
    );

    let out = PathBuf::from("target/examples/transform_splat");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let png = out.join("transform_splat.png");
    save_row(&png, &[before, after, again])?;
    println!(
        "wrote {} (before | after | after, from the moved camera)",
        png.display()
    );
    Ok(())
}
