//! What commands read from their arguments: a splat file as a field, a SCENE argument (a
//! splat file, a checkpoint or a run folder) with its run's config, and lists of numbers.

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use ember_data::read_splats;
use ember_field::splats::field_from_splats;
use ember_field::{GaussianField, PanoramaProjection};
use ember_kernels::SplatBackend;
use ember_train::TrainConfig;
use ember_train::checkpoint::CheckpointFile;

/// How the 360° commands (`render --equirect`, `data walk360`) draw a panorama.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ProjectionArg {
    /// Every Gaussian projected onto the sphere, one rasterization, no seams.
    #[default]
    Sphere,
    /// The six faces of a cube, rendered and stitched.
    Cube,
}

impl From<ProjectionArg> for PanoramaProjection {
    fn from(arg: ProjectionArg) -> Self {
        match arg {
            ProjectionArg::Sphere => PanoramaProjection::Sphere,
            ProjectionArg::Cube => PanoramaProjection::Cube,
        }
    }
}

/// The splat file `path` as a field on `device`, and its number of Gaussians; a file with NaN
/// or infinite values is refused, naming how many and the first.
pub fn read_splat_field<B: SplatBackend>(
    path: &Path,
    device: &B::Device,
) -> Result<(GaussianField<B>, usize)> {
    let splats = read_splats(path).with_context(|| format!("reading {}", path.display()))?;
    if let Some(bad) = splats.non_finite() {
        bail!(
            "{}: {} of {} Gaussians hold NaN or infinite values (the first is index {}): \
             refusing to use them",
            path.display(),
            bad.count,
            splats.len(),
            bad.first
        );
    }
    let field = field_from_splats::<B>(&splats, device)
        .with_context(|| format!("{} as a field", path.display()))?;
    Ok((field, splats.len()))
}

/// The config of the run whose folder is `folder` (its `config.toml`), if it is a run's.
pub fn run_config(folder: &Path) -> Result<Option<TrainConfig>> {
    let file = folder.join("config.toml");
    if !file.is_file() {
        return Ok(None);
    }
    let config = TrainConfig::from_file(&file)
        .with_context(|| format!("reading the run's config {}", file.display()))?;
    Ok(Some(config))
}

/// Whether the file `path` is a run's output drawn with the antialiasing filter: its folder
/// holds the `config.toml` of a run with `raster.antialiased = true`.
pub fn trained_antialiased(path: &Path) -> Result<bool> {
    let folder = path.parent().filter(|f| !f.as_os_str().is_empty());
    let folder = folder.unwrap_or(Path::new("."));
    Ok(run_config(folder)?.is_some_and(|c| c.raster.antialiased))
}

/// The field a SCENE argument names (a splat file, a checkpoint or a run folder, see
/// [`crate::view::ViewArgs`]), and the run's config when it is a run's.
pub fn load_field<B: SplatBackend>(
    scene: &Path,
    device: &B::Device,
) -> Result<(GaussianField<B>, Option<TrainConfig>)> {
    let from_checkpoint = |path: &Path| -> Result<GaussianField<B>> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let file = CheckpointFile::parse(&bytes, path)?;
        Ok(file.field(device, path)?)
    };
    let from_splats =
        |path: &Path| -> Result<GaussianField<B>> { Ok(read_splat_field::<B>(path, device)?.0) };
    if scene.is_dir() {
        let data = run_config(scene)?;
        let checkpoint = scene.join("checkpoint.safetensors");
        let ply = scene.join("splats.ply");
        let field = if checkpoint.is_file() {
            from_checkpoint(&checkpoint)?
        } else if ply.is_file() {
            from_splats(&ply)?
        } else {
            bail!(
                "{} is a folder without checkpoint.safetensors or splats.ply: give a run \
                 folder, a splat file or a checkpoint",
                scene.display()
            );
        };
        return Ok((field, data));
    }
    let is_checkpoint = scene
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    if is_checkpoint {
        let data = scene.parent().map(run_config).transpose()?.flatten();
        Ok((from_checkpoint(scene)?, data))
    } else {
        Ok((from_splats(scene)?, None))
    }
}

/// `N` comma-separated finite numbers, e.g. `1,0,0.5`.
pub fn parse_numbers<const N: usize>(text: &str) -> Result<[f64; N], String> {
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

/// Three comma-separated finite numbers (`R,G,B`, `X,Y,Z`).
pub fn parse_triple(text: &str) -> Result<[f64; 3], String> {
    parse_numbers::<3>(text)
}
