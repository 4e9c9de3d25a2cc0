//! The CPU tile rasterizer: agreement with gsplat's reference image and gradients (through the
//! projection), f64 finite-difference gradients, binning, edge cases and determinism.

use crate::project::ProjectOptions;
use crate::project::cpu::{self as project, ProjectArrays, ProjectOutputGrads};
use crate::raster::RasterError;
use crate::raster::cpu::{self, Bins, RasterArrays, RasterGrads, RasterOutputGrads, RasterOutputs};
use rand::RngExt;
use rand::rngs::StdRng;

use ember_test_utils::{OracleCase, fresh_rng, oracle_camera, oracle_err, uniform};

mod binning;
mod gradients;
mod oracle;

/// Splats in f64 (or any `Real`), row-major, with their screen boxes.
#[derive(Clone, Debug)]
struct Splats<T> {
    xy: Vec<T>,
    depth: Vec<T>,
    conic: Vec<T>,
    color: Vec<T>,
    opacity: Vec<T>,
    radius: Vec<u32>,
}

impl<T: Copy> Splats<T> {
    fn arrays(&self) -> RasterArrays<'_, T> {
        RasterArrays {
            xy: &self.xy,
            depth: &self.depth,
            conic: &self.conic,
            color: &self.color,
            opacity: &self.opacity,
        }
    }
}

impl Splats<f64> {
    fn to_f32(&self) -> Splats<f32> {
        let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
        Splats {
            xy: f(&self.xy),
            depth: f(&self.depth),
            conic: f(&self.conic),
            color: f(&self.color),
            opacity: f(&self.opacity),
            radius: self.radius.clone(),
        }
    }
}

fn bin<T: Copy + RealLike>(s: &Splats<T>, width: u32, height: u32) -> Bins {
    match T::bin(s, width, height) {
        Ok(b) => b,
        Err(e) => panic!("bin refused valid splats: {e}"),
    }
}

/// The scalar types the tests run the kernels in (the kernels' `Real` is not public).
trait RealLike: Sized {
    fn bin(s: &Splats<Self>, width: u32, height: u32) -> Result<Bins, RasterError>;
    fn forward(
        s: &Splats<Self>,
        bins: &Bins,
        bg: [Self; 3],
    ) -> Result<RasterOutputs<Self>, RasterError>;
    fn backward(
        s: &Splats<Self>,
        bins: &Bins,
        bg: [Self; 3],
        out: &RasterOutputs<Self>,
        grads: &RasterOutputGrads<'_, Self>,
    ) -> Result<RasterGrads<Self>, RasterError>;
}

macro_rules! real_like {
    ($t:ty) => {
        impl RealLike for $t {
            fn bin(s: &Splats<$t>, width: u32, height: u32) -> Result<Bins, RasterError> {
                cpu::bin(&s.xy, &s.depth, &s.radius, width, height)
            }
            fn forward(
                s: &Splats<$t>,
                bins: &Bins,
                bg: [$t; 3],
            ) -> Result<RasterOutputs<$t>, RasterError> {
                cpu::forward(&s.arrays(), bins, bg)
            }
            fn backward(
                s: &Splats<$t>,
                bins: &Bins,
                bg: [$t; 3],
                out: &RasterOutputs<$t>,
                grads: &RasterOutputGrads<'_, $t>,
            ) -> Result<RasterGrads<$t>, RasterError> {
                cpu::backward(&s.arrays(), bins, bg, &out.replay(), grads)
            }
        }
    };
}
real_like!(f64);
real_like!(f32);

fn forward<T: Copy + RealLike>(s: &Splats<T>, bins: &Bins, bg: [T; 3]) -> RasterOutputs<T> {
    match T::forward(s, bins, bg) {
        Ok(o) => o,
        Err(e) => panic!("forward refused valid splats: {e}"),
    }
}

fn backward<T: Copy + RealLike>(
    s: &Splats<T>,
    bins: &Bins,
    bg: [T; 3],
    out: &RasterOutputs<T>,
    grads: &RasterOutputGrads<'_, T>,
) -> RasterGrads<T> {
    match T::backward(s, bins, bg, out, grads) {
        Ok(g) => g,
        Err(e) => panic!("backward refused valid inputs: {e}"),
    }
}

/// Number of tiles each Gaussian was binned into.
fn tiles_per_gaussian(bins: &Bins, n: usize) -> Vec<u32> {
    let mut count = vec![0u32; n];
    for &id in bins.ids() {
        count[id as usize] += 1;
    }
    count
}

/// A random positive definite conic: the inverse of a covariance with standard deviations in
/// `[sd_lo, sd_hi)` pixels at a random angle.
fn random_conic(rng: &mut StdRng, sd_lo: f64, sd_hi: f64) -> [f64; 3] {
    let s = uniform(rng, 2, sd_lo, sd_hi);
    let theta = std::f64::consts::PI * rng.random::<f64>();
    let (sin, cos) = theta.sin_cos();
    let (v0, v1) = (s[0] * s[0], s[1] * s[1]);
    let (xx, xy, yy) = (
        cos * cos * v0 + sin * sin * v1,
        cos * sin * (v0 - v1),
        sin * sin * v0 + cos * cos * v1,
    );
    let det = xx * yy - xy * xy;
    [yy / det, -xy / det, xx / det]
}

/// `n` random splats over a `width x height` image; depths distinct. One of every four has
/// opacity 1 and sits on a pixel centre, so that its alpha clamps there; the others are
/// partly transparent. Radii are random, so some splats are cut at tile edges.
fn random_splats(rng: &mut StdRng, n: usize, width: u32, height: u32) -> Splats<f64> {
    let (w, h) = (f64::from(width), f64::from(height));
    let mut s = Splats {
        xy: Vec::new(),
        depth: Vec::new(),
        conic: Vec::new(),
        color: uniform(rng, 3 * n, 0.0, 1.0),
        opacity: Vec::new(),
        radius: Vec::new(),
    };
    for i in 0..n {
        if i % 4 == 0 {
            // The second one shares the first's pixel: there two clamped alphas take the
            // transmittance to 1e-6, so that pixel stops before the one behind.
            let (px, py) = match i {
                4 => (s.xy[0], s.xy[1]),
                _ => (
                    rng.random_range(0..width) as f64 + 0.5,
                    rng.random_range(0..height) as f64 + 0.5,
                ),
            };
            s.xy.extend([px, py]);
            s.opacity.push(1.0);
        } else {
            s.xy.extend([
                -3.0 + (w + 6.0) * rng.random::<f64>(),
                -3.0 + (h + 6.0) * rng.random::<f64>(),
            ]);
            s.opacity.push(0.3 + 0.69 * rng.random::<f64>());
        }
        s.depth
            .push(1.0 + 0.5 * i as f64 + 0.4 * rng.random::<f64>());
        s.conic.extend(random_conic(rng, 2.0, 7.0));
        s.radius
            .extend([rng.random_range(3..30), rng.random_range(3..30)]);
    }
    // Shuffle the depths so that index order is not depth order.
    for i in (1..n).rev() {
        let j = rng.random_range(0..=i);
        s.depth.swap(i, j);
    }
    s
}
