//! The forward projection of [`LANES`] Gaussians at a time: every stage of
//! [`project_one`](super::project_one) as a loop over lanes that the compiler turns into vector
//! instructions, the culling decisions kept as a mask instead of early returns.
//!
//! Every lane computes the same operations in the same order as `project_one` (Rust never
//! reassociates or fuses floating-point operations), so the outputs are those of the scalar
//! path bit for bit; the tests below check it, edge cases included. The scalar path stays the
//! backward's, which needs each Gaussian's whole forward state.

// `!(a >= b)` is used on purpose: it is true when either side is NaN, so NaN culls.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use super::{Camera, ForwardRows, MAX_EXTENT_SIGMAS, MIN_ALPHA, ProjectArrays, TILE_SIZE};
use crate::quat::{MIN_QUAT_NORM, rotation_matrix};
use crate::real::Real;

/// Gaussians per block: one AVX-512 register of `f32`.
pub(super) const LANES: usize = 16;

/// One value per lane.
type Lanes<T> = [T; LANES];

/// `f(l)` for every lane.
#[inline(always)]
fn lanes<T: Copy + Default>(mut f: impl FnMut(usize) -> T) -> [T; LANES] {
    let mut out = [T::default(); LANES];
    for (l, v) in out.iter_mut().enumerate() {
        *v = f(l);
    }
    out
}

/// `f(r, l)` for every row `r` and lane `l` (`core::array::from_fn` over [`lanes`] is not
/// always inlined, and a call per row keeps the loop from vectorising).
#[inline(always)]
fn grid<T: Copy + Default, const R: usize>(
    mut f: impl FnMut(usize, usize) -> T,
) -> [[T; LANES]; R] {
    let mut out = [[T::default(); LANES]; R];
    for (r, row) in out.iter_mut().enumerate() {
        for (l, v) in row.iter_mut().enumerate() {
            *v = f(r, l);
        }
    }
    out
}

/// Whether every value is finite, without stopping at the first that is not (so the loop
/// vectorises).
#[inline(always)]
fn all_finite_flat<T: Real>(values: &[T]) -> bool {
    values
        .iter()
        .fold(true, |ok, v| ok & v.to_f64().is_finite())
}

/// The block's inputs, one array per component (a lane past the block's end repeats its first
/// Gaussian and is never written out).
struct BlockInputs<T> {
    mean: [Lanes<T>; 3],
    quat: [Lanes<T>; 4],
    log_scale: [Lanes<T>; 3],
    logit: Lanes<T>,
    /// Whether the lane is a Gaussian of the block with finite inputs.
    keep: [bool; LANES],
}

impl<T: Real> BlockInputs<T> {
    /// The inputs of Gaussians `first..first + count`; `keep` is `project_one`'s finiteness
    /// test, SH coefficients `0..used` included.
    #[inline(always)]
    fn gather(a: &ProjectArrays<'_, T>, first: usize, count: usize, used: usize) -> Self {
        let k = a.sh_coeffs;
        let index = |l: usize| first + if l < count { l } else { 0 };
        let mean = grid(|c, l| a.means[3 * index(l) + c]);
        let quat = grid(|c, l| a.quats[4 * index(l) + c]);
        let log_scale = grid(|c, l| a.log_scales[3 * index(l) + c]);
        let logit = lanes(|l| a.opacity_logits[index(l)]);
        let mut keep = [false; LANES];
        for (l, keep) in keep.iter_mut().enumerate() {
            let i = index(l);
            *keep = l < count && all_finite_flat(&a.sh[3 * k * i..3 * k * i + 3 * used]);
        }
        for (l, keep) in keep.iter_mut().enumerate() {
            let mut finite = logit[l].to_f64().is_finite();
            for c in 0..3 {
                finite &= mean[c][l].to_f64().is_finite() & log_scale[c][l].to_f64().is_finite();
            }
            for q in &quat {
                finite &= q[l].to_f64().is_finite();
            }
            *keep &= finite;
        }
        BlockInputs {
            mean,
            quat,
            log_scale,
            logit,
            keep,
        }
    }
}

/// Projects Gaussians `first..first + count` (`count <= LANES`) into `rows` at row `row`
/// onwards, as `project_one` and the forward's row writes do (a culled Gaussian's values stay
/// zero).
#[inline(always)]
pub(super) fn forward_block<T: Real>(
    a: &ProjectArrays<'_, T>,
    cam: &Camera<T>,
    degree: usize,
    (first, count): (usize, usize),
    rows: &mut ForwardRows<'_, T>,
    row: usize,
) {
    let used = (degree + 1) * (degree + 1);
    let BlockInputs {
        mean,
        quat,
        log_scale,
        logit,
        mut keep,
    } = BlockInputs::gather(a, first, count, used);
    let w = &cam.w;
    let p: [Lanes<T>; 3] = grid(|r, l| {
        w[3 * r] * mean[0][l] + w[3 * r + 1] * mean[1][l] + w[3 * r + 2] * mean[2][l] + cam.t[r]
    });
    let inv_z = lanes(|l| T::ONE / p[2][l]);
    let u = lanes(|l| p[0][l] * inv_z[l]);
    let v = lanes(|l| p[1][l] * inv_z[l]);
    let uc = lanes(|l| super::clamp(u[l], cam.lim_x).0);
    let vc = lanes(|l| super::clamp(v[l], cam.lim_y).0);
    let am: [Lanes<T>; 6] = grid(|e, l| {
        let col = e % 3;
        if e < 3 {
            cam.fx * inv_z[l] * (w[col] - uc[l] * w[6 + col])
        } else {
            cam.fy * inv_z[l] * (w[3 + col] - vc[l] * w[6 + col])
        }
    });

    let rq = unit_rotation(&quat);
    let scale: [Lanes<T>; 3] = grid(|c, l| log_scale[c][l].exp());
    let m: [Lanes<T>; 9] = grid(|e, l| rq[e][l] * scale[e % 3][l]);
    let b: [Lanes<T>; 6] = grid(|e, l| {
        let (r, col) = (e / 3, e % 3);
        am[3 * r][l] * m[col][l]
            + am[3 * r + 1][l] * m[3 + col][l]
            + am[3 * r + 2][l] * m[6 + col][l]
    });
    let cov = [
        lanes(|l| b[0][l] * b[0][l] + b[1][l] * b[1][l] + b[2][l] * b[2][l]),
        lanes(|l| b[0][l] * b[3][l] + b[1][l] * b[4][l] + b[2][l] * b[5][l]),
        lanes(|l| b[3][l] * b[3][l] + b[4][l] * b[4][l] + b[5][l] * b[5][l]),
    ];
    let cov_d = [
        lanes(|l| cov[0][l] + cam.eps2d),
        cov[1],
        lanes(|l| cov[2][l] + cam.eps2d),
    ];
    let det = lanes(|l| cov_d[0][l] * cov_d[2][l] - cov_d[1][l] * cov_d[1][l]);
    let inv_det = lanes(|l| T::ONE / det[l]);
    let conic = [
        lanes(|l| cov_d[2][l] * inv_det[l]),
        lanes(|l| -cov_d[1][l] * inv_det[l]),
        lanes(|l| cov_d[0][l] * inv_det[l]),
    ];

    let sigmoid = lanes(|l| sigmoid(logit[l]));
    let opacity = if cam.antialiased {
        lanes(|l| {
            let det_c = cov[0][l] * cov[2][l] - cov[1][l] * cov[1][l];
            let det_c = if det_c > T::ZERO { det_c } else { T::ZERO };
            sigmoid[l] * (det_c * inv_det[l]).sqrt()
        })
    } else {
        lanes(|l| sigmoid[l] * T::ONE)
    };
    for l in 0..LANES {
        keep[l] =
            keep[l] && p[2][l] >= cam.near && det[l] > T::ZERO && opacity[l].to_f64() >= MIN_ALPHA;
    }

    let xy = [
        lanes(|l| cam.fx * u[l] + cam.cx),
        lanes(|l| cam.fy * v[l] + cam.cy),
    ];
    let screen = screen_boxes(cam, &xy, &cov_d, &opacity);
    for (keep, overlaps) in keep.iter_mut().zip(screen.overlaps) {
        *keep &= overlaps;
    }

    let view: [Lanes<T>; 3] = grid(|j, l| mean[j][l] - cam.centre[j]);
    let dist = lanes(|l| {
        (view[0][l] * view[0][l] + view[1][l] * view[1][l] + view[2][l] * view[2][l]).sqrt()
    });
    let dir: [Lanes<T>; 3] = grid(|j, l| view[j][l] / dist[l]);
    let color = colors(a, degree, (first, count), &dir);

    for l in 0..count {
        if !keep[l] {
            continue;
        }
        let j = row + l;
        rows.xy[2 * j] = xy[0][l];
        rows.xy[2 * j + 1] = xy[1][l];
        rows.depth[j] = p[2][l];
        for c in 0..3 {
            rows.conic[3 * j + c] = conic[c][l];
            let raw = color[c][l];
            rows.color[3 * j + c] = if raw > T::ZERO { raw } else { T::ZERO };
        }
        rows.opacity[j] = opacity[l];
        rows.radius[2 * j] = screen.radius[0][l];
        rows.radius[2 * j + 1] = screen.radius[1][l];
        rows.tiles[j] = screen.tiles[l];
    }
}

/// `SH(dir) + 0.5` of every lane before the clamp at zero, summed over the bands as
/// `project_one` does.
#[inline(always)]
fn colors<T: Real>(
    a: &ProjectArrays<'_, T>,
    degree: usize,
    (first, count): (usize, usize),
    dir: &[Lanes<T>; 3],
) -> [Lanes<T>; 3] {
    let k = a.sh_coeffs;
    let used = (degree + 1) * (degree + 1);
    let mut basis = [[T::ZERO; LANES]; 16];
    for l in 0..LANES {
        let b = super::sh_basis(degree, [dir[0][l], dir[1][l], dir[2][l]]);
        for (e, row) in basis.iter_mut().enumerate() {
            row[l] = b[e];
        }
    }
    let mut color = [[T::from_f64(0.5); LANES]; 3];
    let mut coeffs = [[T::ZERO; LANES]; 3];
    for (kk, basis) in basis.iter().take(used).enumerate() {
        for l in 0..LANES {
            let i = first + if l < count { l } else { 0 };
            for (c, coeff) in coeffs.iter_mut().enumerate() {
                coeff[l] = a.sh[3 * k * i + 3 * kk + c];
            }
        }
        for (color, coeff) in color.iter_mut().zip(&coeffs) {
            for l in 0..LANES {
                color[l] += basis[l] * coeff[l];
            }
        }
    }
    color
}

/// The rotation matrices (row-major, one array per entry) of the normalised quaternions, the
/// identity for a degenerate one, as `UnitQuat::new(..).rotation()`.
#[inline(always)]
fn unit_rotation<T: Real>(quat: &[Lanes<T>; 4]) -> [Lanes<T>; 9] {
    let norm = lanes(|l| {
        (quat[0][l] * quat[0][l]
            + quat[1][l] * quat[1][l]
            + quat[2][l] * quat[2][l]
            + quat[3][l] * quat[3][l])
            .sqrt()
    });
    let mut rotation = [[T::ZERO; LANES]; 9];
    for l in 0..LANES {
        let degenerate = norm[l].to_f64() < MIN_QUAT_NORM;
        let inv = T::ONE / norm[l];
        let mut q = [T::ZERO; 4];
        for (c, q) in q.iter_mut().enumerate() {
            let identity = if c == 0 { T::ONE } else { T::ZERO };
            *q = if degenerate {
                identity
            } else {
                quat[c][l] * inv
            };
        }
        let r = rotation_matrix(q);
        for (e, row) in rotation.iter_mut().enumerate() {
            row[l] = r[e];
        }
    }
    rotation
}

/// [`super::sigmoid`] without its branch around the exponential: `e^-|x|` is the exponential
/// each of its two sides takes.
#[inline(always)]
fn sigmoid<T: Real>(x: T) -> T {
    let e = (if x >= T::ZERO { -x } else { x }).exp();
    if x >= T::ZERO {
        T::ONE / (T::ONE + e)
    } else {
        e / (T::ONE + e)
    }
}

/// [`super::screen_box`] of every lane, in `f64`.
struct ScreenBoxes {
    radius: [[u32; LANES]; 2],
    tiles: [u32; LANES],
    overlaps: [bool; LANES],
}

#[inline(always)]
fn screen_boxes<T: Real>(
    cam: &Camera<T>,
    xy: &[Lanes<T>; 2],
    cov_d: &[Lanes<T>; 3],
    opacity: &Lanes<T>,
) -> ScreenBoxes {
    // The logarithm is a libm call per lane; the rest vectorises.
    let log = lanes(|l| (opacity[l].to_f64() / MIN_ALPHA).max(1.0).ln());
    let sigmas = lanes(|l| (2.0 * log[l]).sqrt().min(MAX_EXTENT_SIGMAS));
    let x = lanes(|l| xy[0][l].to_f64());
    let y = lanes(|l| xy[1][l].to_f64());
    let rx = lanes(|l| (sigmas[l] * cov_d[0][l].to_f64().sqrt()).ceil());
    let ry = lanes(|l| (sigmas[l] * cov_d[2][l].to_f64().sqrt()).ceil());
    let overlaps = lanes(|l| {
        rx[l] >= 1.0
            && ry[l] >= 1.0
            && x[l] + rx[l] > 0.0
            && x[l] - rx[l] < cam.width
            && y[l] + ry[l] > 0.0
            && y[l] - ry[l] < cam.height
    });
    let tile = f64::from(TILE_SIZE);
    let span =
        |lo: f64, hi: f64, tiles: f64| (hi / tile).ceil().min(tiles) - (lo / tile).floor().max(0.0);
    let tiles = lanes(|l| {
        let count = span(x[l] - rx[l], x[l] + rx[l], cam.tiles_x)
            * span(y[l] - ry[l], y[l] + ry[l], cam.tiles_y);
        count as u32
    });
    ScreenBoxes {
        radius: [lanes(|l| rx[l] as u32), lanes(|l| ry[l] as u32)],
        tiles,
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::super::{
        CameraParams, ForwardRows, ProjectArrays, ProjectOptions, forward_rows, project_one,
        screen_box,
    };
    use super::*;

    /// The rows of `n` Gaussians as the scalar path writes them, and as the blocks do.
    fn both<T: Real>(a: &ProjectArrays<'_, T>, cam: &Camera<T>, degree: usize) {
        let n = a.opacity_logits.len();
        let mut outputs: Vec<(Vec<T>, Vec<u32>)> = Vec::new();
        for blocked in [false, true] {
            let mut floats = vec![T::ZERO; 10 * n];
            let mut ints = vec![0u32; 3 * n];
            let (xy, rest) = floats.split_at_mut(2 * n);
            let (depth, rest) = rest.split_at_mut(n);
            let (conic, rest) = rest.split_at_mut(3 * n);
            let (color, opacity) = rest.split_at_mut(3 * n);
            let (radius, tiles) = ints.split_at_mut(2 * n);
            let rows = ForwardRows {
                first: 0,
                xy,
                depth,
                conic,
                color,
                opacity,
                radius,
                tiles,
            };
            if blocked {
                // The build the forward runs on this CPU (AVX-512 where there is one).
                // SAFETY: `forward_rows` picks a build only on CPUs with its features.
                unsafe { forward_rows::<T>()(a, cam, degree, rows) };
            } else {
                for i in 0..n {
                    let Some(g) = project_one(a, i, cam, degree) else {
                        continue;
                    };
                    // The outputs from the scalar state, as `project_one` computed them.
                    let xy = [
                        cam.fx * (g.p[0] * g.inv_z) + cam.cx,
                        cam.fy * (g.p[1] * g.inv_z) + cam.cy,
                    ];
                    let inv_det = T::ONE / g.shape.det;
                    let opacity = g.shape.sigmoid * g.shape.comp;
                    let (radius, tiles) =
                        screen_box(cam, xy, g.shape.cov_d, opacity).expect("kept by project_one");
                    rows.xy[2 * i..2 * i + 2].copy_from_slice(&xy);
                    rows.depth[i] = g.p[2];
                    rows.conic[3 * i..3 * i + 3].copy_from_slice(&[
                        g.shape.cov_d[2] * inv_det,
                        -g.shape.cov_d[1] * inv_det,
                        g.shape.cov_d[0] * inv_det,
                    ]);
                    for c in 0..3 {
                        let raw = g.colour.raw[c];
                        rows.color[3 * i + c] = if raw > T::ZERO { raw } else { T::ZERO };
                    }
                    rows.opacity[i] = opacity;
                    rows.radius[2 * i..2 * i + 2].copy_from_slice(&radius);
                    rows.tiles[i] = tiles;
                }
            }
            outputs.push((floats, ints));
        }
        let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outputs[0].0), bits(&outputs[1].0), "float outputs");
        assert_eq!(outputs[0].1, outputs[1].1, "radius and tiles");
        let drawn = outputs[0].1[2 * n..].iter().filter(|&&t| t > 0).count();
        assert!(drawn >= n / 4, "the scene draws {drawn} of {n} Gaussians");
        assert!(
            drawn <= 3 * n / 4,
            "the scene culls few: {drawn} of {n} drawn"
        );
    }

    /// Gaussians around the camera's view, with every culling case mixed in: behind the camera,
    /// off screen, faint, degenerate quaternions, non-finite values, huge and tiny scales.
    fn scene(rng: &mut StdRng, n: usize, k: usize) -> [Vec<f64>; 5] {
        let mut means = Vec::new();
        let mut quats = Vec::new();
        let mut log_scales = Vec::new();
        let mut logits = Vec::new();
        let mut sh = Vec::new();
        for i in 0..n {
            let z = rng.random_range(-1.0..8.0);
            means.extend([rng.random_range(-3.0..3.0), rng.random_range(-3.0..3.0), z]);
            let q: [f64; 4] = core::array::from_fn(|_| rng.random_range(-1.0..1.0));
            quats.extend(if i % 13 == 5 { [0.0; 4] } else { q });
            log_scales.extend((0..3).map(|_| rng.random_range(-6.0..1.0)));
            logits.push(rng.random_range(-8.0..6.0));
            sh.extend((0..3 * k).map(|_| rng.random_range(-1.0..1.0)));
            match i % 29 {
                3 => means[3 * i + 1] = f64::NAN,
                7 => log_scales[3 * i] = f64::INFINITY,
                11 => sh[3 * k * i + 3 * k - 1] = f64::NAN,
                _ => {}
            }
        }
        [means, quats, log_scales, logits, sh]
    }

    fn camera(rng: &mut StdRng) -> CameraParams {
        let angle: f64 = rng.random_range(-0.3..0.3);
        let (s, c) = angle.sin_cos();
        CameraParams {
            rotation: [c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c],
            translation: [0.1, -0.2, 0.5],
            fx: 300.0,
            fy: 280.0,
            cx: 200.0,
            cy: 150.0,
            width: 400,
            height: 300,
        }
    }

    fn check<T: Real>(seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        for (degree, antialiased) in [(0, false), (1, true), (2, false), (3, true)] {
            let k = 16;
            let n = 16 * 37 + 5;
            let values = scene(&mut rng, n, k).map(|v| v.into_iter().map(T::from_f64).collect());
            let [means, quats, log_scales, logits, sh]: [Vec<T>; 5] = values;
            let a = ProjectArrays {
                means: &means,
                quats: &quats,
                log_scales: &log_scales,
                opacity_logits: &logits,
                sh: &sh,
                sh_coeffs: k,
            };
            let options = ProjectOptions {
                antialiased,
                ..ProjectOptions::default()
            };
            let cam = Camera::<T>::new(&camera(&mut rng), &options);
            both(&a, &cam, degree);
        }
    }

    #[test]
    fn blocks_match_the_scalar_path_f64() {
        check::<f64>(7);
    }

    #[test]
    fn blocks_match_the_scalar_path_f32() {
        check::<f32>(8);
    }
}
