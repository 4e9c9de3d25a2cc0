//! # 360° panoramas: render one, cut it into a rig, stitch it back, and compare two projections
//!
//! `cargo run --release --example panorama [-- --width 1024 --out DIR --scene FILE --centre X,Y,Z]`
//!
//! A notebook in code, top to bottom. We read the biker scene
//! (`splats/playcanvas-engine/biker.spz` under `$EMBER_DATA_DIR`, default `../shared/data`, or
//! any splat file given with `--scene`), render it as an equirectangular panorama from a point
//! beside it (`ember::field::render_panorama`: every Gaussian projected onto the sphere), cut the
//! panorama into the default rig of pinhole views the way training reads a 360° frame
//! (`ember::data::equirect`: eight views of 90° on the horizon and the two poles, each pixel
//! averaging its footprint on the panorama), and stitch those views back into a panorama.
//! Last, both ways of drawing a panorama (the sphere's projection, and a cube's six faces
//! stitched) are compared with what a pinhole camera sees: 26 views of 60° all around (half of
//! the horizon's centred on the cube's seams) rendered directly, against the same views cut
//! from each panorama. Everything is written under `--out` as PNG.
//!
//! What to notice:
//! - the panorama's left and right edges meet (longitude wraps), its top row is straight up;
//! - the ring's views overlap by half: a 360° frame gives training each horizon direction twice
//!   (the `equirect-cpu` preset cuts a cube instead: every direction once);
//! - the round trip (panorama -> views -> panorama) keeps the picture to about 46 dB at the
//!   default width (51 dB at 2048): what it loses is the filtering of two resamplings, not the
//!   geometry.
//! - the pole views are the costliest per pixel to cut: near a pole a view pixel's footprint
//!   spans many degrees of longitude, and the filter takes up to 256 samples along it;
//! - against the pinhole views the sphere's panorama is the closer one (about 2 dB pooled at
//!   2048) everywhere but on the horizon views centred on the cube's faces, where the cube's
//!   panorama is itself a pinhole view; it is also about 3 times faster to draw. Each cube
//!   face composites in its own depth order, so overlapping Gaussians can change order across
//!   a seam; the sphere sorts by distance, one order for every direction.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ember::backend::Default as B;
use ember::data::equirect::{Pyramid, RigCamera, cut_view, stitch};
use ember::data::{EquirectRig, read_splats};
use ember::field::{
    Camera, PanoramaProjection, RenderOptions, render_batch_images, render_panorama, rig_cameras,
};
use ember::splats::field_from_splats;

/// Command-line settings.
struct Args {
    width: u32,
    out: PathBuf,
    scene: Option<PathBuf>,
    centre: [f64; 3],
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        width: 1024,
        out: PathBuf::from("target/examples/panorama"),
        scene: None,
        centre: [1.2, -1.6, 0.0],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--width" => {
                let v = value()?;
                let width: u32 = v.parse().map_err(|e| format!("--width {v}: {e}"))?;
                if width < 4 || !width.is_multiple_of(2) {
                    return Err("--width must be even and at least 4".into());
                }
                args.width = width;
            }
            "--out" => args.out = PathBuf::from(value()?),
            "--scene" => args.scene = Some(PathBuf::from(value()?)),
            "--centre" => {
                let v = value()?;
                let parts: Vec<f64> = v
                    .split(',')
                    .map(|p| p.trim().parse::<f64>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--centre {v}: {e}"))?;
                args.centre = parts
                    .try_into()
                    .map_err(|_| format!("--centre {v}: three numbers X,Y,Z"))?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (try --width N, --out DIR, --scene FILE, --centre X,Y,Z)"
                ));
            }
        }
    }
    Ok(args)
}

/// Writes 8-bit RGB as PNG, atomically.
fn save_png(path: &Path, width: u32, height: u32, rgb: Vec<u8>) -> Result<(), String> {
    let image = image::RgbImage::from_raw(width, height, rgb)
        .ok_or_else(|| format!("{}: image size mismatch", path.display()))?;
    let tmp = path.with_extension("png.tmp");
    image
        .save_with_format(&tmp, image::ImageFormat::Png)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The mean squared error of two 8-bit images, in levels².
fn squared_error(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        / a.len() as f64
}

/// PSNR of a mean squared error in levels², floored at 8-bit rounding noise (1/12 level²) as
/// evaluation floors it.
fn mse_psnr(mse: f64) -> f64 {
    10.0 * (255.0f64.powi(2) / mse.max(1.0 / 12.0)).log10()
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    mse_psnr(squared_error(a, b))
}

fn main() {
    ember::kernels::host_allocator::keep_freed_memory();
    if let Err(e) = run() {
        eprintln!("panorama: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let dir = std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")));
    let file = args
        .scene
        .clone()
        .unwrap_or_else(|| dir.join("splats/playcanvas-engine/biker.spz"));
    if !file.is_file() {
        return Err(format!(
            "{} not found: this example needs the biker scene (set EMBER_DATA_DIR)",
            file.display()
        ));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;

    // 1. The scene, and a panorama camera 1.2 units beside the biker, at his waist (or at
    //    `--centre`), looking along +z with the scene's up (-y) up: only its pose matters.
    let splats = read_splats(&file).map_err(|e| e.to_string())?;
    let device = Default::default();
    let field = field_from_splats::<B>(&splats, &device).map_err(|e| e.to_string())?;
    let centre = args.centre;
    let camera = Camera {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: centre.map(|c| -c),
        fx: 1.0,
        fy: 1.0,
        cx: 0.0,
        cy: 0.0,
        width: args.width,
        height: args.width / 2,
    };
    println!("{}: {} Gaussians", file.display(), splats.len());

    // 2. The panorama.
    let (w, h) = (args.width, args.width / 2);
    let started = Instant::now();
    let options = RenderOptions::default().with_background([0.15, 0.2, 0.3]);
    let panorama = render_panorama(&field, &camera, w, PanoramaProjection::Sphere, &options)
        .map_err(|e| e.to_string())?;
    println!(
        "panorama {w}x{h}: {:.0} ms (projected onto the sphere)",
        started.elapsed().as_secs_f64() * 1e3,
    );
    save_png(&args.out.join("panorama.png"), w, h, panorama.clone())?;

    // 3. Cut into the default rig, as training reads a 360° frame.
    let rig = EquirectRig::default();
    let size = rig.native_size(w);
    let source = Pyramid::new(w as usize, h as usize, panorama.clone(), true);
    let started = Instant::now();
    let views: Vec<(RigCamera, Vec<u8>)> = rig
        .cameras(size)
        .into_iter()
        .map(|c| {
            let pixels = cut_view(&source, &c);
            (c, pixels)
        })
        .collect();
    println!(
        "cut into {} views of {size}x{size} ({:.1}% of the sphere seen): {:.0} ms",
        views.len(),
        100.0 * rig.coverage(20_000),
        started.elapsed().as_secs_f64() * 1e3
    );
    for (camera, pixels) in &views {
        let name = format!("view_{:02}.png", camera.index);
        save_png(&args.out.join(name), size, size, pixels.clone())?;
    }

    // 4. Stitched back, and compared with the panorama they came from.
    let pyramids: Vec<(RigCamera, Pyramid)> = views
        .into_iter()
        .map(|(c, pixels)| (c, Pyramid::new(size as usize, size as usize, pixels, false)))
        .collect();
    let refs: Vec<(RigCamera, &Pyramid)> = pyramids.iter().map(|(c, p)| (*c, p)).collect();
    let back = stitch(&refs, w as usize, h as usize);
    println!(
        "round trip (panorama -> views -> panorama): {:.1} dB",
        psnr(&back, &panorama)
    );
    save_png(&args.out.join("stitched.png"), w, h, back)?;

    // 5. The sphere's projection and the cube's faces against pinhole views all around.
    let started = Instant::now();
    let cube = render_panorama(&field, &camera, w, PanoramaProjection::Cube, &options)
        .map_err(|e| e.to_string())?;
    println!(
        "the same panorama from a cube's six faces of {} px, stitched: {:.0} ms",
        ember::field::cube_rig().native_size(w),
        started.elapsed().as_secs_f64() * 1e3,
    );
    save_png(&args.out.join("panorama_cube.png"), w, h, cube.clone())?;
    let probes = EquirectRig {
        views: 8,
        fov_deg: 60.0,
        size: None,
        pitch_deg: vec![0.0, -45.0, 45.0],
        poles: true,
    };
    let size = probes.native_size(w);
    let views = rig_cameras(&camera, &probes, size);
    let cameras: Vec<Camera> = views.iter().map(|(_, c)| *c).collect();
    let drawn = render_batch_images(&field, &cameras, &options).map_err(|e| e.to_string())?;
    let drawn = drawn
        .rgb
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let side = (size * size * 3) as usize;
    for (name, pixels) in [("sphere", &panorama), ("cube", &cube)] {
        let source = Pyramid::new(w as usize, h as usize, pixels.clone(), true);
        // Squared errors per view, pooled: the horizon's views centred on the cube's faces
        // (yaw 0°, 90°, ...) and on its seams (45°, 135°, ...), the rings at -45° and +45°, and
        // the poles.
        let errors: Vec<f64> = views
            .iter()
            .zip(drawn.chunks_exact(side))
            .map(|((view, _), reference)| {
                let reference: Vec<u8> = reference
                    .iter()
                    .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
                    .collect();
                squared_error(&cut_view(&source, view), &reference)
            })
            .collect();
        let pooled = |part: &[f64]| mse_psnr(part.iter().sum::<f64>() / part.len() as f64);
        let worst = errors.iter().copied().fold(0.0, f64::max);
        println!(
            "{name:>6} against {} pinhole views of 60°: {:.2} dB (horizon on faces/seams \
             {:.2} / {:.2}, rings -45°/+45° {:.2} / {:.2}, poles {:.2} dB; worst view {:.2} dB)",
            errors.len(),
            pooled(&errors),
            pooled(&errors[0..8].iter().step_by(2).copied().collect::<Vec<_>>()),
            pooled(&errors[1..8].iter().step_by(2).copied().collect::<Vec<_>>()),
            pooled(&errors[8..16]),
            pooled(&errors[16..24]),
            pooled(&errors[24..26]),
            mse_psnr(worst),
        );
    }
    println!("wrote {}", args.out.display());
    Ok(())
}
