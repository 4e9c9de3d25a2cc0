//! COLMAP's binary model format (little-endian), as written by `colmap model_converter`:
//!
//! ```text
//! cameras.bin   u64 count; per camera: u32 id, i32 model id, u64 width, u64 height, f64 params[n]
//! images.bin    u64 count; per image:  u32 id, f64 qvec[4], f64 tvec[3], u32 camera id,
//!               name bytes + NUL, u64 n2d, n2d x (f64 x, f64 y, u64 point3D id or u64::MAX)
//! points3D.bin  u64 count; per point:  u64 id, f64 xyz[3], u8 rgb[3], f64 error,
//!               u64 track length, length x (u32 image id, u32 point2D index)
//! ```
//!
//! Counts are checked against the bytes left before anything is allocated, so a corrupt count
//! is an error, not an out-of-memory abort.

use std::path::Path;

use super::{
    CameraModel, ColmapCamera, ColmapImage, ColmapModel, ColmapPoint3D, Point2D, TrackElement,
};
use crate::error::{DataError, Result};

/// A bounds-checked little-endian cursor that names the file in its errors.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Reader {
            bytes,
            offset: 0,
            path,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .offset
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let slice = &self.bytes[self.offset..end];
                self.offset = end;
                Ok(slice)
            }
            None => Err(DataError::Truncated {
                path: self.path.to_path_buf(),
                offset: self.offset as u64,
                what: what.to_string(),
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    fn f64s<const N: usize>(&mut self, what: &str) -> Result<[f64; N]> {
        let mut out = [0.0; N];
        for v in &mut out {
            *v = self.f64(what)?;
        }
        Ok(out)
    }

    /// Reads a count of records of at least `min_record` bytes each, erroring when the file is
    /// too short to hold that many.
    fn count(&mut self, min_record: usize, what: &str) -> Result<usize> {
        let start = self.offset;
        let count = self.u64(what)?;
        let left = (self.bytes.len() - self.offset) as u64;
        if count.saturating_mul(min_record as u64) > left {
            return Err(DataError::Truncated {
                path: self.path.to_path_buf(),
                offset: start as u64,
                what: format!(
                    "{what}: the file announces {count} records of at least {min_record} bytes but only {left} bytes follow"
                ),
            });
        }
        // Fits in memory: it is no more than the file's length.
        Ok(count as usize)
    }

    fn invalid(&self, offset: usize, problem: String) -> DataError {
        DataError::InvalidBinary {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            problem,
        }
    }

    fn finish(&self) -> Result<()> {
        if self.offset != self.bytes.len() {
            return Err(self.invalid(
                self.offset,
                format!(
                    "{} unexpected bytes after the last record",
                    self.bytes.len() - self.offset
                ),
            ));
        }
        Ok(())
    }
}

/// Parses the bytes of a `cameras.bin`; `path` names the file in errors.
pub fn parse_cameras_binary(bytes: &[u8], path: &Path) -> Result<Vec<ColmapCamera>> {
    let mut r = Reader::new(bytes, path);
    let count = r.count(24, "the camera count")?;
    let mut cameras = Vec::with_capacity(count);
    for i in 0..count {
        let what = format!("camera {i} of {count}");
        let id = r.u32(&what)?;
        let model_offset = r.offset;
        let model_id = r.i32(&what)?;
        let model = CameraModel::from_id(model_id).ok_or_else(|| {
            r.invalid(
                model_offset,
                format!("camera {id} has unknown camera model id {model_id}"),
            )
        })?;
        let width = r.u64(&what)?;
        let height = r.u64(&what)?;
        let mut params = Vec::with_capacity(model.num_params());
        for _ in 0..model.num_params() {
            params.push(r.f64(&what)?);
        }
        cameras.push(ColmapCamera {
            id,
            model,
            width,
            height,
            params,
        });
    }
    r.finish()?;
    Ok(cameras)
}

/// Parses the bytes of an `images.bin`; `path` names the file in errors.
pub fn parse_images_binary(bytes: &[u8], path: &Path) -> Result<Vec<ColmapImage>> {
    let mut r = Reader::new(bytes, path);
    // id, qvec, tvec, camera id, at least the name's NUL, the 2D point count.
    let count = r.count(4 + 56 + 4 + 1 + 8, "the image count")?;
    let mut images = Vec::with_capacity(count);
    for i in 0..count {
        let what = format!("image {i} of {count}");
        let id = r.u32(&what)?;
        let qvec = r.f64s::<4>(&what)?;
        let tvec = r.f64s::<3>(&what)?;
        let camera_id = r.u32(&what)?;
        let name_start = r.offset;
        let rest = &r.bytes[name_start..];
        let Some(len) = rest.iter().position(|&b| b == 0) else {
            return Err(DataError::Truncated {
                path: path.to_path_buf(),
                offset: name_start as u64,
                what: format!("the name of {what} (no terminating NUL)"),
            });
        };
        let name = std::str::from_utf8(&rest[..len])
            .map_err(|_| r.invalid(name_start, format!("the name of {what} is not UTF-8")))?
            .to_string();
        r.offset += len + 1;
        let n2d = r.count(24, &format!("the 2D points of image `{name}`"))?;
        let mut points2d = Vec::with_capacity(n2d);
        for _ in 0..n2d {
            let xy = r.f64s::<2>(&what)?;
            let point3d_id = r.u64(&what)?;
            points2d.push(Point2D {
                xy,
                // COLMAP writes the invalid id -1 as an unsigned 64-bit value.
                point3d_id: (point3d_id != u64::MAX).then_some(point3d_id),
            });
        }
        images.push(ColmapImage {
            id,
            qvec,
            tvec,
            camera_id,
            name,
            points2d,
        });
    }
    r.finish()?;
    Ok(images)
}

/// Parses the bytes of a `points3D.bin`; `path` names the file in errors.
pub fn parse_points3d_binary(bytes: &[u8], path: &Path) -> Result<Vec<ColmapPoint3D>> {
    let mut r = Reader::new(bytes, path);
    let count = r.count(8 + 24 + 3 + 8 + 8, "the point count")?;
    let mut points = Vec::with_capacity(count);
    for i in 0..count {
        let what = format!("point {i} of {count}");
        let id = r.u64(&what)?;
        let xyz = r.f64s::<3>(&what)?;
        let rgb = r.array::<3>(&what)?;
        let error = r.f64(&what)?;
        let length = r.count(8, &format!("the track of point {id}"))?;
        let mut track = Vec::with_capacity(length);
        for _ in 0..length {
            track.push(TrackElement {
                image_id: r.u32(&what)?,
                point2d_index: r.u32(&what)?,
            });
        }
        points.push(ColmapPoint3D {
            id,
            xyz,
            rgb,
            error,
            track,
        });
    }
    r.finish()?;
    Ok(points)
}

/// Encodes a model's three files in COLMAP's binary format: `(cameras, images, points3D)`.
pub(crate) fn encode_binary(model: &ColmapModel) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut cameras = Vec::new();
    cameras.extend((model.cameras.len() as u64).to_le_bytes());
    for camera in model.cameras.values() {
        cameras.extend(camera.id.to_le_bytes());
        cameras.extend(camera.model.id().to_le_bytes());
        cameras.extend(camera.width.to_le_bytes());
        cameras.extend(camera.height.to_le_bytes());
        for p in &camera.params {
            cameras.extend(p.to_le_bytes());
        }
    }
    let mut images = Vec::new();
    images.extend((model.images.len() as u64).to_le_bytes());
    for image in &model.images {
        images.extend(image.id.to_le_bytes());
        for v in image.qvec.iter().chain(&image.tvec) {
            images.extend(v.to_le_bytes());
        }
        images.extend(image.camera_id.to_le_bytes());
        images.extend(image.name.as_bytes());
        images.push(0);
        images.extend((image.points2d.len() as u64).to_le_bytes());
        for p in &image.points2d {
            images.extend(p.xy[0].to_le_bytes());
            images.extend(p.xy[1].to_le_bytes());
            images.extend(p.point3d_id.unwrap_or(u64::MAX).to_le_bytes());
        }
    }
    let mut points = Vec::new();
    points.extend((model.points3d.len() as u64).to_le_bytes());
    for point in &model.points3d {
        points.extend(point.id.to_le_bytes());
        for v in &point.xyz {
            points.extend(v.to_le_bytes());
        }
        points.extend(point.rgb);
        points.extend(point.error.to_le_bytes());
        points.extend((point.track.len() as u64).to_le_bytes());
        for t in &point.track {
            points.extend(t.image_id.to_le_bytes());
            points.extend(t.point2d_index.to_le_bytes());
        }
    }
    (cameras, images, points)
}

/// Writes `cameras.bin`, `images.bin` and `points3D.bin` into `dir`.
pub fn write_binary(model: &ColmapModel, dir: &Path) -> Result<()> {
    let (cameras, images, points) = encode_binary(model);
    for (name, bytes) in [
        ("cameras.bin", cameras),
        ("images.bin", images),
        ("points3D.bin", points),
    ] {
        let path = dir.join(name);
        crate::write_atomically(&path, &bytes).map_err(|e| DataError::io(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_model() -> ColmapModel {
        let mut model = ColmapModel::default();
        model.cameras.insert(
            3,
            ColmapCamera {
                id: 3,
                model: CameraModel::Pinhole,
                width: 64,
                height: 48,
                params: vec![50.0, 51.0, 32.0, 24.0],
            },
        );
        model.images.push(ColmapImage {
            id: 1,
            qvec: [1.0, 0.0, 0.0, 0.0],
            tvec: [0.0, 0.0, 4.0],
            camera_id: 3,
            name: "a.png".to_string(),
            points2d: vec![
                Point2D {
                    xy: [32.0, 24.0],
                    point3d_id: Some(9),
                },
                Point2D {
                    xy: [1.5, 2.5],
                    point3d_id: None,
                },
            ],
        });
        model.points3d.push(ColmapPoint3D {
            id: 9,
            xyz: [0.0, 0.0, 0.0],
            rgb: [10, 20, 30],
            error: 0.5,
            track: vec![TrackElement {
                image_id: 1,
                point2d_index: 0,
            }],
        });
        model
    }

    #[test]
    fn encode_then_parse_is_identity() {
        let model = tiny_model();
        let (c, i, p) = encode_binary(&model);
        let path = Path::new("mem");
        let cameras = parse_cameras_binary(&c, path).unwrap();
        assert_eq!(cameras, model.cameras.values().cloned().collect::<Vec<_>>());
        assert_eq!(parse_images_binary(&i, path).unwrap(), model.images);
        assert_eq!(parse_points3d_binary(&p, path).unwrap(), model.points3d);
    }

    #[test]
    fn every_truncation_is_an_error_naming_the_offset() {
        let (c, i, p) = encode_binary(&tiny_model());
        let path = Path::new("images.bin");
        for len in 0..i.len() {
            let error = parse_images_binary(&i[..len], path).unwrap_err();
            assert!(
                matches!(error, DataError::Truncated { .. }),
                "len {len}: {error}"
            );
            assert!(error.to_string().starts_with("images.bin: file ends early"));
        }
        for len in 0..c.len() {
            assert!(parse_cameras_binary(&c[..len], path).is_err());
        }
        for len in 0..p.len() {
            assert!(parse_points3d_binary(&p[..len], path).is_err());
        }
    }

    #[test]
    fn huge_counts_are_errors_not_allocations() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend([0u8; 100]);
        let path = Path::new("points3D.bin");
        let error = parse_points3d_binary(&bytes, path).unwrap_err();
        assert!(matches!(error, DataError::Truncated { .. }), "{error}");
        assert!(parse_images_binary(&bytes, path).is_err());
        assert!(parse_cameras_binary(&bytes, path).is_err());
    }
}
