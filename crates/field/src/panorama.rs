//! A field drawn as a 360° equirectangular panorama, two ways ([`PanoramaProjection`]):
//! [`render_panorama`] projects every Gaussian onto the sphere and rasterizes the panorama
//! directly (`ember_kernels::project::cpu::equirect`), or draws the six faces of a cube (one
//! batched render) and stitches them into the sphere's map with `ember-data`'s filtered
//! resampler ([`ember_data::equirect`]).

use ember_data::camera::camera_params;
use ember_data::equirect::{Pyramid, RigCamera, stitch};
use ember_data::{EquirectRig, Pose};
use ember_kernels::{CameraParams, RasterSetup, SplatBackend, rasterize};

use crate::gaussian_field::{GaussianField, to_host};
use crate::panorama_pass::{HostField, SphereRows};
use crate::render::{RenderError, RenderOptions, render_batch_images};

/// How [`render_panorama`] draws the sphere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PanoramaProjection {
    /// Every Gaussian projected onto the sphere through the equirectangular map's own Jacobian,
    /// depth-sorted by distance, one rasterization of the panorama: no seams (the default).
    #[default]
    Sphere,
    /// The six faces of a cube rendered as pinhole views and stitched. Each face composites in
    /// its own order (depth along its axis), so large overlapping Gaussians near a face's edge
    /// can be drawn in a different order on either side of it.
    Cube,
}

/// The rig of a cube map: four views of 90° on the horizon and the two poles. Its faces meet
/// edge to edge, so every direction is drawn once.
pub fn cube_rig() -> EquirectRig {
    EquirectRig {
        views: 4,
        fov_deg: 90.0,
        size: None,
        pitch_deg: vec![0.0],
        poles: true,
    }
}

/// The world-to-camera cameras of `rig`'s views of side `size` around a panorama camera `pose`
/// (its rotation and translation; its intrinsics are not used): each view's rotation after the
/// panorama's, the same centre.
pub fn rig_cameras(
    pose: &CameraParams,
    rig: &EquirectRig,
    size: u32,
) -> Vec<(RigCamera, CameraParams)> {
    rig.cameras(size)
        .into_iter()
        .map(|view| {
            let turned = Pose {
                rotation: pose.rotation,
                translation: pose.translation,
            }
            .turned(&view.rotation);
            (view, camera_params(&turned, &view.intrinsics))
        })
        .collect()
}

/// `field` seen from the centre of `pose` as an equirectangular panorama `width x width / 2`
/// (nerfstudio's `EQUIRECTANGULAR` camera in `pose`'s axes, see [`ember_data::equirect`]):
/// 8-bit RGB, `height * width * 3` bytes, top row first, drawn as `projection` says. The cube's
/// faces are rendered at the panorama's density at a face's centre (`width / π` pixels) and
/// stitched, each panorama pixel averaging its footprint on its face; the sphere's projection
/// runs on the host (the field is read back once) and rasterizes on the field's device.
///
/// # Errors
/// The render's, and [`RenderError::PanoramaSize`] for a width that is odd or below 4.
pub fn render_panorama<B: SplatBackend>(
    field: &GaussianField<B>,
    pose: &CameraParams,
    width: u32,
    projection: PanoramaProjection,
    options: &RenderOptions,
) -> Result<Vec<u8>, RenderError> {
    if width < 4 || !width.is_multiple_of(2) {
        return Err(RenderError::PanoramaSize { width });
    }
    match projection {
        PanoramaProjection::Sphere => render_sphere(field, pose, width, options),
        PanoramaProjection::Cube => render_cube(field, pose, width, options),
    }
}

fn to_bytes(value: f32) -> u8 {
    (value.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// [`PanoramaProjection::Sphere`].
fn render_sphere<B: SplatBackend>(
    field: &GaussianField<B>,
    pose: &CameraParams,
    width: u32,
    options: &RenderOptions,
) -> Result<Vec<u8>, RenderError> {
    let camera = CameraParams {
        width,
        height: width / 2,
        ..*pose
    };
    let host = HostField::read(field)?;
    let SphereRows {
        packed, extents, ..
    } = SphereRows::<B>::project(&host, &camera, options, &field.means.device())?;
    let setup = RasterSetup::new(width, width / 2).with_background(options.background);
    let image = rasterize(packed, extents, &setup)?;
    let rgb =
        to_host(image.rgb, "the panorama").map_err(|e| RenderError::ReadBack(e.to_string()))?;
    Ok(rgb.into_iter().map(to_bytes).collect())
}

/// [`PanoramaProjection::Cube`].
fn render_cube<B: SplatBackend>(
    field: &GaussianField<B>,
    pose: &CameraParams,
    width: u32,
    options: &RenderOptions,
) -> Result<Vec<u8>, RenderError> {
    let rig = cube_rig();
    let size = rig.native_size(width);
    let faces = rig_cameras(pose, &rig, size);
    let cameras: Vec<CameraParams> = faces.iter().map(|(_, camera)| *camera).collect();
    let images = render_batch_images(field, &cameras, options)?;
    let rgb = to_host(images.rgb, "the panorama's faces")
        .map_err(|e| RenderError::ReadBack(e.to_string()))?;
    let side = size as usize;
    let pyramids: Vec<Pyramid> = rgb
        .chunks_exact(side * side * 3)
        .map(|face| {
            Pyramid::new(
                side,
                side,
                face.iter().copied().map(to_bytes).collect(),
                false,
            )
        })
        .collect();
    let views: Vec<(RigCamera, &Pyramid)> = faces
        .iter()
        .zip(&pyramids)
        .map(|((view, _), pyramid)| (*view, pyramid))
        .collect();
    Ok(stitch(&views, width as usize, width as usize / 2))
}
