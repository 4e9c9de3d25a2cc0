//! The splat-file subcommands: `convert`, `transform`, `edit`, `info` and `render`, over `ember_data`'s
//! splat readers and writers (3DGS PLY, `.splat`, SPZ; PlayCanvas compressed PLY read only) and
//! `ember_field::render`.

use std::path::{Path, PathBuf};

use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use ember_data::{
    CameraPath, Dataset, DatasetOptions, HierarchyConfig, Region, SplatFilter, SplatInfo, convert,
    edit, find_camera, info, parse_camera_file, parse_camera_path, transform,
};
use ember_field::{
    DEFAULT_LOD_MIN_SAVING, GaussianField, RenderOptions, render_batch_images, render_lod_images,
    render_panorama,
};
use ember_kernels::transform::Similarity;
use ember_kernels::{CameraParams, SplatBackend};
use ember_train::{TrainConfig, write_atomically};
use image::ImageFormat;

use crate::guard::{fits_in_memory, not_an_input};
use crate::inputs::{ProjectionArg, load_field, parse_numbers, parse_triple, trained_antialiased};

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
    /// Keep the Gaussians of a splat file inside a box or sphere (or outside it), above an
    /// opacity or below a size: floaters and background out, as the viewer's page does.
    Edit(EditArgs),
    /// Print a splat file's format, Gaussian count, SH degree and bounds.
    Info {
        /// The file.
        input: PathBuf,
    },
    /// Render a splat file, a checkpoint or a run folder through a camera into a PNG or JPEG
    /// (or a 360° panorama from its centre with `--equirect`), or along a camera path into
    /// numbered PNGs and an animated PNG (on the `--backend` given before the subcommand).
    Render(RenderArgs),
}

/// `trainer render IN (--camera CAM.json | --data PATH --view I) --out IMG.png`, or
/// `trainer render IN --path PATH.json --out DIR`.
#[derive(Args, Debug)]
pub struct RenderArgs {
    /// What to render: a splat file, a checkpoint (`.safetensors`) or a run folder (its
    /// checkpoint, else its `splats.ply`).
    input: PathBuf,
    /// Camera as JSON: `rotation` (9, row-major world-to-camera), `translation` (3), `fx`,
    /// `fy`, `cx`, `cy` (pixels), `width`, `height`; OpenCV axes.
    #[arg(
        long,
        value_name = "CAMERA.json",
        conflicts_with_all = ["data", "path"],
        required_unless_present_any = ["data", "path"]
    )]
    camera: Option<PathBuf>,
    /// With `--camera`, the camera of that name in a camera list: the `cameras.json` of a run
    /// that refined its poses (`{"cameras": [{"name", "refined", "camera"}]}`).
    #[arg(long, value_name = "NAME", requires = "camera")]
    name: Option<String>,
    /// A dataset (COLMAP, NeRF-Synthetic, nerfstudio) whose view `--view` to render.
    #[arg(long, value_name = "PATH", requires = "view", conflicts_with = "path")]
    data: Option<PathBuf>,
    /// Index of the view among the dataset's train, then val, then test views.
    #[arg(long, value_name = "I")]
    view: Option<usize>,
    /// A camera path as JSON: `fps` (default 30) and `keyframes`, each a `time` in seconds and a
    /// `camera` as in `--camera`, and optionally `render` (`background`, `sh_degree`,
    /// `lod_threshold`: how the viewer's page drew). Every frame is rendered into the folder
    /// `--out`.
    #[arg(long, value_name = "PATH.json", requires = "out")]
    path: Option<PathBuf>,
    /// Output image: PNG (`.png`) or JPEG (`.jpg`, `.jpeg`); `render.png` when not given. With
    /// `--path`, a folder (created if missing) for `frame_00000.png`, `frame_00001.png`, ...
    /// and `path.apng`, all frames as an animated PNG.
    #[arg(long, value_name = "IMG.png|DIR")]
    out: Option<PathBuf>,
    /// Background colour, RGB in [0, 1] (over a camera path's own).
    #[arg(long, value_name = "R,G,B", value_parser = parse_triple)]
    background: Option<[f64; 3]>,
    /// Draw with the 2D antialiasing filter (default: on for a splat file in the folder of a
    /// run trained with `raster.antialiased = true`, else off): a field trained with the
    /// filter is drawn with it.
    #[arg(long)]
    antialiased: bool,
    /// Draw a 360° equirectangular panorama WIDTH x WIDTH/2 (default 2048) from the camera's
    /// centre, in its axes (its intrinsics unused), as `--projection` says.
    #[arg(
        long,
        value_name = "WIDTH",
        num_args = 0..=1,
        default_missing_value = "2048",
        conflicts_with = "path"
    )]
    equirect: Option<u32>,
    /// How `--equirect` draws the panorama.
    #[arg(long, value_enum, default_value_t, requires = "equirect")]
    projection: ProjectionArg,
}

impl RenderArgs {
    fn camera(&self) -> Result<CameraParams> {
        if let Some(path) = &self.camera {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading the camera {}", path.display()))?;
            return Ok(match &self.name {
                Some(name) => find_camera(&bytes, path, name)?,
                None => parse_camera_file(&bytes, path)?,
            });
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

    /// The render options: the default ones over `--background` (black when not given) and
    /// the antialiasing filter (`--antialiased`, or the `raster.antialiased` of `run`, the
    /// input's run, or of the run folder a splat file is in).
    fn options(&self, run: Option<&TrainConfig>) -> Result<RenderOptions> {
        let background = self.background.unwrap_or([0.0; 3]).map(|c| c as f32);
        let trained = match run {
            Some(config) => config.raster.antialiased,
            None if self.input.is_file() => trained_antialiased(&self.input)?,
            None => false,
        };
        let antialiased = self.antialiased || trained;
        Ok(RenderOptions::default()
            .with_background(background)
            .with_antialiased(antialiased))
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

/// Refuses a render of `camera`'s size whose buffers exceed the memory this machine has.
fn render_fits_in_memory(camera: &CameraParams) -> Result<()> {
    fits_in_memory(
        &format!("a {}x{} render", camera.width, camera.height),
        u128::from(camera.width) * u128::from(camera.height) * RENDER_BYTES_PER_PIXEL,
    )
}

/// `field` through `camera` as 8-bit RGB, `[height, width, 3]` row-major, read back to the host.
/// The images alone ([`render_batch_images`] of one camera): no depth image, and a
/// `[1, H, W, 3]` read back as it is (`render`'s `[H, W, 3]` is a copy on ndarray).
fn render_rgb8<B: SplatBackend>(
    field: &GaussianField<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<Vec<u8>> {
    let out =
        render_batch_images(field, core::slice::from_ref(camera), options).context("rendering")?;
    rgb8(ember_field::to_host(out.rgb, "the rendered image")?)
}

/// An image in `[0, 1]` as 8-bit values.
fn rgb8(rgb: Vec<f32>) -> Result<Vec<u8>> {
    Ok(rgb
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect())
}

/// The render options of a camera path's frames: `base` (the command's) with the path file's
/// `render` settings, as the viewer's page drew them; `--background` on the command line wins
/// over the file's.
fn path_options<B: SplatBackend>(
    base: RenderOptions,
    args: &RenderArgs,
    camera_path: &CameraPath,
    field: &GaussianField<B>,
) -> RenderOptions {
    let render = camera_path.render();
    let mut options = base;
    if let (None, Some(bg)) = (args.background, render.background) {
        options = options.with_background(bg.map(|c| c as f32));
    }
    if let Some(degree) = render.sh_degree {
        options = options.with_sh_degree(degree.min(field.sh_degree() as u32));
    }
    if let Some(threshold) = render.lod_threshold.filter(|&t| t > 0.0) {
        options = options
            .with_lod_threshold(threshold as f32)
            .with_lod_min_saving(DEFAULT_LOD_MIN_SAVING);
    }
    options
}

/// Encodes 8-bit RGB `[height, width, 3]` as `format` and writes it to `out` atomically.
fn write_image(
    rgb: Vec<u8>,
    width: u32,
    height: u32,
    format: ImageFormat,
    out: &Path,
) -> Result<()> {
    let image = image::RgbImage::from_raw(width, height, rgb)
        .context("the image size does not match the camera")?;
    let mut encoded = Vec::new();
    image
        .write_to(&mut std::io::Cursor::new(&mut encoded), format)
        .with_context(|| format!("encoding {}", out.display()))?;
    write_atomically(out, &encoded).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// `trainer render`: the splat file drawn on backend `B`, written as PNG or JPEG; with
/// `--path`, every frame of the camera path ([`render_path`]).
pub fn render_png<B: SplatBackend>(args: &RenderArgs, device: &B::Device) -> Result<()> {
    if let Some(path_file) = &args.path {
        return render_path::<B>(args, path_file, device);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("render.png"));
    let format = image_format(&out)?;
    let inputs: Vec<&Path> = [Some(&args.input), args.camera.as_ref(), args.data.as_ref()]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .collect();
    not_an_input("--out", &out, &inputs)?;
    let mut camera = args.camera()?;
    if let Some(width) = args.equirect {
        if width < 4 || !width.is_multiple_of(2) {
            bail!("--equirect {width}: a panorama's width must be even and at least 4");
        }
        (camera.width, camera.height) = (width, width / 2);
    }
    render_fits_in_memory(&camera)?;
    let (field, run) = load_field::<B>(&args.input, device)?;
    let count = field.num_gaussians();
    let started = Instant::now();
    let options = args.options(run.as_ref())?;
    let rgb = match args.equirect {
        Some(width) => render_panorama(&field, &camera, width, args.projection.into(), &options)
            .context("rendering the panorama")?,
        None => render_rgb8(&field, &camera, &options)?,
    };
    let ms = started.elapsed().as_secs_f64() * 1e3;
    write_image(rgb, camera.width, camera.height, format, &out)?;
    println!(
        "{}: {count} Gaussians rendered at {}x{} on {} in {ms:.1} ms (with the read-back)",
        out.display(),
        camera.width,
        camera.height,
        B::name(device)
    );
    Ok(())
}

/// The animated PNG `trainer render --path` writes into its `--out` folder.
const ANIMATION_NAME: &str = "path.apng";

/// The file name of frame `index` in the `--out` folder: `frame_00000.png`, ...
fn frame_name(index: usize) -> String {
    format!("frame_{index:05}.png")
}

/// `trainer render IN --path PATH.json --out DIR`: every frame of the camera path in
/// `path_file`, rendered once the splat file is loaded, written as `DIR/frame_NNNNN.png` and
/// streamed into `DIR/path.apng` (through `path.apng.tmp`, removed on an error).
fn render_path<B: SplatBackend>(
    args: &RenderArgs,
    path_file: &Path,
    device: &B::Device,
) -> Result<()> {
    let Some(dir) = &args.out else {
        bail!("--path needs --out DIR, the folder for the frames");
    };
    let bytes = std::fs::read(path_file)
        .with_context(|| format!("reading the camera path {}", path_file.display()))?;
    let camera_path = parse_camera_path(&bytes, path_file)?;
    let inputs = [args.input.as_path(), path_file];
    not_an_input("--out", dir, &inputs)?;
    if dir.exists() && !dir.is_dir() {
        bail!(
            "--out {} is a file: with --path, --out is the folder for the frames (created if \
             missing)",
            dir.display()
        );
    }
    let frame_count = camera_path.frame_count();
    for index in 0..frame_count {
        not_an_input("the frame", &dir.join(frame_name(index)), &inputs)?;
    }
    let animation = dir.join(ANIMATION_NAME);
    not_an_input("the animation", &animation, &inputs)?;
    let first = camera_path.keyframes()[0].camera;
    render_fits_in_memory(&first)?;
    let (field, run) = load_field::<B>(&args.input, device)?;
    let count = field.num_gaussians();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;

    let mut partial = animation.clone().into_os_string();
    partial.push(".tmp");
    let partial = PathBuf::from(partial);
    let options = path_options(args.options(run.as_ref())?, args, &camera_path, &field);
    let lod = match camera_path.render().lod_threshold.filter(|&t| t > 0.0) {
        Some(_) => Some(
            field
                .hierarchy(&HierarchyConfig::default())
                .context("building the level-of-detail hierarchy the path asks for")?,
        ),
        None => None,
    };
    let draw = |camera: &CameraParams| match &lod {
        Some(hierarchy) => {
            let out = render_lod_images(hierarchy, camera, &options).context("rendering")?;
            rgb8(ember_field::to_host(out.rgb, "the rendered image")?)
        }
        None => render_rgb8(&field, camera, &options),
    };
    let started = Instant::now();
    let written = write_frames(&draw, &camera_path, dir, &partial).and_then(|()| {
        std::fs::rename(&partial, &animation)
            .with_context(|| format!("writing {}", animation.display()))
    });
    if written.is_err() {
        // Nothing to report if the temporary file was never created.
        let _ = std::fs::remove_file(&partial);
    }
    written?;
    let ms = started.elapsed().as_secs_f64() * 1e3 / frame_count as f64;
    let (width, height) = camera_path.size();
    println!(
        "{}: {frame_count} frames of {width}x{height} at {} fps ({} to {} and {ANIMATION_NAME}), \
         {count} Gaussians rendered on {} in {ms:.1} ms per frame (with the read-back and \
         encoding)",
        dir.display(),
        camera_path.fps(),
        frame_name(0),
        frame_name(frame_count - 1),
        B::name(device)
    );
    Ok(())
}

/// Renders every frame of `camera_path`, writes each as a PNG in `dir` and streams it into the
/// animated PNG `partial` (looping forever, one frame per `1 / fps` seconds). Progress goes to
/// stderr every tenth of the frames.
fn write_frames(
    draw: &dyn Fn(&CameraParams) -> Result<Vec<u8>>,
    camera_path: &CameraPath,
    dir: &Path,
    partial: &Path,
) -> Result<()> {
    let frame_count = camera_path.frame_count();
    let (width, height) = camera_path.size();
    let file = std::fs::File::create(partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let frames = u32::try_from(frame_count).context("too many frames for an animated PNG")?;
    encoder.set_animated(frames, 0)?;
    let (numerator, denominator) = frame_delay(camera_path.fps());
    encoder.set_frame_delay(numerator, denominator)?;
    let mut animation = encoder
        .write_header()
        .with_context(|| format!("writing {}", partial.display()))?;
    let progress_every = frame_count.div_ceil(10);
    for (index, camera) in camera_path.frames().enumerate() {
        let rgb = draw(&camera).with_context(|| format!("frame {index} of {frame_count}"))?;
        animation
            .write_image_data(&rgb)
            .with_context(|| format!("writing {}", partial.display()))?;
        write_image(
            rgb,
            width,
            height,
            ImageFormat::Png,
            &dir.join(frame_name(index)),
        )?;
        let done = index + 1;
        if frame_count >= 20 && done % progress_every == 0 && done < frame_count {
            eprintln!("{done}/{frame_count} frames");
        }
    }
    animation
        .finish()
        .with_context(|| format!("writing {}", partial.display()))?;
    Ok(())
}

/// The animated PNG frame delay `numerator / denominator` seconds (both 16-bit) nearest to
/// `1 / fps`: exact for whole frame rates and for rates such as 30000/1001.
fn frame_delay(fps: f64) -> (u16, u16) {
    let seconds = 1.0 / fps;
    let mut best = (1, 1);
    let mut best_error = f64::INFINITY;
    for denominator in 1..=u16::MAX {
        let numerator = (f64::from(denominator) * seconds)
            .round()
            .clamp(1.0, f64::from(u16::MAX));
        let error = (numerator / f64::from(denominator) - seconds).abs();
        if error < best_error {
            best = (numerator as u16, denominator);
            best_error = error;
            if error == 0.0 {
                break;
            }
        }
    }
    best
}

/// `trainer transform IN OUT ...`: `x' = s R (x - c) + c + t`.
#[derive(Args, Debug)]
pub struct TransformArgs {
    /// Input splat file.
    input: PathBuf,
    /// Output splat file.
    output: PathBuf,
    /// Translation `t`, world units.
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, allow_hyphen_values = true)]
    translate: Option<[f64; 3]>,
    /// Rotation as Euler angles in degrees, applied about x, then y, then z.
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, conflicts_with = "rotate_quat", allow_hyphen_values = true)]
    rotate_euler: Option<[f64; 3]>,
    /// Rotation as a quaternion `w,x,y,z` (normalised).
    #[arg(long, value_name = "W,X,Y,Z", value_parser = parse_quad, allow_hyphen_values = true)]
    rotate_quat: Option<[f64; 4]>,
    /// Uniform scale `s` (> 0).
    #[arg(long, value_name = "S")]
    scale: Option<f64>,
    /// Fixed point `c` of the rotation and scale, world units (default: the origin).
    #[arg(long, value_name = "X,Y,Z", value_parser = parse_triple, allow_hyphen_values = true)]
    center: Option<[f64; 3]>,
}

fn parse_quad(text: &str) -> Result<[f64; 4], String> {
    parse_numbers::<4>(text)
}

/// `trainer edit IN OUT [--crop-box ...|--crop-sphere ...] [--outside] [--min-opacity O]
/// [--max-scale S]`: every condition given must hold for a Gaussian to be kept
/// (`ember_data::splats::edit`).
#[derive(Args, Debug)]
pub struct EditArgs {
    /// Input splat file.
    input: PathBuf,
    /// Output splat file (never the input).
    output: PathBuf,
    /// Keep the centres inside this box (faces included), world units.
    #[arg(long, value_name = "MINX,MINY,MINZ,MAXX,MAXY,MAXZ", value_parser = parse_numbers::<6>, allow_hyphen_values = true)]
    crop_box: Option<[f64; 6]>,
    /// Keep the centres inside this sphere (its surface included), world units.
    #[arg(long, value_name = "X,Y,Z,R", value_parser = parse_quad, conflicts_with = "crop_box", allow_hyphen_values = true)]
    crop_sphere: Option<[f64; 4]>,
    /// Keep what lies outside the box or sphere instead (delete the region).
    #[arg(long)]
    outside: bool,
    /// Keep the Gaussians at least this opaque (0 to 1).
    #[arg(long, value_name = "O")]
    min_opacity: Option<f64>,
    /// Keep the Gaussians whose largest standard deviation is at most this, world units.
    #[arg(long, value_name = "S")]
    max_scale: Option<f64>,
}

impl EditArgs {
    /// The filter the flags describe.
    fn filter(&self) -> SplatFilter {
        SplatFilter {
            region: Region::from_flags(self.crop_box, self.crop_sphere),
            outside: self.outside,
            min_opacity: self.min_opacity,
            max_scale: self.max_scale,
        }
    }
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
        SplatCommand::Edit(args) => {
            not_an_input("the output", &args.output, &[&args.input])?;
            let (written, before) = edit(&args.input, &args.output, &args.filter())
                .with_context(|| format!("editing {}", args.input.display()))?;
            println!(
                "kept {} of {} Gaussians ({} removed)",
                written.count,
                before,
                before - written.count
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_delays_are_exact_for_common_rates() {
        assert_eq!(frame_delay(30.0), (1, 30));
        assert_eq!(frame_delay(240.0), (1, 240));
        assert_eq!(frame_delay(0.5), (2, 1));
        assert_eq!(frame_delay(30000.0 / 1001.0), (1001, 30000));
        let (numerator, denominator) = frame_delay(12.5);
        assert_eq!(f64::from(numerator) / f64::from(denominator), 0.08);
    }
}
