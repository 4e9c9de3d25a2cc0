//! Projection: 3D Gaussians to the 2D splats the rasterizer draws (EWA covariance, culling,
//! spherical harmonics to colour, radii, tile counts), with its backward.
//!
//! # Inputs (per Gaussian `i`, row-major)
//! | input            | shape       | notes                                                       |
//! |------------------|-------------|-------------------------------------------------------------|
//! | `means`          | `[N, 3]`    | centres, world units                                        |
//! | `quats`          | `[N, 4]`    | `(w, x, y, z)`, need not be normalised                      |
//! | `log_scales`     | `[N, 3]`    | natural log of the standard deviations along local axes     |
//! | `opacity_logits` | `[N]`       | opacity before the sigmoid                                  |
//! | `sh`             | `[N, K, 3]` | SH coefficients, `K = (d + 1)^2`, `d <= 3`, DC first; flat index `(i K + k) 3 + c` |
//!
//! The camera ([`CameraParams`]) maps world points to camera space by `p = R mu + t`, OpenCV axes
//! (x right, y down, z forward); pixel coordinates are `(fx x / z + cx, fy y / z + cy)`, with the
//! centre of pixel `(0, 0)` at `(0.5, 0.5)` (so a mean at `(0.5, 0.5)` sits on that pixel's centre).
//!
//! # Outputs
//! | output    | shape    | meaning                                                            |
//! |-----------|----------|--------------------------------------------------------------------|
//! | `xy`      | `[N, 2]` | projected mean, pixels                                             |
//! | `depth`   | `[N]`    | camera-space `z`, world units                                      |
//! | `conic`   | `[N, 3]` | `(a, b, c)` of the inverse dilated 2D covariance, pixels^-2: the rasterizer's `sigma = 1/2 (a dx^2 + c dy^2) + b dx dy` |
//! | `color`   | `[N, 3]` | `max(SH(dir) + 0.5, 0)`, `dir` the unit vector from the camera centre to the mean |
//! | `opacity` | `[N]`    | `sigmoid(logit)`, times the anti-aliasing compensation when on     |
//! | `radius`  | `[N, 2]` | `u32` pixel half-extents of the screen box, `(0, 0)` when culled   |
//! | `tiles`   | `[N]`    | `u32` number of 16x16 tiles the screen box touches, `0` when culled |
//!
//! # The 2D covariance
//! `Sigma = Rq S S Rq^T` (`Rq` from the normalised quaternion, `S = diag(exp(log_scales))`),
//! `C = J R Sigma R^T J^T` with the EWA Jacobian of the perspective map at `p`,
//!
//! ```text
//! J = [[fx / z, 0, -fx u / z], [0, fy / z, -fy v / z]],   u = clamp(x / z, -lim_x-, lim_x+)
//! lim_x+ = (width - cx) / fx + 0.3 tan_fovx,  lim_x- = cx / fx + 0.3 tan_fovx,  tan_fovx = width / (2 fx)
//! ```
//!
//! (and `v`, `lim_y+-` likewise): the clamp keeps Gaussians far outside the view from getting
//! absurdly stretched footprints. The rasterizer uses the dilated `C + eps2d I`
//! ([`ProjectOptions::eps2d`], `0.3` px^2: a splat covers at least about a pixel). With
//! [`ProjectOptions::antialiased`] (the Mip-Splatting 2D filter) the opacity is multiplied by
//! `sqrt(det C / det(C + eps2d I))`, so that dilation does not add energy.
//!
//! # Radius and tiles
//! A pixel is drawn where `alpha = opacity exp(-sigma) >= 1/255`, i.e. inside the ellipse
//! `sigma <= ln(255 opacity)`. Its axis-aligned bounding box has half-extents
//! `k sqrt(C'_xx)` and `k sqrt(C'_yy)` (`C'` the dilated covariance) with
//! `k = sqrt(2 ln(255 opacity))`; `k` is capped at `3.33`, its value for opacity 1, which only
//! guards rounding. `radius = ceil(k sqrt(C'_xx)), ceil(k sqrt(C'_yy))`. The tiles counted are
//! those with index range `floor((x - r) / 16) ..= ceil((x + r) / 16) - 1` (and `y`), clipped to
//! the image's `ceil(width / 16) x ceil(height / 16)` tiles.
//!
//! # Culling
//! A Gaussian is culled (every output zero, `radius = (0, 0)`, zero gradient) when
//! - any input it depends on is NaN or infinite (the SH bands beyond the degree used do not count);
//! - `z < near` ([`ProjectOptions::near`]), which also covers everything behind the camera;
//! - its opacity (after the compensation) is below `1/255`;
//! - the determinant of the dilated 2D covariance is not positive;
//! - a radius is zero, or the screen box `[x - rx, x + rx] x [y - ry, y + ry]` does not overlap
//!   the image `[0, width] x [0, height]` (touching an edge is not overlapping).
//!
//! # What is differentiable
//! Every output but `radius` and `tiles` with respect to every input, through the clamped
//! Jacobian as the function it is (where the clamp is active `u` is a constant, and the
//! Jacobian still depends on `z`), through the quaternion normalisation (a quaternion of norm
//! below `1e-12` is the identity rotation and gets a zero gradient), and through the colour
//! clamp (no gradient where it clamps). [`ProjectOptions::view_dir_grad`] chooses whether the
//! colour's dependence on the view direction reaches the means; the culling decisions are
//! piecewise constant and carry no gradient.

pub mod cpu;

/// A pinhole camera, world to camera, OpenCV axes (x right, y down, z forward).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraParams {
    /// World-to-camera rotation `R`, 3x3 row-major (orthonormal: the camera centre is `-R^T t`).
    pub rotation: [f64; 9],
    /// World-to-camera translation `t`: `p_cam = R p_world + t`.
    pub translation: [f64; 3],
    /// Focal length along x, pixels.
    pub fx: f64,
    /// Focal length along y, pixels.
    pub fy: f64,
    /// Principal point x, pixels (from the image's left edge).
    pub cx: f64,
    /// Principal point y, pixels (from the image's top edge).
    pub cy: f64,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
}

/// Options of the projection. The default is classic 3DGS with all SH bands and the view
/// direction differentiated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProjectOptions {
    /// Near plane, camera-space `z` in world units; Gaussians with `z` below it are culled.
    pub near: f64,
    /// Added to the 2D covariance's diagonal, px^2.
    pub eps2d: f64,
    /// Mip-Splatting's 2D filter: scale the opacity by `sqrt(det C / det(C + eps2d I))`.
    pub antialiased: bool,
    /// SH bands used, at most the degree the coefficient array holds; `None` uses them all.
    pub sh_degree: Option<u32>,
    /// Whether the gradient flows through the view direction into the means. `false` detaches
    /// it, as gsplat's reference gradients do.
    pub view_dir_grad: bool,
}

impl Default for ProjectOptions {
    fn default() -> Self {
        ProjectOptions {
            near: 0.01,
            eps2d: 0.3,
            antialiased: false,
            sh_degree: None,
            view_dir_grad: true,
        }
    }
}

/// Why a projection was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProjectError {
    /// An array's length does not match the number of Gaussians.
    #[error("projection: `{name}` has {got} values, expected {expected} ({shape} with N = {n})")]
    Length {
        /// The array's name.
        name: &'static str,
        /// Its length.
        got: usize,
        /// The expected length.
        expected: usize,
        /// The expected shape, in words.
        shape: &'static str,
        /// The number of Gaussians (from `means`).
        n: usize,
    },
    /// The SH coefficient count is not `(d + 1)^2` for a degree `d` in `0..=3`.
    #[error("projection: {0} SH coefficients per Gaussian; expected 1, 4, 9 or 16")]
    ShCoeffs(usize),
    /// More SH bands were asked for than the coefficients hold.
    #[error("projection: SH degree {requested} requested, the coefficients hold degree {stored}")]
    ShDegree {
        /// [`ProjectOptions::sh_degree`].
        requested: u32,
        /// The degree of the coefficient array.
        stored: u32,
    },
    /// A camera parameter is out of range.
    #[error("projection: camera {name} = {value} is invalid; {rule}")]
    Camera {
        /// The parameter's name.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        rule: &'static str,
    },
    /// An option is out of range.
    #[error("projection: option {name} = {value} is invalid; {rule}")]
    Option {
        /// The option's name.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        rule: &'static str,
    },
}
