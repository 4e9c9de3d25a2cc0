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
//! | `sh_dc`          | `[N, 1, 3]` | SH coefficient of band 0 (the DC term)                      |
//! | `sh_rest`        | `[N, K - 1, 3]` | the higher SH coefficients, `K = (d + 1)^2`, `d <= 3`; flat index `(i (K - 1) + k - 1) 3 + c` for coefficient `k >= 1` |
//!
//! The two SH parts come separately, as `ember_field::GaussianField` stores
//! them (they are optimised at different rates), so that no backend has to interleave them into
//! one `[N, K, 3]` tensor per render: on ndarray that concatenation and its backward are strided
//! copies, element by element, every step.
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
//!
//! # Onto a sphere
//! [`cpu::equirect`] projects onto an equirectangular panorama instead (the map's own Jacobian,
//! depth = distance, splats across the back meridian drawn on both edges), for the same
//! rasterizer: forward and backward, on the CPU (no device kernel, no `ProjectOps` entry).

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;
pub(crate) mod packed;
pub mod pose;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};

/// Floats per Gaussian in the packed projection output, in this order: `xy` (2), `depth` (1),
/// `conic` (3), `color` (3), `opacity` (1). The offsets are the `PACKED_*` constants.
pub const PACKED_WIDTH: usize = 10;

/// The band-0 constant of the real spherical-harmonic basis of 3DGS, `1 / (2 sqrt(pi))`: a
/// Gaussian's colour is `SH_C0 * sh_dc + 0.5` plus the higher bands, clamped at 0.
pub const SH_C0: f64 = 0.282_094_791_773_878_14;
/// Offset of `xy` in a packed row.
pub const PACKED_XY: usize = 0;
/// Offset of `depth` in a packed row.
pub const PACKED_DEPTH: usize = 2;
/// Offset of `conic` in a packed row.
pub const PACKED_CONIC: usize = 3;
/// Offset of `color` in a packed row.
pub const PACKED_COLOR: usize = 6;
/// Offset of `opacity` in a packed row.
pub const PACKED_OPACITY: usize = 9;

/// The inputs of the projection, as backend primitives (shapes in the [module docs](self)).
#[derive(Debug, Clone)]
pub struct ProjectInputs<B: Backend> {
    /// `[N, 3]`
    pub means: FloatTensor<B>,
    /// `[N, 4]`
    pub quats: FloatTensor<B>,
    /// `[N, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[N]`
    pub opacity_logits: FloatTensor<B>,
    /// `[N, 1, 3]`
    pub sh_dc: FloatTensor<B>,
    /// `[N, K - 1, 3]` (`K - 1` may be zero)
    pub sh_rest: FloatTensor<B>,
}

impl<B: Backend> ProjectInputs<B> {
    /// The six inputs in their documented order: `means, quats, log_scales, opacity_logits,
    /// sh_dc, sh_rest` (what the wrappers hand on as a list).
    pub fn into_array(self) -> [FloatTensor<B>; 6] {
        [
            self.means,
            self.quats,
            self.log_scales,
            self.opacity_logits,
            self.sh_dc,
            self.sh_rest,
        ]
    }

    /// The inverse of [`ProjectInputs::into_array`].
    pub fn from_array(
        [means, quats, log_scales, opacity_logits, sh_dc, sh_rest]: [FloatTensor<B>; 6],
    ) -> Self {
        ProjectInputs {
            means,
            quats,
            log_scales,
            opacity_logits,
            sh_dc,
            sh_rest,
        }
    }
}

/// The outputs of the projection as backend primitives.
#[derive(Debug, Clone)]
pub struct ProjectPrimitives<B: Backend> {
    /// `[N, PACKED_WIDTH]`: `xy, depth, conic, color, opacity` per Gaussian (zero when culled).
    pub packed: FloatTensor<B>,
    /// `[N, 3]` integers: `radius_x, radius_y, tiles` (all zero when culled).
    pub extents: IntTensor<B>,
}

/// Gradients of a scalar loss with respect to every [`ProjectInputs`] tensor: the same six
/// fields, shapes and array order.
pub type ProjectGrads<B> = ProjectInputs<B>;

/// The projection of `N` Gaussians as tensors. Every float output is differentiable (they are
/// views of `packed`); `radius` and `tiles` are not.
#[derive(Debug, Clone)]
pub struct Projected<B: Backend> {
    /// `[N, PACKED_WIDTH]`, the rows the rasterizer reads (the per-quantity views below are
    /// columns of it).
    pub packed: Tensor<B, 2>,
    /// `[N, 3]` integers `radius_x, radius_y, tiles`, as the rasterizer reads them.
    pub extents: Tensor<B, 2, Int>,
}

/// The projection on a backend: what [`project_gaussians`] dispatches to. Implemented for every
/// backend Ember supports, each in its own file of this folder.
///
/// Implementations may assume the shapes [`project_gaussians`] checks.
pub trait ProjectOps: Backend {
    /// Forward pass of the projection (see the [module docs](self) for the contract): every
    /// Gaussian's splat as seen by each of the `C` cameras, in one pass, as
    /// `packed [C N, PACKED_WIDTH]` floats (the differentiable outputs) and `extents [C N, 3]`
    /// integers (`radius_x, radius_y, tiles`). Row `v N + i` is Gaussian `i` seen by camera
    /// `v`, in that camera's own pixel coordinates.
    fn project_forward(
        inputs: ProjectInputs<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self>;

    /// Backward pass of the projection: the gradient of a scalar loss with respect to every
    /// input, given `grad_packed [C N, PACKED_WIDTH]` (the loss gradient with respect to
    /// `packed`), summed over the cameras. Culled Gaussians get zero.
    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectGrads<Self>;
}

/// Projects `N` Gaussians through `camera` (the op contract is in the [module docs](self)).
///
/// `means [N, 3]`, `quats [N, 4]`, `log_scales [N, 3]`, `opacity_logits [N]`, `sh_dc [N, 1, 3]`,
/// `sh_rest [N, K - 1, 3]` with `K` in `{1, 4, 9, 16}`. Differentiable with respect to all of
/// them on `Autodiff<B>`. Shapes, the camera and the options are checked here, once.
#[allow(clippy::too_many_arguments)]
pub fn project_gaussians<B: ProjectOps>(
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    opacity_logits: Tensor<B, 1>,
    sh_dc: Tensor<B, 3>,
    sh_rest: Tensor<B, 3>,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<Projected<B>, ProjectError> {
    project_views(
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
        core::slice::from_ref(camera),
        options,
    )
}

/// Projects `N` Gaussians through each of `C` cameras in one op (one kernel launch on a GPU):
/// [`Projected`] with `C N` rows, row `v N + i` being Gaussian `i` seen by `cameras[v]` in
/// that camera's pixel coordinates, so that [`crate::rasterize_views`] draws all `C` images
/// at once. The inputs are those of [`project_gaussians`]; their gradients sum the
/// contributions of every view. `cameras` may differ in everything, image size included.
#[allow(clippy::too_many_arguments)]
pub fn project_views<B: ProjectOps>(
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    opacity_logits: Tensor<B, 1>,
    sh_dc: Tensor<B, 3>,
    sh_rest: Tensor<B, 3>,
    cameras: &[CameraParams],
    options: &ProjectOptions,
) -> Result<Projected<B>, ProjectError> {
    if cameras.is_empty() {
        return Err(ProjectError::NoCameras);
    }
    let [n, md] = means.dims();
    let [_, rest, rest_width] = sh_rest.dims();
    let k = rest + 1;
    let shape_err =
        |name: &'static str, got: usize, per: usize, shape: &'static str| ProjectError::Length {
            name,
            got,
            expected: per * n,
            shape,
            n,
        };
    if md != 3 {
        return Err(shape_err("means", n * md, 3, "[N, 3]"));
    }
    let same = |got: &[usize], want: &[usize]| got == want;
    if !same(&quats.dims(), &[n, 4]) {
        return Err(shape_err(
            "quats",
            quats.dims().iter().product(),
            4,
            "[N, 4]",
        ));
    }
    if !same(&log_scales.dims(), &[n, 3]) {
        return Err(shape_err(
            "log_scales",
            log_scales.dims().iter().product(),
            3,
            "[N, 3]",
        ));
    }
    if !same(&opacity_logits.dims(), &[n]) {
        return Err(shape_err(
            "opacity_logits",
            opacity_logits.dims()[0],
            1,
            "[N]",
        ));
    }
    if !same(&sh_dc.dims(), &[n, 1, 3]) {
        return Err(shape_err(
            "sh_dc",
            sh_dc.dims().iter().product(),
            3,
            "[N, 1, 3]",
        ));
    }
    if !same(&[sh_rest.dims()[0], rest_width], &[n, 3]) {
        return Err(shape_err(
            "sh_rest",
            sh_rest.dims().iter().product(),
            3 * rest,
            "[N, K - 1, 3]",
        ));
    }
    for camera in cameras {
        check_setup(k, camera, options)?;
    }
    let device = means.device();
    if n == 0 {
        // Uploaded, not filled: a fill kernel over zero elements is an invalid launch on CUDA.
        return Ok(Projected {
            packed: Tensor::from_data(
                burn::tensor::TensorData::new(Vec::<f32>::new(), [0, PACKED_WIDTH]),
                &device,
            ),
            extents: Tensor::from_data(
                burn::tensor::TensorData::new(Vec::<i32>::new(), [0, 3]),
                &device,
            ),
        });
    }
    let out = B::project_forward(
        ProjectInputs {
            means: means.into_primitive().tensor(),
            quats: quats.into_primitive().tensor(),
            log_scales: log_scales.into_primitive().tensor(),
            opacity_logits: opacity_logits.into_primitive().tensor(),
            sh_dc: sh_dc.into_primitive().tensor(),
            sh_rest: sh_rest.into_primitive().tensor(),
        },
        cameras,
        *options,
    );
    Ok(Projected {
        packed: Tensor::from_primitive(TensorPrimitive::Float(out.packed)),
        extents: Tensor::from_primitive(out.extents),
    })
}

impl<B: Backend> Projected<B> {
    /// The columns `offset..offset + width` of `packed`. The views are made on demand: a
    /// one-column view reshaped to `[N]` is a copy on some backends (ndarray walks it element
    /// by element), which the renderer, needing none of them, should not pay for.
    fn columns(&self, offset: usize, width: usize) -> Tensor<B, 2> {
        self.packed.clone().narrow(1, offset, width)
    }

    /// `[N, 2]` projected means, pixels.
    pub fn xy(&self) -> Tensor<B, 2> {
        self.columns(PACKED_XY, 2)
    }

    /// `[N]` camera-space depth.
    pub fn depth(&self) -> Tensor<B, 1> {
        let n = self.packed.dims()[0];
        self.columns(PACKED_DEPTH, 1).reshape([n])
    }

    /// `[N, 3]` inverse dilated 2D covariance `(a, b, c)`.
    pub fn conic(&self) -> Tensor<B, 2> {
        self.columns(PACKED_CONIC, 3)
    }

    /// `[N, 3]` RGB.
    pub fn color(&self) -> Tensor<B, 2> {
        self.columns(PACKED_COLOR, 3)
    }

    /// `[N]` opacity.
    pub fn opacity(&self) -> Tensor<B, 1> {
        let n = self.packed.dims()[0];
        self.columns(PACKED_OPACITY, 1).reshape([n])
    }

    /// `[N, 2]` screen-box half-extents in pixels, `(0, 0)` when culled.
    pub fn radius(&self) -> Tensor<B, 2, Int> {
        extents_columns(&self.extents, 0, 2)
    }

    /// `[N]` 16x16 tiles the screen box touches.
    pub fn tiles(&self) -> Tensor<B, 1, Int> {
        let n = self.extents.dims()[0];
        extents_columns(&self.extents, 2, 1).reshape([n])
    }
}

/// The columns `offset..offset + width` of the projection's `extents [N, 3]` (`radius` is
/// `0..2`, `tiles` is `2..3`), copied with `select`: on ndarray `select` copies whole columns
/// while a `narrow` view is materialised element by element.
pub fn extents_columns<B: Backend>(
    extents: &Tensor<B, 2, Int>,
    offset: usize,
    width: usize,
) -> Tensor<B, 2, Int> {
    if extents.dims()[0] == 0 {
        // No gather over zero rows: an empty kernel launch is invalid on CUDA.
        return extents.clone().narrow(1, offset, width);
    }
    let columns: Vec<i64> = (offset..offset + width).map(|c| c as i64).collect();
    let indices = Tensor::<B, 1, Int>::from_data(
        burn::tensor::TensorData::new(columns, [width]),
        &extents.device(),
    );
    extents.clone().select(1, indices)
}

/// Checks that `camera` can form an image: positive finite focal lengths, a finite principal
/// point and pose, a non-empty image.
pub fn check_camera(camera: &CameraParams) -> Result<(), ProjectError> {
    let camera_checks = [
        ("fx", camera.fx, camera.fx.is_finite() && camera.fx > 0.0),
        ("fy", camera.fy, camera.fy.is_finite() && camera.fy > 0.0),
        ("cx", camera.cx, camera.cx.is_finite()),
        ("cy", camera.cy, camera.cy.is_finite()),
        ("width", f64::from(camera.width), camera.width > 0),
        ("height", f64::from(camera.height), camera.height > 0),
    ];
    for (name, value, ok) in camera_checks {
        if !ok {
            return Err(ProjectError::Camera {
                name,
                value,
                rule: "focal lengths must be positive, the image non-empty, all finite",
            });
        }
    }
    let pose = camera.rotation.iter().chain(&camera.translation);
    if let Some(&value) = pose.clone().find(|v| !v.is_finite()) {
        return Err(ProjectError::Camera {
            name: "pose",
            value,
            rule: "rotation and translation must be finite",
        });
    }
    Ok(())
}

/// Checks what does not depend on the array lengths: the SH coefficient count `k`, the camera
/// and the options. Returns the SH degree to evaluate.
pub(crate) fn check_setup(
    k: usize,
    camera: &CameraParams,
    options: &ProjectOptions,
) -> Result<u32, ProjectError> {
    let stored = match k {
        1 => 0,
        4 => 1,
        9 => 2,
        16 => 3,
        k => return Err(ProjectError::ShCoeffs(k)),
    };
    let degree = match options.sh_degree {
        None => stored,
        Some(d) if d <= stored => d,
        Some(requested) => {
            return Err(ProjectError::ShDegree { requested, stored });
        }
    };
    check_camera(camera)?;
    if !(options.near.is_finite() && options.near > 0.0) {
        return Err(ProjectError::Option {
            name: "near",
            value: options.near,
            rule: "must be positive and finite",
        });
    }
    if !(options.eps2d.is_finite() && options.eps2d >= 0.0) {
        return Err(ProjectError::Option {
            name: "eps2d",
            value: options.eps2d,
            rule: "must be non-negative and finite",
        });
    }
    Ok(degree)
}

/// A pinhole camera, world to camera, OpenCV axes (x right, y down, z forward): Ember's one
/// camera type.
///
/// Its serde form is the camera JSON everywhere Ember reads or writes one (the `--camera` file
/// of `trainer render`, the viewer's WebSocket messages): an object with exactly these fields,
/// `{"rotation": [9 numbers], "translation": [3], "fx": .., "fy": .., "cx": .., "cy": ..,
/// "width": W, "height": H}`; unknown keys are refused.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
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

impl CameraParams {
    /// The camera centre in world coordinates, `-R^T t`.
    pub fn center(&self) -> [f64; 3] {
        let (r, t) = (&self.rotation, &self.translation);
        [0, 1, 2].map(|j| -(r[j] * t[0] + r[3 + j] * t[1] + r[6 + j] * t[2]))
    }

    /// The same camera moved to centre `center` (world coordinates), its rotation kept:
    /// `t = -R center`.
    pub fn with_center(mut self, center: [f64; 3]) -> CameraParams {
        let r = &self.rotation;
        self.translation = [0, 1, 2]
            .map(|i| -(r[3 * i] * center[0] + r[3 * i + 1] * center[1] + r[3 * i + 2] * center[2]));
        self
    }
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
    /// A panorama's copy row names a Gaussian past the last
    /// ([`cpu::equirect::backward`]'s `copies`).
    #[error("projection: copy row {row} draws Gaussian {gaussian}, but there are {n}")]
    CopyRow {
        /// The row.
        row: usize,
        /// The Gaussian it names.
        gaussian: u32,
        /// The number of Gaussians.
        n: usize,
    },
    /// [`project_views`] was given no camera.
    #[error("projection: no camera to project through")]
    NoCameras,
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

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
