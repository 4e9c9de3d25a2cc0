//! A panorama drawn on the sphere whose backward the caller runs, as [`crate::render_pass`] is
//! for pinhole views: [`panorama_pass`] projects every Gaussian onto the equirectangular map
//! on the host (`ember_kernels::project::cpu::equirect`, in f64) and rasterizes the panorama on
//! the field's device; [`PanoramaBackward::run`] runs the rasterizer's backward there and the
//! sphere's projection backward on the host, so a field can be fitted to panoramas directly,
//! without cutting them into a rig of pinhole views.
//!
//! The splats that cross the back meridian are drawn twice (a copy `W` pixels over); the
//! backward adds a copy's gradient into its Gaussian. On a GPU backend each pass reads the
//! field back and uploads its splats (the projection has no device kernel yet), so the host
//! bounds it there.

use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use ember_kernels::project::cpu::equirect::{self, EquirectSplats};
use ember_kernels::project::cpu::{ProjectArrays, ProjectOutputGrads};
use ember_kernels::raster::{rasterize_views_backward, rasterize_views_forward};
use ember_kernels::{
    CameraParams, PACKED_WIDTH, ProjectOptions, RasterSetup, RasterState, SplatBackend,
};

use crate::gaussian_field::GaussianField;
use crate::pass::{PassImages, RenderBackward, RenderGradients, RenderPass};
use crate::render::{RenderError, RenderOptions, batch_setup};

/// [`panorama_pass`]'s result: the panorama and its backward.
pub struct PanoramaPass<B: SplatBackend> {
    /// `[H, W, 3]`: the panorama's colour, the background behind what the field leaves open.
    pub rgb: Tensor<B, 3>,
    /// `[N, 3]` integers: each Gaussian's `(rx, ry, tiles)` on the panorama, `tiles` counting
    /// its copy's too (zero when culled).
    pub extents: Tensor<B, 2, Int>,
    /// What the backward needs.
    pub backward: PanoramaBackward<B>,
}

/// What a [`PanoramaPass`]'s backward replays.
pub struct PanoramaBackward<B: SplatBackend> {
    packed: Tensor<B, 2>,
    state: RasterState<B>,
    setup: RasterSetup,
    host: Arc<HostField>,
    copies: Vec<u32>,
    camera: CameraParams,
    project: ProjectOptions,
    device: B::Device,
}

/// Draws a non-empty `field` as the panorama `camera.width x camera.height` (2:1, the
/// equirectangular camera at `camera`'s pose, see [`crate::render_panorama`]), keeping what
/// [`PanoramaBackward::run`] needs.
///
/// # Errors
/// The projection's (a camera that is not 2:1) and the rasterizer's, and a field that cannot
/// be read back.
pub fn panorama_pass<B: SplatBackend>(
    field: &GaussianField<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<PanoramaPass<B>, RenderError> {
    let host = Arc::new(HostField::read(field)?);
    let drawn = draw_sphere(host, camera, options, &field.means.device())?;
    let (height, width) = (camera.height as usize, camera.width as usize);
    Ok(PanoramaPass {
        rgb: drawn
            .image
            .narrow(0, 0, 3 * height * width)
            .reshape([height, width, 3]),
        extents: drawn.extents,
        backward: drawn.backward,
    })
}

/// [`crate::render_pass`] for whole panoramas: each of `cameras` (2:1, all of one size) drawn
/// as by [`panorama_pass`] (the field read back once), as one [`RenderPass`] whose images,
/// `extents` `[C N, 3]` and backward are the batch's. Its backward gives no pose gradients
/// and no weighted coverage ([`RenderError::Panorama`]).
///
/// # Errors
/// As [`panorama_pass`], and cameras of different sizes.
pub fn panorama_batch_pass<B: SplatBackend>(
    field: &GaussianField<B>,
    cameras: &[CameraParams],
    options: &RenderOptions,
) -> Result<RenderPass<B>, RenderError> {
    let setup = batch_setup(cameras, options)?;
    let host = Arc::new(HostField::read(field)?);
    let device = field.means.device();
    let mut images = Vec::with_capacity(cameras.len());
    let mut extents = Vec::with_capacity(cameras.len());
    let mut pairs = Vec::with_capacity(cameras.len());
    let mut passes = Vec::with_capacity(cameras.len());
    for camera in cameras {
        let drawn = draw_sphere(host.clone(), camera, options, &device)?;
        images.push(drawn.image);
        extents.push(drawn.extents);
        pairs.push(drawn.tile_pairs);
        passes.push(drawn.backward);
    }
    Ok(RenderPass {
        images: PassImages {
            image: Tensor::cat(images, 0),
            views: cameras.len(),
            height: setup.height as usize,
            width: setup.width as usize,
        },
        extents: Tensor::cat(extents, 0),
        tile_pairs: pairs
            .into_iter()
            .reduce(|sum, view| sum + view)
            .ok_or(RenderError::NoCameras)?,
        backward: RenderBackward::panoramas(passes),
    })
}

/// One panorama drawn: its flat image (`IMAGE_CHANNELS` planes, colour first), each
/// Gaussian's extents `[N, 3]`, its tile pairs `[2]` and its backward.
struct DrawnSphere<B: SplatBackend> {
    image: Tensor<B, 1>,
    extents: Tensor<B, 2, Int>,
    tile_pairs: Tensor<B, 1, Int>,
    backward: PanoramaBackward<B>,
}

fn draw_sphere<B: SplatBackend>(
    host: Arc<HostField>,
    camera: &CameraParams,
    options: &RenderOptions,
    device: &B::Device,
) -> Result<DrawnSphere<B>, RenderError> {
    let sphere = SphereRows::<B>::project(&host, camera, options, device)?;
    let setup = RasterSetup::new(camera.width, camera.height).with_background(options.background);
    let raster = rasterize_views_forward(sphere.packed.clone(), sphere.extents, &setup)?;
    let n = host.len();
    let tile_pairs: Tensor<B, 1, Int> = Tensor::from_primitive(raster.state.pairs.clone());
    Ok(DrawnSphere {
        image: Tensor::from_primitive(TensorPrimitive::Float(raster.image)),
        extents: Tensor::from_data(TensorData::new(sphere.own_extents, [n, 3]), device),
        tile_pairs,
        backward: PanoramaBackward {
            packed: sphere.packed,
            state: raster.state,
            setup,
            host,
            copies: sphere.copies,
            camera: *camera,
            project: options.project,
            device: device.clone(),
        },
    })
}

impl<B: SplatBackend> PanoramaBackward<B> {
    /// The field's gradients from `grad_rgb` `[H, W, 3]`, the gradient of the panorama's
    /// colour; `screen` is `[N, 3]`, a Gaussian's statistics with its copy's added, and
    /// `poses` is empty.
    ///
    /// # Errors
    /// The rasterizer's, and gradients that cannot be read back.
    pub fn run(self, grad_rgb: Tensor<B, 3>) -> Result<RenderGradients<B>, RenderError> {
        let [height, width, _] = grad_rgb.dims();
        let grad_rgb = grad_rgb.reshape([1, height, width, 3]);
        let (grad_packed, screen) =
            rasterize_views_backward(self.packed, self.state, grad_rgb, &self.setup)?;
        let rows = read_f64(grad_packed, "the panorama's splat gradients")?;
        let columns = PackedGrads::split(&rows);
        let g = equirect::backward(
            &self.host.arrays(),
            &self.camera,
            &self.project,
            &columns.grads(),
            &self.copies,
        )?;
        let n = self.host.len();
        let k = self.host.sh_coeffs;
        let mut screen = read_f64(screen, "the panorama's screen statistics")?;
        for (j, &gaussian) in self.copies.iter().enumerate() {
            let (own, copy) = screen.split_at_mut(3 * (n + j));
            for (a, b) in own[3 * gaussian as usize..][..3].iter_mut().zip(&copy[..3]) {
                *a += *b;
            }
        }
        screen.truncate(3 * n);
        let (sh_dc, sh_rest): (Vec<f64>, Vec<f64>) = {
            let mut dc = Vec::with_capacity(3 * n);
            let mut rest = Vec::with_capacity(3 * (k - 1) * n);
            for gaussian in g.sh.chunks_exact(3 * k) {
                dc.extend_from_slice(&gaussian[..3]);
                rest.extend_from_slice(&gaussian[3..]);
            }
            (dc, rest)
        };
        let device = &self.device;
        Ok(RenderGradients {
            means: upload(g.means, [n, 3], device),
            quats: upload(g.quats, [n, 4], device),
            log_scales: upload(g.log_scales, [n, 3], device),
            opacity_logits: upload(g.opacity_logits, [n], device),
            sh_dc: upload(sh_dc, [n, 1, 3], device),
            sh_rest: upload(sh_rest, [n, k - 1, 3], device),
            screen: upload(screen, [n, 3], device),
            poses: Vec::new(),
        })
    }
}

/// A field's parameters on the host, f64, in the projection's layout (`sh` `[N, K, 3]`, the DC
/// term first).
pub(crate) struct HostField {
    means: Vec<f64>,
    quats: Vec<f64>,
    log_scales: Vec<f64>,
    opacity_logits: Vec<f64>,
    sh: Vec<f64>,
    sh_coeffs: usize,
}

impl HostField {
    pub(crate) fn read<B: Backend>(field: &GaussianField<B>) -> Result<HostField, RenderError> {
        let dc = read_f64(field.sh_dc.val(), "sh_dc")?;
        let rest = read_f64(field.sh_rest.val(), "sh_rest")?;
        let rest_coeffs = field.sh_rest.dims()[1];
        let r = 3 * rest_coeffs;
        let sh = (0..dc.len() / 3)
            .flat_map(|i| dc[3 * i..3 * i + 3].iter().chain(&rest[r * i..r * (i + 1)]))
            .copied()
            .collect();
        Ok(HostField {
            means: read_f64(field.means.val(), "means")?,
            quats: read_f64(field.quats.val(), "quats")?,
            log_scales: read_f64(field.log_scales.val(), "log_scales")?,
            opacity_logits: read_f64(field.opacity_logits.val(), "opacity_logits")?,
            sh,
            sh_coeffs: rest_coeffs + 1,
        })
    }

    fn len(&self) -> usize {
        self.opacity_logits.len()
    }

    fn arrays(&self) -> ProjectArrays<'_, f64> {
        ProjectArrays {
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            opacity_logits: &self.opacity_logits,
            sh: &self.sh,
            sh_coeffs: self.sh_coeffs,
        }
    }
}

/// The rows of a field's splats on the sphere, uploaded for the rasterizer.
pub(crate) struct SphereRows<B: Backend> {
    /// `[N + copies, PACKED_WIDTH]` and `[N + copies, 3]`.
    pub packed: Tensor<B, 2>,
    pub extents: Tensor<B, 2, Int>,
    /// The Gaussian each row past `N` copies.
    pub copies: Vec<u32>,
    /// `[N, 3]` flat: each Gaussian's own `(rx, ry, tiles)`, its copy's tiles added.
    pub own_extents: Vec<i64>,
}

impl<B: Backend> SphereRows<B> {
    pub(crate) fn project(
        host: &HostField,
        camera: &CameraParams,
        options: &RenderOptions,
        device: &B::Device,
    ) -> Result<SphereRows<B>, RenderError> {
        let EquirectSplats { outputs, copies } =
            equirect::forward(&host.arrays(), camera, &options.project)?;
        let n = host.len();
        let rows = outputs.depth.len();
        let (packed, extents) = outputs.into_rows();
        let mut own_extents = extents[..3 * n].to_vec();
        for (j, &gaussian) in copies.iter().enumerate() {
            own_extents[3 * gaussian as usize + 2] += extents[3 * (n + j) + 2];
        }
        Ok(SphereRows {
            packed: upload(packed, [rows, PACKED_WIDTH], device),
            extents: Tensor::from_data(TensorData::new(extents, [rows, 3]), device),
            copies,
            own_extents,
        })
    }
}

/// The gradient of the packed rows `[rows, PACKED_WIDTH]` split into the projection's outputs.
struct PackedGrads {
    xy: Vec<f64>,
    depth: Vec<f64>,
    conic: Vec<f64>,
    color: Vec<f64>,
    opacity: Vec<f64>,
}

impl PackedGrads {
    fn split(packed: &[f64]) -> PackedGrads {
        use ember_kernels::project::{
            PACKED_COLOR, PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_XY,
        };
        let column = |offset: usize, width: usize| -> Vec<f64> {
            packed
                .chunks_exact(PACKED_WIDTH)
                .flat_map(|row| row[offset..offset + width].iter().copied())
                .collect()
        };
        PackedGrads {
            xy: column(PACKED_XY, 2),
            depth: column(PACKED_DEPTH, 1),
            conic: column(PACKED_CONIC, 3),
            color: column(PACKED_COLOR, 3),
            opacity: column(PACKED_OPACITY, 1),
        }
    }

    fn grads(&self) -> ProjectOutputGrads<'_, f64> {
        ProjectOutputGrads {
            xy: &self.xy,
            depth: &self.depth,
            conic: &self.conic,
            color: &self.color,
            opacity: &self.opacity,
        }
    }
}

/// `values` on `device` as a tensor of `shape` in `B`'s float type. The dtype is named: a
/// device's default float dtype is shared by its backends (`NdArray<f32>` and `NdArray<f64>`),
/// and another test or caller may have set it.
fn upload<B: Backend, const D: usize>(
    values: Vec<f64>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(TensorData::new(values, shape), (device, dtype))
}

/// A tensor's values on the host as `f64`; `what` names it in the error.
fn read_f64<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    what: &str,
) -> Result<Vec<f64>, RenderError> {
    let fail = |message: String| RenderError::ReadBack(format!("{what}: {message}"));
    tensor
        .try_into_data()
        .map_err(|e| fail(e.to_string()))?
        .convert::<f64>()
        .to_vec::<f64>()
        .map_err(|e| fail(format!("{e:?}")))
}
