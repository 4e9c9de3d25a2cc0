//! The splat-file subcommands: `convert`, `transform` and `info`, over `ember::data`'s splat
//! readers and writers (3DGS PLY, `.splat`, SPZ; PlayCanvas compressed PLY read only).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use ember_data::{SplatInfo, convert, info, transform};
use ember_kernels::transform::Similarity;

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
        None => "none (no Gaussians)".into(),
    };
    format!(
        "{}: {:?}, {} Gaussians, SH degree {}, bounds {bounds}",
        path.display(),
        info.format,
        info.count,
        info.sh_degree
    )
}

/// Runs one splat-file subcommand, printing what it read or wrote.
pub fn run(command: &SplatCommand) -> Result<()> {
    match command {
        SplatCommand::Convert { input, output } => {
            let written = convert(input, output).with_context(|| {
                format!("converting {} to {}", input.display(), output.display())
            })?;
            println!("{}", describe(output, &written));
        }
        SplatCommand::Transform(args) => {
            let similarity = args.similarity()?;
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
    }
    Ok(())
}
