//! Rendering a [`GaussianField`] through a pinhole camera: projection then tile
//! rasterization, differentiable end to end under `Autodiff`.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use crate::GaussianField;
use ember_kernels::project::extents_columns;
use ember_kernels::{
    CameraParams, ProjectError, ProjectOptions, RasterError, RasterSetup, project_views,
    rasterize_views,
};

/// Why a render was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// The projection refused the field, the camera or the options.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// The rasterizer refused the image setup.
    #[error(transparent)]
    Raster(#[from] RasterError),
    /// The level-of-detail cut refused the hierarchy.
    #[error(transparent)]
    Lod(ember_kernels::LodError),
    /// A value the render needed on the host could not be read back.
    #[error("reading back {0}")]
    ReadBack(String),
    /// [`crate::render_panorama`] was asked for a width that is odd or below 4 (a panorama is
    /// twice as wide as it is high).
    #[error("a panorama {width} pixels wide: its width must be even and at least 4")]
    PanoramaSize {
        /// The width asked for, pixels.
        width: u32,
    },
    /// A render of whole panoramas ([`crate::panorama_batch_pass`]) was asked for what only
    /// pinhole views give.
    #[error("{0} is not available for whole panoramas")]
    Panorama(&'static str),
    /// [`render_batch`] was given no camera.
    #[error("render_batch needs at least one camera")]
    NoCameras,
    /// [`render_batch`] was given more cameras than a `u32` counts.
    #[error("render_batch takes at most 2^32 - 1 cameras")]
    TooManyCameras,
    /// [`render_batch`] was given cameras of different image sizes.
    #[error(
        "camera {index} is {width}x{height} but camera 0 is {first_width}x{first_height}: a batch shares one image size"
    )]
    BatchSize {
        /// Which camera differs.
        index: usize,
        /// Its width, pixels.
        width: u32,
        /// Its height, pixels.
        height: u32,
        /// Camera 0's width, pixels.
        first_width: u32,
        /// Camera 0's height, pixels.
        first_height: u32,
    },
}

/// How to render. The default is classic 3DGS (0.3 px^2 dilation, near plane 0.01, every
/// stored SH band, gradient through the view direction) on a black background.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct RenderOptions {
    /// Projection settings (near plane, dilation, antialiasing, SH degree, view-direction
    /// gradient).
    pub project: ProjectOptions,
    /// RGB behind the splats.
    pub background: [f32; 3],
    /// Entries of the GPU's tile lists (see `ember_kernels::RasterSetup::tile_pairs`): `None`
    /// sizes them exactly, at the cost of one wait for the device per render; a training loop
    /// that knows the count from earlier steps passes it with a margin and never waits.
    pub tile_pairs: Option<u32>,
    /// Level of detail, pixels: what [`crate::render_lod`] draws of a hierarchy (nodes whose
    /// projected standard deviation is at most this are drawn whole). `0`, the default, draws
    /// the leaves alone; [`crate::DEFAULT_LOD_THRESHOLD`] is the value where it is on. A plain
    /// field's [`render`] has no hierarchy and ignores it.
    pub lod_threshold: f32,
    /// Where a level-of-detail cut would save less than this share of the leaves (`[0, 1)`:
    /// draw more than `(1 - lod_min_saving) L` nodes for `L` leaves), [`crate::render_lod`]
    /// draws the leaves instead, on a backend that gathers the cut (the CPU): gathering the
    /// drawn nodes costs more than the few merged ones save. `0`, the default, always draws the
    /// cut; [`crate::DEFAULT_LOD_MIN_SAVING`] is the value where level of detail is on. A GPU
    /// draws the cut whatever this says (deciding would read the weights back: a wait).
    pub lod_min_saving: f32,
}

impl RenderOptions {
    /// The same options with another background colour.
    pub fn with_background(self, background: [f32; 3]) -> Self {
        RenderOptions { background, ..self }
    }

    /// The same options with Mip-Splatting's antialiasing filter on or off.
    pub fn with_antialiased(mut self, antialiased: bool) -> Self {
        self.project.antialiased = antialiased;
        self
    }

    /// The same options with GPU tile lists of `tile_pairs` entries.
    pub fn with_tile_pairs(self, tile_pairs: Option<u32>) -> Self {
        RenderOptions { tile_pairs, ..self }
    }

    /// The same options with a level-of-detail threshold of `pixels` (see
    /// [`RenderOptions::lod_threshold`]).
    pub fn with_lod_threshold(self, pixels: f32) -> Self {
        RenderOptions {
            lod_threshold: pixels,
            ..self
        }
    }

    /// The same options with a level-of-detail minimum saving of `share` (see
    /// [`RenderOptions::lod_min_saving`]).
    pub fn with_lod_min_saving(self, share: f32) -> Self {
        RenderOptions {
            lod_min_saving: share,
            ..self
        }
    }

    /// The same options evaluating at most `degree` SH bands.
    pub fn with_sh_degree(mut self, degree: u32) -> Self {
        self.project.sh_degree = Some(degree);
        self
    }
}

/// A rendered view. Images are row-major, `H = camera.height`, `W = camera.width`.
#[derive(Debug, Clone)]
pub struct RenderOutput<B: Backend> {
    /// `[H, W, 3]`: the colour, with the background behind the splats.
    pub rgb: Tensor<B, 3>,
    /// `[H, W]`: coverage, `1 - T_final`.
    pub alpha: Tensor<B, 2>,
    /// `[H, W]`: the expected camera depth of the covered part, `sum T alpha z / alpha`
    /// (zero where nothing is drawn).
    pub depth: Tensor<B, 2>,
    /// What densification and diagnostics need.
    pub aux: RenderAux<B>,
}

/// Per-Gaussian by-products of a render.
#[derive(Debug, Clone)]
pub struct RenderAux<B: Backend> {
    /// `[N, 3]`: the projection's `(rx, ry, tiles)` per Gaussian: its screen-space box
    /// half-extents, pixels (zero when culled), and the 16x16 tiles the box touches.
    /// [`RenderAux::radius`] and [`RenderAux::visible`] read it; densification takes it whole.
    pub extents: Tensor<B, 2, Int>,
    /// `[N, 3]` probe (zeros): after `backward`, its gradient holds per Gaussian
    /// `(dL/dx, dL/dy, xy_abs)`: the screen-space gradient of its centre (3DGS's densification
    /// signal is its norm) and `sum` over pixels of `|dL_pixel / dxy|` (gsplat's "absgrad").
    pub screen_grads: Tensor<B, 2>,
    /// `[2]`: the (tile, Gaussian) pairs the views made and the rows the GPU's lists held (see
    /// `ember_kernels::RasterState::pairs`): what sizes the next renders' lists. `None` where
    /// nothing was rasterized or only the images were drawn (no autodiff).
    pub tile_pairs: Option<Tensor<B, 1, Int>>,
}

impl<B: Backend> RenderAux<B> {
    /// `[N, 2]`: screen-space box half-extents, pixels (zero when culled): the "radii" that
    /// 3DGS densification thresholds.
    pub fn radius(&self) -> Tensor<B, 2, Int> {
        extents_columns(&self.extents, 0, 2)
    }

    /// `[N]`: whether the Gaussian survived culling and lands in at least one tile.
    pub fn visible(&self) -> Tensor<B, 1, Bool> {
        let n = self.extents.dims()[0];
        extents_columns(&self.extents, 2, 1)
            .reshape([n])
            .greater_elem(0)
    }
}

/// Renders `field` through `camera` (see [`RenderOutput`]).
///
/// Differentiable with respect to every parameter of the field under `Autodiff`.
pub fn render<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<RenderOutput<B>, RenderError> {
    let setup = batch_setup(core::slice::from_ref(camera), options)?;
    if field.num_gaussians() == 0 {
        // Zero-size tensors trip several cube-backend ops; there is nothing to draw anyway.
        ember_kernels::project::check_camera(camera)?;
        return empty_render(&setup, &field.means.device());
    }
    render_nonempty(field, camera, options, &setup)
}

/// [`render`] of a non-empty field: [`render_views`] of one camera.
fn render_nonempty<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    camera: &CameraParams,
    options: &RenderOptions,
    setup: &RasterSetup,
) -> Result<RenderOutput<B>, RenderError> {
    let (h, w) = (setup.height as usize, setup.width as usize);
    let out = render_views(field, core::slice::from_ref(camera), options, setup)?;
    Ok(RenderOutput {
        rgb: out.rgb.reshape([h, w, 3]),
        alpha: out.alpha.reshape([h, w]),
        depth: out.depth.reshape([h, w]),
        aux: out.aux,
    })
}

/// The batched projection and rasterization of a non-empty field through `cameras`, drawn as
/// `setup` says (its `views` the camera count).
fn render_views<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
    setup: &RasterSetup,
) -> Result<BatchRenderOutput<B>, RenderError> {
    let (projected, raster) = project_and_rasterize(field, cameras, options, setup)?;
    // Where nothing is drawn the weighted depth is exactly zero; the floor only avoids 0 / 0.
    let depth = raster.weighted_depth / raster.alpha.clone().clamp_min(1e-10);
    Ok(BatchRenderOutput {
        rgb: raster.rgb,
        alpha: raster.alpha,
        depth,
        aux: RenderAux {
            extents: projected.extents,
            screen_grads: raster.screen_grads,
            tile_pairs: raster.pairs,
        },
    })
}

/// The batched projection of a non-empty field through `cameras`, and its rasterization as
/// `setup` says.
fn project_and_rasterize<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
    setup: &RasterSetup,
) -> Result<
    (
        ember_kernels::Projected<B>,
        ember_kernels::RasterizedViews<B>,
    ),
    RenderError,
> {
    let projected = project(field, cameras, options)?;
    let raster = rasterize_views(projected.packed.clone(), projected.extents.clone(), setup)?;
    Ok((projected, raster))
}

/// The projection of every Gaussian of `field` through each of `cameras` (see
/// [`ember_kernels::project_views`]): what the rasterizer draws, and each Gaussian's screen
/// extents and tile count per view ([`ember_kernels::Projected::tiles`]). Every render of a field
/// projects it here.
pub fn project<B: ember_kernels::ProjectOps>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<ember_kernels::Projected<B>, RenderError> {
    Ok(project_views(
        field.means.val(),
        field.quats.val(),
        field.log_scales.val(),
        field.opacity_logits.val(),
        field.sh_dc.val(),
        field.sh_rest.val(),
        cameras,
        &options.project,
    )?)
}

/// `C` views of one field, stacked: [`RenderOutput`]'s tensors with a leading camera axis.
#[derive(Debug, Clone)]
pub struct BatchRenderOutput<B: Backend> {
    /// `[C, H, W, 3]`
    pub rgb: Tensor<B, 4>,
    /// `[C, H, W]`
    pub alpha: Tensor<B, 3>,
    /// `[C, H, W]`
    pub depth: Tensor<B, 3>,
    /// The by-products of all views, row `v N + i` being Gaussian `i` in camera `v`:
    /// `extents` `[C N, 3]` and one `screen_grads` probe `[C N, 3]` whose
    /// gradient holds each view's statistics in its own rows.
    pub aux: RenderAux<B>,
}

/// Renders `field` through every camera of `cameras` (all of one image size, `H x W`), as
/// [`render`] does for one, and stacks the images (see [`BatchRenderOutput`]).
///
/// One projection and one rasterization for the whole batch (one launch per kernel on a GPU,
/// not one per camera). Each image equals [`render`]'s for its camera, and a loss over the
/// stacked images back-propagates into the field through every view.
pub fn render_batch<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<BatchRenderOutput<B>, RenderError> {
    let setup = batch_setup(cameras, options)?;
    if field.num_gaussians() == 0 {
        let device = field.means.device();
        let (images, aux) = empty_batch(cameras, &setup, &device)?;
        return Ok(BatchRenderOutput {
            rgb: images.rgb,
            alpha: images.alpha,
            depth: Tensor::zeros(setup_dims(&setup), &device),
            aux,
        });
    }
    render_views(field, cameras, options, &setup)
}

/// The images of `C` views, stacked: what [`render_batch_images`] returns.
#[derive(Debug, Clone)]
pub struct BatchImages<B: Backend> {
    /// `[C, H, W, 3]`
    pub rgb: Tensor<B, 4>,
    /// `[C, H, W]`
    pub alpha: Tensor<B, 3>,
}

/// [`render_batch`]'s `rgb` and `alpha` alone, the same values, for a caller that only shows
/// or saves the images (the viewer, an exporter). It skips the depth image's division, a pass
/// over every pixel.
pub fn render_batch_images<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<BatchImages<B>, RenderError> {
    let setup = batch_setup(cameras, options)?;
    if field.num_gaussians() == 0 {
        return Ok(empty_batch(cameras, &setup, &field.means.device())?.0);
    }
    let (_, raster) = project_and_rasterize(field, cameras, options, &setup)?;
    Ok(BatchImages {
        rgb: raster.rgb,
        alpha: raster.alpha,
    })
}

/// The raster setup of a batch: every camera of one size, at most `u32::MAX` of them. Every
/// render of a field draws with the setup made here.
pub(crate) fn batch_setup(
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<RasterSetup, RenderError> {
    let first = cameras.first().ok_or(RenderError::NoCameras)?;
    for (index, camera) in cameras.iter().enumerate() {
        if (camera.width, camera.height) != (first.width, first.height) {
            return Err(RenderError::BatchSize {
                index,
                width: camera.width,
                height: camera.height,
                first_width: first.width,
                first_height: first.height,
            });
        }
    }
    let views = u32::try_from(cameras.len()).map_err(|_| RenderError::TooManyCameras)?;
    Ok(RasterSetup::new(first.width, first.height)
        .with_background(options.background)
        .with_tile_pairs(options.tile_pairs)
        .with_views(views))
}

/// `[C, H, W]` of `setup`.
fn setup_dims(setup: &RasterSetup) -> [usize; 3] {
    [
        setup.views as usize,
        setup.height as usize,
        setup.width as usize,
    ]
}

/// The render of no Gaussians through `cameras` (checked as the projection checks them for a
/// non-empty field): the background in every view, zero alpha, and the empty by-products.
fn empty_batch<B: Backend>(
    cameras: &[CameraParams],
    setup: &RasterSetup,
    device: &B::Device,
) -> Result<(BatchImages<B>, RenderAux<B>), RenderError> {
    for camera in cameras {
        ember_kernels::project::check_camera(camera)?;
    }
    let empty = empty_render::<B>(setup, device)?;
    let images = BatchImages {
        rgb: empty
            .rgb
            .unsqueeze_dim::<4>(0)
            .repeat(&[setup.views as usize, 1, 1, 1]),
        alpha: Tensor::zeros(setup_dims(setup), device),
    };
    Ok((images, empty.aux))
}

/// The render of no Gaussians: the background everywhere, zero alpha and depth.
fn empty_render<B: Backend>(
    setup: &RasterSetup,
    device: &B::Device,
) -> Result<RenderOutput<B>, RenderError> {
    let (h, w) = (setup.height as usize, setup.width as usize);
    let rgb = Tensor::<B, 1>::from_floats(setup.background, device)
        .reshape([1, 1, 3])
        .repeat(&[h, w, 1]);
    // The empty per-Gaussian tensors are uploaded, not filled: a fill kernel over zero
    // elements is an invalid launch on CUDA.
    Ok(RenderOutput {
        rgb,
        alpha: Tensor::zeros([h, w], device),
        depth: Tensor::zeros([h, w], device),
        aux: RenderAux {
            extents: Tensor::from_data(TensorData::new(Vec::<i32>::new(), [0, 3]), device),
            screen_grads: Tensor::from_data(TensorData::new(Vec::<f32>::new(), [0, 3]), device),
            tile_pairs: None,
        },
    })
}
