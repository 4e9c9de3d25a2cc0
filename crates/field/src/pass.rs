//! A render whose backward the caller runs: [`render_pass`] draws a batch of views on a backend
//! without autodiff and keeps what the backward needs, and [`RenderBackward::run`] turns the
//! gradient of the colour images into the field's gradients (the rasterizer's backward, then
//! the projection's), the screen-space statistics densification reads and, when asked, each
//! camera's pose gradient.
//!
//! Training's default step uses it: the photometric loss returns its gradient with the loss,
//! so Burn's autodiff graph would only record these two calls, and without it the host records
//! a step with far fewer operations. [`crate::render_batch`] under `Autodiff` runs the same
//! kernels forward and backward, so the two agree to the bit on the CPU.
//!
//! The pose gradient of a camera comes from the projection's backward of its own view: a camera
//! moved by a small turn and shift draws what the unmoved camera draws of the whole scene moved
//! the same way, so it is a sum over the Gaussians of their gradients
//! ([`ember_kernels::project::pose`]).

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorPrimitive};
use ember_kernels::project::PACKED_COLOR;
use ember_kernels::project::pose::PoseMoments;
use ember_kernels::raster::{rasterize_views_backward, rasterize_views_forward};
use ember_kernels::{
    CameraParams, IMAGE_CHANNELS, ProjectGrads, ProjectInputs, ProjectOptions, RasterSetup,
    RasterState, SplatBackend,
};

use crate::GaussianField;
use crate::panorama_pass::PanoramaBackward;
use crate::render::{RenderError, RenderOptions, batch_setup, project};

/// [`render_pass`]'s result: the images, the projection's by-products and the backward.
pub struct RenderPass<B: SplatBackend> {
    /// The views' images.
    pub images: PassImages<B>,
    /// `[C N, 3]`: the projection's `(rx, ry, tiles)` per Gaussian and view (see
    /// [`crate::RenderAux::extents`]).
    pub extents: Tensor<B, 2, Int>,
    /// `[2]`: the (tile, Gaussian) pairs the views made and the rows the GPU's lists held (see
    /// [`crate::RenderAux::tile_pairs`]).
    pub tile_pairs: Tensor<B, 1, Int>,
    /// What the backward needs.
    pub backward: RenderBackward<B>,
}

/// The images of a [`RenderPass`]: `C` views of `H x W` pixels, each as `IMAGE_CHANNELS`
/// planes, colour first.
pub struct PassImages<B: Backend> {
    pub(crate) image: Tensor<B, 1>,
    pub(crate) views: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
}

impl<B: Backend> PassImages<B> {
    /// View `view`'s colour, `[H, W, 3]`.
    pub fn rgb(&self, view: usize) -> Tensor<B, 3> {
        let pixels = self.height * self.width;
        self.image
            .clone()
            .narrow(0, view * IMAGE_CHANNELS * pixels, 3 * pixels)
            .reshape([self.height, self.width, 3])
    }

    /// Every view's colour, `[C, H, W, 3]`.
    pub fn rgb_batch(self) -> Tensor<B, 4> {
        let pixels = self.height * self.width;
        self.image
            .reshape([self.views, IMAGE_CHANNELS * pixels])
            .narrow(1, 0, 3 * pixels)
            .reshape([self.views, self.height, self.width, 3])
    }
}

/// What a [`RenderPass`]'s backward replays: the projection's inputs and outputs and the
/// rasterizer's state.
pub struct RenderBackward<B: SplatBackend> {
    kind: BackwardKind<B>,
}

enum BackwardKind<B: SplatBackend> {
    /// Pinhole views, projected and rasterized as one batch.
    Views {
        packed: Tensor<B, 2>,
        state: RasterState<B>,
        setup: RasterSetup,
        inputs: ProjectInputs<B>,
        cameras: Vec<CameraParams>,
        project: ProjectOptions,
    },
    /// Whole panoramas, one pass each ([`crate::panorama_batch_pass`]).
    Panoramas(Vec<PanoramaBackward<B>>),
}

impl<B: SplatBackend> RenderBackward<B> {
    /// The backward of panorama passes, in view order.
    pub(crate) fn panoramas(passes: Vec<PanoramaBackward<B>>) -> Self {
        RenderBackward {
            kind: BackwardKind::Panoramas(passes),
        }
    }
}

/// The gradients of a [`RenderPass`], each the shape of its parameter.
pub struct RenderGradients<B: Backend> {
    /// `[N, 3]`
    pub means: Tensor<B, 2>,
    /// `[N, 4]`
    pub quats: Tensor<B, 2>,
    /// `[N, 3]`
    pub log_scales: Tensor<B, 2>,
    /// `[N]`
    pub opacity_logits: Tensor<B, 1>,
    /// `[N, 1, 3]`
    pub sh_dc: Tensor<B, 3>,
    /// `[N, K, 3]`
    pub sh_rest: Tensor<B, 3>,
    /// `[C N, 3]`: the screen-space statistics (see [`crate::RenderAux::screen_grads`]).
    pub screen: Tensor<B, 2>,
    /// Each camera's pose gradient `[dL/dtau, dL/domega]` at the camera as drawn (see
    /// [`ember_kernels::project::pose`]), in order; empty unless asked.
    pub poses: Vec<[f64; 6]>,
}

/// Draws a non-empty `field` through `cameras` (all of one size) as [`crate::render_batch`]
/// does, keeping what [`RenderBackward::run`] needs.
pub fn render_pass<B: SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<RenderPass<B>, RenderError> {
    let setup = batch_setup(cameras, options)?;
    let projected = project(field, cameras, options)?;
    let raster =
        rasterize_views_forward(projected.packed.clone(), projected.extents.clone(), &setup)?;
    let images = PassImages {
        image: Tensor::from_primitive(TensorPrimitive::Float(raster.image)),
        views: cameras.len(),
        height: setup.height as usize,
        width: setup.width as usize,
    };
    Ok(RenderPass {
        images,
        extents: projected.extents,
        tile_pairs: Tensor::from_primitive(raster.state.pairs.clone()),
        backward: RenderBackward {
            kind: BackwardKind::Views {
                packed: projected.packed,
                state: raster.state,
                setup,
                inputs: ProjectInputs {
                    means: field.means.val().into_primitive().tensor(),
                    quats: field.quats.val().into_primitive().tensor(),
                    log_scales: field.log_scales.val().into_primitive().tensor(),
                    opacity_logits: field.opacity_logits.val().into_primitive().tensor(),
                    sh_dc: field.sh_dc.val().into_primitive().tensor(),
                    sh_rest: field.sh_rest.val().into_primitive().tensor(),
                },
                cameras: cameras.to_vec(),
                project: options.project,
            },
        },
    })
}

impl<B: SplatBackend> RenderBackward<B> {
    /// The gradients from `grad_rgb` `[C, H, W, 3]`, the gradient of the colour images; with
    /// `poses`, the projection's backward runs one view at a time and each camera's pose
    /// gradient comes with them (pinhole views only).
    pub fn run(
        self,
        grad_rgb: Tensor<B, 4>,
        poses: bool,
    ) -> Result<RenderGradients<B>, RenderError> {
        let (packed, state, setup, inputs, cameras, project) = match self.kind {
            BackwardKind::Views {
                packed,
                state,
                setup,
                inputs,
                cameras,
                project,
            } => (packed, state, setup, inputs, cameras, project),
            BackwardKind::Panoramas(_) if poses => {
                return Err(RenderError::Panorama("a camera's pose gradient"));
            }
            BackwardKind::Panoramas(passes) => return panoramas_backward(passes, grad_rgb),
        };
        let (grad_packed, screen) = rasterize_views_backward(packed, state, grad_rgb, &setup)?;
        let (g, poses) = match poses {
            false => (
                B::project_backward(
                    inputs,
                    grad_packed.into_primitive().tensor(),
                    &cameras,
                    project,
                ),
                Vec::new(),
            ),
            true => per_view_backward(inputs, grad_packed, &cameras, project),
        };
        let float = |t| TensorPrimitive::Float(t);
        Ok(RenderGradients {
            means: Tensor::from_primitive(float(g.means)),
            quats: Tensor::from_primitive(float(g.quats)),
            log_scales: Tensor::from_primitive(float(g.log_scales)),
            opacity_logits: Tensor::from_primitive(float(g.opacity_logits)),
            sh_dc: Tensor::from_primitive(float(g.sh_dc)),
            sh_rest: Tensor::from_primitive(float(g.sh_rest)),
            screen,
            poses,
        })
    }
}

impl<B: SplatBackend> RenderBackward<B> {
    /// `[C N]`: for each view and Gaussian, the pixel weights `pixel_weights` `[C, H, W]`
    /// summed over the pixels the Gaussian is blended into, each times its blend weight there
    /// (`alpha_i T_i`, its share of the pixel's colour): `sum_p m_p alpha_i(p) T_i(p)`. A
    /// pixel's colour is `sum_i c_i alpha_i T_i` plus the background's share, so this is the
    /// gradient of the colours' first channel under the upstream gradient `m`: the
    /// rasterizer's backward alone, the projection's skipped. With every weight 1, a view's
    /// sums add up to its pixels' alphas.
    pub fn weighted_coverage(
        self,
        pixel_weights: Tensor<B, 3>,
    ) -> Result<Tensor<B, 1>, RenderError> {
        let BackwardKind::Views {
            packed,
            state,
            setup,
            ..
        } = self.kind
        else {
            return Err(RenderError::Panorama("the weighted coverage"));
        };
        let [views, height, width] = pixel_weights.dims();
        let device = pixel_weights.device();
        let grad_rgb = Tensor::cat(
            vec![
                pixel_weights.reshape([views, height, width, 1]),
                Tensor::zeros([views, height, width, 2], &device),
            ],
            3,
        );
        let (grad_packed, _) = rasterize_views_backward(packed, state, grad_rgb, &setup)?;
        let rows = grad_packed.dims()[0];
        Ok(grad_packed.narrow(1, PACKED_COLOR, 1).reshape([rows]))
    }
}

/// The backward of whole panoramas, one at a time: the field's gradients summed over them and
/// the screen statistics stacked `[C N, 3]`.
fn panoramas_backward<B: SplatBackend>(
    passes: Vec<PanoramaBackward<B>>,
    grad_rgb: Tensor<B, 4>,
) -> Result<RenderGradients<B>, RenderError> {
    let [views, height, width, _] = grad_rgb.dims();
    let mut total: Option<RenderGradients<B>> = None;
    let mut screens = Vec::with_capacity(views);
    for (v, pass) in passes.into_iter().enumerate() {
        let view_grad = grad_rgb.clone().narrow(0, v, 1).reshape([height, width, 3]);
        let g = pass.run(view_grad)?;
        screens.push(g.screen.clone());
        total = Some(match total {
            None => g,
            Some(sum) => RenderGradients {
                means: sum.means + g.means,
                quats: sum.quats + g.quats,
                log_scales: sum.log_scales + g.log_scales,
                opacity_logits: sum.opacity_logits + g.opacity_logits,
                sh_dc: sum.sh_dc + g.sh_dc,
                sh_rest: sum.sh_rest + g.sh_rest,
                screen: sum.screen,
                poses: Vec::new(),
            },
        });
    }
    let mut total = total.ok_or(RenderError::NoCameras)?;
    total.screen = Tensor::cat(screens, 0);
    Ok(total)
}

/// The projection's backward one view at a time, so that each camera's pose gradient comes
/// from its own Gaussians' gradients: the field's gradients (summed over the views) and each
/// view's pose gradient.
fn per_view_backward<B: SplatBackend>(
    inputs: ProjectInputs<B>,
    grad_packed: Tensor<B, 2>,
    cameras: &[CameraParams],
    options: ProjectOptions,
) -> (ProjectGrads<B>, Vec<[f64; 6]>) {
    let float2 = |t| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(t));
    let float3 = |t| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t));
    let n = grad_packed.dims()[0] / cameras.len();
    let mut total: Option<ProjectGrads<B>> = None;
    let mut poses = Vec::with_capacity(cameras.len());
    for (v, camera) in cameras.iter().enumerate() {
        let view_grad = match cameras.len() {
            1 => grad_packed.clone(),
            _ => grad_packed.clone().narrow(0, v * n, n),
        };
        let g = B::project_backward(
            inputs.clone(),
            view_grad.into_primitive().tensor(),
            core::slice::from_ref(camera),
            options,
        );
        let moments = PoseMoments::from_tensors(
            float2(inputs.means.clone()),
            float2(inputs.quats.clone()),
            float3(inputs.sh_rest.clone()),
            float2(g.means.clone()),
            float2(g.quats.clone()),
            float3(g.sh_rest.clone()),
            camera.center(),
        );
        poses.push(moments.gradient(camera, options.view_dir_grad));
        total = Some(match total {
            None => g,
            Some(sum) => {
                let mut view = g.into_array().into_iter();
                ProjectGrads::from_array(
                    sum.into_array()
                        .map(|s| B::float_add(s, view.next().expect("six gradients in each"))),
                )
            }
        });
    }
    (total.expect("a pass has at least one view"), poses)
}
