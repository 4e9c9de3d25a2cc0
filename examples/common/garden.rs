//! The Mip-NeRF 360 *garden* test scene (`garden_points/test_garden.npz` under
//! `EMBER_DATA_DIR`, default `../shared/data`) as the rasterizer benchmark and the
//! `render_scene` example use it: gsplat's test setup.
//!
//! Scene: the SfM points inside `[-2, 2]^3`, their colours as the SH DC term (degree 0), random
//! scales uniform in `[1e-4, 0.02]` (stored as logs), random unit quaternions, opacities uniform
//! in `(0, 1)` (stored as logits), fixed seed. Cameras: the file's 3, at their own 648x420
//! intrinsics, or at `side x side` (same pose, `fx = fy` keeping the horizontal FOV, principal
//! point at the centre).

// Included by the raster bench and the render_scene example, each of which uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember::field::GaussianField;
use ember::kernels::project::CameraParams;
use ember::kernels::project::cpu::ProjectArrays;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// `Y_0^0`, the SH DC basis value, in `f32`.
const SH_C0: f32 = ember::kernels::SH_C0 as f32;
/// The seed of the random scales, rotations and opacities.
pub const SEED: u64 = 0x6a7d_e11a;

/// The file's contents, row-major.
pub struct Garden {
    pub means: Vec<f32>,
    pub colors: Vec<u8>,
    pub viewmats: Vec<f32>,
    pub ks: Vec<f32>,
    pub width: u32,
    pub height: u32,
}

/// The Gaussians drawn, in the layouts [`ProjectArrays`] takes.
pub struct Scene {
    pub means: Vec<f32>,
    pub quats: Vec<f32>,
    pub log_scales: Vec<f32>,
    pub opacity_logits: Vec<f32>,
    pub sh: Vec<f32>,
}

impl Scene {
    pub fn arrays(&self) -> ProjectArrays<'_, f32> {
        ProjectArrays {
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            opacity_logits: &self.opacity_logits,
            sh: &self.sh,
            sh_coeffs: 1,
        }
    }

    pub fn len(&self) -> usize {
        self.opacity_logits.len()
    }
}

/// Where the file is expected.
pub fn data_file() -> PathBuf {
    let dir = std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data")));
    dir.join("garden_points/test_garden.npz")
}

fn read_array<T: npyz::Deserialize>(
    npz: &mut npyz::npz::NpzArchive<std::io::BufReader<std::fs::File>>,
    name: &str,
    expected: &[u64],
) -> Result<Vec<T>, String> {
    let file = npz
        .by_name(name)
        .map_err(|e| format!("{name}: {e}"))?
        .ok_or_else(|| format!("no array `{name}`"))?;
    if file.shape() != expected {
        return Err(format!(
            "`{name}` has shape {:?}, expected {expected:?}",
            file.shape()
        ));
    }
    file.into_vec().map_err(|e| format!("{name}: {e}"))
}

/// Reads the file.
pub fn load(path: &Path) -> Result<Garden, String> {
    let mut npz = npyz::npz::NpzArchive::open(path).map_err(|e| e.to_string())?;
    let n = npz
        .by_name("means3d")
        .map_err(|e| e.to_string())?
        .ok_or("no array `means3d`")?
        .shape()
        .first()
        .copied()
        .ok_or("`means3d` is a scalar")?;
    let means = read_array::<f32>(&mut npz, "means3d", &[n, 3])?;
    let colors = read_array::<u8>(&mut npz, "colors", &[n, 3])?;
    let viewmats = read_array::<f32>(&mut npz, "viewmats", &[3, 4, 4])?;
    let ks = read_array::<f32>(&mut npz, "Ks", &[3, 3, 3])?;
    let side = |name: &str, npz: &mut _| -> Result<u32, String> {
        let v = read_array::<i64>(npz, name, &[])?;
        v.first()
            .and_then(|s| u32::try_from(*s).ok())
            .ok_or_else(|| format!("bad `{name}`"))
    };
    let width = side("width", &mut npz)?;
    let height = side("height", &mut npz)?;
    Ok(Garden {
        means,
        colors,
        viewmats,
        ks,
        width,
        height,
    })
}

/// The Gaussians of the scene (fixed seed).
pub fn scene(garden: &Garden) -> Scene {
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut s = Scene {
        means: Vec::new(),
        quats: Vec::new(),
        log_scales: Vec::new(),
        opacity_logits: Vec::new(),
        sh: Vec::new(),
    };
    let kept = garden
        .means
        .chunks_exact(3)
        .zip(garden.colors.chunks_exact(3))
        .filter(|(p, _)| p.iter().all(|v| (-2.0..=2.0).contains(v)));
    for (p, rgb) in kept {
        s.means.extend_from_slice(p);
        s.sh.extend(rgb.iter().map(|c| (f32::from(*c) / 255.0 - 0.5) / SH_C0));
        for _ in 0..3 {
            let scale = 1e-4 + (0.02 - 1e-4) * rng.random::<f32>();
            s.log_scales.push(scale.ln());
        }
        // Shoemake's uniform random rotation.
        let (u1, u2, u3) = (
            rng.random::<f32>(),
            rng.random::<f32>(),
            rng.random::<f32>(),
        );
        let tau = std::f32::consts::TAU;
        let (a, b) = ((1.0 - u1).sqrt(), u1.sqrt());
        s.quats.extend_from_slice(&[
            b * (tau * u3).cos(),
            a * (tau * u2).sin(),
            a * (tau * u2).cos(),
            b * (tau * u3).sin(),
        ]);
        let o = rng.random::<f32>().clamp(1e-6, 1.0 - 1e-6);
        s.opacity_logits.push((o / (1.0 - o)).ln());
    }
    s
}

/// Camera `i` of the file, at its own intrinsics or at `square x square` with the same
/// horizontal FOV.
pub fn camera(garden: &Garden, i: usize, square: Option<u32>) -> CameraParams {
    let v = &garden.viewmats[16 * i..16 * i + 16];
    let k = &garden.ks[9 * i..9 * i + 9];
    let f = |x: f32| f64::from(x);
    let rotation = [
        f(v[0]),
        f(v[1]),
        f(v[2]),
        f(v[4]),
        f(v[5]),
        f(v[6]),
        f(v[8]),
        f(v[9]),
        f(v[10]),
    ];
    let translation = [f(v[3]), f(v[7]), f(v[11])];
    let (fx, fy, cx, cy) = (f(k[0]), f(k[4]), f(k[2]), f(k[5]));
    match square {
        None => CameraParams {
            rotation,
            translation,
            fx,
            fy,
            cx,
            cy,
            width: garden.width,
            height: garden.height,
        },
        Some(side) => {
            let focal = fx * f64::from(side) / f64::from(garden.width);
            let centre = f64::from(side) / 2.0;
            CameraParams {
                rotation,
                translation,
                fx: focal,
                fy: focal,
                cx: centre,
                cy: centre,
                width: side,
                height: side,
            }
        }
    }
}

/// The scene as a field on `B` (colour in the SH DC term, band 1 zero).
///
/// # Panics
/// Never for a scene made by [`scene`] (its shapes are consistent).
pub fn field<B: Backend>(s: &Scene, device: &B::Device) -> GaussianField<B> {
    let n = s.len();
    let t = |v: &[f32], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
    match GaussianField::from_tensors(
        Tensor::from_data(t(&s.means, vec![n, 3]), device),
        Tensor::from_data(t(&s.quats, vec![n, 4]), device),
        Tensor::from_data(t(&s.log_scales, vec![n, 3]), device),
        Tensor::from_data(t(&s.opacity_logits, vec![n]), device),
        Tensor::from_data(t(&s.sh, vec![n, 1, 3]), device),
        // Band 1 stored as zeros rather than an empty `[N, 0, 3]`: the CUDA backend of Burn 0.21
        // cannot create zero-size tensors. Renders use `sh_degree: Some(0)`.
        Tensor::from_data(t(&vec![0.0; 9 * n], vec![n, 3, 3]), device),
        None,
    ) {
        Ok(f) => f,
        Err(e) => panic!("the garden scene is not a valid field: {e}"),
    }
}
