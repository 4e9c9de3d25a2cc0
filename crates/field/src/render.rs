//! Rendering a [`GaussianField`] through a pinhole camera: projection then tile
//! rasterization, differentiable end to end under `Autodiff`.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};

use crate::GaussianField;
use ember_kernels::{
    CameraParams, ProjectError, ProjectOptions, RasterError, RasterSetup, project_gaussians,
    rasterize,
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
    /// `[N, 2]`: screen-space box half-extents, pixels (zero when culled): the "radii" that
    /// 3DGS densification thresholds.
    pub radius: Tensor<B, 2, Int>,
    /// `[N]`: whether the Gaussian survived culling and lands in at least one tile.
    pub visible: Tensor<B, 1, Bool>,
    /// `[N, 3]` probe (zeros): after `backward`, its gradient holds per Gaussian
    /// `(dL/dx, dL/dy, xy_abs)`: the screen-space gradient of its centre (3DGS's densification
    /// signal is its norm) and `sum` over pixels of `|dL_pixel / dxy|` (gsplat's "absgrad").
    pub screen_grads: Tensor<B, 2>,
}

/// Renders `field` through `camera` (see [`RenderOutput`]).
///
/// Differentiable with respect to every parameter of the field under `Autodiff`.
pub fn render<B: ember_kernels::SplatBackend>(
    field: &GaussianField<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<RenderOutput<B>, RenderError> {
    let setup = RasterSetup::new(camera.width, camera.height).with_background(options.background);
    if field.num_gaussians() == 0 {
        // Zero-size tensors trip several cube-backend ops; there is nothing to draw anyway.
        ember_kernels::project::check_camera(camera)?;
        return empty_render(&setup, &field.means.device());
    }
    // Burn's `cat` on the cube backends fails on zero-size parts: a degree-0 field (no
    // `sh_rest` coefficients) passes its DC term alone.
    let sh = if field.sh_rest.dims()[1] == 0 {
        field.sh_dc.val()
    } else {
        Tensor::cat(vec![field.sh_dc.val(), field.sh_rest.val()], 1)
    };
    let projected = project_gaussians(
        field.means.val(),
        field.quats.val(),
        field.log_scales.val(),
        field.opacity_logits.val(),
        sh,
        camera,
        &options.project,
    )?;
    let (visible, radius) = (projected.tiles().greater_elem(0), projected.radius());
    let raster = rasterize(projected.packed, projected.extents, &setup)?;
    let alpha = raster.alpha();
    // Where nothing is drawn the weighted depth is exactly zero; the floor only avoids 0 / 0.
    let depth = raster.weighted_depth() / alpha.clone().clamp_min(1e-10);
    Ok(RenderOutput {
        rgb: raster.rgb(),
        alpha,
        depth,
        aux: RenderAux {
            visible,
            radius,
            screen_grads: raster.screen_grads,
        },
    })
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
            radius: Tensor::from_data(TensorData::new(Vec::<i32>::new(), [0, 2]), device),
            visible: Tensor::from_data(TensorData::new(Vec::<bool>::new(), [0]), device),
            screen_grads: Tensor::from_data(TensorData::new(Vec::<f32>::new(), [0, 3]), device),
        },
    })
}
