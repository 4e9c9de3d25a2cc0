//! # Level of detail
//!
//! `cargo run --release --example level_of_detail [-- --file SPLATS]`
//!
//! A notebook in code, top to bottom. We read a trained scene (by default the tile
//! `splats/gaussiansplats3d-pr477/lod2_tile_0.ply` under `$EMBER_DATA_DIR`, 6831 Gaussians; any
//! splat file with `--file`, e.g. `splats/playcanvas-engine/biker.spz`), build its
//! level-of-detail hierarchy with one call on the field, and render it from cameras at 1x, 2x,
//! 4x and 8x the distance that frames it: once whole, once through the hierarchy at the default
//! threshold, timing both and comparing the images.
//!
//! What to notice:
//! - the hierarchy adds about a third of the leaves as merged nodes (four children a node), in
//!   a fraction of a second;
//! - the farther the camera, the fewer Gaussians the cut draws (merged nodes whose projected
//!   size is under `DEFAULT_LOD_THRESHOLD` pixels stand in for their leaves), and the faster the
//!   render;
//! - the PSNR against the full render: at the default threshold (1 px) a node stands in for its
//!   leaves only while it is under a pixel, so the images stay close to the full render and the
//!   saving comes from the far views; a larger threshold (`RenderOptions::with_lod_threshold`)
//!   trades fidelity for speed (biker at 4 px: 2.3x at 4x the framing distance, at 36 dB;
//!   `trainer bench lod`, BENCHMARKS.md "Level of detail").

use std::path::PathBuf;
use std::time::Instant;

use burn::tensor::Tensor;
use ember::backend::Default as B;
use ember::data::{HierarchyConfig, read_splats};
use ember::field::{Camera, DEFAULT_LOD_THRESHOLD, RenderOptions, lod_cut, render, render_lod};
use ember::splats::field_from_splats;
use ember::train::scene::look_at;

const SIZE: u32 = 320;

fn host(t: Tensor<B, 3>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_default()
}

fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(x.clamp(0.0, 1.0) - y.clamp(0.0, 1.0)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (1.0 / mse).log10()
    }
}

/// The median of three timed runs of `f`, ms, and its last result.
fn timed<T>(mut f: impl FnMut() -> Result<T, String>) -> Result<(f64, T), String> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let started = Instant::now();
        last = Some(f()?);
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[1], last.expect("three runs")))
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = match (args.next().as_deref(), args.next()) {
        (Some("--file"), Some(file)) => PathBuf::from(file),
        (None, _) => {
            let dir = std::env::var("EMBER_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
            PathBuf::from(dir).join("splats/gaussiansplats3d-pr477/lod2_tile_0.ply")
        }
        _ => return Err("usage: level_of_detail [--file SPLATS]".into()),
    };

    // 1. The scene as a field, and its hierarchy: one call.
    let splats = read_splats(&path).map_err(|e| format!("{e} (set EMBER_DATA_DIR)"))?;
    let device = Default::default();
    let field = field_from_splats::<B>(&splats, &device).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let hierarchy = field
        .hierarchy(&HierarchyConfig::default())
        .map_err(|e| e.to_string())?;
    println!(
        "{}: {} Gaussians; hierarchy of {} nodes built in {:.2} s",
        path.display(),
        hierarchy.leaves,
        hierarchy.num_nodes(),
        started.elapsed().as_secs_f64()
    );

    // 2. The framing: the centre of the centres' box and a distance that shows all of it.
    let [lo, hi] = splats.bounds().ok_or("the scene has no finite centre")?;
    let centre: [f64; 3] = std::array::from_fn(|k| 0.5 * f64::from(lo[k] + hi[k]));
    let size = (0..3).map(|k| f64::from(hi[k] - lo[k])).fold(0.0, f64::max);

    // 3. Whole and through the hierarchy, at four distances.
    let full = RenderOptions::default();
    let lod = full.with_lod_threshold(DEFAULT_LOD_THRESHOLD);
    println!("| distance | full ms | LOD ms | speed-up | drawn | PSNR vs full |");
    println!("|---|---|---|---|---|---|");
    for distance in [1.0, 2.0, 4.0, 8.0] {
        let far = 1.2 * size * distance;
        let eye = [
            centre[0] - 0.8 * far,
            centre[1] - 0.6 * far,
            centre[2] + 0.5 * far,
        ];
        let camera: Camera = look_at(eye, centre, SIZE);
        let (full_ms, want) = timed(|| {
            Ok(host(
                render(&field, &camera, &full)
                    .map_err(|e| e.to_string())?
                    .rgb,
            ))
        })?;
        let (lod_ms, got) = timed(|| {
            Ok(host(
                render_lod(&hierarchy, &camera, &lod)
                    .map_err(|e| e.to_string())?
                    .rgb,
            ))
        })?;
        let drawn = lod_cut(&hierarchy, &camera, lod.lod_threshold)
            .map_err(|e| e.to_string())?
            .drawn();
        println!(
            "| {distance}x | {full_ms:.1} | {lod_ms:.1} | {:.2}x | {drawn} | {:.1} dB |",
            full_ms / lod_ms,
            psnr(&got, &want)
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("level_of_detail: {e}");
        std::process::exit(1);
    }
}
