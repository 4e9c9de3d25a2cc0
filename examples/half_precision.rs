//! Would half-precision compositing keep the picture? The accuracy half of the f16/bf16
//! experiment, measured on the CPU, where a GPU is not needed to answer it.
//!
//! `cargo run --release --example half_precision [-- SPLAT_FILE]` (default: the trained
//! `biker` scene, `splats/playcanvas-engine/biker.spz` under `EMBER_DATA_DIR`, 152 746 splats).
//!
//! The scene is projected and binned by Ember's CPU kernels (f32) for 8 orbit views at 800x800,
//! then composited per pixel front to back by a scalar compositor four ways:
//! - `f32`: every value in f32, the reference (checked against Ember's CPU rasterizer);
//! - `f16 sums`: transmittance, colour and depth sums rounded to IEEE half after every update
//!   (what "accumulate in f16" means on a GPU), alpha computed in f32;
//! - `f16 all`: the same, and alpha rounded to half too (a half `exp`);
//! - `bf16 sums`: the sums rounded to bfloat16.
//!
//! It prints, per variant, the PSNR of its images against the f32 images (how much error the
//! rounding adds) and what that does to the PSNR of a scene trained to 28.4 dB (Ember's CPU lego
//! run) and 34.8 dB (its H200 run) against its test images, assuming the rounding error is
//! independent of the model's: `10 log10(1 + MSE_round / MSE_model)`. The experiment's rule is
//! to keep a precision only if it costs under 0.05 dB and is faster; the speed half needs a GPU.

use std::path::PathBuf;
use std::time::Instant;

use ember::data::read_splats;
use ember::kernels::project::cpu::{self as project, ProjectArrays};
use ember::kernels::project::{CameraParams, ProjectOptions};
use ember::kernels::raster::cpu::{self as raster, Bins, RasterArrays};
use ember::train::scene::look_at;
use half::{bf16, f16};
use rayon::prelude::*;

const SIZE: u32 = 800;
const VIEWS: usize = 8;
const MIN_ALPHA: f32 = 1.0 / 255.0;
const MAX_ALPHA: f32 = 0.999;
const MIN_TRANSMITTANCE: f32 = 1e-4;

/// How the compositor rounds: its running sums, and alpha.
#[derive(Clone, Copy)]
struct Precision {
    name: &'static str,
    sums: fn(f32) -> f32,
    alpha: fn(f32) -> f32,
}

fn exact(x: f32) -> f32 {
    x
}

fn to_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

fn to_bf16(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

const VARIANTS: [Precision; 4] = [
    Precision {
        name: "f32",
        sums: exact,
        alpha: exact,
    },
    Precision {
        name: "f16 sums",
        sums: to_f16,
        alpha: exact,
    },
    Precision {
        name: "f16 all",
        sums: to_f16,
        alpha: to_f16,
    },
    Precision {
        name: "bf16 sums",
        sums: to_bf16,
        alpha: exact,
    },
];

/// The RGB image `[H, W, 3]` of the binned splats over a black background, composited per pixel
/// with the rounding of `p` (Ember's compositing rule: skip `alpha < 1/255`, stop before the
/// transmittance reaches 1e-4).
fn composite(a: &RasterArrays<'_, f32>, bins: &Bins, p: Precision) -> Vec<f32> {
    let (w, h) = (bins.width() as usize, bins.height() as usize);
    let tiles_x = bins.tiles_x() as usize;
    let rows: Vec<Vec<f32>> = (0..h)
        .into_par_iter()
        .map(|py| {
            let mut row = vec![0.0f32; 3 * w];
            for px in 0..w {
                let list = bins.tile((py / 16) * tiles_x + px / 16);
                let (cx, cy) = (px as f32 + 0.5, py as f32 + 0.5);
                let mut t = 1.0f32;
                let mut rgb = [0.0f32; 3];
                for &g in list {
                    let g = g as usize;
                    let (dx, dy) = (cx - a.xy[2 * g], cy - a.xy[2 * g + 1]);
                    let [ca, cb, cc] = [a.conic[3 * g], a.conic[3 * g + 1], a.conic[3 * g + 2]];
                    let sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy;
                    let alpha = (p.alpha)((a.opacity[g] * (-sigma).exp()).min(MAX_ALPHA));
                    if sigma < 0.0 || alpha < MIN_ALPHA {
                        continue;
                    }
                    let next = (p.sums)(t * (1.0 - alpha));
                    if next <= MIN_TRANSMITTANCE {
                        break;
                    }
                    for (c, acc) in rgb.iter_mut().enumerate() {
                        *acc = (p.sums)(*acc + t * alpha * a.color[3 * g + c]);
                    }
                    t = next;
                }
                row[3 * px..3 * px + 3].copy_from_slice(&rgb);
            }
            row
        })
        .collect();
    rows.concat()
}

fn mse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            // Images are compared as they would be saved: clamped to [0, 1].
            let d = f64::from(x.clamp(0.0, 1.0)) - f64::from(y.clamp(0.0, 1.0));
            d * d
        })
        .sum();
    sum / a.len() as f64
}

fn psnr(mse: f64) -> f64 {
    -10.0 * mse.log10()
}

/// 8 cameras around the splats' central 90% (real captures have far outliers).
fn orbit(means: &[[f32; 3]]) -> Vec<CameraParams> {
    let percentile = |axis: usize, q: f64| {
        let mut v: Vec<f32> = means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        f64::from(v[((v.len() - 1) as f64 * q) as usize])
    };
    let lo: [f64; 3] = std::array::from_fn(|k| percentile(k, 0.05));
    let hi: [f64; 3] = std::array::from_fn(|k| percentile(k, 0.95));
    let centre: [f64; 3] = std::array::from_fn(|k| 0.5 * (lo[k] + hi[k]));
    let radius = 1.2 * (0..3).map(|k| (hi[k] - lo[k]).powi(2)).sum::<f64>().sqrt() / 2.0;
    (0..VIEWS)
        .map(|k| {
            let angle = k as f64 * std::f64::consts::TAU / VIEWS as f64;
            let eye = [
                centre[0] + radius * angle.cos(),
                centre[1] + radius * angle.sin(),
                centre[2] + 0.3 * radius,
            ];
            look_at(eye, centre, SIZE)
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let dir = std::env::var("EMBER_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
            PathBuf::from(dir).join("splats/playcanvas-engine/biker.spz")
        });
    if !path.exists() {
        println!("skipped: {} not found (set EMBER_DATA_DIR)", path.display());
        return Ok(());
    }
    let started = Instant::now();
    let splats = read_splats(&path)?;
    let k = splats.sh_rest_coefficients() + 1;
    let sh: Vec<f32> = (0..splats.len())
        .flat_map(|i| {
            let mut row = splats.sh_dc[i].to_vec();
            row.extend_from_slice(&splats.sh_rest[i * (k - 1) * 3..(i + 1) * (k - 1) * 3]);
            row
        })
        .collect();
    let arrays = ProjectArrays {
        means: splats.means.as_flattened(),
        quats: splats.quats.as_flattened(),
        log_scales: splats.log_scales.as_flattened(),
        opacity_logits: &splats.opacity_logits,
        sh: &sh,
        sh_coeffs: k,
    };
    println!(
        "{}: {} splats, SH degree {}, {VIEWS} orbit views at {SIZE}x{SIZE}",
        path.display(),
        splats.len(),
        splats.sh_degree
    );
    let options = ProjectOptions::default();
    // Per variant: the summed squared error against f32 and the pixel count.
    let mut errors = vec![0.0f64; VARIANTS.len()];
    let mut worst = vec![0.0f32; VARIANTS.len()];
    let mut coverage = 0.0f64;
    for camera in orbit(&splats.means) {
        let p = project::forward(&arrays, &camera, &options)?;
        let bins = raster::bin(&p.xy, &p.depth, &p.radius, camera.width, camera.height)?;
        let ra = RasterArrays {
            xy: &p.xy,
            depth: &p.depth,
            conic: &p.conic,
            color: &p.color,
            opacity: &p.opacity,
        };
        let reference = composite(&ra, &bins, VARIANTS[0]);
        // The scalar f32 compositor is Ember's rasterizer, up to the order of float operations.
        let kernel = raster::forward(&ra, &bins, [0.0; 3])?;
        let drift = reference
            .iter()
            .zip(&kernel.rgb)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            drift < 1e-4,
            "scalar compositor and kernel differ by {drift}"
        );
        coverage += kernel.alpha.iter().map(|&a| f64::from(a)).sum::<f64>()
            / (kernel.alpha.len() * VIEWS) as f64;
        for (v, variant) in VARIANTS.iter().enumerate().skip(1) {
            let image = composite(&ra, &bins, *variant);
            errors[v] += mse(&image, &reference) / VIEWS as f64;
            let max = image
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            worst[v] = worst[v].max(max);
        }
    }
    println!(
        "mean coverage (alpha) of the views: {:.0}%",
        100.0 * coverage
    );
    println!();
    println!(
        "| precision | PSNR against f32 (dB) | max abs error | loss at 28.4 dB | loss at 34.8 dB |"
    );
    println!("|---|---|---|---|---|");
    for (v, variant) in VARIANTS.iter().enumerate().skip(1) {
        let loss = |model_psnr: f64| {
            let model = 10f64.powf(-model_psnr / 10.0);
            10.0 * (1.0 + errors[v] / model).log10()
        };
        println!(
            "| {} | {:.1} | {:.2e} | {:.3} dB | {:.3} dB |",
            variant.name,
            psnr(errors[v]),
            worst[v],
            loss(28.4),
            loss(34.8)
        );
    }
    println!();
    println!("What to notice: the rule keeps a precision only under a 0.05 dB loss; the sums are");
    println!("rounded at every splat a pixel meets, so their errors add up along the ray.");
    for (v, variant) in VARIANTS.iter().enumerate().skip(1) {
        let model = 10f64.powf(-34.8 / 10.0);
        let loss = 10.0 * (1.0 + errors[v] / model).log10();
        let verdict = if loss < 0.05 {
            "within the 0.05 dB rule at 34.8 dB: worth timing on a GPU"
        } else {
            "over the 0.05 dB rule at 34.8 dB: dropped whatever its speed"
        };
        println!("- {}: {verdict}", variant.name);
    }
    println!("(done in {:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}
