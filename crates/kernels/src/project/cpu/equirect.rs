//! The projection onto a sphere: 3D Gaussians to the splats of one equirectangular panorama,
//! drawn by the same rasterizer as a pinhole view's (forward only, on the CPU).
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

use rayon::prelude::*;

use super::{
    GaussianInputs, MAX_EXTENT_SIGMAS, MIN_ALPHA, ProjectArrays, ProjectOutputs, TILE_SIZE,
    gaussian_inputs, splat_shape, to_camera, validate, view_colour,
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
    let (n, degree) = validate(a, camera, options)?;
    if !camera.width.is_multiple_of(2) || camera.height != camera.width / 2 {
        return Err(ProjectError::Camera {
            name: "height",
            value: f64::from(camera.height),
            rule: "a panorama's height must be half its width, and its width even",
        });
    }
    let sphere = Sphere::new(camera, options);
    let splats: Vec<Option<SphereSplat<T>>> = (0..n)
        .into_par_iter()
        .map(|i| project_one(a, i, &sphere, degree))
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

/// Projects Gaussian `i` onto the panorama; `None` when it is culled.
fn project_one<T: Real>(
    a: &ProjectArrays<'_, T>,
    i: usize,
    cam: &Sphere<T>,
    degree: usize,
) -> Option<SphereSplat<T>> {
    let GaussianInputs {
        mean,
        quat,
        log_scale,
        logit,
        sh,
    } = gaussian_inputs(a, i, degree)?;
    let w = &cam.w;
    let p = to_camera(w, &cam.t, mean);
    let [x, y, z] = p.map(Real::to_f64);
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
    let rho = rho_true.max(r * (std::f64::consts::PI / cam.height).sin());
    let (width, height) = (cam.width, cam.height);
    let du = width / (std::f64::consts::TAU * rho);
    let dv = height / (std::f64::consts::PI * r2);
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

    let u = width * (x.atan2(z) / std::f64::consts::TAU + 0.5);
    let v = height * (0.5 - (-y).atan2(x.hypot(z)) / std::f64::consts::PI);
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
    Some(SphereSplat {
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
    })
}
