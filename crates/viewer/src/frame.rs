//! One frame: rendered with `ember_field::render` on the field's backend, read back as 8-bit
//! RGB, optionally with the Gaussian centres drawn over it, encoded as JPEG or PNG.

use std::io::Cursor;
use std::time::Instant;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember_field::{GaussianField, RenderOptions, render};
use ember_kernels::{CameraParams, SplatBackend};
use image::codecs::jpeg::JpegEncoder;
use image::{ExtendedColorType, ImageEncoder};

use crate::ViewerError;
use crate::protocol::{FrameFormat, FrameRequest};

/// A rendered frame, before encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// `height * width * 3` bytes, RGB, top row first.
    pub rgb: Vec<u8>,
    /// Time to render and read back, ms.
    pub render_ms: f64,
    /// Training steps done when it was rendered (live mode).
    pub step: Option<usize>,
}

/// The colour of the centre dots: saturated yellow, rare in photos.
const CENTRE_COLOUR: [u8; 3] = [255, 214, 0];

/// Renders `request` from `field` (its SH degree clamped to the field's).
pub fn render_frame<B: SplatBackend>(
    field: &GaussianField<B>,
    request: &FrameRequest,
) -> Result<Frame, ViewerError> {
    let started = Instant::now();
    let degree = request
        .sh_degree
        .unwrap_or(u32::MAX)
        .min(field.sh_degree() as u32);
    let options = RenderOptions::default()
        .with_background(request.background)
        .with_sh_degree(degree);
    let out =
        render(field, &request.camera, &options).map_err(|e| ViewerError::Render(e.to_string()))?;
    // `+ 0.5` and truncation round as `round` does on [0, 255], and vectorise (`round` is a
    // libm call per value: 6% of a frame's time at 800x600 on the CPU).
    let rgb: Vec<u8> = host_values(out.rgb)?
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect();
    let mut frame = Frame {
        width: request.camera.width,
        height: request.camera.height,
        rgb,
        render_ms: 0.0,
        step: None,
    };
    if request.centres {
        let means = host_values(field.means.val())?;
        draw_centres(&mut frame, &request.camera, &means);
    }
    frame.render_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(frame)
}

/// A tensor's values on the host; a failed device is an error, not a panic.
fn host_values<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Result<Vec<f32>, ViewerError> {
    tensor
        .try_into_data()
        .map_err(|e| ViewerError::Render(format!("reading the frame back: {e:?}")))?
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| ViewerError::Render(format!("reading the frame back: {e:?}")))
}

/// Draws each centre in front of the camera (`means` `[N, 3]` flattened) as one pixel.
pub fn draw_centres(frame: &mut Frame, camera: &CameraParams, means: &[f32]) {
    let (r, t) = (&camera.rotation, &camera.translation);
    for p in means.chunks_exact(3) {
        let p = [p[0], p[1], p[2]].map(f64::from);
        let cam =
            [0, 1, 2].map(|i| r[3 * i] * p[0] + r[3 * i + 1] * p[1] + r[3 * i + 2] * p[2] + t[i]);
        if cam[2].is_nan() || cam[2] <= 1e-6 {
            continue;
        }
        let u = (camera.fx * cam[0] / cam[2] + camera.cx).floor();
        let v = (camera.fy * cam[1] / cam[2] + camera.cy).floor();
        if u >= 0.0 && v >= 0.0 && u < f64::from(frame.width) && v < f64::from(frame.height) {
            let at = 3 * (v as usize * frame.width as usize + u as usize);
            frame.rgb[at..at + 3].copy_from_slice(&CENTRE_COLOUR);
        }
    }
}

/// `frame` encoded as `format` (`quality` 1..=100 for JPEG).
pub fn encode(frame: &Frame, format: FrameFormat, quality: u8) -> Result<Vec<u8>, ViewerError> {
    let mut bytes = Vec::new();
    let result = match format {
        FrameFormat::Jpeg => JpegEncoder::new_with_quality(&mut bytes, quality.clamp(1, 100))
            .write_image(
                &frame.rgb,
                frame.width,
                frame.height,
                ExtendedColorType::Rgb8,
            ),
        FrameFormat::Png => image::codecs::png::PngEncoder::new(Cursor::new(&mut bytes))
            .write_image(
                &frame.rgb,
                frame.width,
                frame.height,
                ExtendedColorType::Rgb8,
            ),
    };
    result.map_err(|e| ViewerError::Encode(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera() -> CameraParams {
        CameraParams {
            rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            translation: [0.0; 3],
            fx: 10.0,
            fy: 10.0,
            cx: 8.0,
            cy: 8.0,
            width: 16,
            height: 16,
        }
    }

    fn black() -> Frame {
        Frame {
            width: 16,
            height: 16,
            rgb: vec![0; 16 * 16 * 3],
            render_ms: 0.0,
            step: None,
        }
    }

    #[test]
    fn centres_in_front_are_drawn_where_they_project() {
        let mut frame = black();
        // (0.25, -0.25, 1) projects to (10.5, 5.5), pixel (10, 5); the one behind the camera
        // and the one off the frame leave no mark.
        draw_centres(
            &mut frame,
            &camera(),
            &[0.25, -0.25, 1.0, 0.0, 0.0, -1.0, 50.0, 0.0, 1.0],
        );
        let lit: Vec<usize> = frame
            .rgb
            .chunks_exact(3)
            .enumerate()
            .filter(|(_, px)| px != &[0, 0, 0])
            .map(|(i, _)| i)
            .collect();
        assert_eq!(lit, vec![5 * 16 + 10]);
    }

    #[test]
    fn png_round_trips_and_jpeg_decodes() {
        let mut frame = black();
        frame.rgb[0..3].copy_from_slice(&[10, 200, 30]);
        let png = encode(&frame, FrameFormat::Png, 90).unwrap();
        let back = image::load_from_memory(&png).unwrap().to_rgb8();
        assert_eq!(back.into_raw(), frame.rgb);
        let jpeg = encode(&frame, FrameFormat::Jpeg, 90).unwrap();
        let back = image::load_from_memory(&jpeg).unwrap();
        assert_eq!((back.width(), back.height()), (16, 16));
    }
}
