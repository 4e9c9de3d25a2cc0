//! Decoding one image file into what training consumes: 8-bit RGB at the view's resolution.
//!
//! The steps, in this order: decode (PNG or JPEG, any bit depth, format sniffed from the bytes),
//! composite RGBA over the background colour (before anything resamples, so a resize never mixes
//! straight-alpha colours), undistort (remap to the pinhole camera, when the view asks for it),
//! resize to the view's size (triangle filter, which averages over the footprint when shrinking).
//! The result stays `u8` (a quarter of the memory of `f32`) until [`DecodedImage::to_tensor`].
//!
//! A photo's mask ([`MaskSource`]: a greyscale file, or the photo's own alpha) goes through the
//! same undistortion and resizing as the colours, so its edges land on the same pixels.
//!
//! A view cut from a 360° panorama ([`ImageSource::panorama_view`]) is decoded in two steps
//! instead: the panorama once ([`ImageSource::decode_panorama`]: decode, composite, the
//! filtering pyramids of its colours, transparency and mask), then each of its views
//! ([`DecodedPanorama::cut`], see [`crate::equirect`]), so that a rig of views costs one decode.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use image::imageops::FilterType;
use image::{GrayImage, ImageReader, RgbImage};
use rayon::prelude::*;

use crate::camera::{Distortion, Intrinsics};
use crate::equirect::{CutPlan, Pyramid, RigCamera, cut_planned};
use crate::error::{DataError, Result};

/// An 8-bit RGB image, row-major `[height, width, 3]`, composited over its source's
/// background, with the transparency it was composited with when the file has alpha.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedImage {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// `height * width * 3` bytes, RGB interleaved, top row first.
    pub data: Vec<u8>,
    /// `height * width` bytes of `255 (1 - alpha)`, after the same undistortion and resizing
    /// as `data`; `None` for files without alpha. With it the image over another background
    /// `b` is `data + (b - background) * transparency` (see [`DecodedImage::over_background`]).
    pub transparency: Option<Vec<u8>>,
    /// `height * width` bytes of the photo's mask ([`ImageSource::mask`]): 255 where a pixel
    /// counts, 0 where it takes no part in the loss or the metrics, values between where
    /// resizing blended the two (the pixel counts that much). `None`: every pixel counts.
    pub mask: Option<Vec<u8>>,
}

impl DecodedImage {
    /// Bytes of pixel data held.
    pub fn byte_len(&self) -> usize {
        self.data.len()
            + self.transparency.as_ref().map_or(0, Vec::len)
            + self.mask.as_ref().map_or(0, Vec::len)
    }

    /// The image as `f32` values in `[0, 1]` (`[height, width, 3]`) composited over
    /// `background` instead of `composited_over` (the background it was decoded with). Files
    /// without alpha are returned unchanged.
    pub fn over_background(&self, composited_over: [f32; 3], background: [f32; 3]) -> Vec<f32> {
        let mut values = self.to_f32();
        if background == composited_over {
            return values;
        }
        if let Some(transparency) = &self.transparency {
            let shift = [0, 1, 2].map(|c| background[c] - composited_over[c]);
            for (pixel, &t) in values.chunks_exact_mut(3).zip(transparency) {
                let t = f32::from(t) / 255.0;
                for c in 0..3 {
                    pixel[c] += shift[c] * t;
                }
            }
        }
        values
    }

    /// The RGB value of pixel `(x, y)`; `None` outside the image.
    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = 3 * (y as usize * self.width as usize + x as usize);
        Some([self.data[i], self.data[i + 1], self.data[i + 2]])
    }

    /// The image as `f32` values in `[0, 1]`, row-major `[height, width, 3]`.
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.iter().map(|&v| v as f32 / 255.0).collect()
    }

    /// The image on `device` as a `[height, width, 3]` float tensor with values in `[0, 1]`.
    pub fn to_tensor<B: Backend>(&self, device: &B::Device) -> Tensor<B, 3> {
        let shape = [self.height as usize, self.width as usize, 3];
        Tensor::from_data(TensorData::new(self.to_f32(), shape), device)
    }

    /// The mask on `device` as a `[height, width, 1]` float tensor of weights in `[0, 1]`;
    /// `None` when every pixel counts.
    pub fn mask_tensor<B: Backend>(&self, device: &B::Device) -> Option<Tensor<B, 3>> {
        let mask = self.mask.as_ref()?;
        let weights = mask.iter().map(|&m| f32::from(m) / 255.0).collect();
        let shape = [self.height as usize, self.width as usize, 1];
        Some(Tensor::from_data(TensorData::new(weights, shape), device))
    }
}

/// Where a photo's mask comes from: which of its pixels take part in the loss and the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaskSource {
    /// An image file (PNG or JPEG; colour files count by their luma): white keeps a pixel,
    /// black leaves it out. It has the photo's size, or a whole multiple of it (the full-size
    /// masks of an `images_N/` photo).
    File(PathBuf),
    /// The photo's own alpha channel (`data.alpha_as_mask`): transparent pixels are left out.
    Alpha,
}

/// Where a view's image comes from and how to turn the file into the view's pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSource {
    /// The image file.
    pub path: PathBuf,
    /// The size the file must have, pixels (checked when decoding).
    pub file_size: (u32, u32),
    /// The size delivered, pixels (the file is resized when it differs).
    pub size: (u32, u32),
    /// Colour that transparent pixels are composited over, RGB in `[0, 1]`.
    pub background: [f32; 3],
    /// Remap the file from this distorted camera (intrinsics at the file's resolution) to the
    /// pinhole camera with the same intrinsics before resizing; `None` leaves it as it is.
    pub undistort: Option<(Intrinsics, Distortion)>,
    /// The photo's mask; `None`: every pixel counts.
    pub mask: Option<MaskSource>,
    /// The file is an equirectangular panorama and this view is cut from it
    /// ([`crate::equirect`]; its intrinsics are at [`ImageSource::size`]): `undistort` does not
    /// apply, and a mask file is a panorama of the same size.
    pub panorama_view: Option<RigCamera>,
}

/// A decoded 360° panorama, ready for its views to be cut: the filtering pyramids of its
/// colours (composited over the source's background), of its transparency and of its mask.
#[derive(Debug)]
pub struct DecodedPanorama {
    path: PathBuf,
    rgb: Pyramid,
    transparency: Option<Pyramid>,
    mask: Option<(Pyramid, PathBuf)>,
}

impl DecodedPanorama {
    /// Bytes held by its pyramids.
    pub fn byte_len(&self) -> usize {
        self.rgb.byte_len()
            + self.transparency.as_ref().map_or(0, Pyramid::byte_len)
            + self.mask.as_ref().map_or(0, |(m, _)| m.byte_len())
    }

    /// The view of `source` (which names this panorama and a [`ImageSource::panorama_view`]):
    /// its colours, transparency and mask, each footprint-filtered. A view whose mask hides
    /// every pixel is an [`DataError::EmptyMask`] naming the mask and the view.
    pub fn cut(&self, source: &ImageSource) -> Result<DecodedImage> {
        let plan = self.plan(source)?;
        self.cut_with(source, &plan)
    }

    /// The plan that cuts `source`'s view from a panorama of this size, to cut it from every
    /// panorama of the walk ([`DecodedPanorama::cut_with`]).
    pub fn plan(&self, source: &ImageSource) -> Result<CutPlan> {
        let camera = view_of(source)?;
        Ok(CutPlan::new(camera, self.rgb.width(), self.rgb.height()))
    }

    /// [`DecodedPanorama::cut`] through `plan` (made by [`DecodedPanorama::plan`] for a
    /// panorama of this size and the same view).
    pub fn cut_with(&self, source: &ImageSource, plan: &CutPlan) -> Result<DecodedImage> {
        let camera = view_of(source)?;
        if !plan.fits(camera, (self.rgb.width(), self.rgb.height())) {
            return Err(DataError::InvalidOption(format!(
                "{}: the cut plan of view {} does not fit this panorama",
                source.path.display(),
                camera.index
            )));
        }
        let (w, h) = source.size;
        if (camera.intrinsics.width, camera.intrinsics.height) != (w, h) {
            return Err(DataError::InvalidOption(format!(
                "{}: panorama view {} is {}x{} but its source says {w}x{h}",
                source.path.display(),
                camera.index,
                camera.intrinsics.width,
                camera.intrinsics.height
            )));
        }
        let grey = |pyramid: &Pyramid| -> Vec<u8> {
            cut_planned(pyramid, plan)
                .chunks_exact(3)
                .map(|p| p[0])
                .collect()
        };
        let mask = match &self.mask {
            Some((pyramid, path)) => {
                let values = grey(pyramid);
                if !values.iter().any(|&v| v > 0) {
                    return Err(DataError::EmptyMask {
                        path: PathBuf::from(format!(
                            "{} (view {} of {})",
                            path.display(),
                            camera.index,
                            self.path.display()
                        )),
                    });
                }
                Some(values)
            }
            None => None,
        };
        Ok(DecodedImage {
            width: w,
            height: h,
            data: cut_planned(&self.rgb, plan),
            transparency: self.transparency.as_ref().map(grey),
            mask,
        })
    }
}

/// The panorama view of `source`, or an error naming it.
fn view_of(source: &ImageSource) -> Result<&RigCamera> {
    source.panorama_view.as_ref().ok_or_else(|| {
        DataError::InvalidOption(format!(
            "{}: not a view of a panorama",
            source.path.display()
        ))
    })
}

impl ImageSource {
    /// Reads and decodes the file.
    pub fn decode(&self) -> Result<DecodedImage> {
        let bytes = std::fs::read(&self.path).map_err(|e| DataError::io(&self.path, e))?;
        self.decode_bytes(&bytes)
    }

    /// Decodes the panorama this view is cut from ([`ImageSource::panorama_view`]): the file's
    /// bytes (already read) checked against [`ImageSource::file_size`], composited over the
    /// background, and the pyramids of its colours, transparency and mask built. Its views
    /// are then cut by [`DecodedPanorama::cut`].
    pub fn decode_panorama(&self, bytes: &[u8]) -> Result<DecodedPanorama> {
        let (rgb, transparency) = decode_composited(bytes, &self.path, self.background)?;
        let (fw, fh) = self.file_size;
        if rgb.dimensions() != (fw, fh) {
            return Err(DataError::ImageSizeMismatch {
                path: self.path.clone(),
                expected_width: fw,
                expected_height: fh,
                found_width: rgb.width(),
                found_height: rgb.height(),
            });
        }
        if fw != 2 * fh {
            return Err(DataError::NotEquirectangular {
                path: self.path.clone(),
                width: fw,
                height: fh,
            });
        }
        let (w, h) = (fw as usize, fh as usize);
        let grey_pyramid =
            |values: &[u8]| Pyramid::new(w, h, values.iter().flat_map(|&v| [v; 3]).collect(), true);
        let mask = match self.full_mask(transparency.as_deref())? {
            Some((values, path)) if values.iter().all(|&v| v == 0) => {
                return Err(DataError::EmptyMask { path });
            }
            Some((values, path)) => Some((grey_pyramid(&values), path)),
            None => None,
        };
        Ok(DecodedPanorama {
            path: self.path.clone(),
            rgb: Pyramid::new(w, h, rgb.into_raw(), true),
            transparency: transparency.as_deref().map(grey_pyramid),
            mask,
        })
    }

    /// The mask at the file's size (one byte a pixel, 255 keeps) and the file it came from
    /// (the photo itself for its alpha), from [`ImageSource::mask`] and the decoded file's
    /// `transparency`; `None` without a mask.
    fn full_mask(&self, transparency: Option<&[u8]>) -> Result<Option<(Vec<u8>, PathBuf)>> {
        match &self.mask {
            None => Ok(None),
            Some(MaskSource::Alpha) => {
                let Some(t) = transparency else {
                    return Err(DataError::MissingMask {
                        photo: self.path.clone(),
                        problem: "data.alpha_as_mask is set but the photo has no alpha channel"
                            .to_string(),
                    });
                };
                let alpha = t.iter().map(|&t| 255 - t).collect();
                Ok(Some((alpha, self.path.clone())))
            }
            Some(MaskSource::File(path)) => {
                let full = read_mask(path, &self.path, self.file_size)?;
                Ok(Some((full.into_raw(), path.clone())))
            }
        }
    }

    /// Decodes the file's bytes (already read); errors name [`ImageSource::path`].
    pub fn decode_bytes(&self, bytes: &[u8]) -> Result<DecodedImage> {
        if self.panorama_view.is_some() {
            return self.decode_panorama(bytes)?.cut(self);
        }
        let (rgb, transparency) = decode_composited(bytes, &self.path, self.background)?;
        let (fw, fh) = self.file_size;
        if rgb.dimensions() != (fw, fh) {
            return Err(DataError::ImageSizeMismatch {
                path: self.path.clone(),
                expected_width: fw,
                expected_height: fh,
                found_width: rgb.width(),
                found_height: rgb.height(),
            });
        }
        let (w, h) = self.size;
        // Undistortion and resizing are linear in the pixel values, so the transparency goes
        // through the same steps as the colours (as the grey image it is).
        let resample = |image: RgbImage| -> RgbImage {
            let image = match &self.undistort {
                Some((intrinsics, distortion)) if !distortion.is_none() => {
                    undistort(&image, intrinsics, distortion)
                }
                _ => image,
            };
            if (w, h) == (fw, fh) {
                image
            } else {
                image::imageops::resize(&image, w, h, FilterType::Triangle)
            }
        };
        let resample_grey = |values: &[u8]| -> Vec<u8> {
            let grey = RgbImage::from_fn(fw, fh, |x, y| {
                let v = values[(y * fw + x) as usize];
                image::Rgb([v, v, v])
            });
            resample(grey).pixels().map(|p| p.0[0]).collect()
        };
        let mask = match self.full_mask(transparency.as_deref())? {
            Some((values, path)) => {
                let values = resample_grey(&values);
                if !values.iter().any(|&v| v > 0) {
                    return Err(DataError::EmptyMask { path });
                }
                Some(values)
            }
            None => None,
        };
        let transparency = transparency.map(|t| resample_grey(&t));
        Ok(DecodedImage {
            width: w,
            height: h,
            data: resample(rgb).into_raw(),
            transparency,
            mask,
        })
    }
}

/// Reads mask `path` of photo `photo` (whose file is `size` pixels) as a greyscale image of
/// that size: a whole multiple of it is shrunk to it (triangle filter); any other size is an
/// error naming both files.
fn read_mask(path: &Path, photo: &Path, size: (u32, u32)) -> Result<GrayImage> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let mask = ImageReader::new(Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| DataError::io(path, e))?
        .decode()
        .map_err(|cause| DataError::Image {
            path: path.to_path_buf(),
            cause,
        })?
        .into_luma8();
    let (mw, mh) = mask.dimensions();
    let (fw, fh) = size;
    if (mw, mh) == size {
        return Ok(mask);
    }
    // Tools that write `images_N/` round either way: one pixel of slack per factor.
    let factor = (f64::from(mw) / f64::from(fw)).round() as u32;
    let whole_multiple =
        factor >= 2 && (fw * factor).abs_diff(mw) <= factor && (fh * factor).abs_diff(mh) <= factor;
    if !whole_multiple {
        return Err(DataError::MaskSizeMismatch {
            path: path.to_path_buf(),
            photo: photo.to_path_buf(),
            expected_width: fw,
            expected_height: fh,
            found_width: mw,
            found_height: mh,
        });
    }
    Ok(image::imageops::resize(&mask, fw, fh, FilterType::Triangle))
}

/// Reads only the header of an image file: its `(width, height)`.
pub fn image_dimensions(path: &Path) -> Result<(u32, u32)> {
    let image_error = |cause| DataError::Image {
        path: path.to_path_buf(),
        cause,
    };
    ImageReader::open(path)
        .map_err(|e| DataError::io(path, e))?
        .with_guessed_format()
        .map_err(|e| DataError::io(path, e))?
        .into_dimensions()
        .map_err(image_error)
}

/// Decodes PNG or JPEG bytes to RGB, compositing any alpha over `background`.
pub fn decode_rgb(bytes: &[u8], path: &Path, background: [f32; 3]) -> Result<RgbImage> {
    decode_composited(bytes, path, background).map(|(rgb, _)| rgb)
}

/// [`decode_rgb`], plus `255 (1 - alpha)` per pixel (row-major) when the file has alpha.
fn decode_composited(
    bytes: &[u8],
    path: &Path,
    background: [f32; 3],
) -> Result<(RgbImage, Option<Vec<u8>>)> {
    let image_error = |cause| DataError::Image {
        path: path.to_path_buf(),
        cause,
    };
    if bytes.starts_with(&[0xFF, 0xD8])
        && let Err(problem) = check_jpeg_complete(bytes)
    {
        return Err(image_error(image::ImageError::Decoding(
            image::error::DecodingError::new(image::ImageFormat::Jpeg.into(), problem),
        )));
    }
    // `ImageReader` applies the default decoding limits (512 MiB), so a corrupt header that
    // announces a gigantic image is an error rather than an allocation failure.
    let decoded = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| DataError::io(path, e))?
        .decode()
        .map_err(image_error)?;
    if !decoded.color().has_alpha() {
        return Ok((decoded.into_rgb8(), None));
    }
    let rgba = decoded.into_rgba8();
    let (w, h) = rgba.dimensions();
    let bg = background.map(|c| c.clamp(0.0, 1.0) * 255.0);
    let mut out = vec![0u8; w as usize * h as usize * 3];
    out.par_chunks_mut(3 * w as usize)
        .zip(rgba.as_raw().par_chunks(4 * w as usize))
        .for_each(|(dst, src)| {
            for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(4)) {
                let a = s[3] as f32 * (1.0 / 255.0);
                for c in 0..3 {
                    d[c] = (s[c] as f32 * a + bg[c] * (1.0 - a)).round() as u8;
                }
            }
        });
    let transparency = rgba.as_raw().chunks_exact(4).map(|p| 255 - p[3]).collect();
    // The buffer has exactly w * h * 3 bytes, so this cannot fail.
    let rgb = RgbImage::from_raw(w, h, out).expect("buffer sized for the image");
    Ok((rgb, Some(transparency)))
}

/// Walks a JPEG's marker segments to its end-of-image marker.
///
/// The JPEG decoder fills whatever a truncated file lacks with grey and reports success, so a
/// file cut short (a partial copy, an interrupted download) would silently train on grey
/// blocks. A complete file has an EOI marker after its last scan; entropy-coded data cannot
/// contain one (a data byte `0xFF` is always followed by `0x00` or a restart marker).
fn check_jpeg_complete(bytes: &[u8]) -> std::result::Result<(), String> {
    let mut i = 2;
    loop {
        // Markers may be preceded by any number of 0xFF fill bytes.
        while i < bytes.len() && bytes[i] == 0xFF && bytes.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if i + 1 >= bytes.len() {
            return Err(format!(
                "truncated JPEG: file ends at byte {} without an end-of-image marker",
                bytes.len()
            ));
        }
        if bytes[i] != 0xFF {
            return Err(format!("corrupt JPEG: expected a marker at byte {i}"));
        }
        let marker = bytes[i + 1];
        i += 2;
        match marker {
            0xD9 => return Ok(()),
            // Standalone markers without a length.
            0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let Some(length) = bytes
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        else {
            return Err(format!(
                "truncated JPEG: file ends in the segment at byte {}",
                i - 2
            ));
        };
        if length < 2 {
            return Err(format!("corrupt JPEG: segment length {length} at byte {i}"));
        }
        i += length;
        if i > bytes.len() {
            return Err(format!(
                "truncated JPEG: a segment runs past the end of the file ({} bytes)",
                bytes.len()
            ));
        }
        if marker == 0xDA {
            // Entropy-coded data up to the next marker that is not a stuffed byte or a restart.
            loop {
                match bytes.get(i..i + 2) {
                    None => {
                        return Err(format!(
                            "truncated JPEG: file ends inside scan data at byte {}",
                            bytes.len()
                        ));
                    }
                    Some([0xFF, next])
                        if *next != 0x00 && !(0xD0..=0xD7).contains(next) && *next != 0xFF =>
                    {
                        break;
                    }
                    _ => i += 1,
                }
            }
        }
    }
}

/// Remaps an image taken by a distorted camera to the pinhole camera with the same intrinsics
/// and size: each output pixel centre is distorted into the source and sampled bilinearly.
/// Samples that fall outside the source repeat its edge (as COLMAP's undistorter would crop
/// instead; keeping the size keeps the intrinsics unchanged).
pub fn undistort(source: &RgbImage, k: &Intrinsics, distortion: &Distortion) -> RgbImage {
    let (w, h) = source.dimensions();
    let src = source.as_raw();
    let row_bytes = 3 * w as usize;
    let mut out = vec![0u8; row_bytes * h as usize];
    out.par_chunks_mut(row_bytes)
        .enumerate()
        .for_each(|(v, row)| {
            let y = (v as f64 + 0.5 - k.cy) / k.fy;
            for u in 0..w as usize {
                let x = (u as f64 + 0.5 - k.cx) / k.fx;
                let (xd, yd) = distortion.distort(x, y);
                // Back to continuous pixel-index coordinates (pixel centres at integers).
                let sx = (k.fx * xd + k.cx - 0.5).clamp(0.0, (w - 1) as f64);
                let sy = (k.fy * yd + k.cy - 0.5).clamp(0.0, (h - 1) as f64);
                let (x0, y0) = (sx.floor() as usize, sy.floor() as usize);
                let (x1, y1) = ((x0 + 1).min(w as usize - 1), (y0 + 1).min(h as usize - 1));
                let (ax, ay) = (sx - x0 as f64, sy - y0 as f64);
                for c in 0..3 {
                    let at = |xx: usize, yy: usize| src[yy * row_bytes + 3 * xx + c] as f64;
                    let top = at(x0, y0) * (1.0 - ax) + at(x1, y0) * ax;
                    let bottom = at(x0, y1) * (1.0 - ax) + at(x1, y1) * ax;
                    row[3 * u + c] = (top * (1.0 - ay) + bottom * ay).round() as u8;
                }
            }
        });
    RgbImage::from_raw(w, h, out).expect("buffer sized for the image")
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageFormat, Rgba, RgbaImage};

    fn png_bytes(image: &RgbaImage) -> Vec<u8> {
        let mut bytes = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
            .unwrap();
        bytes
    }

    #[test]
    fn rgba_is_composited_over_the_background() {
        let mut rgba = RgbaImage::new(2, 1);
        rgba.put_pixel(0, 0, Rgba([255, 0, 0, 0]));
        rgba.put_pixel(1, 0, Rgba([255, 0, 0, 128]));
        let bytes = png_bytes(&rgba);
        let white = decode_rgb(&bytes, Path::new("x.png"), [1.0; 3]).unwrap();
        assert_eq!(white.get_pixel(0, 0).0, [255, 255, 255]);
        assert_eq!(white.get_pixel(1, 0).0, [255, 127, 127]);
        let black = decode_rgb(&bytes, Path::new("x.png"), [0.0; 3]).unwrap();
        assert_eq!(black.get_pixel(0, 0).0, [0, 0, 0]);
        assert_eq!(black.get_pixel(1, 0).0, [128, 0, 0]);
    }

    #[test]
    fn transparency_recomposites_over_any_background() {
        // A 40x30 RGBA gradient, downsampled to 20x15: the transparency follows the colours
        // through the resize, so recompositing the white decode over black matches the black
        // decode to rounding.
        let rgba = RgbaImage::from_fn(40, 30, |x, y| {
            Rgba([
                (6 * x) as u8,
                (8 * y) as u8,
                200,
                ((x * 7 + y * 3) % 256) as u8,
            ])
        });
        let bytes = png_bytes(&rgba);
        let source = |background| ImageSource {
            path: PathBuf::from("g.png"),
            file_size: (40, 30),
            size: (20, 15),
            background,
            undistort: None,
            mask: None,
            panorama_view: None,
        };
        let white = source([1.0; 3]).decode_bytes(&bytes).unwrap();
        let black = source([0.0; 3]).decode_bytes(&bytes).unwrap();
        assert_eq!(white.transparency.as_ref().map(Vec::len), Some(20 * 15));
        let moved = white.over_background([1.0; 3], [0.0; 3]);
        for (a, b) in moved.iter().zip(black.to_f32()) {
            assert!((a - b).abs() <= 2.0 / 255.0, "{a} vs {b}");
        }
        let same = white.over_background([1.0; 3], [1.0; 3]);
        assert_eq!(same, white.to_f32());
        // An opaque file has no transparency and ignores the background.
        let rgb = image::RgbImage::from_pixel(2, 2, image::Rgb([10, 20, 30]));
        let mut png = Vec::new();
        rgb.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        let opaque = ImageSource {
            file_size: (2, 2),
            size: (2, 2),
            ..source([1.0; 3])
        }
        .decode_bytes(&png)
        .unwrap();
        assert_eq!(opaque.transparency, None);
        assert_eq!(opaque.over_background([1.0; 3], [0.0; 3]), opaque.to_f32());
    }

    #[test]
    fn source_checks_size_and_resizes() {
        let rgba = RgbaImage::from_pixel(8, 4, Rgba([10, 20, 30, 255]));
        let bytes = png_bytes(&rgba);
        let source = ImageSource {
            path: PathBuf::from("x.png"),
            file_size: (8, 4),
            size: (4, 2),
            background: [1.0; 3],
            undistort: None,
            mask: None,
            panorama_view: None,
        };
        let image = source.decode_bytes(&bytes).unwrap();
        assert_eq!((image.width, image.height), (4, 2));
        assert_eq!(image.pixel(3, 1), Some([10, 20, 30]));
        assert_eq!(image.pixel(4, 1), None);
        let wrong = ImageSource {
            file_size: (8, 5),
            ..source
        };
        let error = wrong.decode_bytes(&bytes).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("image is 8x4 but its camera says 8x5"),
            "{error}"
        );
    }

    #[test]
    fn undistort_moves_a_dot_to_its_pinhole_position() {
        // A white dot on black at a distorted position; after undistortion it must sit where the
        // pinhole camera projects the same ray.
        let k = Intrinsics {
            fx: 100.0,
            fy: 100.0,
            cx: 64.0,
            cy: 64.0,
            width: 128,
            height: 128,
        };
        let d = Distortion {
            k1: -0.2,
            ..Distortion::default()
        };
        let (x, y) = (0.4, -0.3);
        let (xd, yd) = d.distort(x, y);
        let (du, dv) = (k.fx * xd + k.cx, k.fy * yd + k.cy);
        let mut img = RgbImage::new(128, 128);
        for j in 0..128u32 {
            for i in 0..128u32 {
                let r2 = (i as f64 + 0.5 - du).powi(2) + (j as f64 + 0.5 - dv).powi(2);
                if r2 < 4.0 {
                    img.put_pixel(i, j, image::Rgb([255, 255, 255]));
                }
            }
        }
        let out = undistort(&img, &k, &d);
        // Brightness-weighted centroid of the output, in continuous pixel coordinates.
        let (mut sx, mut sy, mut s) = (0.0, 0.0, 0.0);
        for (i, j, p) in out.enumerate_pixels() {
            let v = p.0[0] as f64;
            sx += v * (i as f64 + 0.5);
            sy += v * (j as f64 + 0.5);
            s += v;
        }
        let (pu, pv) = (k.fx * x + k.cx, k.fy * y + k.cy);
        assert!(s > 0.0);
        assert!(
            (sx / s - pu).abs() < 0.5 && (sy / s - pv).abs() < 0.5,
            "centroid ({}, {}) vs pinhole ({pu}, {pv})",
            sx / s,
            sy / s
        );
        // No distortion: the identity.
        assert_eq!(undistort(&img, &k, &Distortion::default()), img);
    }

    #[test]
    fn garbage_and_truncated_bytes_are_errors() {
        let bytes = png_bytes(&RgbaImage::from_pixel(16, 16, Rgba([1, 2, 3, 4])));
        for len in [0, 8, 20, 40, bytes.len() / 2] {
            assert!(decode_rgb(&bytes[..len], Path::new("t.png"), [1.0; 3]).is_err());
        }
        assert!(decode_rgb(b"not an image", Path::new("t.png"), [1.0; 3]).is_err());
    }

    #[test]
    fn truncated_jpeg_is_an_error() {
        let rgb = RgbImage::from_fn(64, 48, |x, y| image::Rgb([(x * 4) as u8, (y * 5) as u8, 7]));
        let mut jpeg = Vec::new();
        rgb.write_to(&mut Cursor::new(&mut jpeg), ImageFormat::Jpeg)
            .unwrap();
        let full = decode_rgb(&jpeg, Path::new("t.jpg"), [1.0; 3]).unwrap();
        assert_eq!(full.dimensions(), (64, 48));
        for len in (2..jpeg.len()).step_by(7) {
            let error = decode_rgb(&jpeg[..len], Path::new("t.jpg"), [1.0; 3]).unwrap_err();
            assert!(
                error.to_string().starts_with("t.jpg: cannot decode image"),
                "{error}"
            );
        }
        // Bytes after the end-of-image marker (some cameras append data) are fine.
        let mut trailer = jpeg.clone();
        trailer.extend_from_slice(b"trailing maker notes");
        assert!(decode_rgb(&trailer, Path::new("t.jpg"), [1.0; 3]).is_ok());
    }
}
