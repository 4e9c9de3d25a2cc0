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
//! to keep a precision only if it costs under 0.05 dB and is faster. The speed half was
//! measured on an H100 (docs/benchmarks-history.md, "Half-precision sums"): f16 sums were not faster, so
//! Ember keeps f32 sums everywhere.
//!
//! Then the field query on the same splats (`out = sum_i f_i exp(-d_i^2 / 2)`, features
//! `f_i = opacity_i * colour_i`, 3-sigma cutoff): 8192 points, three quarters near splat centres
//! and a quarter uniform in the scene's central box, each summed over its Gaussians in index
//! order (as one GPU thread per point would) with the running sum in f32, rounded to f16 after
//! every addition, or to bf16. The scalar f32 sum is checked against Ember's CPU field query.

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

/// The box of the splats' central 90% per axis (real captures have far outliers): the 5th and
/// 95th percentiles.
fn central_box(means: &[[f32; 3]]) -> ([f64; 3], [f64; 3]) {
    let percentile = |axis: usize, q: f64| {
        let mut v: Vec<f32> = means.iter().map(|m| m[axis]).collect();
        v.sort_by(f32::total_cmp);
        f64::from(v[((v.len() - 1) as f64 * q) as usize])
    };
    (
        std::array::from_fn(|k| percentile(k, 0.05)),
        std::array::from_fn(|k| percentile(k, 0.95)),
    )
}

/// 8 cameras around the splats' [`central_box`].
fn orbit(means: &[[f32; 3]]) -> Vec<CameraParams> {
    let (lo, hi) = central_box(means);
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
        // The scalar f32 compositor is Ember's rasterizer up to the rounding of its operations:
        // the kernel evaluates `sigma` and `exp` with fused multiply-adds, so a pair right at the
        // `alpha >= 1/255` threshold can be drawn by one and skipped by the other (at most
        // ~1/255 of a pixel's colour, ~0.008 with its effect on what lies behind). Everywhere
        // else they agree to rounding: the mean difference stays tiny.
        let kernel = raster::forward(&ra, &bins, [0.0; 3])?;
        let (drift, total) = reference
            .iter()
            .zip(&kernel.rgb)
            .fold((0.0f32, 0.0f64), |(max, sum), (a, b)| {
                ((a - b).abs().max(max), sum + f64::from((a - b).abs()))
            });
        let mean = total / reference.len() as f64;
        assert!(
            drift < 0.01 && mean < 1e-5,
            "scalar compositor and kernel differ by {drift} (max), {mean:e} (mean)"
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
    field_query_precision(&splats)?;
    println!("(done in {:.1} s)", started.elapsed().as_secs_f64());
    Ok(())
}

/// The field query's accumulation in f16 and bf16 against f32 (see the module docs).
fn field_query_precision(splats: &ember::data::Splats) -> Result<(), Box<dyn std::error::Error>> {
    use ember::field::sh::SH_C0;
    use ember::kernels::field::FieldOptions;
    use ember::kernels::field::cpu::{self as field, FieldArrays};
    use ember::kernels::transform::Similarity;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    const POINTS: usize = 8192;
    const CUTOFF: f32 = 3.0;
    let n = splats.len();
    let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
    let features: Vec<f32> = (0..n)
        .flat_map(|i| {
            let o = sigmoid(splats.opacity_logits[i]);
            splats.sh_dc[i].map(|dc| o * (0.5 + SH_C0 as f32 * dc).max(0.0))
        })
        .collect();
    // Per Gaussian: the whitening `W = S^-1 R^T` (rows) and a bounding radius for the cutoff.
    let whitening: Vec<([[f32; 3]; 3], f32)> = (0..n)
        .map(|i| {
            // Row-major R from the normalised quaternion (a zero one gives the identity, as in
            // the field query).
            let r = Similarity::rotation(splats.quats[i].map(f64::from)).rotation_matrix();
            let s = splats.log_scales[i].map(f32::exp);
            let rows =
                core::array::from_fn(|a| core::array::from_fn(|b| r[3 * b + a] as f32 / s[a]));
            (rows, CUTOFF * s.iter().fold(0.0f32, |m, v| m.max(*v)))
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(11);
    let (lo, hi) = central_box(&splats.means);
    let points: Vec<[f32; 3]> = (0..POINTS)
        .map(|p| {
            if p % 4 == 3 {
                core::array::from_fn(|a| (lo[a] + (hi[a] - lo[a]) * rng.random::<f64>()) as f32)
            } else {
                let i = rng.random_range(0..n);
                let reach = whitening[i].1 / CUTOFF;
                core::array::from_fn(|a| splats.means[i][a] + reach * (rng.random::<f32>() - 0.5))
            }
        })
        .collect();
    // Per point and channel: the f32, f16 and bf16 sums.
    let sums: Vec<[[f32; 3]; 3]> = points
        .par_iter()
        .map(|x| {
            let mut acc = [[0.0f32; 3]; 3];
            for (i, (rows, reach)) in whitening.iter().enumerate() {
                let v: [f32; 3] = core::array::from_fn(|a| x[a] - splats.means[i][a]);
                if v[0] * v[0] + v[1] * v[1] + v[2] * v[2] > reach * reach {
                    continue;
                }
                let d2: f32 = rows
                    .iter()
                    .map(|row| {
                        let t = row[0] * v[0] + row[1] * v[1] + row[2] * v[2];
                        t * t
                    })
                    .sum();
                if d2 > CUTOFF * CUTOFF {
                    continue;
                }
                let g = (-0.5 * d2).exp();
                for c in 0..3 {
                    let term = features[3 * i + c] * g;
                    acc[0][c] += term;
                    acc[1][c] = to_f16(acc[1][c] + term);
                    acc[2][c] = to_bf16(acc[2][c] + term);
                }
            }
            acc
        })
        .collect();
    let reference: Vec<f32> = sums.iter().flat_map(|s| s[0]).collect();
    let flat_points: Vec<f32> = points.as_flattened().to_vec();
    let kernel = field::forward(
        &FieldArrays {
            points: &flat_points,
            means: splats.means.as_flattened(),
            quats: splats.quats.as_flattened(),
            log_scales: splats.log_scales.as_flattened(),
            features: &features,
            channels: 3,
        },
        &FieldOptions::default().with_cutoff(CUTOFF),
    );
    let peak = reference.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let drift = reference
        .iter()
        .zip(&kernel)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        drift <= 1e-4 * peak,
        "scalar field sum and kernel differ by {drift} (peak {peak})"
    );
    let terms = reference.iter().filter(|v| **v > 0.0).count();
    println!();
    println!(
        "field query: {POINTS} points, {terms} of {} channel values non-zero, peak {peak:.3}",
        reference.len()
    );
    println!(
        "| accumulation | PSNR against f32 (dB, peak = max value) | max abs error | max relative error where |f32| > 1% of peak |"
    );
    println!("|---|---|---|---|");
    for (v, name) in [(1, "f16 sums"), (2, "bf16 sums")] {
        let values: Vec<f32> = sums.iter().flat_map(|s| s[v]).collect();
        // Unclamped (field values are not colours), relative to the peak.
        let mse = values
            .iter()
            .zip(&reference)
            .map(|(x, y)| (f64::from(x - y) / f64::from(peak)).powi(2))
            .sum::<f64>()
            / values.len() as f64;
        let (max_abs, max_rel) =
            values
                .iter()
                .zip(&reference)
                .fold((0.0f32, 0.0f32), |(a, r), (x, y)| {
                    let e = (x - y).abs();
                    let rel = if y.abs() > 0.01 * peak {
                        e / y.abs()
                    } else {
                        0.0
                    };
                    (a.max(e), r.max(rel))
                });
        println!(
            "| {name} | {:.1} | {max_abs:.2e} | {max_rel:.2e} |",
            psnr(mse)
        );
    }
    println!();
    println!("What to notice: a point meets far fewer Gaussians than a pixel's ray, so the field");
    println!("query loses less than compositing; but its values are often read one at a time,");
    println!("so the relative error of single values matters as much as the PSNR.");
    Ok(())
}
