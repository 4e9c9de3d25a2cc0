//! The projection onto a sphere: 3D Gaussians to the splats of one equirectangular panorama,
//! drawn by the same rasterizer as a pinhole view's, and its backward (on the CPU; its shape
//! and colour parts are the pinhole's, `grads.rs`).
//!
//! # The map
//! The panorama camera has the pinhole's axes (`p = R mu + t`, OpenCV: x right, y down,
//! z forward) and `ember_data::equirect`'s map of a `W x H` panorama (`W = 2 H`): with
//! `rho = hypot(x, z)` and `r = |p|`,
//!
//! ```text
//! u = W (atan2(x, z) / 2π + 1/2),   v = H (1/2 − atan2(−y, rho) / π)
//! ```
//!
//! # The 2D covariance
//! As the pinhole's, `C = A Sigma A^T` with `A = J R`, but `J` is the Jacobian of this map at `p`:
//!
//! ```text
//! ∂u/∂p = W / (2π rho²) (z, 0, −x)
//! ∂v/∂p = H / (π r²) (−x y / rho, rho, −z y / rho)
//! ```
//!
//! A degree of longitude spans `1 / cos(lat)` more pixels towards the poles, so the footprint
//! widens there as the panorama does. At a pole `rho` goes to zero: it is held at least
//! `r sin(π / H)` (a pixel row from the pole) so the Jacobian stays finite, the rows' directions
//! kept (`x / rho` and `z / rho` from the true `rho`), so a splat at a pole keeps its extent in
//! latitude.
//!
//! # Depth, colour, culling
//! - The depth the rasterizer sorts by is the distance `r`, not `z`: every direction is in front
//!   of a panorama, and one order along the rays holds for the whole sphere.
//! - A Gaussian closer than `near` is culled, as are those the pinhole culls for their shape
//!   (non-finite inputs, opacity below 1/255, a degenerate covariance) or whose box misses the
//!   rows `[0, H]`.
//! - Colour, opacity and Mip-Splatting's compensation are the pinhole's.
//!
//! # Wrapping around
//! Longitude wraps: a splat whose box crosses the left or right edge is drawn a second time, a
//! copy `W` pixels to the other side. A box wider than the panorama is held at half its width
//! on each side of the centre (the copy draws the other half); such a splat, within a few of
//! its own radii of a pole, may be drawn twice in the 16-pixel tiles around the meridian
//! opposite its centre, where the two halves meet.
//!
//! The local linear map is exact at a Gaussian's centre and first-order across it, like the
//! pinhole's EWA approximation; it is worst for Gaussians that cover a pole, whose true
//! footprint is a cap across every longitude.
//!
//! # The backward
//! [`backward`] differentiates every differentiable output as the function it is (the
//! Jacobian's factors and the pole's hold included, [`sphere_backward`]'s doc has the chain),
//! a copy's gradient added into its Gaussian. Checked against f64 central differences in
//! `project::tests::equirect`.

use std::f64::consts::{PI, TAU};

use rayon::prelude::*;

use super::grads::{InputGrads, Upstream, colour_backward, shape_backward};
use super::{
    GAUSSIANS_PER_TASK, GaussianInputs, MAX_EXTENT_SIGMAS, MIN_ALPHA, ProjectArrays,
    ProjectGrads, ProjectOutputGrads, ProjectOutputs, SplatShape, TILE_SIZE, ViewColour,
    check_len, gaussian_inputs, splat_shape, to_camera, validate, view_colour,
};
use crate::project::{CameraParams, ProjectError, ProjectOptions};
use crate::real::Real;

/// The splats of a panorama: rows `0..N` are the Gaussians in order (zero when culled), rows
/// `N..` the wrapped copies, in the order of the Gaussians they copy.
#[derive(Clone, Debug, PartialEq)]
pub struct EquirectSplats<T> {
    /// `N + copies.len()` rows, shapes as [`super::forward`]'s.
    pub outputs: ProjectOutputs<T>,
    /// For each copy row `N + j`, the Gaussian it draws.
    pub copies: Vec<u32>,
}

/// One kept Gaussian's splat on the panorama.
struct SphereSplat<T> {
    xy: [T; 2],
    depth: T,
    conic: [T; 3],
    color: [T; 3],
    opacity: T,
    radius: [u32; 2],
}

/// Forward: the splats of all Gaussians on the `camera.width x camera.height` panorama seen from
/// `camera`'s pose (its intrinsics `fx, fy, cx, cy` are not used), with the wrapped copies.
///
/// # Errors
/// [`ProjectError`] for the inputs, camera and options the pinhole projection refuses, and a
/// camera whose height is not half its (even) width.
pub fn forward<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<EquirectSplats<T>, ProjectError> {
    let (n, degree) = validate_panorama(a, camera, options)?;
    let sphere = Sphere::new(camera, options);
    let splats: Vec<Option<SphereSplat<T>>> = (0..n)
        .into_par_iter()
        .map(|i| project_one(a, i, &sphere, degree).map(|state| state.splat))
        .collect();

    let mut outputs = ProjectOutputs {
        xy: vec![T::ZERO; 2 * n],
        depth: vec![T::ZERO; n],
        conic: vec![T::ZERO; 3 * n],
        color: vec![T::ZERO; 3 * n],
        opacity: vec![T::ZERO; n],
        radius: vec![0; 2 * n],
        tiles: vec![0; n],
    };
    let mut copies = Vec::new();
    let mut copy_rows = Vec::new();
    for (i, splat) in splats.iter().enumerate() {
        let Some(s) = splat else { continue };
        let x = s.xy[0].to_f64();
        let rx = f64::from(s.radius[0]);
        outputs.xy[2 * i..2 * i + 2].copy_from_slice(&s.xy);
        outputs.depth[i] = s.depth;
        outputs.conic[3 * i..3 * i + 3].copy_from_slice(&s.conic);
        outputs.color[3 * i..3 * i + 3].copy_from_slice(&s.color);
        outputs.opacity[i] = s.opacity;
        outputs.radius[2 * i..2 * i + 2].copy_from_slice(&s.radius);
        outputs.tiles[i] = sphere.tiles(x, s);
        let shift = if x - rx < 0.0 {
            sphere.width
        } else if x + rx > sphere.width {
            -sphere.width
        } else {
            continue;
        };
        copies.push(i as u32);
        // The tiles of the column as stored, which the rasterizer bins by.
        let copy_x = T::from_f64(x + shift);
        copy_rows.push((i, copy_x, sphere.tiles(copy_x.to_f64(), s)));
    }
    for (i, x, tiles) in copy_rows {
        outputs.xy.extend_from_slice(&[x, outputs.xy[2 * i + 1]]);
        outputs.depth.push(outputs.depth[i]);
        outputs.conic.extend_from_within(3 * i..3 * i + 3);
        outputs.color.extend_from_within(3 * i..3 * i + 3);
        outputs.opacity.push(outputs.opacity[i]);
        outputs.radius.extend_from_within(2 * i..2 * i + 2);
        outputs.tiles.push(tiles);
    }
    Ok(EquirectSplats { outputs, copies })
}

/// Backward: the gradient of `sum(output * grad)` over the rows [`forward`] drew with these
/// inputs, camera and options, with respect to every input. `grads` has the forward's
/// `N + copies.len()` rows and `copies` is its [`EquirectSplats::copies`]: a copy's gradient
/// adds into the Gaussian it draws (the copy is the same splat `W` pixels over). Culled
/// Gaussians get zero.
///
/// Differentiable as the pinhole's is (see the [op contract](crate::project)), through the
/// Jacobian as the function it is: where `rho` is held away from a pole, through the hold
/// `r sin(π / H)` and the unit azimuth.
///
/// # Errors
/// What [`forward`] refuses, gradients of another length, and a copy of no Gaussian.
pub fn backward<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
    grads: &ProjectOutputGrads<'_, T>,
    copies: &[u32],
) -> Result<ProjectGrads<T>, ProjectError> {
    let (n, degree) = validate_panorama(a, camera, options)?;
    let rows = n + copies.len();
    let lengths = [
        ("grad xy", grads.xy.len(), 2, "[N + copies, 2]"),
        ("grad depth", grads.depth.len(), 1, "[N + copies]"),
        ("grad conic", grads.conic.len(), 3, "[N + copies, 3]"),
        ("grad color", grads.color.len(), 3, "[N + copies, 3]"),
        ("grad opacity", grads.opacity.len(), 1, "[N + copies]"),
    ];
    for (name, got, per, shape) in lengths {
        check_len(name, got, per, shape, rows)?;
    }
    // The row of each Gaussian's copy (`usize::MAX`: none).
    let mut copy_row = vec![usize::MAX; n];
    for (j, &gaussian) in copies.iter().enumerate() {
        match copy_row.get_mut(gaussian as usize) {
            Some(row) => *row = n + j,
            None => return Err(ProjectError::CopyRow { row: n + j, gaussian, n }),
        }
    }
    let sphere = Sphere::new(camera, options);
    let k = a.sh_coeffs;
    let mut out = ProjectGrads {
        means: vec![T::ZERO; 3 * n],
        quats: vec![T::ZERO; 4 * n],
        log_scales: vec![T::ZERO; 3 * n],
        opacity_logits: vec![T::ZERO; n],
        sh: vec![T::ZERO; 3 * k * n],
    };
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
        .for_each(|(task, (means, quats, log_scales, logits, sh))| {
            for (j, logit) in logits.iter_mut().enumerate() {
                let i = task * per + j;
                let Some(state) = project_one(a, i, &sphere, degree) else {
                    continue;
                };
                let up = upstream(grads, i, copy_row[i]);
                let v_sh = &mut sh[3 * k * j..3 * k * (j + 1)];
                let g = sphere_backward(&state, &sphere, degree, &a.sh[3 * k * i..], &up, v_sh);
                means[3 * j..3 * j + 3].copy_from_slice(&g.mean);
                quats[4 * j..4 * j + 4].copy_from_slice(&g.quat);
                log_scales[3 * j..3 * j + 3].copy_from_slice(&g.log_scale);
                *logit = g.logit;
            }
        });
    Ok(out)
}

/// Checks what [`validate`] checks and that `camera` is a panorama's (2:1, even width).
fn validate_panorama<T: Real>(
    a: &ProjectArrays<'_, T>,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<(usize, usize), ProjectError> {
    let checked = validate(a, camera, options)?;
    if !camera.width.is_multiple_of(2) || camera.height != camera.width / 2 {
        return Err(ProjectError::Camera {
            name: "height",
            value: f64::from(camera.height),
            rule: "a panorama's height must be half its width, and its width even",
        });
    }
    Ok(checked)
}

/// Gaussian `i`'s upstream gradient: its row's, plus its copy's at `copy_row` (if not
/// `usize::MAX`).
fn upstream<T: Real>(grads: &ProjectOutputGrads<'_, T>, i: usize, copy_row: usize) -> Upstream<T> {
    let row = |r: usize| Upstream {
        xy: [grads.xy[2 * r], grads.xy[2 * r + 1]],
        depth: grads.depth[r],
        conic: core::array::from_fn(|c| grads.conic[3 * r + c]),
        color: core::array::from_fn(|c| grads.color[3 * r + c]),
        opacity: grads.opacity[r],
    };
    let mut up = row(i);
    if copy_row != usize::MAX {
        let copy = row(copy_row);
        let add = |a: &mut [T], b: &[T]| a.iter_mut().zip(b).for_each(|(a, b)| *a += *b);
        add(&mut up.xy, &copy.xy);
        up.depth += copy.depth;
        add(&mut up.conic, &copy.conic);
        add(&mut up.color, &copy.color);
        up.opacity += copy.opacity;
    }
    up
}

/// The backward of [`project_one`] for a kept Gaussian; writes `v_sh` (`[K, 3]`).
///
/// With `s, c` the unit azimuth, `J = [[du c, 0, -du s], [-dv y s, dv rho, -dv y c]]`,
/// `du = W / (2π rho)` and `dv = H / (π r^2)`, the gradient with respect to `J` goes to `p`
/// through each factor: `d du = -du / rho d rho`, `d dv = -2 dv / r^2 p . dp`, `d rho =
/// (s, 0, c) . dp` (or `sin(π / H) p / r . dp` while held), `d s = (c^2, 0, -s c) . dp /
/// rho_true`, `d c = (-s c, 0, s^2) . dp / rho_true`. The position's own Jacobian is `J` at
/// the true `rho`, the distance's `p / r`.
fn sphere_backward<T: Real>(
    st: &SphereState<T>,
    cam: &Sphere<T>,
    degree: usize,
    sh: &[T],
    up: &Upstream<T>,
    v_sh: &mut [T],
) -> InputGrads<T> {
    let shape = shape_backward(&st.shape, &st.a, up.conic, up.opacity, cam.antialiased);
    let w = cam.w.map(Real::to_f64);
    // dL/dJ = dL/dA W^T.
    let g_a = shape.a.map(Real::to_f64);
    let gj: [[f64; 3]; 2] = core::array::from_fn(|row| {
        core::array::from_fn(|m| (0..3).map(|col| g_a[3 * row + col] * w[3 * m + col]).sum())
    });
    let [x, y, z] = st.p;
    let (s, c) = (st.sin_lon, st.cos_lon);
    let (du, dv, rho, r2) = (st.du, st.dv, st.rho, st.r2);
    let g_du = gj[0][0] * c - gj[0][2] * s;
    let g_dv = -gj[1][0] * y * s + gj[1][1] * rho - gj[1][2] * y * c;
    let g_s = -gj[0][2] * du - gj[1][0] * dv * y;
    let g_c = gj[0][0] * du - gj[1][2] * dv * y;
    let g_rho = gj[1][1] * dv - g_du * du / rho;
    let mut gp = [0.0, -(gj[1][0] * s + gj[1][2] * c) * dv, 0.0];
    let from_dv = -2.0 * g_dv * dv / r2;
    for (g, p) in gp.iter_mut().zip(&st.p) {
        *g += from_dv * p;
    }
    if st.held {
        let from_rho = g_rho * cam.pole_sin / st.r;
        for (g, p) in gp.iter_mut().zip(&st.p) {
            *g += from_rho * p;
        }
    } else {
        gp[0] += g_rho * s;
        gp[2] += g_rho * c;
    }
    let rho_true = st.rho_true;
    let (gu, gv) = (up.xy[0].to_f64(), up.xy[1].to_f64());
    if rho_true > 0.0 {
        gp[0] += (g_s * c * c - g_c * s * c) / rho_true;
        gp[2] += (g_c * s * s - g_s * s * c) / rho_true;
        let along_u = gu * cam.width / (TAU * rho_true * rho_true);
        gp[0] += along_u * z;
        gp[2] -= along_u * x;
    }
    let along_v = gv * cam.height / (PI * r2);
    gp[0] -= along_v * y * s;
    gp[1] += along_v * rho_true;
    gp[2] -= along_v * y * c;
    let from_depth = up.depth.to_f64() / st.r;
    for (g, p) in gp.iter_mut().zip(&st.p) {
        *g += from_depth * p;
    }
    // p = W mu + t.
    let mut mean: [T; 3] = core::array::from_fn(|m| {
        T::from_f64(w[m] * gp[0] + w[3 + m] * gp[1] + w[6 + m] * gp[2])
    });
    if let Some(from_dir) = colour_backward(&st.colour, degree, sh, up.color, cam.view_dir_grad, v_sh)
    {
        for (m, d) in mean.iter_mut().zip(from_dir) {
            *m += d;
        }
    }
    InputGrads {
        mean,
        quat: shape.quat,
        log_scale: shape.log_scale,
        logit: shape.logit,
    }
}

/// The panorama camera of one call.
struct Sphere<T> {
    /// World-to-camera rotation, row-major, and translation.
    w: [T; 9],
    t: [T; 3],
    /// Camera centre in world space, `-W^T t`.
    centre: [T; 3],
    near: T,
    eps2d: T,
    antialiased: bool,
    view_dir_grad: bool,
    /// `sin(π / H)`: `rho` is held at least `r` times this (a pixel row from a pole).
    pole_sin: f64,
    width: f64,
    height: f64,
    tiles_x: f64,
    tiles_y: f64,
}

impl<T: Real> Sphere<T> {
    fn new(c: &CameraParams, o: &ProjectOptions) -> Self {
        let f = T::from_f64;
        Sphere {
            w: c.rotation.map(f),
            t: c.translation.map(f),
            centre: c.center().map(f),
            near: f(o.near),
            eps2d: f(o.eps2d),
            antialiased: o.antialiased,
            view_dir_grad: o.view_dir_grad,
            pole_sin: (PI / f64::from(c.height)).sin(),
            width: f64::from(c.width),
            height: f64::from(c.height),
            tiles_x: f64::from(c.width.div_ceil(TILE_SIZE)),
            tiles_y: f64::from(c.height.div_ceil(TILE_SIZE)),
        }
    }

    /// The tiles a splat's box touches when centred at column `x` (clipped to the panorama).
    fn tiles(&self, x: f64, s: &SphereSplat<T>) -> u32 {
        let (rx, ry) = (f64::from(s.radius[0]), f64::from(s.radius[1]));
        let y = s.xy[1].to_f64();
        let tile = f64::from(TILE_SIZE);
        let span = |lo: f64, hi: f64, tiles: f64| {
            ((hi / tile).ceil().min(tiles) - (lo / tile).floor().max(0.0)).max(0.0)
        };
        (span(x - rx, x + rx, self.tiles_x) * span(y - ry, y + ry, self.tiles_y)) as u32
    }
}

/// One kept Gaussian's state on the sphere: its splat, and what the backward needs.
struct SphereState<T> {
    /// Camera-space mean `p`, its distance `r` and `r^2`.
    p: [f64; 3],
    r: f64,
    r2: f64,
    /// `hypot(x, z)`, the same held at least `r sin(π / H)`, and whether the hold is active.
    rho_true: f64,
    rho: f64,
    held: bool,
    /// The unit azimuth `(x, z) / rho_true` (`(0, 1)` straight up or down).
    sin_lon: f64,
    cos_lon: f64,
    /// `W / (2π rho)` and `H / (π r^2)`: the Jacobian's two row scales.
    du: f64,
    dv: f64,
    /// `A = J W`, 2x3 row-major.
    a: [T; 6],
    shape: SplatShape<T>,
    colour: ViewColour<T>,
    splat: SphereSplat<T>,
}

/// Projects Gaussian `i` onto the panorama; `None` when it is culled.
fn project_one<T: Real>(
    a: &ProjectArrays<'_, T>,
    i: usize,
    cam: &Sphere<T>,
    degree: usize,
) -> Option<SphereState<T>> {
    let GaussianInputs {
        mean,
        quat,
        log_scale,
        logit,
        sh,
    } = gaussian_inputs(a, i, degree)?;
    let w = &cam.w;
    let p = to_camera(w, &cam.t, mean).map(Real::to_f64);
    let [x, y, z] = p;
    let r2 = x * x + y * y + z * z;
    let r = r2.sqrt();
    if !(r >= cam.near.to_f64()) {
        return None;
    }
    // The map's Jacobian written with the unit azimuth `(sin lon, cos lon) = (x, z) / rho`, so
    // that holding `rho` away from zero keeps both rows' directions (a pole's splat keeps its
    // latitude extent; straight up or down, any azimuth serves).
    let rho_true = x.hypot(z);
    let (sin_lon, cos_lon) = if rho_true > 0.0 {
        (x / rho_true, z / rho_true)
    } else {
        (0.0, 1.0)
    };
    let rho_min = r * cam.pole_sin;
    let held = rho_min > rho_true;
    let rho = rho_true.max(rho_min);
    let (width, height) = (cam.width, cam.height);
    let du = width / (TAU * rho);
    let dv = height / (PI * r2);
    let j = [
        [du * cos_lon, 0.0, -du * sin_lon],
        [-dv * y * sin_lon, dv * rho, -dv * y * cos_lon],
    ];
    let am: [T; 6] = core::array::from_fn(|e| {
        let (row, col) = (e / 3, e % 3);
        T::from_f64(
            j[row][0] * w[col].to_f64()
                + j[row][1] * w[3 + col].to_f64()
                + j[row][2] * w[6 + col].to_f64(),
        )
    });
    let shape = splat_shape(&am, quat, log_scale, logit, cam.eps2d, cam.antialiased)?;

    let u = width * (x.atan2(z) / TAU + 0.5);
    let v = height * (0.5 - (-y).atan2(rho_true) / PI);
    // The box as the pinhole's: alpha >= 1/255 inside sigma <= ln(255 opacity).
    let kk = (2.0 * (shape.opacity.to_f64() / MIN_ALPHA).max(1.0).ln())
        .sqrt()
        .min(MAX_EXTENT_SIGMAS);
    let rx = (kk * shape.cov_d[0].to_f64().sqrt())
        .ceil()
        .min(width / 2.0);
    let ry = (kk * shape.cov_d[2].to_f64().sqrt()).ceil();
    if !(rx >= 1.0 && ry >= 1.0 && v + ry > 0.0 && v - ry < height) {
        return None;
    }
    let inv_det = T::ONE / shape.det;
    let colour = view_colour(mean, &cam.centre, degree, sh);
    let splat = SphereSplat {
        // `u` of a direction just left of the back meridian can round to `W`: keep it inside.
        xy: [T::from_f64(u.rem_euclid(width)), T::from_f64(v)],
        depth: T::from_f64(r),
        conic: [
            shape.cov_d[2] * inv_det,
            -shape.cov_d[1] * inv_det,
            shape.cov_d[0] * inv_det,
        ],
        color: colour
            .raw
            .map(|c| if c > T::ZERO { c } else { T::ZERO }),
        opacity: shape.opacity,
        radius: [rx as u32, ry as u32],
    };
    Some(SphereState {
        p,
        r,
        r2,
        rho_true,
        rho,
        held,
        sin_lon,
        cos_lon,
        du,
        dv,
        a: am,
        shape,
        colour,
        splat,
    })
}
