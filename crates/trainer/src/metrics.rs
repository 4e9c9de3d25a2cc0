//! `trainer metrics A B`: PSNR, SSIM and LPIPS of two images of one size, on the `--backend`
//! given before the subcommand.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use burn::tensor::{ElementConversion, Tensor, TensorData};
use clap::Args;
use ember_data::images::decode_rgb;
use ember_kernels::SplatBackend;
use ember_train::loss::{psnr, ssim};
use ember_train::lpips::load_configured;
use ember_train::write_atomically;
use serde_json::json;

use crate::guard::not_an_input;
use crate::inputs::parse_triple;

/// `trainer metrics A.png B.png [--json FILE]`.
#[derive(Args, Debug)]
pub struct MetricsArgs {
    /// The first image, PNG or JPEG (a render, say).
    a: PathBuf,
    /// The second image, PNG or JPEG, of the same size (its reference).
    b: PathBuf,
    /// The colour an image's alpha channel is composited on, RGB in [0, 1] (default black;
    /// NeRF-Synthetic's protocol uses white: 1,1,1).
    #[arg(long, value_name = "R,G,B", value_parser = parse_triple)]
    background: Option<[f64; 3]>,
    /// The LPIPS weights (safetensors, see scripts/lpips-weights.py); default: the
    /// EMBER_LPIPS_WEIGHTS environment variable, else the weights Ember ships. A file that does
    /// not load leaves LPIPS out, with a notice.
    #[arg(long, value_name = "FILE")]
    lpips_weights: Option<PathBuf>,
    /// Also write the numbers to this JSON file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// An image file (PNG or JPEG) as `[H, W, 3]` RGB in `[0, 1]`, its alpha (if any) composited on
/// `background` as the dataset loaders do.
fn read_rgb<B: SplatBackend>(
    path: &Path,
    background: [f32; 3],
    device: &B::Device,
) -> Result<Tensor<B, 3>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let rgb = decode_rgb(&bytes, path, background)?;
    let shape = [rgb.height() as usize, rgb.width() as usize, 3];
    let values: Vec<f32> = rgb
        .into_raw()
        .iter()
        .map(|&v| f32::from(v) / 255.0)
        .collect();
    Ok(Tensor::from_data(TensorData::new(values, shape), device))
}

/// `trainer metrics`: prints the metrics, and writes them to `--json` when given.
pub fn metrics<B: SplatBackend>(args: &MetricsArgs, device: &B::Device) -> Result<()> {
    if let Some(out) = &args.json {
        not_an_input("--json", out, &[args.a.as_path(), args.b.as_path()])?;
    }
    let background = args.background.unwrap_or([0.0; 3]).map(|c| c as f32);
    let a = read_rgb::<B>(&args.a, background, device)?;
    let b = read_rgb::<B>(&args.b, background, device)?;
    let ([ha, wa, _], [hb, wb, _]) = (a.dims(), b.dims());
    if (ha, wa) != (hb, wb) {
        bail!(
            "{} is {wa}x{ha} and {} is {wb}x{hb}: the images must be the same size",
            args.a.display(),
            args.b.display()
        );
    }
    let psnr_db = psnr(a.clone(), b.clone());
    let ssim_value: f32 = ssim(a.clone(), b.clone())
        .context("SSIM")?
        .into_scalar()
        .elem();
    let lpips = match load_configured::<B>(args.lpips_weights.as_deref(), device) {
        Ok(net) => Some(net.image_distance(a, b).context("LPIPS")?),
        Err(why) => {
            eprintln!("note: LPIPS is off: {why}");
            None
        }
    };
    let lpips_text = lpips.map_or("- (off)".to_string(), |v| format!("{v:.4}"));
    println!(
        "{} vs {} ({wa}x{ha}): PSNR {psnr_db:.2} dB, SSIM {ssim_value:.4}, LPIPS {lpips_text}",
        args.a.display(),
        args.b.display()
    );
    if let Some(out) = &args.json {
        let value = json!({
            "a": args.a, "b": args.b, "width": wa, "height": ha,
            // JSON has no infinity: identical images have no finite PSNR.
            "psnr": psnr_db.is_finite().then_some(psnr_db), "ssim": ssim_value, "lpips": lpips,
        });
        let text = serde_json::to_string_pretty(&value)? + "\n";
        write_atomically(out, text.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
