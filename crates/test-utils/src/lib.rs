//! Helpers shared by Ember's tests (the kernels' op tests, the field's and the facade's test
//! binaries): seeded random inputs, comparisons, the gsplat oracle cases, data paths. Dev-only:
//! no crate depends on it outside `[dev-dependencies]`. It depends on no Ember crate, so the
//! kernels' own unit tests can use it (a dependency on `ember-kernels` would link a second copy
//! of the crate under test, whose types are not the test's).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::de::DeserializeOwned;

/// A fresh seed per call (printed, so a failure can be replayed with `EMBER_TEST_SEED`).
pub fn fresh_rng(test: &str) -> StdRng {
    let seed = std::env::var("EMBER_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            t ^ (test.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
    println!("{test}: seed {seed} (EMBER_TEST_SEED={seed} to replay)");
    StdRng::seed_from_u64(seed)
}

/// Uniform values in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| lo + (hi - lo) * rng.random::<f64>())
        .collect()
}

/// A random field-query problem in f64, row-major.
#[derive(Clone, Debug)]
pub struct Problem {
    pub points: Vec<f64>,
    pub means: Vec<f64>,
    pub quats: Vec<f64>,
    pub log_scales: Vec<f64>,
    pub features: Vec<f64>,
    pub p: usize,
    pub n: usize,
    pub c: usize,
}

impl Problem {
    /// Points and means in a box of half-size `extent`, log-scales in `[ls_lo, ls_hi)`,
    /// unnormalised quaternions (norms between 0.2 and 5), features in `[-1, 1)` but away from 0.
    pub fn random(
        rng: &mut StdRng,
        p: usize,
        n: usize,
        c: usize,
        extent: f64,
        ls: (f64, f64),
    ) -> Self {
        let quats = (0..n)
            .flat_map(|_| {
                let q = uniform(rng, 4, -1.0, 1.0);
                let norm = q.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-3);
                let len = 0.2 + 4.8 * rng.random::<f64>();
                q.into_iter().map(move |x| x / norm * len)
            })
            .collect();
        let features = uniform(rng, n * c, 0.2, 1.0)
            .into_iter()
            .map(|f| if rng.random::<bool>() { f } else { -f })
            .collect();
        Problem {
            points: uniform(rng, 3 * p, -extent, extent),
            means: uniform(rng, 3 * n, -extent, extent),
            quats,
            log_scales: uniform(rng, 3 * n, ls.0, ls.1),
            features,
            p,
            n,
            c,
        }
    }
}

/// `max |a - b| / max(max |b|, floor)`: the relative error of a whole tensor.
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    let worst = a.iter().zip(b).fold(0.0f64, |m, (x, y)| {
        if (x - y).is_nan() {
            f64::INFINITY
        } else {
            m.max((x - y).abs())
        }
    });
    worst / scale
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| *x as f64).collect()
}

pub fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|x| *x as f32).collect()
}

/// SH coefficients `[N, K, 3]` split as the projection takes them: the DC terms `[N, 1, 3]` and
/// the rest `[N, K - 1, 3]`.
pub fn split_sh<T: Copy>(sh: &[T], k: usize) -> (Vec<T>, Vec<T>) {
    let mut dc = Vec::with_capacity(sh.len() / k);
    let mut rest = Vec::with_capacity(sh.len() - sh.len() / k);
    for g in sh.chunks_exact(3 * k) {
        dc.extend_from_slice(&g[..3]);
        rest.extend_from_slice(&g[3..]);
    }
    (dc, rest)
}

/// The inverse of [`split_sh`]: `[N, K, 3]` from the DC terms and the rest.
pub fn join_sh<T: Copy>(dc: &[T], rest: &[T]) -> Vec<T> {
    let per_rest = rest.len() / (dc.len() / 3).max(1);
    dc.chunks_exact(3)
        .enumerate()
        .flat_map(|(i, d)| {
            d.iter()
                .chain(&rest[per_rest * i..per_rest * (i + 1)])
                .copied()
        })
        .collect()
}

// ---- the gsplat oracle ----

/// One gsplat oracle case (`tiny` or `basic`), every tensor as f64.
pub struct OracleCase {
    tensors: std::collections::HashMap<String, Vec<f64>>,
}

impl OracleCase {
    /// Reads `oracle/gsplat_cases/{case}_case.safetensors` from [`data_dir`]; `None`, after
    /// saying so, when it is absent and not required (`EMBER_REQUIRE_DATA=1` makes a missing
    /// file a failure).
    pub fn load(case: &str) -> Option<Self> {
        let path = data_dir()
            .join("oracle/gsplat_cases")
            .join(format!("{case}_case.safetensors"));
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if std::env::var("EMBER_REQUIRE_DATA").as_deref() != Ok("1") => {
                println!("skipped: {} not readable ({e})", path.display());
                return None;
            }
            Err(e) => panic!(
                "EMBER_REQUIRE_DATA=1 but {} is not readable: {e}",
                path.display()
            ),
        };
        let file = match safetensors::SafeTensors::deserialize(&bytes) {
            Ok(f) => f,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        let tensors = file
            .tensors()
            .into_iter()
            .map(|(name, view)| {
                assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
                let values = view
                    .data()
                    .chunks_exact(4)
                    .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect();
                (name, values)
            })
            .collect();
        Some(OracleCase { tensors })
    }

    /// The tensor `name`, row-major.
    pub fn get(&self, name: &str) -> Vec<f64> {
        match self.tensors.get(name) {
            Some(v) => v.clone(),
            None => panic!("oracle tensor {name} is missing"),
        }
    }
}

/// The camera the oracle cases were made with, as the camera type `C` (Ember's
/// `CameraParams`) reads it from its JSON form.
pub fn oracle_camera<C: DeserializeOwned>() -> C {
    let camera = serde_json::json!({
        "rotation": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        "translation": [-0.123, -0.456, 8.0],
        "fx": 61.5, "fy": 61.5, "cx": 61.5, "cy": 41.0,
        "width": 123, "height": 82,
    });
    serde_json::from_value(camera).expect("the oracle camera is a camera")
}

/// Largest `|got - want| / (1e-5 + 1e-2 |want|)` over the rows kept by the oracle: below 1 passes
/// the README's tolerance. Also the largest absolute difference.
pub fn oracle_err(got: &[f64], want: &[f64], width: usize, kept: &[bool]) -> (f64, f64) {
    let mut worst = (0.0f64, 0.0f64);
    for (i, _) in kept.iter().enumerate().filter(|(_, k)| **k) {
        for j in width * i..width * (i + 1) {
            let d = (got[j] - want[j]).abs();
            let ratio = if d.is_nan() {
                f64::INFINITY
            } else {
                d / (1e-5 + 1e-2 * want[j].abs())
            };
            worst = (worst.0.max(ratio), worst.1.max(d));
        }
    }
    worst
}

/// `EMBER_DATA_DIR`, or `../shared/data` beside the workspace root (the folder holding
/// `Cargo.lock`, found above the manifest of the test being run: cargo sets
/// `CARGO_MANIFEST_DIR` when it runs a test, and this crate's own compile-time path may belong
/// to another checkout sharing the target folder).
pub fn data_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("EMBER_DATA_DIR") {
        return dir.into();
    }
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let root = manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(&manifest);
    root.join("../shared/data")
}

/// `relative` under [`data_dir`], or `None` after saying it was skipped; with
/// `EMBER_REQUIRE_DATA=1` a missing file fails instead.
pub fn data_path(relative: &str) -> Option<std::path::PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("EMBER_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_DATA=1 but {} does not exist", path.display());
    }
    eprintln!("skipped: test data {} not found", path.display());
    None
}

/// A render and a correlated target, `[h, w, 3]`, values in `[0, 1]`.
pub fn image_pair(test: &str, h: usize, w: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = fresh_rng(test);
    let n = h * w * 3;
    let x = uniform(&mut rng, n, 0.0, 1.0);
    let noise = uniform(&mut rng, n, -0.3, 0.3);
    let y = x
        .iter()
        .zip(&noise)
        .map(|(a, b)| (a + b).clamp(0.0, 1.0) as f32);
    (x.iter().map(|&v| v as f32).collect(), y.collect())
}

/// `v` as a `[h, w, 3]` image on `B`'s default device, in `B`'s float type.
pub fn image<B: burn::tensor::backend::Backend>(
    v: &[f32],
    h: usize,
    w: usize,
) -> burn::tensor::Tensor<B, 3> {
    let device = Default::default();
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    burn::tensor::Tensor::from_data(
        burn::tensor::TensorData::new(v.to_vec(), [h, w, 3]).convert_dtype(dtype),
        (&device, dtype),
    )
}

/// A tensor's values as `f64`.
pub fn host<B: burn::tensor::backend::Backend, const D: usize>(
    t: burn::tensor::Tensor<B, D>,
) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec().unwrap()
}
