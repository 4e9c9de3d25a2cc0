//! One frame: rendered with `ember_field::render` on the field's backend (or, for a scene with a
//! level-of-detail hierarchy, `ember_field::render_lod`), read back as 8-bit RGB, optionally with
//! the Gaussian centres drawn over it, encoded as JPEG or PNG.

use std::io::Cursor;
use std::time::Instant;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember_field::{
    DEFAULT_LOD_MIN_SAVING, GaussianField, GaussianHierarchy, RenderOptions, render,
    render_batch_images, render_lod, render_lod_images,
};
use ember_kernels::{CameraParams, SplatBackend};
use image::{ExtendedColorType, ImageEncoder};
use rayon::prelude::*;

use crate::ViewerError;
use crate::protocol::{FrameFormat, FrameRequest, FrameView, Pick};
use crate::scene::LodInfo;

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
    /// The surface under the request's `pick` pixel, when it asked.
    pub pick: Option<Pick>,
}

impl Frame {
    /// A frame of `rgb` (`height * width * 3` bytes, RGB, top row first) with nothing else.
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Frame {
        Frame {
            width,
            height,
            rgb,
            render_ms: 0.0,
            step: None,
            pick: None,
        }
    }
}

/// How far from the picked pixel a covered pixel is looked for, pixels.
const PICK_REACH: i64 = 4;

/// The colour of the centre dots: saturated yellow, rare in photos.
const CENTRE_COLOUR: [u8; 3] = [255, 214, 0];

/// A scene's level of detail as the renderer draws it: its hierarchy (whose leaves are the
/// field) and the threshold a frame is drawn at unless its request names another.
#[derive(Debug, Clone)]
pub struct SceneLod<B: Backend> {
    /// The hierarchy of the scene's field.
    pub hierarchy: GaussianHierarchy<B>,
    /// Pixels (see `ember_field::RenderOptions::lod_threshold`); 0 draws every Gaussian.
    pub threshold: f32,
}

impl<B: Backend> SceneLod<B> {
    /// What the page learns of it (the hello's `lod`).
    pub fn info(&self) -> LodInfo {
        LodInfo {
            nodes: self.hierarchy.num_nodes(),
            threshold: self.threshold,
        }
    }
}

/// Renders `request` from `field` (its SH degree clamped to the field's).
pub fn render_frame<B: SplatBackend>(
    field: &GaussianField<B>,
    request: &FrameRequest,
) -> Result<Frame, ViewerError> {
    render_scene_frame(field, None, request)
}

/// Renders `request` from `field`, through `lod`'s hierarchy of it when there is one and the
/// request's threshold (or `lod`'s) is above zero.
pub fn render_scene_frame<B: SplatBackend>(
    field: &GaussianField<B>,
    lod: Option<&SceneLod<B>>,
    request: &FrameRequest,
) -> Result<Frame, ViewerError> {
    let started = Instant::now();
    let degree = request
        .sh_degree
        .unwrap_or(u32::MAX)
        .min(field.sh_degree() as u32);
    let lod = lod.and_then(|lod| {
        let threshold = request.lod_threshold.unwrap_or(lod.threshold);
        (threshold > 0.0).then_some((&lod.hierarchy, threshold))
    });
    let options = RenderOptions::default()
        .with_background(request.background)
        .with_sh_degree(degree)
        .with_antialiased(request.antialiased)
        .with_lod_threshold(lod.map_or(0.0, |(_, threshold)| threshold))
        .with_lod_min_saving(DEFAULT_LOD_MIN_SAVING);
    let failed = |e: ember_field::RenderError| ViewerError::Render(e.to_string());
    let (values, pick) = match request.pick {
        // The depth or coverage image: a single-camera render, the image made from them.
        _ if request.view != FrameView::Rgb => {
            let out = match lod {
                Some((hierarchy, _)) => render_lod(hierarchy, &request.camera, &options),
                None => render(field, &request.camera, &options),
            }
            .map_err(failed)?;
            let alpha = host_values(out.alpha)?;
            let shades = match request.view {
                FrameView::Depth => depth_shades(&host_values(out.depth)?, &alpha),
                _ => alpha,
            };
            let grey = shades.iter().flat_map(|&v| [v; 3]).collect();
            (grey, None)
        }
        // The depth and coverage images too: a single-camera render.
        Some(pixel) => {
            let out = match lod {
                Some((hierarchy, _)) => render_lod(hierarchy, &request.camera, &options),
                None => render(field, &request.camera, &options),
            }
            .map_err(failed)?;
            let depth = host_values(out.depth)?;
            let alpha = host_values(out.alpha)?;
            let point = surface_point(&request.camera, pixel, &depth, &alpha);
            (host_values(out.rgb)?, Some(Pick { pixel, point }))
        }
        // A batch of one camera: its `[1, H, W, 3]` image is read back as it is, where
        // `render`'s `[H, W, 3]` would be a reshape, which copies the frame on ndarray. The
        // images alone: the depth and the per-Gaussian by-products are nothing a page shows.
        None => {
            let out = match lod {
                Some((hierarchy, _)) => render_lod_images(hierarchy, &request.camera, &options),
                None => {
                    render_batch_images(field, core::slice::from_ref(&request.camera), &options)
                }
            }
            .map_err(failed)?;
            (host_values(out.rgb)?, None)
        }
    };
    // `+ 0.5` and truncation round as `round` does on [0, 255], and vectorise (`round` is a
    // libm call per value: 6% of a frame's time at 800x600 on the CPU); on all threads, as the
    // renderer's stages are (on the caller's alone it was 4% of a CPU frame).
    let rgb: Vec<u8> = values
        .par_iter()
        .with_min_len(1 << 14)
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect();
    let mut frame = Frame {
        width: request.camera.width,
        height: request.camera.height,
        rgb,
        render_ms: 0.0,
        step: None,
        pick,
    };
    if request.centres {
        let means = host_values(field.means.val())?;
        draw_centres(&mut frame, &request.camera, &means);
    }
    frame.render_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(frame)
}

/// A depth image as shades in `[0, 1]` (one per pixel): the pixels at least half covered are
/// graded from 1 (the frame's nearest, its 1st percentile of depth among them) to 0.15 (its
/// farthest, the 99th percentile) linearly in inverse depth, so that near detail gets the
/// range; the others are 0. `depth` and `alpha` are `[H, W]` flattened.
pub fn depth_shades(depth: &[f32], alpha: &[f32]) -> Vec<f32> {
    let covered = |i: usize| alpha[i] >= 0.5 && depth[i].is_finite() && depth[i] > 0.0;
    let mut inverse: Vec<f32> = (0..depth.len())
        .filter(|&i| covered(i))
        .map(|i| 1.0 / depth[i])
        .collect();
    if inverse.is_empty() {
        return vec![0.0; depth.len()];
    }
    inverse.sort_unstable_by(f32::total_cmp);
    let at = |q: f64| inverse[((inverse.len() - 1) as f64 * q).round() as usize];
    let (far, near) = (at(0.01), at(0.99));
    let span = (near - far).max(f32::MIN_POSITIVE);
    (0..depth.len())
        .map(|i| {
            if covered(i) {
                0.15 + 0.85 * ((1.0 / depth[i] - far) / span).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
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

/// The world point drawn at `pixel` (`[x, y]` from the top-left corner) of a frame through
/// `camera` with the expected depth `depth` and coverage `alpha` (`[H, W]` flattened): of the
/// pixels within [`PICK_REACH`] whose coverage is at least one half, the nearest, its depth
/// along its own ray; `None` when there is none.
pub fn surface_point(
    camera: &CameraParams,
    pixel: [f64; 2],
    depth: &[f32],
    alpha: &[f32],
) -> Option<[f64; 3]> {
    let (w, h) = (i64::from(camera.width), i64::from(camera.height));
    let (px, py) = (pixel[0].floor() as i64, pixel[1].floor() as i64);
    let mut best: Option<(i64, i64, i64)> = None;
    for y in (py - PICK_REACH).max(0)..=(py + PICK_REACH).min(h - 1) {
        for x in (px - PICK_REACH).max(0)..=(px + PICK_REACH).min(w - 1) {
            let at = (y * w + x) as usize;
            let covered = alpha.get(at).is_some_and(|&a| a >= 0.5)
                && depth.get(at).is_some_and(|&d| d.is_finite() && d > 0.0);
            let distance = (x - px).pow(2) + (y - py).pow(2);
            if covered && best.is_none_or(|(_, _, d)| distance < d) {
                best = Some((x, y, distance));
            }
        }
    }
    let (x, y, _) = best?;
    let z = f64::from(depth[(y * w + x) as usize]);
    let cam = [
        (x as f64 + 0.5 - camera.cx) / camera.fx * z,
        (y as f64 + 0.5 - camera.cy) / camera.fy * z,
        z,
    ];
    // p_world = R^T (p_cam - t).
    let (r, t) = (&camera.rotation, &camera.translation);
    let d = [0, 1, 2].map(|i| cam[i] - t[i]);
    Some([0, 1, 2].map(|j| r[j] * d[0] + r[3 + j] * d[1] + r[6 + j] * d[2]))
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

/// Rows per strip when a `height`-row frame is cut into at most `strips` JPEG strips: a
/// multiple of 16, the largest JPEG block (an MCU with 4:2:0 chroma), so that every strip but the
/// last holds whole blocks.
pub fn strip_height(height: u32, strips: usize) -> u32 {
    let strips = u32::try_from(strips.max(1)).unwrap_or(u32::MAX);
    height.div_ceil(strips).div_ceil(16).max(1) * 16
}

/// A frame encoded for the wire: the image bytes, and for a frame cut into strips the byte
/// length of each (see [`crate::FrameHeader::strips`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedFrame {
    /// The encoded strips, top first, back to back (one image when `strips` is empty).
    pub bytes: Vec<u8>,
    /// Byte length of each strip, top first; empty for a single image.
    pub strips: Vec<u32>,
    /// Rows per strip (the last may have fewer); the frame's height for a single image.
    pub strip_height: u32,
}

/// `frame` encoded as `format` for the wire: a JPEG frame is cut into horizontal strips of
/// [`strip_height`] rows, at most `threads` of them, encoded in parallel (one thread each), as
/// JPEG encoding, not rendering, limits the frame rate of large frames on a GPU. PNG frames
/// (screenshots) stay one image.
pub fn encode_frame(
    frame: &Frame,
    format: FrameFormat,
    quality: u8,
    threads: usize,
) -> Result<EncodedFrame, ViewerError> {
    let rows = strip_height(frame.height, threads);
    if format == FrameFormat::Png || rows >= frame.height {
        return Ok(EncodedFrame {
            bytes: encode(frame, format, quality)?,
            strips: Vec::new(),
            strip_height: frame.height,
        });
    }
    let row_bytes = frame.width as usize * 3;
    let parts: Vec<Result<Vec<u8>, ViewerError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = frame
            .rgb
            .chunks(rows as usize * row_bytes)
            .map(|rgb| {
                scope.spawn(move || {
                    let height = (rgb.len() / row_bytes) as u32;
                    encode_rgb(rgb, frame.width, height, FrameFormat::Jpeg, quality)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ViewerError::Encode("a strip encoder panicked".into())))
            })
            .collect()
    });
    let mut encoded = EncodedFrame {
        bytes: Vec::new(),
        strips: Vec::with_capacity(parts.len()),
        strip_height: rows,
    };
    for part in parts {
        let part = part?;
        encoded.strips.push(part.len() as u32);
        encoded.bytes.extend_from_slice(&part);
    }
    Ok(encoded)
}

/// `frame` encoded as one image in `format` (`quality` 1..=100 for JPEG).
pub fn encode(frame: &Frame, format: FrameFormat, quality: u8) -> Result<Vec<u8>, ViewerError> {
    encode_rgb(&frame.rgb, frame.width, frame.height, format, quality)
}

/// `rgb` (`height * width * 3` bytes, top row first) encoded as one image in `format`.
fn encode_rgb(
    rgb: &[u8],
    width: u32,
    height: u32,
    format: FrameFormat,
    quality: u8,
) -> Result<Vec<u8>, ViewerError> {
    let mut bytes = Vec::new();
    match format {
        FrameFormat::Jpeg => {
            let side = |v: u32| {
                u16::try_from(v).map_err(|_| {
                    ViewerError::Encode(format!("a {width}x{height} frame is too large for JPEG"))
                })
            };
            let (w, h) = (side(width)?, side(height)?);
            jpeg_encoder::Encoder::new(&mut bytes, quality.clamp(1, 100))
                .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
                .map_err(|e| ViewerError::Encode(e.to_string()))?;
        }
        FrameFormat::Png => image::codecs::png::PngEncoder::new(Cursor::new(&mut bytes))
            .write_image(rgb, width, height, ExtendedColorType::Rgb8)
            .map_err(|e| ViewerError::Encode(e.to_string()))?,
    }
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
        Frame::from_rgb(16, 16, vec![0; 16 * 16 * 3])
    }

    #[test]
    fn picked_point_is_on_the_nearest_covered_pixel() {
        // 16x16, covered at depth 2 only in the pixel (10, 5) and at depth 4 in (12, 5).
        let camera = camera();
        let mut depth = vec![0.0; 256];
        let mut alpha = vec![0.0; 256];
        for (x, z) in [(10, 2.0), (12, 4.0)] {
            depth[5 * 16 + x] = z;
            alpha[5 * 16 + x] = 0.9;
        }
        // Pixel (10, 5)'s centre is (10.5, 5.5): x = (10.5 - 8) / 10 * 2 = 0.5, y = -0.5.
        let point = surface_point(&camera, [9.2, 6.7], &depth, &alpha).unwrap();
        for (got, want) in point.iter().zip([0.5, -0.5, 2.0]) {
            assert!((got - want).abs() < 1e-12, "{point:?}");
        }
        // Beyond the reach, or faintly covered: nothing.
        assert_eq!(surface_point(&camera, [2.0, 12.0], &depth, &alpha), None);
        alpha[5 * 16 + 10] = 0.3;
        alpha[5 * 16 + 12] = 0.3;
        assert_eq!(surface_point(&camera, [10.0, 5.0], &depth, &alpha), None);
        // A moved and turned camera maps back to the world.
        let turned = CameraParams {
            rotation: [0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
            ..camera
        }
        .with_center([1.0, 2.0, 3.0]);
        alpha[5 * 16 + 10] = 1.0;
        let world = surface_point(&turned, [10.5, 5.5], &depth, &alpha).unwrap();
        let r = &turned.rotation;
        let t = &turned.translation;
        let back = [0, 1, 2].map(|i| {
            r[3 * i] * world[0] + r[3 * i + 1] * world[1] + r[3 * i + 2] * world[2] + t[i]
        });
        for (got, want) in back.iter().zip([0.5, -0.5, 2.0]) {
            assert!((got - want).abs() < 1e-12, "{back:?}");
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

    /// A smooth gradient with a sharp square, `width x height`.
    fn picture(width: u32, height: u32) -> Frame {
        let mut rgb = Vec::with_capacity((width * height * 3) as usize);
        for y in 0..height {
            for x in 0..width {
                let square = (10..30).contains(&x) && (20..52).contains(&y);
                rgb.extend_from_slice(&[
                    (x * 255 / width) as u8,
                    (y * 255 / height) as u8,
                    if square { 240 } else { 20 },
                ]);
            }
        }
        Frame::from_rgb(width, height, rgb)
    }

    #[test]
    fn strips_are_whole_blocks() {
        assert_eq!(strip_height(600, 2), 304);
        assert_eq!(strip_height(1080, 16), 80);
        assert_eq!(strip_height(70, 3), 32);
        assert_eq!(strip_height(10, 4), 16);
        assert_eq!(strip_height(600, 0), 608);
    }

    /// A frame in strips decodes (through [`crate::FrameHeader::decode`], as the tests and the
    /// page stack them) to the frame: as close to it as the same frame in one JPEG, and only
    /// the rows at the seams may differ from that one.
    #[test]
    fn strips_decode_like_one_image() {
        let frame = picture(45, 70);
        let one = encode_frame(&frame, FrameFormat::Jpeg, 90, 1).unwrap();
        assert!(one.strips.is_empty());
        let split = encode_frame(&frame, FrameFormat::Jpeg, 90, 3).unwrap();
        assert_eq!(split.strips.len(), 3);
        assert_eq!(split.strip_height, 32);
        assert_eq!(split.strips.iter().sum::<u32>() as usize, split.bytes.len());
        let header = |encoded: &EncodedFrame| crate::FrameHeader {
            id: 1,
            width: 45,
            height: 70,
            format: FrameFormat::Jpeg,
            render_ms: 0.0,
            step: None,
            strips: encoded.strips.clone(),
            strip_height: (!encoded.strips.is_empty()).then_some(encoded.strip_height),
            pick: None,
        };
        let whole = header(&one).decode(&one.bytes).unwrap();
        let stacked = header(&split).decode(&split.bytes).unwrap();
        let error = |got: &[u8]| {
            got.iter()
                .zip(&frame.rgb)
                .map(|(a, b)| f64::from(a.abs_diff(*b)))
                .sum::<f64>()
                / got.len() as f64
        };
        assert!(
            error(&stacked) < error(&whole) + 0.5,
            "{} vs {}",
            error(&stacked),
            error(&whole)
        );
        assert!(error(&stacked) < 3.0, "mean error {}", error(&stacked));
        let row = 45 * 3;
        for (y, (a, b)) in whole.chunks(row).zip(stacked.chunks(row)).enumerate() {
            let near_seam = [32, 64]
                .iter()
                .any(|&seam: &usize| y + 2 >= seam && y < seam + 2);
            if !near_seam {
                assert_eq!(a, b, "row {y} away from the seams");
            }
        }
        // PNG frames (screenshots) stay one image.
        let png = encode_frame(&frame, FrameFormat::Png, 90, 3).unwrap();
        assert!(png.strips.is_empty());
        // Truncated strips are an error, not a panic.
        let mut short = header(&split);
        short.strips[2] += 10;
        assert!(short.decode(&split.bytes).is_err());
    }
}
