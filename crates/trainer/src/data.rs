//! `trainer data`: making and reshaping 360° datasets.
//!
//! - `split360 FRAMES --out DIR`: equirectangular frames (a folder of panoramas, or a
//!   `transforms.json` of `EQUIRECTANGULAR` frames) written as a rig's perspective images in
//!   COLMAP's rig layout, with `rig_config.json`, and a `transforms.json` when the frames have
//!   poses ([`ember_data::equirect::split`]).
//! - `walk360 SCENE --out DIR`: a 360° walk rendered through a splat scene: equirectangular frames
//!   along a closed path, their exact poses in a `transforms.json` (`EQUIRECTANGULAR`), and some
//!   of the scene's centres as the initial points (the part of SfM a synthetic scene can give).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use ember_data::equirect::{SplitOptions, read_panorama_frames, split_panoramas};
use ember_data::transforms_json::{FrameOut, TransformsOut, write_transforms};
use ember_data::{Dataset, DatasetOptions, EquirectRig, PointCloud, Pose, read_splats};
use ember_field::{RenderOptions, render_panorama};
use ember_kernels::{CameraParams, SplatBackend};
use image::ImageEncoder;

use crate::guard::{fits_in_memory, not_inside};
use crate::inputs::{ProjectionArg, parse_triple, read_splat_field};

/// Making and reshaping datasets.
#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Split 360° frames (a folder of 2:1 panoramas, or a transforms.json of EQUIRECTANGULAR
    /// frames) into a rig's perspective images: images/view_NN/FRAME.jpg (COLMAP's
    /// single_camera_per_folder layout), rig_config.json (for colmap rig_configurator) and,
    /// when the frames have poses, a transforms.json of PINHOLE frames that trains as it is.
    Split360(Split360Args),
    /// Render a 360° walk through a splat scene: 2:1 frames along a closed path, their exact
    /// poses in transforms.json (EQUIRECTANGULAR) and some of the scene's centres as points.ply.
    Walk360(Walk360Args),
}

/// The rig a panorama is cut into (see `data.equirect` in a config).
#[derive(Args, Debug, Clone)]
pub struct RigArgs {
    /// Views per ring, evenly spaced in yaw.
    #[arg(long, default_value_t = 8)]
    views: u32,
    /// Field of view of every view, degrees.
    #[arg(long, value_name = "DEGREES", default_value_t = 90.0)]
    fov: f64,
    /// Side of every view, pixels (default: the panorama's density, `width tan(fov/2) / π`).
    #[arg(long, value_name = "PIXELS")]
    size: Option<u32>,
    /// Pitch of each ring, degrees, positive up (comma-separated).
    #[arg(
        long,
        value_name = "DEGREES,...",
        value_delimiter = ',',
        default_value = "0",
        allow_hyphen_values = true
    )]
    pitch: Vec<f64>,
    /// Leave out the views straight up and straight down.
    #[arg(long)]
    no_poles: bool,
}

impl RigArgs {
    /// The rig these flags describe.
    pub fn rig(&self) -> EquirectRig {
        EquirectRig {
            views: self.views,
            fov_deg: self.fov,
            size: self.size,
            pitch_deg: self.pitch.clone(),
            poles: !self.no_poles,
        }
    }
}

/// `trainer data split360 FRAMES --out DIR`.
#[derive(Args, Debug)]
pub struct Split360Args {
    /// A folder of equirectangular panoramas (.jpg, .jpeg, .png; 2:1, one size), or a
    /// transforms.json (or a folder holding one) of EQUIRECTANGULAR frames.
    frames: PathBuf,
    /// The output folder (created; it must not hold images/ yet).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[command(flatten)]
    rig: RigArgs,
    /// Write PNG instead of JPEG.
    #[arg(long)]
    png: bool,
    /// JPEG quality, 1-100.
    #[arg(long, default_value_t = 95)]
    quality: u8,
}

/// `trainer data walk360 SCENE --out DIR`.
#[derive(Args, Debug)]
pub struct Walk360Args {
    /// The splat file walked through (.ply, .splat, .spz, .compressed.ply).
    scene: PathBuf,
    /// The output folder (created; it must not hold transforms.json yet).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Frames along the walk.
    #[arg(long, default_value_t = 40)]
    frames: usize,
    /// Panorama width, pixels (the height is half).
    #[arg(long, default_value_t = 2048)]
    width: u32,
    /// Walk where a capture's training cameras stood: the circle's centre, radius and up from
    /// the dataset (COLMAP, nerfstudio) at this path: the cameras' mean centre, their median
    /// distance from it, and their mean up axis (the flags below override each).
    #[arg(long, value_name = "DATASET")]
    cameras_of: Option<PathBuf>,
    /// Centre of the walk's circle, world units (default: the median of the Gaussians'
    /// centres).
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, allow_hyphen_values = true)]
    center: Option<[f64; 3]>,
    /// Radius of the walk's circle, world units (default: a quarter of the median distance of
    /// the Gaussians from the centre).
    #[arg(long)]
    radius: Option<f64>,
    /// The scene's up direction (default: -y, as COLMAP and OpenCV captures have it).
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, allow_hyphen_values = true)]
    up: Option<[f64; 3]>,
    /// Gaussian centres written to points.ply for initialisation, evenly chosen.
    #[arg(long, default_value_t = 20_000)]
    points: usize,
    /// Background behind the splats, RGB in [0, 1].
    #[arg(long, value_name = "R,G,B", value_parser = parse_triple)]
    background: Option<[f64; 3]>,
    /// Write PNG frames instead of JPEG (quality 95).
    #[arg(long)]
    png: bool,
    /// How each frame is drawn.
    #[arg(long, value_enum, default_value_t)]
    projection: ProjectionArg,
}

/// Runs `command`; `walk360` renders on backend `B`.
pub fn run<B: SplatBackend>(command: &DataCommand, device: &B::Device) -> Result<()> {
    match command {
        DataCommand::Split360(args) => split360(args),
        DataCommand::Walk360(args) => walk360::<B>(args, device),
    }
}

fn split360(args: &Split360Args) -> Result<()> {
    not_inside("--out", &args.out, &[&args.frames])?;
    let (frames, points) = read_panorama_frames(&args.frames)
        .with_context(|| format!("reading the frames of {}", args.frames.display()))?;
    let options = SplitOptions {
        rig: args.rig.rig(),
        jpeg_quality: (!args.png).then_some(args.quality),
        ..SplitOptions::default()
    };
    let coverage = options.rig.coverage(20_000);
    let total = frames.len();
    let step = total.div_ceil(10).max(1);
    let progress = |done: usize| {
        if total >= 10 && (done.is_multiple_of(step) || done == total) {
            eprintln!("{done}/{total} frames");
        }
    };
    let summary = split_panoramas(&frames, points.as_deref(), &args.out, &options, &progress)
        .with_context(|| format!("splitting into {}", args.out.display()))?;
    let seconds = summary.seconds.max(1e-9);
    let phases = summary.decode_seconds + summary.cut_seconds + summary.write_seconds;
    let share = |s: f64| 100.0 * s / phases.max(1e-9);
    println!(
        "{}: {} frames of {}x{} -> {} views of {}x{} ({} a frame, {:.1}% of the sphere) in \
         {seconds:.1} s: {:.1} views/s; decode {:.0}%, cut {:.0}%, encode and write {:.0}%{}",
        args.out.display(),
        summary.frames,
        summary.panorama_size.0,
        summary.panorama_size.1,
        summary.views,
        summary.view_size,
        summary.view_size,
        options.rig.view_count(),
        100.0 * coverage,
        summary.views as f64 / seconds,
        share(summary.decode_seconds),
        share(summary.cut_seconds),
        share(summary.write_seconds),
        if summary.transforms {
            "; transforms.json written (the frames have poses)"
        } else {
            "; no transforms.json (the frames have no poses: run COLMAP with rig_config.json)"
        }
    );
    Ok(())
}

/// The walk's panorama cameras: `count` poses on a circle of `radius` about `center` in the
/// plane across `up`, each looking along the walk (forward) with its top towards `up`.
fn walk_poses(center: [f64; 3], radius: f64, up: [f64; 3], count: usize) -> Result<Vec<Pose>> {
    let norm = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let length = norm(up);
    if length.is_nan() || length <= 1e-12 {
        bail!("--up must be a direction, not zero");
    }
    let up = up.map(|v| v / length);
    // Two axes across `up`.
    let helper = if up[0].abs() < 0.9 {
        [1.0, 0.0, 0.0]
    } else {
        [0.0, 1.0, 0.0]
    };
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let e1 = {
        let c = cross(up, helper);
        let n = norm(c);
        c.map(|v| v / n)
    };
    let e2 = cross(up, e1);
    Ok((0..count)
        .map(|k| {
            let angle = std::f64::consts::TAU * k as f64 / count as f64;
            let (s, c) = angle.sin_cos();
            let position: [f64; 3] =
                std::array::from_fn(|i| center[i] + radius * (c * e1[i] + s * e2[i]));
            // OpenCV axes: z forward (the walk's tangent), y down, x = y × z.
            let forward: [f64; 3] = std::array::from_fn(|i| -s * e1[i] + c * e2[i]);
            let down = up.map(|v| -v);
            let right = cross(down, forward);
            let rotation = [
                right[0], right[1], right[2], down[0], down[1], down[2], forward[0], forward[1],
                forward[2],
            ];
            let translation = std::array::from_fn(|row| {
                -(0..3)
                    .map(|col| rotation[3 * row + col] * position[col])
                    .sum::<f64>()
            });
            Pose {
                rotation,
                translation,
            }
        })
        .collect())
}

/// The circle a capture's training cameras stand on: their mean centre, their median distance
/// from it, and their mean up axis (each photo's -y, OpenCV axes).
fn capture_circle(path: &Path) -> Result<([f64; 3], f64, [f64; 3])> {
    let dataset = Dataset::load(path, &DatasetOptions::default())
        .with_context(|| format!("loading the cameras of {}", path.display()))?;
    let count = dataset.train.len() as f64;
    let mut center = [0.0; 3];
    let mut up = [0.0; 3];
    for view in &dataset.train {
        let c = view.pose.center();
        for a in 0..3 {
            center[a] += c[a] / count;
            // The camera's y axis in the world is the rotation's second row; up is its negation.
            up[a] -= view.pose.rotation[3 + a] / count;
        }
    }
    let radius = median(
        dataset
            .train
            .iter()
            .map(|v| {
                let c = v.pose.center();
                (0..3)
                    .map(|a| (c[a] - center[a]).powi(2))
                    .sum::<f64>()
                    .sqrt()
            })
            .collect(),
    );
    Ok((center, radius, up))
}

/// The median of `values` (empty: 0).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let middle = values.len() / 2;
    *values.select_nth_unstable_by(middle, f64::total_cmp).1
}

fn walk360<B: SplatBackend>(args: &Walk360Args, device: &B::Device) -> Result<()> {
    if args.frames == 0 {
        bail!("--frames must be at least 1");
    }
    if args.width < 4 || !args.width.is_multiple_of(2) {
        bail!("--width {} must be even and at least 4", args.width);
    }
    not_inside("--out", &args.out, &[&args.scene])?;
    let transforms_path = args.out.join("transforms.json");
    if transforms_path.exists() {
        bail!(
            "{} exists: make the walk in a new folder",
            transforms_path.display()
        );
    }
    fits_in_memory(
        &format!("a {}x{} panorama", args.width, args.width / 2),
        // Six faces of (width / π)² pixels in f32 through the renderer, and the panorama.
        u128::from(args.width) * u128::from(args.width) * 48,
    )?;
    let splats =
        read_splats(&args.scene).with_context(|| format!("reading {}", args.scene.display()))?;
    let capture = match &args.cameras_of {
        Some(path) => Some(capture_circle(path)?),
        None => None,
    };
    let center = args.center.or(capture.map(|c| c.0)).unwrap_or_else(|| {
        std::array::from_fn(|a| median(splats.means.iter().map(|m| f64::from(m[a])).collect()))
    });
    let distance = |p: [f64; 3]| {
        (0..3)
            .map(|a| (p[a] - center[a]).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    let radius = match args.radius.or(capture.map(|c| c.1)) {
        Some(r) if r.is_finite() && r >= 0.0 => r,
        Some(r) => bail!("--radius {r} must be a distance, at least 0"),
        None => {
            0.25 * median(
                splats
                    .means
                    .iter()
                    .map(|m| distance(m.map(f64::from)))
                    .collect(),
            )
        }
    };
    let up = args.up.or(capture.map(|c| c.2)).unwrap_or([0.0, -1.0, 0.0]);
    let poses = walk_poses(center, radius, up, args.frames)?;
    let (field, count) = read_splat_field::<B>(&args.scene, device)?;
    let background = args.background.unwrap_or([0.0; 3]).map(|c| c as f32);
    let options = RenderOptions::default().with_background(background);
    let frames_dir = args.out.join("frames");
    std::fs::create_dir_all(&frames_dir)
        .with_context(|| format!("creating {}", frames_dir.display()))?;
    let extension = if args.png { "png" } else { "jpg" };
    let (width, height) = (args.width, args.width / 2);
    let started = Instant::now();
    let mut entries = Vec::with_capacity(args.frames);
    for (k, pose) in poses.iter().enumerate() {
        let camera = CameraParams {
            rotation: pose.rotation,
            translation: pose.translation,
            fx: 1.0,
            fy: 1.0,
            cx: 0.0,
            cy: 0.0,
            width,
            height,
        };
        let rgb = render_panorama(&field, &camera, width, args.projection.into(), &options)
            .with_context(|| format!("rendering frame {k}"))?;
        let file_path = format!("frames/{k:05}.{extension}");
        write_rgb(&rgb, width, height, !args.png, &args.out.join(&file_path))?;
        entries.push(FrameOut::new(file_path, pose));
        if args.frames >= 10
            && ((k + 1).is_multiple_of(args.frames.div_ceil(10)) || k + 1 == args.frames)
        {
            eprintln!("{}/{} frames", k + 1, args.frames);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let chosen = ember_data::evenly_spaced(splats.len(), Some(args.points));
    let points = PointCloud {
        positions: chosen.iter().map(|&i| splats.means[i]).collect(),
        colors: Some(
            chosen
                .iter()
                .map(|&i| {
                    // Colour at DC: SH_C0 times the coefficient plus 0.5, as the renderer's.
                    splats.sh_dc[i]
                        .map(|c| ((0.282_094_8 * c + 0.5).clamp(0.0, 1.0) * 255.0).round() as u8)
                })
                .collect(),
        ),
    };
    points
        .write_ply(&args.out.join("points.ply"))
        .context("writing points.ply")?;
    write_transforms(
        &transforms_path,
        &TransformsOut {
            camera_model: "EQUIRECTANGULAR".to_string(),
            pinhole: None,
            frames: entries,
            ply_file_path: Some("points.ply".to_string()),
            train_filenames: None,
            test_filenames: None,
        },
    )?;
    println!(
        "{}: {} frames of {width}x{height} on a circle of radius {radius:.3} about [{:.3}, {:.3}, \
         {:.3}], {count} Gaussians rendered on {} in {:.1} s ({:.0} ms a frame), {} points",
        args.out.display(),
        args.frames,
        center[0],
        center[1],
        center[2],
        B::name(device),
        seconds,
        1e3 * seconds / args.frames as f64,
        points.len()
    );
    Ok(())
}

/// Writes RGB `width x height` to `path` as JPEG (quality 95) or PNG, atomically.
pub fn write_rgb(rgb: &[u8], width: u32, height: u32, jpeg: bool, path: &Path) -> Result<()> {
    let mut bytes = Vec::new();
    if jpeg {
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 95).write_image(
            rgb,
            width,
            height,
            image::ExtendedColorType::Rgb8,
        )
    } else {
        image::codecs::png::PngEncoder::new(&mut bytes).write_image(
            rgb,
            width,
            height,
            image::ExtendedColorType::Rgb8,
        )
    }
    .with_context(|| format!("encoding {}", path.display()))?;
    ember_train::write_atomically(path, &bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_circles_its_centre_looking_ahead_with_up_up() {
        let poses = walk_poses([1.0, 2.0, 3.0], 0.5, [0.0, -2.0, 0.0], 8).unwrap();
        for (k, pose) in poses.iter().enumerate() {
            let c = pose.center();
            let d = ((c[0] - 1.0).powi(2) + (c[2] - 3.0).powi(2)).sqrt();
            assert!(
                (d - 0.5).abs() < 1e-12 && (c[1] - 2.0).abs() < 1e-12,
                "{k}: {c:?}"
            );
            // The camera's y axis (down) is the scene's +y (up is -y).
            assert!((pose.rotation[4] - 1.0).abs() < 1e-12);
            // Forward is the tangent: the next centre lies ahead.
            let next = poses[(k + 1) % 8].center();
            let ahead = pose.transform_point(next);
            assert!(
                ahead[2] > 0.0 && ahead[0].abs() < ahead[2],
                "{k}: {ahead:?}"
            );
            assert_eq!(pose.problem(), None);
        }
        assert!(walk_poses([0.0; 3], 1.0, [0.0; 3], 4).is_err());
    }
}
