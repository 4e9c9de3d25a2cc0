//! [`render_panorama`]: a field drawn as a 360° equirectangular panorama, through the six faces
//! of a cube (one batched render) stitched into the sphere's map by `ember-data`'s filtered
//! resampler ([`ember_data::equirect`]).

use ember_data::camera::camera_params;
use ember_data::equirect::{Pyramid, RigCamera, stitch};
use ember_data::{EquirectRig, Pose};
use ember_kernels::{CameraParams, SplatBackend};

use crate::gaussian_field::{GaussianField, to_host};
use crate::render::{RenderError, RenderOptions, render_batch_images};

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
/// 8-bit RGB, `height * width * 3` bytes, top row first. The six cube faces are rendered at
/// the panorama's density at a face's centre (`width / π` pixels) in one batch and stitched,
/// each panorama pixel averaging its footprint on its face.
///
/// # Errors
/// The render's, and [`RenderError::PanoramaSize`] for a width that is odd or below 4.
pub fn render_panorama<B: SplatBackend>(
    field: &GaussianField<B>,
    pose: &CameraParams,
    width: u32,
    options: &RenderOptions,
) -> Result<Vec<u8>, RenderError> {
    if width < 4 || !width.is_multiple_of(2) {
        return Err(RenderError::PanoramaSize { width });
    }
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
            let bytes = face
                .iter()
                .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
                .collect();
            Pyramid::new(side, side, bytes, false)
        })
        .collect();
    let views: Vec<(RigCamera, &Pyramid)> = faces
        .iter()
        .zip(&pyramids)
        .map(|((view, _), pyramid)| (*view, pyramid))
        .collect();
    Ok(stitch(&views, width as usize, width as usize / 2))
}
