//! The splat-file subcommands: `convert`, `transform`, `info` and `render`, over `ember_data`'s
//! splat readers and writers (3DGS PLY, `.splat`, SPZ; PlayCanvas compressed PLY read only) and
//! `ember_field::render`.

use std::path::{Path, PathBuf};

use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use ember_data::{
    Dataset, DatasetOptions, SplatInfo, convert, info, parse_camera_file, read_splats, transform,
};
use ember_field::splats::field_from_splats;
use ember_field::{RenderOptions, render};
use ember_kernels::transform::Similarity;
use ember_kernels::{CameraParams, SplatBackend};
use ember_train::write_atomically;
use image::ImageFormat;

use crate::guard::{fits_in_memory, not_an_input};

/// A splat-file operation.
#[derive(Subcommand, Debug)]
pub enum SplatCommand {
    /// Convert a splat file to another format (each chosen by its extension).
    Convert {
        /// Input: .ply, .compressed.ply, .splat or .spz.
        input: PathBuf,
        /// Output: .ply, .splat or .spz.
        output: PathBuf,
    },
    /// Move, rotate and scale the Gaussians of a splat file (SH bands rotated too).
    Transform(TransformArgs),
    /// Print a splat file's format, Gaussian count, SH degree and bounds.
    Info {
        /// The file.
        input: PathBuf,
    },
    /// Render a splat file through a camera into a PNG or JPEG (on the `--backend` given before
    /// the subcommand).
    Render(RenderArgs),
}

/// `trainer render IN (--camera CAM.json | --data PATH --view I) --out IMG.png`.
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Splat file to render.
    input: PathBuf,
    /// Camera as JSON: `rotation` (9, row-major world-to-camera), `translation` (3), `fx`,
    /// `fy`, `cx`, `cy` (pixels), `width`, `height`; OpenCV axes.
    #[arg(
        long,
        value_name = "CAMERA.json",
        conflicts_with = "data",
        required_unless_present = "data"
    )]
    camera: Option<PathBuf>,
    /// A dataset (COLMAP, NeRF-Synthetic, nerfstudio) whose view `--view` to render.
    #[arg(long, value_name = "PATH", requires = "view")]
    data: Option<PathBuf>,
    /// Index of the view among the dataset's train, then val, then test views.
    #[arg(long, value_name = "I")]
    view: Option<usize>,
    /// Output image: PNG (`.png`) or JPEG (`.jpg`, `.jpeg`).
    #[arg(long, value_name = "IMG.png", default_value = "render.png")]
    out: PathBuf,
    /// Background colour, RGB in [0, 1].
    #[arg(long, value_name = "R,G,B", value_parser = parse_triple)]
    background: Option<[f64; 3]>,
}

impl RenderArgs {
    fn camera(&self) -> Result<CameraParams> {
        if let Some(path) = &self.camera {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading the camera {}", path.display()))?;
            return Ok(parse_camera_file(&bytes, path)?);
        }
        let (Some(data), Some(view)) = (&self.data, self.view) else {
            bail!("give --camera FILE.json, or --data PATH with --view I");
        };
        let dataset = Dataset::load(data, &DatasetOptions::default())
            .with_context(|| format!("loading the dataset {}", data.display()))?;
        let count = dataset.all_views().count();
        match dataset.all_views().nth(view) {
            Some(v) => Ok(v.camera()),
            None => bail!("--view {view}: {} has {count} views", data.display()),
        }
    }
}

/// Bytes of host memory a render needs per pixel: the image in f32 on the device and read
/// back (RGB, alpha and the compositing state), then as 8-bit RGB and encoded.
const RENDER_BYTES_PER_PIXEL: u128 = 48;

/// The image format `--out`'s extension names.
fn image_format(out: &Path) -> Result<ImageFormat> {
    let extension = out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("png") => Ok(ImageFormat::Png),
        Some("jpg" | "jpeg") => Ok(ImageFormat::Jpeg),
        _ => bail!(
            "--out {}: unknown image extension (write .png, .jpg or .jpeg)",
            out.display()
        ),
    }
}

/// `trainer render`: the splat file drawn on backend `B`, written as PNG or JPEG.
pub fn render_png<B: SplatBackend>(args: &RenderArgs, device: &B::Device) -> Result<()> {
    let format = image_format(&args.out)?;
    let inputs: Vec<&Path> = [Some(&args.input), args.camera.as_ref(), args.data.as_ref()]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    not_an_input("--out", &args.out, &inputs)?;
    let camera = args.camera()?;
    fits_in_memory(
        &format!("a {}x{} render", camera.width, camera.height),
        u128::from(camera.width) * u128::from(camera.height) * RENDER_BYTES_PER_PIXEL,
    )?;
    let splats =
        read_splats(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    if let Some(bad) = splats.non_finite() {
        bail!(
            "{}: {} of {} Gaussians hold NaN or infinite values (the first is index {}): \
             refusing to render them",
            args.input.display(),
            bad.count,
            splats.len(),
            bad.first
        );
    }
    let field = field_from_splats::<B>(&splats, device)
        .with_context(|| format!("{} as a field", args.input.display()))?;
    let background = args.background.unwrap_or([0.0; 3]).map(|c| c as f32);
    let options = RenderOptions::default().with_background(background);
    let started = Instant::now();
    let out = render(&field, &camera, &options).context("rendering")?;
    let rgb = ember_field::to_host(out.rgb, "the rendered image")?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let bytes: Vec<u8> = rgb
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let image = image::RgbImage::from_raw(camera.width, camera.height, bytes)
        .context("the image size does not match the camera")?;
    let mut encoded = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut encoded), format)
        .with_context(|| format!("encoding {}", args.out.display()))?;
    write_atomically(&args.out, &encoded)
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{}: {} Gaussians rendered at {}x{} on {} in {ms:.1} ms (with the read-back)",
        args.out.display(),
        splats.len(),
        camera.width,
        camera.height,
        B::name(device)
    );
    Ok(())
}

/// `trainer transform IN OUT ...`: `x' = s R (x - c) + c + t`.
#[derive(Args, Debug)]
pub struct TransformArgs {
    /// Input splat file.
    input: PathBuf,
    /// Output splat file.
    output: PathBuf,
    /// Translation `t`, world units.
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple)]
    translate: Option<[f64; 3]>,
    /// Rotation as Euler angles in degrees, applied about x, then y, then z.
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, conflicts_with = "rotate_quat")]
    rotate_euler: Option<[f64; 3]>,
    /// Rotation as a quaternion `w,x,y,z` (normalised).
    #[arg(long, value_name = "W,X,Y,Z", value_parser = parse_quad)]
    rotate_quat: Option<[f64; 4]>,
    /// Uniform scale `s` (> 0).
    #[arg(long, value_name = "S")]
    scale: Option<f64>,
    /// Fixed point `c` of the rotation and scale, world units (default: the origin).
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple)]
    center: Option<[f64; 3]>,
}

fn parse_numbers<const N: usize>(text: &str) -> Result<[f64; N], String> {
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>().map_err(|e| format!("`{v}`: {e}")))
        .collect::<Result<_, _>>()?;
    let array: [f64; N] = values
        .try_into()
        .map_err(|v: Vec<f64>| format!("expected {N} comma-separated numbers, got {}", v.len()))?;
    if array.iter().any(|v| !v.is_finite()) {
        return Err("the numbers must be finite".into());
    }
    Ok(array)
}

fn parse_triple(text: &str) -> Result<[f64; 3], String> {
    parse_numbers::<3>(text)
}

fn parse_quad(text: &str) -> Result<[f64; 4], String> {
    parse_numbers::<4>(text)
}

impl TransformArgs {
    /// The similarity the flags describe.
    fn similarity(&self) -> Result<Similarity> {
        let rotation = match (self.rotate_euler, self.rotate_quat) {
            (Some([x, y, z]), _) => {
                let about = |axis: [f64; 3], degrees: f64| {
                    Similarity::axis_angle(axis, degrees.to_radians())
                };
                about([1.0, 0.0, 0.0], x)
                    .then(&about([0.0, 1.0, 0.0], y))
                    .then(&about([0.0, 0.0, 1.0], z))
                    .rotation
            }
            (None, Some(q)) => {
                let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
                if norm < 1e-12 {
                    bail!("--rotate-quat: the quaternion has zero length");
                }
                q.map(|v| v / norm)
            }
            (None, None) => [1.0, 0.0, 0.0, 0.0],
        };
        let similarity = Similarity {
            rotation,
            scale: self.scale.unwrap_or(1.0),
            translation: self.translate.unwrap_or([0.0; 3]),
            centre: self.center.unwrap_or([0.0; 3]),
        };
        similarity
            .validate()
            .context("the transform's flags do not make a similarity")?;
        Ok(similarity)
    }
}

fn describe(path: &Path, info: &SplatInfo) -> String {
    let bounds = match info.bounds {
        Some([lo, hi]) => format!(
            "[{:.3}, {:.3}, {:.3}] .. [{:.3}, {:.3}, {:.3}]",
            lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]
        ),
        None if info.count == 0 => "none (no Gaussians)".into(),
        None => "none (no finite centre)".into(),
    };
    let non_finite = match info.non_finite {
        Some(bad) => format!(
            "; {} Gaussians hold NaN or infinite values (the first is index {})",
            bad.count, bad.first
        ),
        None => String::new(),
    };
    format!(
        "{}: {}, {} Gaussians, SH degree {}, bounds {bounds}{non_finite}",
        path.display(),
        info.format,
        info.count,
        info.sh_degree
    )
}

/// Runs one splat-file subcommand except `render` (which needs a backend: [`render_png`]),
/// printing what it read or wrote.
pub fn run(command: &SplatCommand) -> Result<()> {
    match command {
        SplatCommand::Convert { input, output } => {
            not_an_input("the output", output, &[input])?;
            let written = convert(input, output).with_context(|| {
                format!("converting {} to {}", input.display(), output.display())
            })?;
            println!("{}", describe(output, &written));
        }
        SplatCommand::Transform(args) => {
            let similarity = args.similarity()?;
            not_an_input("the output", &args.output, &[&args.input])?;
            let written = transform(&args.input, &args.output, &similarity).with_context(|| {
                format!(
                    "transforming {} into {}",
                    args.input.display(),
                    args.output.display()
                )
            })?;
            println!("{}", describe(&args.output, &written));
        }
        SplatCommand::Info { input } => {
            let read = info(input).with_context(|| format!("reading {}", input.display()))?;
            println!("{}", describe(input, &read));
        }
        SplatCommand::Render(_) => bail!("render needs a backend: call render_png"),
    }
    Ok(())
}
