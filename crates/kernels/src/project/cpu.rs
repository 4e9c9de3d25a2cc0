//! The projection on the CPU: rayon, each task projecting its own block of Gaussians, generic
//! over `f32` / `f64` (`f64` is what the finite-difference gradient checks run on). A task's
//! loop runs as the widest build of `simd::variants!` the CPU supports; every build computes
//! the same values. The forward projects [`lanes::LANES`] Gaussians at a time, one vector lane
//! each ([`lanes`]); the backward one Gaussian at a time.
//!
//! The backward recomputes each Gaussian's forward state instead of saving it: it is a few
//! hundred flops per Gaussian, cheaper than storing and reading back ~100 values each, and it
//! makes the culling decisions of the backward exactly those of the forward. Results do not
//! depend on the thread count: no value is reduced across Gaussians.

// `!(a >= b)` is used on purpose: it is true when either side is NaN, so NaN culls.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use rayon::prelude::*;

use super::SH_C0;
use super::packed::{PackedColumns, ROWS_PER_TASK};
use super::{CameraParams, ProjectError, ProjectOptions, check_setup};
use crate::quat::UnitQuat;
use crate::real::Real;
use crate::simd;
use grads::{Upstream, backward_one};

pub mod equirect;
mod grads;
mod lanes;

/// Edge of the square screen tiles the rasterizer bins splats into, pixels.
pub const TILE_SIZE: u32 = 16;

/// Below this opacity a Gaussian cannot make any pixel reach the rasterizer's `alpha >= 1/255`.
const MIN_ALPHA: f64 = 1.0 / 255.0;

/// Cap of the box half-extent in standard deviations: `sqrt(2 ln 255)`, the value at opacity 1.
const MAX_EXTENT_SIGMAS: f64 = 3.33;

/// Gaussians per rayon task: enough work per task to amortise the scheduling.
const GAUSSIANS_PER_TASK: usize = 64;

/// Row-major inputs of the projection (shapes as in the [op contract](super)).
#[derive(Clone, Copy, Debug)]
pub struct ProjectArrays<'a, T> {
    /// `[N, 3]`
    pub means: &'a [T],
    /// `[N, 4]`, `(w, x, y, z)`
    pub quats: &'a [T],
    /// `[N, 3]`
    pub log_scales: &'a [T],
    /// `[N]`
    pub opacity_logits: &'a [T],
    /// `[N, K, 3]`
    pub sh: &'a [T],
    /// SH coefficients per Gaussian `K`: 1, 4, 9 or 16.
    pub sh_coeffs: usize,
}

/// Row-major outputs of the projection; every value of a culled Gaussian is zero.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectOutputs<T> {
    /// `[N, 2]` projected means, pixels.
    pub xy: Vec<T>,
    /// `[N]` camera-space depth.
    pub depth: Vec<T>,
    /// `[N, 3]` inverse dilated 2D covariance `(a, b, c)`.
    pub conic: Vec<T>,
    /// `[N, 3]` RGB.
    pub color: Vec<T>,
    /// `[N]` opacity in `[0, 1]`.
    pub opacity: Vec<T>,
    /// `[N, 2]` screen-box half-extents, pixels; `(0, 0)` marks a culled Gaussian.
    pub radius: Vec<u32>,
    /// `[N]` tiles the screen box touches.
    pub tiles: Vec<u32>,
}

impl<T: Real> ProjectOutputs<T> {
    /// The rows the rasterizer reads, as [`super::ProjectOps::project_forward`] returns them:
    /// `packed` `[N, PACKED_WIDTH]` and `extents` `[N, 3]` (`radius_x, radius_y, tiles`), both
    /// row-major, built on all threads.
    pub fn into_rows(self) -> (Vec<T>, Vec<i64>) {
        let mut extents = vec![0i64; 3 * self.tiles.len()];
        let per = ROWS_PER_TASK;
        (
            extents.par_chunks_mut(3 * per),
            self.radius.par_chunks(2 * per),
            self.tiles.par_chunks(per),
        )
            .into_par_iter()
            .for_each(|(extents, radius, tiles)| {
                for ((e, r), &t) in extents
                    .chunks_exact_mut(3)
                    .zip(radius.chunks_exact(2))
                    .zip(tiles)
                {
                    e.copy_from_slice(&[i64::from(r[0]), i64::from(r[1]), i64::from(t)]);
                }
            });
        let packed = PackedColumns {
            xy: self.xy,
            depth: self.depth,
            conic: self.conic,
            color: self.color,
            opacity: self.opacity,
        }
        .pack();
        (packed, extents)
    }
}

/// Gradients of a scalar loss with respect to the differentiable outputs (same shapes).
#[derive(Clone, Copy, Debug)]
pub struct ProjectOutputGrads<'a, T> {
    /// `[N, 2]`
    pub xy: &'a [T],
    /// `[N]`
    pub depth: &'a [T],
    /// `[N, 3]`
    pub conic: &'a [T],
    /// `[N, 3]`
    pub color: &'a [T],
    /// `[N]`
    pub opacity: &'a [T],
}

/// Gradients of a scalar loss with respect to every input (same shapes as the inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectGrads<T> {
    /// `[N, 3]`
    pub means: Vec<T>,
    /// `[N, 4]`, with respect to the raw (unnormalised) quaternions.
    pub quats: Vec<T>,
    /// `[N, 3]`
    pub log_scales: Vec<T>,
    /// `[N]`
    pub opacity_logits: Vec<T>,
    /// `[N, K, 3]`; zero for the bands beyond the degree used.
    pub sh: Vec<T>,
}

/// Forward: the splats of all Gaussians as seen by `camera`.
pub fn forward<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<ProjectOutputs<T>, ProjectError> {
    let (n, degree) = validate(a, camera, options)?;
    let cam = Camera::<T>::new(camera, options);
    let mut out = ProjectOutputs {
        xy: vec![T::ZERO; 2 * n],
        depth: vec![T::ZERO; n],
        conic: vec![T::ZERO; 3 * n],
        color: vec![T::ZERO; 3 * n],
        opacity: vec![T::ZERO; n],
        radius: vec![0; 2 * n],
        tiles: vec![0; n],
    };
    let rows_fn = forward_rows::<T>();
    let per = GAUSSIANS_PER_TASK;
    (
        out.xy.par_chunks_mut(2 * per),
        out.depth.par_chunks_mut(per),
        out.conic.par_chunks_mut(3 * per),
        out.color.par_chunks_mut(3 * per),
        out.opacity.par_chunks_mut(per),
        out.radius.par_chunks_mut(2 * per),
        out.tiles.par_chunks_mut(per),
    )
        .into_par_iter()
        .enumerate()
        .for_each(
            |(task, (xy, depth, conic, color, opacity, radius, tiles))| {
                let rows = ForwardRows {
                    first: task * per,
                    xy,
                    depth,
                    conic,
                    color,
                    opacity,
                    radius,
                    tiles,
                };
                // SAFETY: `forward_rows` picks a build only on CPUs with its features.
                unsafe { rows_fn(a, &cam, degree, rows) };
            },
        );
    Ok(out)
}

/// One task's rows of the forward's outputs: Gaussians `first..first + depth.len()`.
struct ForwardRows<'o, T> {
    first: usize,
    xy: &'o mut [T],
    depth: &'o mut [T],
    conic: &'o mut [T],
    color: &'o mut [T],
    opacity: &'o mut [T],
    radius: &'o mut [u32],
    tiles: &'o mut [u32],
}

/// Projects the Gaussians of `rows` into it, [`lanes::LANES`] at a time (a culled Gaussian's
/// values stay zero).
#[inline(always)]
fn forward_rows_body<T: Real>(
    a: &ProjectArrays<'_, T>,
    cam: &Camera<T>,
    degree: usize,
    mut rows: ForwardRows<'_, T>,
) {
    let n = rows.depth.len();
    for row in (0..n).step_by(lanes::LANES) {
        let count = lanes::LANES.min(n - row);
        lanes::forward_block(a, cam, degree, (rows.first + row, count), &mut rows, row);
    }
}

// The wide builds change no result: Rust never fuses a product and a sum on its own, so the
// gain is the lanes' loops as vector instructions, and `floor`/`ceil` as instructions instead
// of libm calls.
simd::variants!(
    forward_rows,
    forward_rows_body,
    (
        a: &ProjectArrays<'_, T>,
        cam: &Camera<T>,
        degree: usize,
        rows: ForwardRows<'_, T>,
    )
);

/// Backward: the gradient of `sum(output * grad)` over the differentiable outputs, with respect
/// to every input. Culled Gaussians get zero.
pub fn backward<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
    grads: &ProjectOutputGrads<'_, T>,
) -> Result<ProjectGrads<T>, ProjectError> {
    let (n, degree) = validate(a, camera, options)?;
    let lengths = [
        ("grad xy", grads.xy.len(), 2, "[N, 2]"),
        ("grad depth", grads.depth.len(), 1, "[N]"),
        ("grad conic", grads.conic.len(), 3, "[N, 3]"),
        ("grad color", grads.color.len(), 3, "[N, 3]"),
        ("grad opacity", grads.opacity.len(), 1, "[N]"),
    ];
    for (name, got, per, shape) in lengths {
        check_len(name, got, per, shape, n)?;
    }
    let cam = Camera::<T>::new(camera, options);
    let k = a.sh_coeffs;
    let mut out = ProjectGrads {
        means: vec![T::ZERO; 3 * n],
        quats: vec![T::ZERO; 4 * n],
        log_scales: vec![T::ZERO; 3 * n],
        opacity_logits: vec![T::ZERO; n],
        sh: vec![T::ZERO; 3 * k * n],
    };
    let rows_fn = backward_rows::<T>();
    let per = GAUSSIANS_PER_TASK;
    (
        out.means.par_chunks_mut(3 * per),
        out.quats.par_chunks_mut(4 * per),
        out.log_scales.par_chunks_mut(3 * per),
        out.opacity_logits.par_chunks_mut(per),
        out.sh.par_chunks_mut(3 * k * per),
    )
        .into_par_iter()
        .enumerate()
        .for_each(|(task, (means, quats, log_scales, opacity_logits, sh))| {
            let rows = BackwardRows {
                first: task * per,
                means,
                quats,
                log_scales,
                opacity_logits,
                sh,
            };
            // SAFETY: `backward_rows` picks a build only on CPUs with its features.
            unsafe { rows_fn(a, &cam, degree, grads, rows) };
        });
    Ok(out)
}

/// One task's rows of the backward's gradients: Gaussians `first..first + opacity_logits.len()`.
struct BackwardRows<'o, T> {
    first: usize,
    means: &'o mut [T],
    quats: &'o mut [T],
    log_scales: &'o mut [T],
    opacity_logits: &'o mut [T],
    sh: &'o mut [T],
}

/// The input gradients of the Gaussians of `rows`, written into it (zero for a culled one).
#[inline(always)]
fn backward_rows_body<T: Real>(
    a: &ProjectArrays<'_, T>,
    cam: &Camera<T>,
    degree: usize,
    grads: &ProjectOutputGrads<'_, T>,
    rows: BackwardRows<'_, T>,
) {
    let k = a.sh_coeffs;
    for j in 0..rows.opacity_logits.len() {
        let i = rows.first + j;
        let Some(g) = project_one(a, i, cam, degree) else {
            continue;
        };
        let upstream = Upstream {
            xy: [grads.xy[2 * i], grads.xy[2 * i + 1]],
            depth: grads.depth[i],
            conic: core::array::from_fn(|c| grads.conic[3 * i + c]),
            color: core::array::from_fn(|c| grads.color[3 * i + c]),
            opacity: grads.opacity[i],
        };
        let sh = &a.sh[3 * k * i..3 * k * (i + 1)];
        let v_sh = &mut rows.sh[3 * k * j..3 * k * (j + 1)];
        let v = backward_one(&g, cam, degree, sh, &upstream, v_sh);
        rows.means[3 * j..3 * j + 3].copy_from_slice(&v.mean);
        rows.quats[4 * j..4 * j + 4].copy_from_slice(&v.quat);
        rows.log_scales[3 * j..3 * j + 3].copy_from_slice(&v.log_scale);
        rows.opacity_logits[j] = v.logit;
    }
}

simd::variants!(
    backward_rows,
    backward_rows_body,
    (
        a: &ProjectArrays<'_, T>,
        cam: &Camera<T>,
        degree: usize,
        grads: &ProjectOutputGrads<'_, T>,
        rows: BackwardRows<'_, T>,
    )
);

fn check_len(
    name: &'static str,
    got: usize,
    per: usize,
    shape: &'static str,
    n: usize,
) -> Result<(), ProjectError> {
    if got == per * n {
        Ok(())
    } else {
        Err(ProjectError::Length {
            name,
            got,
            expected: per * n,
            shape,
            n,
        })
    }
}

/// Checks shapes, camera and options; returns `N` and the SH degree used.
fn validate<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<(usize, usize), ProjectError> {
    let n = a.means.len() / 3;
    check_len("means", a.means.len(), 3, "[N, 3]", n)?;
    check_len("quats", a.quats.len(), 4, "[N, 4]", n)?;
    check_len("log_scales", a.log_scales.len(), 3, "[N, 3]", n)?;
    check_len("opacity_logits", a.opacity_logits.len(), 1, "[N]", n)?;
    let degree = check_setup(a.sh_coeffs, camera, options)?;
    check_len("sh", a.sh.len(), 3 * a.sh_coeffs, "[N, K, 3]", n)?;
    Ok((n, degree as usize))
}

/// The camera and options of one call, converted once to `T`.
struct Camera<T> {
    /// World-to-camera rotation `W`, row-major.
    w: [T; 9],
    t: [T; 3],
    /// Camera centre in world space, `-W^T t`.
    centre: [T; 3],
    fx: T,
    fy: T,
    cx: T,
    cy: T,
    /// Clamp of `x / z`: `[-lim_x-, lim_x+]`, and of `y / z`.
    lim_x: [T; 2],
    lim_y: [T; 2],
    near: T,
    eps2d: T,
    antialiased: bool,
    view_dir_grad: bool,
    width: f64,
    height: f64,
    tiles_x: f64,
    tiles_y: f64,
}

impl<T: Real> Camera<T> {
    fn new(c: &CameraParams, o: &ProjectOptions) -> Self {
        let (width, height) = (f64::from(c.width), f64::from(c.height));
        let r = c.rotation;
        let t = c.translation;
        let centre: [f64; 3] =
            core::array::from_fn(|k| -(r[k] * t[0] + r[3 + k] * t[1] + r[6 + k] * t[2]));
        // The frustum plus 30% of the half-FOV on each side, measured from the principal point.
        let margin_x = 0.3 * 0.5 * width / c.fx;
        let margin_y = 0.3 * 0.5 * height / c.fy;
        let f = T::from_f64;
        Camera {
            w: r.map(f),
            t: t.map(f),
            centre: centre.map(f),
            fx: f(c.fx),
            fy: f(c.fy),
            cx: f(c.cx),
            cy: f(c.cy),
            lim_x: [
                f(-(c.cx / c.fx + margin_x)),
                f((width - c.cx) / c.fx + margin_x),
            ],
            lim_y: [
                f(-(c.cy / c.fy + margin_y)),
                f((height - c.cy) / c.fy + margin_y),
            ],
            near: f(o.near),
            eps2d: f(o.eps2d),
            antialiased: o.antialiased,
            view_dir_grad: o.view_dir_grad,
            width,
            height,
            tiles_x: f64::from(c.width.div_ceil(TILE_SIZE)),
            tiles_y: f64::from(c.height.div_ceil(TILE_SIZE)),
        }
    }
}

/// `v` clamped to `[lim[0], lim[1]]`, and whether the clamp was active.
#[inline(always)]
fn clamp<T: Real>(v: T, lim: [T; 2]) -> (T, bool) {
    if v < lim[0] {
        (lim[0], true)
    } else if v > lim[1] {
        (lim[1], true)
    } else {
        (v, false)
    }
}

/// One kept Gaussian's forward state, what the backward needs.
struct Projected<T> {
    /// Camera-space mean.
    p: [T; 3],
    inv_z: T,
    /// `x / z` and `y / z` after the clamp, and whether each clamp was active.
    uv: [T; 2],
    clamped: [bool; 2],
    /// `A = J W`, 2x3 row-major: world-space covariance to pixel covariance.
    a: [T; 6],
    shape: SplatShape<T>,
    colour: ViewColour<T>,
}

/// Whether every value is finite.
#[inline(always)]
fn all_finite<T: Real>(values: &[T]) -> bool {
    values.iter().all(|v| v.to_f64().is_finite())
}

/// One Gaussian's inputs: its rows of the arrays, the SH coefficients cut to the degree used.
pub(super) struct GaussianInputs<'a, T> {
    pub mean: &'a [T],
    pub quat: &'a [T],
    pub log_scale: &'a [T],
    pub logit: T,
    pub sh: &'a [T],
}

/// Gaussian `i`'s inputs; `None` when any of them is NaN or infinite (the SH bands beyond
/// `degree` do not count).
#[inline(always)]
pub(super) fn gaussian_inputs<'a, T: Real>(
    a: &ProjectArrays<'a, T>,
    i: usize,
    degree: usize,
) -> Option<GaussianInputs<'a, T>> {
    let k = a.sh_coeffs;
    let used = (degree + 1) * (degree + 1);
    let inputs = GaussianInputs {
        mean: &a.means[3 * i..3 * i + 3],
        quat: &a.quats[4 * i..4 * i + 4],
        log_scale: &a.log_scales[3 * i..3 * i + 3],
        logit: a.opacity_logits[i],
        sh: &a.sh[3 * k * i..3 * k * i + 3 * used],
    };
    let finite = all_finite(inputs.mean)
        && all_finite(inputs.quat)
        && all_finite(inputs.log_scale)
        && all_finite(&[inputs.logit])
        && all_finite(inputs.sh);
    finite.then_some(inputs)
}

/// `W mean + t`: a world point in the camera's axes.
#[inline(always)]
pub(super) fn to_camera<T: Real>(w: &[T; 9], t: &[T; 3], mean: &[T]) -> [T; 3] {
    core::array::from_fn(|r| {
        w[3 * r] * mean[0] + w[3 * r + 1] * mean[1] + w[3 * r + 2] * mean[2] + t[r]
    })
}

/// Projects Gaussian `i`; `None` when it is culled.
#[inline(always)]
fn project_one<T: Real>(
    a: &ProjectArrays<'_, T>,
    i: usize,
    cam: &Camera<T>,
    degree: usize,
) -> Option<Projected<T>> {
    let GaussianInputs {
        mean,
        quat,
        log_scale,
        logit,
        sh,
    } = gaussian_inputs(a, i, degree)?;
    let w = &cam.w;
    let p = to_camera(w, &cam.t, mean);
    if !(p[2] >= cam.near) {
        return None;
    }
    let inv_z = T::ONE / p[2];
    let u = p[0] * inv_z;
    let v = p[1] * inv_z;
    let (uc, clamped_x) = clamp(u, cam.lim_x);
    let (vc, clamped_y) = clamp(v, cam.lim_y);
    // J = [[fx/z, 0, -fx uc/z], [0, fy/z, -fy vc/z]], so row r of A = J W is
    // f_r / z (W_r - c_r W_2).
    let mut am = [T::ZERO; 6];
    for col in 0..3 {
        am[col] = cam.fx * inv_z * (w[col] - uc * w[6 + col]);
        am[3 + col] = cam.fy * inv_z * (w[3 + col] - vc * w[6 + col]);
    }

    let shape = splat_shape(&am, quat, log_scale, logit, cam.eps2d, cam.antialiased)?;
    // The forward's outputs (`xy`, the conic, the box) are the lanes' (`lanes.rs`); the box
    // decides culling here too, so that the backward drops what the forward dropped.
    let xy = [cam.fx * u + cam.cx, cam.fy * v + cam.cy];
    screen_box(cam, xy, shape.cov_d, shape.opacity)?;
    let colour = view_colour(mean, &cam.centre, degree, sh);
    Some(Projected {
        p,
        inv_z,
        uv: [uc, vc],
        clamped: [clamped_x, clamped_y],
        a: am,
        shape,
        colour,
    })
}

/// A Gaussian's splat after the camera's map: its 2D covariance and opacity.
pub(super) struct SplatShape<T> {
    /// The normalised quaternion.
    pub quat: UnitQuat<T>,
    /// `Rq`, row-major.
    pub rq: [T; 9],
    pub scale: [T; 3],
    /// `M = Rq S` and `B = A M` (so that `C = B B^T`), row-major.
    pub m: [T; 9],
    pub b: [T; 6],
    /// Un-dilated and dilated 2D covariance `(xx, xy, yy)`, and the dilated one's determinant.
    pub cov: [T; 3],
    pub cov_d: [T; 3],
    pub det: T,
    /// `sigmoid(logit)`, the anti-aliasing compensation (1 when off) and their product.
    pub sigmoid: T,
    pub comp: T,
    pub opacity: T,
}

/// The splat of a Gaussian whose world-space covariance reaches the image through `am` (`A`,
/// 2x3 row-major, the map's Jacobian after the world-to-camera rotation); `None` when it is
/// culled (the dilated covariance is not positive definite, or the opacity is below 1/255).
#[inline(always)]
pub(super) fn splat_shape<T: Real>(
    am: &[T; 6],
    quat: &[T],
    log_scale: &[T],
    logit: T,
    eps2d: T,
    antialiased: bool,
) -> Option<SplatShape<T>> {
    let unit = UnitQuat::new(quat);
    let rq = unit.rotation();
    let scale = [log_scale[0].exp(), log_scale[1].exp(), log_scale[2].exp()];
    let m: [T; 9] = core::array::from_fn(|e| rq[e] * scale[e % 3]);
    // C = A Sigma A^T = (A M)(A M)^T: no 3x3 covariance needed.
    let b: [T; 6] = core::array::from_fn(|e| {
        let (r, col) = (e / 3, e % 3);
        am[3 * r] * m[col] + am[3 * r + 1] * m[3 + col] + am[3 * r + 2] * m[6 + col]
    });
    let cov = [
        b[0] * b[0] + b[1] * b[1] + b[2] * b[2],
        b[0] * b[3] + b[1] * b[4] + b[2] * b[5],
        b[3] * b[3] + b[4] * b[4] + b[5] * b[5],
    ];
    let cov_d = [cov[0] + eps2d, cov[1], cov[2] + eps2d];
    let det = cov_d[0] * cov_d[2] - cov_d[1] * cov_d[1];
    if !(det > T::ZERO) {
        return None;
    }
    let inv_det = T::ONE / det;
    let sigmoid = sigmoid(logit);
    let comp = if antialiased {
        // A rounding-negative determinant of the PSD `C` means a degenerate splat: weight 0.
        let det_c = cov[0] * cov[2] - cov[1] * cov[1];
        let det_c = if det_c > T::ZERO { det_c } else { T::ZERO };
        (det_c * inv_det).sqrt()
    } else {
        T::ONE
    };
    let opacity = sigmoid * comp;
    if !(opacity.to_f64() >= MIN_ALPHA) {
        return None;
    }
    Some(SplatShape {
        quat: unit,
        rq,
        scale,
        m,
        b,
        cov,
        cov_d,
        det,
        sigmoid,
        comp,
        opacity,
    })
}

/// A Gaussian's colour as seen from `centre`.
pub(super) struct ViewColour<T> {
    /// Unit view direction and the centre-to-mean distance it was normalised by.
    pub dir: [T; 3],
    pub dist: T,
    pub basis: [T; 16],
    /// `SH(dir) + 0.5` before the clamp at zero.
    pub raw: [T; 3],
}

/// The colour of the Gaussian at `mean` with SH coefficients `sh` (its first `(degree + 1)^2`,
/// `[.., 3]`) seen from `centre`, which must not be `mean`.
#[inline(always)]
pub(super) fn view_colour<T: Real>(
    mean: &[T],
    centre: &[T; 3],
    degree: usize,
    sh: &[T],
) -> ViewColour<T> {
    let used = (degree + 1) * (degree + 1);
    let view: [T; 3] = core::array::from_fn(|j| mean[j] - centre[j]);
    let dist = (view[0] * view[0] + view[1] * view[1] + view[2] * view[2]).sqrt();
    let dir = view.map(|x| x / dist);
    let basis = sh_basis(degree, dir);
    let half = T::from_f64(0.5);
    let raw = core::array::from_fn(|c| {
        let mut sum = half;
        for (kk, bk) in basis.iter().take(used).enumerate() {
            sum += *bk * sh[3 * kk + c];
        }
        sum
    });
    ViewColour {
        dir,
        dist,
        basis,
        raw,
    }
}

/// `1 / (1 + e^-x)` without overflow for large `|x|`.
#[inline(always)]
fn sigmoid<T: Real>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE / (T::ONE + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::ONE + e)
    }
}

/// The screen box's half-extents and the tiles it touches; `None` when it misses the image.
/// Integer outputs, so computed in `f64` whatever `T` is.
#[inline(always)]
fn screen_box<T: Real>(
    cam: &Camera<T>,
    xy: [T; 2],
    cov_d: [T; 3],
    opacity: T,
) -> Option<([u32; 2], u32)> {
    // alpha = opacity exp(-sigma) >= 1/255 inside sigma <= ln(255 opacity); that ellipse's
    // half-extent along x is sqrt(2 ln(255 opacity) C'_xx). `max(1)` absorbs rounding below
    // the threshold (k = 0 culls it).
    let k = (2.0 * (opacity.to_f64() / MIN_ALPHA).max(1.0).ln())
        .sqrt()
        .min(MAX_EXTENT_SIGMAS);
    let (x, y) = (xy[0].to_f64(), xy[1].to_f64());
    let rx = (k * cov_d[0].to_f64().sqrt()).ceil();
    let ry = (k * cov_d[2].to_f64().sqrt()).ceil();
    let overlaps = rx >= 1.0
        && ry >= 1.0
        && x + rx > 0.0
        && x - rx < cam.width
        && y + ry > 0.0
        && y - ry < cam.height;
    if !overlaps {
        return None;
    }
    let tile = f64::from(TILE_SIZE);
    // Tile index ranges, half-open; `overlaps` makes each at least one tile wide.
    let span =
        |lo: f64, hi: f64, tiles: f64| (hi / tile).ceil().min(tiles) - (lo / tile).floor().max(0.0);
    let count = span(x - rx, x + rx, cam.tiles_x) * span(y - ry, y + ry, cam.tiles_y);
    // `as` saturates: a box wider than u32::MAX pixels reports u32::MAX.
    Some(([rx as u32, ry as u32], count as u32))
}

/// The standard real SH basis constants of 3DGS, bands 1 to 3 (band 0 is [`SH_C0`]).
const SH_C1: f64 = 0.488_602_511_902_919_9;
const SH_C2: [f64; 5] = [
    1.092_548_430_592_079_2,
    -1.092_548_430_592_079_2,
    0.315_391_565_252_520_05,
    -1.092_548_430_592_079_2,
    0.546_274_215_296_039_6,
];
const SH_C3: [f64; 7] = [
    -0.590_043_589_926_643_5,
    2.890_611_442_640_554,
    -0.457_045_799_464_465_8,
    0.373_176_332_590_115_4,
    -0.457_045_799_464_465_8,
    1.445_305_721_320_277,
    -0.590_043_589_926_643_5,
];

/// The SH basis at the unit direction `d`, bands `0..=degree` (the rest zero).
#[inline(always)]
pub fn sh_basis<T: Real>(degree: usize, [x, y, z]: [T; 3]) -> [T; 16] {
    let c = T::from_f64;
    let mut b = [T::ZERO; 16];
    b[0] = c(SH_C0);
    if degree >= 1 {
        b[1] = -c(SH_C1) * y;
        b[2] = c(SH_C1) * z;
        b[3] = -c(SH_C1) * x;
    }
    if degree >= 2 {
        let (xx, yy, zz) = (x * x, y * y, z * z);
        b[4] = c(SH_C2[0]) * x * y;
        b[5] = c(SH_C2[1]) * y * z;
        b[6] = c(SH_C2[2]) * (c(2.0) * zz - xx - yy);
        b[7] = c(SH_C2[3]) * x * z;
        b[8] = c(SH_C2[4]) * (xx - yy);
        if degree >= 3 {
            b[9] = c(SH_C3[0]) * y * (c(3.0) * xx - yy);
            b[10] = c(SH_C3[1]) * x * y * z;
            b[11] = c(SH_C3[2]) * y * (c(4.0) * zz - xx - yy);
            b[12] = c(SH_C3[3]) * z * (c(2.0) * zz - c(3.0) * xx - c(3.0) * yy);
            b[13] = c(SH_C3[4]) * x * (c(4.0) * zz - xx - yy);
            b[14] = c(SH_C3[5]) * z * (xx - yy);
            b[15] = c(SH_C3[6]) * x * (xx - c(3.0) * yy);
        }
    }
    b
}

/// `sum_k s_k grad B_k(d)`: the basis polynomials of [`sh_basis`] differentiated in `(x, y, z)`
/// as free variables (the caller projects onto the sphere's tangent plane).
#[inline(always)]
pub(crate) fn sh_basis_vjp<T: Real>(degree: usize, [x, y, z]: [T; 3], s: &[T; 16]) -> [T; 3] {
    let c = T::from_f64;
    let mut g = [T::ZERO; 3];
    if degree >= 1 {
        g[0] -= c(SH_C1) * s[3];
        g[1] -= c(SH_C1) * s[1];
        g[2] += c(SH_C1) * s[2];
    }
    if degree >= 2 {
        let (s4, s5, s6, s7, s8) = (
            c(SH_C2[0]) * s[4],
            c(SH_C2[1]) * s[5],
            c(SH_C2[2]) * s[6],
            c(SH_C2[3]) * s[7],
            c(SH_C2[4]) * s[8],
        );
        let two = c(2.0);
        g[0] += s4 * y + s7 * z - two * s6 * x + two * s8 * x;
        g[1] += s4 * x + s5 * z - two * s6 * y - two * s8 * y;
        g[2] += s5 * y + s7 * x + c(4.0) * s6 * z;
        if degree >= 3 {
            let (xx, yy, zz) = (x * x, y * y, z * z);
            let s9 = c(SH_C3[0]) * s[9];
            let s10 = c(SH_C3[1]) * s[10];
            let s11 = c(SH_C3[2]) * s[11];
            let s12 = c(SH_C3[3]) * s[12];
            let s13 = c(SH_C3[4]) * s[13];
            let s14 = c(SH_C3[5]) * s[14];
            let s15 = c(SH_C3[6]) * s[15];
            let three = c(3.0);
            g[0] += c(6.0) * s9 * x * y + s10 * y * z - two * s11 * x * y - c(6.0) * s12 * x * z
                + s13 * (c(4.0) * zz - three * xx - yy)
                + two * s14 * x * z
                + three * s15 * (xx - yy);
            g[1] += three * s9 * (xx - yy) + s10 * x * z + s11 * (c(4.0) * zz - xx - three * yy)
                - c(6.0) * s12 * y * z
                - two * s13 * x * y
                - two * s14 * y * z
                - c(6.0) * s15 * x * y;
            g[2] += s10 * x * y
                + c(8.0) * s11 * y * z
                + s12 * (c(6.0) * zz - three * xx - three * yy)
                + c(8.0) * s13 * x * z
                + s14 * (xx - yy);
        }
    }
    g
}
