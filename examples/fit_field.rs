//! # Fitting a Gaussian field to a surface
//!
//! `cargo run --release --example fit_field [-- --steps 300 --gaussians 2000 --out DIR]`
//!
//! A notebook in code, top to bottom. We take the Stanford bunny's scanned vertices
//! (`$EMBER_DATA_DIR/geometry/bunny.ply`, or a procedural torus when the file is absent), define
//! a target density that is 1 on the surface and falls off over a few percent of the object's
//! size, and fit a `GaussianField` of about 2000 anisotropic Gaussians to it by gradient descent
//! on point samples. Everything runs on `ember::backend::DefaultAutodiff` (cuda, else wgpu, else
//! the CPU).
//!
//! What to notice:
//! - the target itself is a Gaussian field (one small isotropic Gaussian per scan vertex,
//!   36k of them) evaluated with a 3-sigma cutoff: the query is both the model and the tool;
//! - the loss falls by well over an order of magnitude, and the Gaussians flatten onto the
//!   surface (their smallest scale shrinks relative to the largest);
//! - `fit_field_slices.png` shows three slices through the volume, target (left) and fit (right).

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember::backend::DefaultAutodiff as Train;
use ember::prelude::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Width of the target shell around the surface, in units of the normalised object (which fits
/// in [-1, 1]^3).
const SHELL_SIGMA: f32 = 0.03;

struct Args {
    steps: usize,
    gaussians: usize,
    batch: usize,
    out: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        steps: 300,
        gaussians: 2000,
        batch: 4096,
        out: PathBuf::from("target/examples/fit_field"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--steps" => args.steps = value()?.parse().map_err(|e| format!("--steps: {e}"))?,
            "--gaussians" => {
                args.gaussians = value()?.parse().map_err(|e| format!("--gaussians: {e}"))?
            }
            "--batch" => args.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--out" => args.out = PathBuf::from(value()?),
            other => {
                return Err(format!(
                    "unknown argument {other} (try --steps, --gaussians, --batch, --out)"
                ));
            }
        }
    }
    Ok(args)
}

/// The vertices of a PLY file (a scan or mesh: faces and other properties are skipped),
/// flattened to `[x0, y0, z0, x1, ...]`.
fn read_ply_vertices(path: &Path) -> Result<Vec<f32>, String> {
    let cloud = ember_data::PointCloud::read_ply(path).map_err(|e| e.to_string())?;
    if let Some(i) = cloud
        .positions
        .iter()
        .position(|p| p.iter().any(|v| !v.is_finite()))
    {
        return Err(format!("{}: vertex {i} is not finite", path.display()));
    }
    Ok(cloud.positions.concat())
}

/// Points on a torus (major radius 0.6, minor 0.25): the stand-in when the bunny is absent.
fn torus(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|_| {
            let (u, v) = (
                rng.random::<f32>() * std::f32::consts::TAU,
                rng.random::<f32>() * std::f32::consts::TAU,
            );
            let r = 0.6 + 0.25 * v.cos();
            [r * u.cos(), 0.25 * v.sin(), r * u.sin()]
        })
        .collect()
}

/// Centres the cloud and scales it into [-0.9, 0.9]^3.
fn normalise(points: &mut [f32]) {
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for p in points.chunks_exact(3) {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    let half = (0..3).map(|a| hi[a] - lo[a]).fold(0.0f32, f32::max) / 2.0;
    for p in points.chunks_exact_mut(3) {
        for a in 0..3 {
            p[a] = (p[a] - (lo[a] + hi[a]) / 2.0) / half * 0.9;
        }
    }
}

fn tensor2<B: Backend>(v: Vec<f32>, shape: [usize; 2], device: &B::Device) -> Tensor<B, 2> {
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// The target: one isotropic Gaussian of width `SHELL_SIGMA` per surface point, scaled so that
/// the density on the surface is about 1.
struct Target<B: Backend> {
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    weights: Tensor<B, 2>,
}

impl<B: SplatBackend> Target<B> {
    fn new(surface: &[f32], device: &B::Device) -> Self {
        let m = surface.len() / 3;
        let means = tensor2::<B>(surface.to_vec(), [m, 3], device);
        let quats = tensor2::<B>([1.0, 0.0, 0.0, 0.0].repeat(m), [m, 4], device);
        let log_scales = Tensor::full([m, 3], SHELL_SIGMA.ln(), device);
        let mut target = Target {
            means,
            quats,
            log_scales,
            weights: Tensor::ones([m, 1], device),
        };
        // Normalise by the median raw density at the surface points themselves.
        let probe: Vec<f32> = surface
            .chunks_exact(3)
            .step_by((m / 512).max(1))
            .flatten()
            .copied()
            .collect();
        let mut raw = target
            .eval(tensor2::<B>(probe.clone(), [probe.len() / 3, 3], device))
            .into_data()
            .to_vec::<f32>()
            .unwrap_or_default();
        raw.sort_by(f32::total_cmp);
        let median = raw
            .get(raw.len() / 2)
            .copied()
            .filter(|v| *v > 0.0)
            .unwrap_or(1.0);
        target.weights = Tensor::full([m, 1], 1.0 / median, device);
        target
    }

    fn eval(&self, points: Tensor<B, 2>) -> Tensor<B, 1> {
        let p = points.dims()[0];
        field_query(
            points,
            self.means.clone(),
            self.quats.clone(),
            self.log_scales.clone(),
            self.weights.clone(),
            FieldOptions::default()
                .with_cutoff(3.0)
                .with_covariance(Covariance::Diagonal),
        )
        .expect("shapes are built here")
        .reshape([p])
    }
}

/// Half the batch near the surface (a surface point plus noise of the shell's width), half
/// uniform in the box: the fit must learn both the shell and the empty space.
fn sample_batch(rng: &mut StdRng, surface: &[f32], batch: usize) -> Vec<f32> {
    let m = surface.len() / 3;
    (0..batch)
        .flat_map(|k| {
            if k % 2 == 0 {
                let i = rng.random_range(0..m);
                core::array::from_fn::<f32, 3, _>(|a| {
                    surface[3 * i + a] + SHELL_SIGMA * 2.0 * (rng.random::<f32>() - 0.5)
                })
            } else {
                core::array::from_fn(|_| rng.random::<f32>() * 2.0 - 1.0)
            }
        })
        .collect()
}

/// Target and fit on three axis-aligned slices, as one grey PNG (written atomically).
fn write_slices<B: SplatBackend>(
    field: &GaussianField<B>,
    target: &Target<B>,
    path: &Path,
    device: &B::Device,
) -> Result<(), String> {
    const RES: usize = 128;
    let planes = [(2usize, 0.0f32), (1, 0.0), (0, 0.0)];
    let mut image = image::GrayImage::new((2 * RES + 4) as u32, (planes.len() * (RES + 4)) as u32);
    for (row, (axis, offset)) in planes.iter().enumerate() {
        let pts: Vec<f32> = (0..RES * RES)
            .flat_map(|k| {
                let (u, v) = (
                    (k % RES) as f32 / RES as f32 * 2.0 - 1.0,
                    (k / RES) as f32 / RES as f32 * 2.0 - 1.0,
                );
                let (a, b) = ((axis + 1) % 3, (axis + 2) % 3);
                let mut p = [0.0f32; 3];
                p[*axis] = *offset;
                p[a] = u;
                p[b] = -v;
                p
            })
            .collect();
        let points = tensor2::<B>(pts, [RES * RES, 3], device);
        let want = target
            .eval(points.clone())
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        let got = field
            .query(points, FieldOptions::default().with_cutoff(3.0))
            .map_err(|e| e.to_string())?
            .into_data()
            .to_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        for (col, values) in [want, got].iter().enumerate() {
            for (k, v) in values.iter().enumerate() {
                let px = (col * (RES + 4) + k % RES) as u32;
                let py = (row * (RES + 4) + k / RES) as u32;
                image.put_pixel(px, py, image::Luma([(v.clamp(0.0, 1.0) * 255.0) as u8]));
            }
        }
    }
    let tmp = path.with_extension("png.tmp");
    image
        .save_with_format(&tmp, image::ImageFormat::Png)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let device = Default::default();
    let mut rng = StdRng::seed_from_u64(42);
    println!("backend: {}", <Train as Backend>::name(&device));

    // 1. The surface: the bunny's scan vertices, or a torus.
    let data_dir = std::env::var("EMBER_DATA_DIR").unwrap_or_else(|_| "../shared/data".into());
    let bunny = Path::new(&data_dir).join("geometry/bunny.ply");
    let mut surface = match read_ply_vertices(&bunny) {
        Ok(v) => {
            println!("surface: {} vertices of {}", v.len() / 3, bunny.display());
            v
        }
        Err(e) => {
            println!("surface: procedural torus ({e})");
            torus(&mut rng, 20_000)
        }
    };
    normalise(&mut surface);

    // 2. The target density, itself a (fixed) Gaussian field on the inner backend.
    let target = Target::<<Train as burn::tensor::backend::AutodiffBackend>::InnerBackend>::new(
        &surface, &device,
    );

    // 3. The model: Gaussians at random surface points, scales from their 3 nearest neighbours.
    let m = surface.len() / 3;
    let seeds: Vec<f32> = (0..args.gaussians)
        .flat_map(|_| {
            let i = rng.random_range(0..m);
            [surface[3 * i], surface[3 * i + 1], surface[3 * i + 2]]
        })
        .collect();
    let config = GaussianFieldConfig::new().with_opacity(0.5).with_seed(1);
    let mut field =
        GaussianField::<Train>::from_points(&config, &seeds, &vec![0.5; seeds.len()], &device)
            .map_err(|e| e.to_string())?;
    println!("model: {} Gaussians", field.num_gaussians());

    // 4. Adam, one learning rate per parameter group (Burn steps one group at a time).
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-15)
        .init::<Train, GaussianField<Train>>();
    let options = FieldOptions::default().with_cutoff(3.0);
    let start = Instant::now();
    let mut first_loss = None;
    let mut last_loss = f32::NAN;
    for step in 0..=args.steps {
        let batch = sample_batch(&mut rng, &surface, args.batch);
        let points = tensor2::<Train>(batch.clone(), [args.batch, 3], &device);
        let want = target.eval(tensor2(batch, [args.batch, 3], &device));
        let got = field.query(points, options).map_err(|e| e.to_string())?;
        let loss = (got - Tensor::from_inner(want)).powi_scalar(2).mean();
        last_loss = loss.clone().into_scalar();
        if !last_loss.is_finite() {
            return Err(format!("loss became {last_loss} at step {step}"));
        }
        first_loss.get_or_insert(last_loss);
        if step % 25 == 0 {
            println!(
                "step {step:4}  loss {last_loss:.5}  ({:.1} s)",
                start.elapsed().as_secs_f32()
            );
        }
        if step == args.steps {
            break;
        }
        let mut grads = loss.backward();
        for (lr, ids) in [
            (2e-3, vec![field.means.id]),
            (1e-2, vec![field.log_scales.id, field.quats.id]),
            (3e-2, vec![field.opacity_logits.id]),
        ] {
            let group = GradientsParams::from_params(&mut grads, &field, &ids);
            field = optim.step(lr, field, group);
        }
    }
    let first = first_loss.unwrap_or(f32::NAN);
    println!(
        "loss fell from {first:.5} to {last_loss:.5} ({:.1}x) in {} steps, {:.1} s",
        first / last_loss,
        args.steps,
        start.elapsed().as_secs_f32()
    );

    // 5. How the Gaussians changed shape: flattened onto the surface.
    let scales = field
        .log_scales
        .val()
        .exp()
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))?;
    let mut flatness: Vec<f32> = scales
        .chunks_exact(3)
        .map(|s| {
            s.iter().cloned().fold(f32::INFINITY, f32::min) / s.iter().cloned().fold(0.0, f32::max)
        })
        .collect();
    flatness.sort_by(f32::total_cmp);
    println!(
        "median smallest/largest scale: {:.2} (1.0 = round, the initial shape)",
        flatness[flatness.len() / 2]
    );

    // 6. Slices of target and fit.
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let path = args.out.join("fit_field_slices.png");
    write_slices(&field.valid(), &target, &path, &device)?;
    println!(
        "wrote {} (left: target, right: fit; slices z=0, y=0, x=0)",
        path.display()
    );
    Ok(())
}
