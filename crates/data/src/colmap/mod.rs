//! COLMAP sparse models (`cameras`, `images`, `points3D`), in COLMAP's binary (`.bin`) and text
//! (`.txt`) formats: readers, writers, and the conversion of a camera to Ember's [`Intrinsics`]
//! and [`Distortion`].
//!
//! Poses are COLMAP's world-to-camera quaternion `(qw, qx, qy, qz)` and translation, already in
//! OpenCV axes. Every record is kept as read (including the 2D observations and tracks), so a
//! model written back is the model read. [`keypoint_exposures`] fits each photo's exposure from
//! those observations.

mod binary;
mod exposures;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use binary::{parse_cameras_binary, parse_images_binary, parse_points3d_binary, write_binary};
pub use exposures::{KeypointExposures, keypoint_exposures};
pub use text::{parse_cameras_text, parse_images_text, parse_points3d_text, write_text};

use crate::camera::{Distortion, Intrinsics, Pose};
use crate::error::{DataError, Result};

/// COLMAP's camera models, with the ids of its binary format. All can be read and written; only
/// those with [`CameraModel::is_supported`] convert to Ember intrinsics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CameraModel {
    /// `f, cx, cy`.
    SimplePinhole,
    /// `fx, fy, cx, cy`.
    Pinhole,
    /// `f, cx, cy, k1`.
    SimpleRadial,
    /// `f, cx, cy, k1, k2`.
    Radial,
    /// `fx, fy, cx, cy, k1, k2, p1, p2`.
    OpenCv,
    /// `fx, fy, cx, cy, k1, k2, k3, k4` (equidistant fisheye): not supported.
    OpenCvFisheye,
    /// `fx, fy, cx, cy, k1, k2, p1, p2, k3, k4, k5, k6` (rational): not supported.
    FullOpenCv,
    /// `fx, fy, cx, cy, omega`: not supported.
    Fov,
    /// `f, cx, cy, k`: not supported.
    SimpleRadialFisheye,
    /// `f, cx, cy, k1, k2`: not supported.
    RadialFisheye,
    /// `fx, fy, cx, cy, k1, k2, p1, p2, k3, k4, sx1, sy1`: not supported.
    ThinPrismFisheye,
    /// `fx, fy, cx, cy, k0..k5, p0, p1, s0..s3`: not supported.
    RadTanThinPrismFisheye,
}

impl CameraModel {
    const ALL: [CameraModel; 12] = [
        CameraModel::SimplePinhole,
        CameraModel::Pinhole,
        CameraModel::SimpleRadial,
        CameraModel::Radial,
        CameraModel::OpenCv,
        CameraModel::OpenCvFisheye,
        CameraModel::FullOpenCv,
        CameraModel::Fov,
        CameraModel::SimpleRadialFisheye,
        CameraModel::RadialFisheye,
        CameraModel::ThinPrismFisheye,
        CameraModel::RadTanThinPrismFisheye,
    ];

    /// The model's id in COLMAP's binary format.
    pub fn id(self) -> i32 {
        CameraModel::ALL
            .iter()
            .position(|&m| m == self)
            .map_or(-1, |i| i as i32)
    }

    /// The model with binary id `id`.
    pub fn from_id(id: i32) -> Option<CameraModel> {
        usize::try_from(id)
            .ok()
            .and_then(|i| CameraModel::ALL.get(i).copied())
    }

    /// The model's name in COLMAP's text format (`PINHOLE`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CameraModel::SimplePinhole => "SIMPLE_PINHOLE",
            CameraModel::Pinhole => "PINHOLE",
            CameraModel::SimpleRadial => "SIMPLE_RADIAL",
            CameraModel::Radial => "RADIAL",
            CameraModel::OpenCv => "OPENCV",
            CameraModel::OpenCvFisheye => "OPENCV_FISHEYE",
            CameraModel::FullOpenCv => "FULL_OPENCV",
            CameraModel::Fov => "FOV",
            CameraModel::SimpleRadialFisheye => "SIMPLE_RADIAL_FISHEYE",
            CameraModel::RadialFisheye => "RADIAL_FISHEYE",
            CameraModel::ThinPrismFisheye => "THIN_PRISM_FISHEYE",
            CameraModel::RadTanThinPrismFisheye => "RAD_TAN_THIN_PRISM_FISHEYE",
        }
    }

    /// The model named `name` in COLMAP's text format.
    pub fn from_name(name: &str) -> Option<CameraModel> {
        CameraModel::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// How many parameters the model has.
    pub fn num_params(self) -> usize {
        match self {
            CameraModel::SimplePinhole => 3,
            CameraModel::Pinhole => 4,
            CameraModel::SimpleRadial => 4,
            CameraModel::Radial => 5,
            CameraModel::OpenCv => 8,
            CameraModel::OpenCvFisheye => 8,
            CameraModel::FullOpenCv => 12,
            CameraModel::Fov => 5,
            CameraModel::SimpleRadialFisheye => 4,
            CameraModel::RadialFisheye => 5,
            CameraModel::ThinPrismFisheye => 12,
            CameraModel::RadTanThinPrismFisheye => 16,
        }
    }

    /// Whether Ember converts this model to pinhole intrinsics plus [`Distortion`].
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            CameraModel::SimplePinhole
                | CameraModel::Pinhole
                | CameraModel::SimpleRadial
                | CameraModel::Radial
                | CameraModel::OpenCv
        )
    }
}

/// One camera (intrinsics shared by one or more images).
#[derive(Debug, Clone, PartialEq)]
pub struct ColmapCamera {
    /// The camera's id.
    pub id: u32,
    /// Its model.
    pub model: CameraModel,
    /// Image width, pixels.
    pub width: u64,
    /// Image height, pixels.
    pub height: u64,
    /// The model's parameters, [`CameraModel::num_params`] of them, in COLMAP's order.
    pub params: Vec<f64>,
}

impl ColmapCamera {
    /// The camera as pinhole intrinsics plus distortion; `path` names the file in errors.
    ///
    /// Errors for unsupported models (naming the model) and for intrinsics that cannot be a
    /// camera.
    pub fn intrinsics(&self, path: &Path) -> Result<(Intrinsics, Distortion)> {
        let p = &self.params;
        if p.len() != self.model.num_params() {
            return Err(DataError::InvalidIntrinsics {
                path: path.to_path_buf(),
                camera: self.id.to_string(),
                problem: format!(
                    "{} needs {} parameters, the camera has {}",
                    self.model.name(),
                    self.model.num_params(),
                    p.len()
                ),
            });
        }
        let (fx, fy, cx, cy, distortion) = match self.model {
            CameraModel::SimplePinhole => (p[0], p[0], p[1], p[2], Distortion::default()),
            CameraModel::Pinhole => (p[0], p[1], p[2], p[3], Distortion::default()),
            CameraModel::SimpleRadial => (
                p[0],
                p[0],
                p[1],
                p[2],
                Distortion {
                    k1: p[3],
                    ..Distortion::default()
                },
            ),
            CameraModel::Radial => (
                p[0],
                p[0],
                p[1],
                p[2],
                Distortion {
                    k1: p[3],
                    k2: p[4],
                    ..Distortion::default()
                },
            ),
            CameraModel::OpenCv => (
                p[0],
                p[1],
                p[2],
                p[3],
                Distortion {
                    k1: p[4],
                    k2: p[5],
                    p1: p[6],
                    p2: p[7],
                    ..Distortion::default()
                },
            ),
            CameraModel::OpenCvFisheye => (
                p[0],
                p[1],
                p[2],
                p[3],
                Distortion {
                    k1: p[4],
                    k2: p[5],
                    k3: p[6],
                    k4: p[7],
                    fisheye: true,
                    ..Distortion::default()
                },
            ),
            other => {
                return Err(DataError::UnsupportedCameraModel {
                    path: path.to_path_buf(),
                    camera_id: self.id as u64,
                    model: other.name().to_string(),
                });
            }
        };
        let invalid = |problem: String| DataError::InvalidIntrinsics {
            path: path.to_path_buf(),
            camera: self.id.to_string(),
            problem,
        };
        let width = u32::try_from(self.width)
            .map_err(|_| invalid(format!("width {} is too large", self.width)))?;
        let height = u32::try_from(self.height)
            .map_err(|_| invalid(format!("height {} is too large", self.height)))?;
        let intrinsics = Intrinsics {
            fx,
            fy,
            cx,
            cy,
            width,
            height,
        };
        if let Some(problem) = intrinsics.problem() {
            return Err(invalid(problem));
        }
        if !distortion.is_finite() {
            return Err(invalid("non-finite distortion coefficient".to_string()));
        }
        Ok((intrinsics, distortion))
    }
}

/// A 2D feature of an image and the 3D point it observes, if any.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point2D {
    /// Position, pixels (COLMAP's convention: the top-left corner of the image is `(0, 0)`).
    pub xy: [f64; 2],
    /// The id of the observed 3D point; `None` for COLMAP's `-1`.
    pub point3d_id: Option<u64>,
}

/// One registered image.
#[derive(Debug, Clone, PartialEq)]
pub struct ColmapImage {
    /// The image's id.
    pub id: u32,
    /// World-to-camera rotation `(qw, qx, qy, qz)`, as stored (not renormalised).
    pub qvec: [f64; 4],
    /// World-to-camera translation.
    pub tvec: [f64; 3],
    /// The id of its camera.
    pub camera_id: u32,
    /// File name, relative to the images folder.
    pub name: String,
    /// Its 2D features.
    pub points2d: Vec<Point2D>,
}

impl ColmapImage {
    /// The world-to-camera pose; errors (naming the image) when not finite or the quaternion is
    /// zero.
    pub fn pose(&self, path: &Path) -> Result<Pose> {
        let invalid = |problem: &str| DataError::InvalidPose {
            path: path.to_path_buf(),
            view: self.name.clone(),
            problem: problem.to_string(),
        };
        if self.tvec.iter().any(|v| !v.is_finite()) {
            return Err(invalid("non-finite translation"));
        }
        Pose::from_quaternion(self.qvec, self.tvec)
            .ok_or_else(|| invalid("quaternion is zero or not finite"))
    }
}

/// One point of an image's track: which image, which of its 2D features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackElement {
    /// The image id.
    pub image_id: u32,
    /// Index into that image's [`ColmapImage::points2d`].
    pub point2d_index: u32,
}

/// One triangulated 3D point.
#[derive(Debug, Clone, PartialEq)]
pub struct ColmapPoint3D {
    /// The point's id.
    pub id: u64,
    /// Position, world units.
    pub xyz: [f64; 3],
    /// Colour, 8-bit RGB.
    pub rgb: [u8; 3],
    /// Mean reprojection error, pixels.
    pub error: f64,
    /// The images that observe it.
    pub track: Vec<TrackElement>,
}

/// A whole sparse model, records in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColmapModel {
    /// Cameras by id.
    pub cameras: BTreeMap<u32, ColmapCamera>,
    /// Registered images, in file order.
    pub images: Vec<ColmapImage>,
    /// 3D points, in file order.
    pub points3d: Vec<ColmapPoint3D>,
}

/// Which of COLMAP's two encodings a model folder uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColmapFormat {
    /// `cameras.bin`, `images.bin`, `points3D.bin`.
    Binary,
    /// `cameras.txt`, `images.txt`, `points3D.txt`.
    Text,
}

impl ColmapFormat {
    /// The format of the model in `dir` (binary preferred when both are there), or `None`.
    pub fn detect(dir: &Path) -> Option<ColmapFormat> {
        if dir.join("cameras.bin").is_file() && dir.join("images.bin").is_file() {
            Some(ColmapFormat::Binary)
        } else if dir.join("cameras.txt").is_file() && dir.join("images.txt").is_file() {
            Some(ColmapFormat::Text)
        } else {
            None
        }
    }

    /// The path of the model file `stem` (`cameras`, `images`, `points3D`) in `dir`.
    pub fn file(self, dir: &Path, stem: &str) -> PathBuf {
        let ext = match self {
            ColmapFormat::Binary => "bin",
            ColmapFormat::Text => "txt",
        };
        dir.join(format!("{stem}.{ext}"))
    }
}

impl ColmapModel {
    /// Reads the model in `dir`, binary if `cameras.bin` and `images.bin` are there, else text.
    /// `points3D` is optional (an empty list when the file is missing).
    pub fn read(dir: &Path) -> Result<ColmapModel> {
        match ColmapFormat::detect(dir) {
            Some(format) => ColmapModel::read_format(dir, format),
            None => Err(DataError::NotADataset {
                path: dir.to_path_buf(),
            }),
        }
    }

    /// Reads the model in `dir` in the given format.
    pub fn read_format(dir: &Path, format: ColmapFormat) -> Result<ColmapModel> {
        let cameras_path = format.file(dir, "cameras");
        let images_path = format.file(dir, "images");
        let points_path = format.file(dir, "points3D");
        let cameras_bytes = read_file(&cameras_path)?;
        let images_bytes = read_file(&images_path)?;
        let points_bytes = if points_path.is_file() {
            Some(read_file(&points_path)?)
        } else {
            None
        };
        let (cameras, images, points3d) = match format {
            ColmapFormat::Binary => (
                parse_cameras_binary(&cameras_bytes, &cameras_path)?,
                parse_images_binary(&images_bytes, &images_path)?,
                match &points_bytes {
                    Some(bytes) => parse_points3d_binary(bytes, &points_path)?,
                    None => Vec::new(),
                },
            ),
            ColmapFormat::Text => (
                parse_cameras_text(&cameras_bytes, &cameras_path)?,
                parse_images_text(&images_bytes, &images_path)?,
                match &points_bytes {
                    Some(bytes) => parse_points3d_text(bytes, &points_path)?,
                    None => Vec::new(),
                },
            ),
        };
        let mut by_id = BTreeMap::new();
        for camera in cameras {
            by_id.insert(camera.id, camera);
        }
        Ok(ColmapModel {
            cameras: by_id,
            images,
            points3d,
        })
    }

    /// Writes the model to `dir` (created if needed) in the given format.
    pub fn write(&self, dir: &Path, format: ColmapFormat) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| DataError::io(dir, e))?;
        match format {
            ColmapFormat::Binary => write_binary(self, dir),
            ColmapFormat::Text => write_text(self, dir),
        }
    }
}

/// The model folder to load under a scene folder: `sparse/0` when it holds a model, else the
/// subfolder of `sparse/` with the largest `images` file (the model with the most registered
/// images, cheaply), else `sparse/` itself, else the scene folder itself.
pub fn find_model_dir(scene: &Path) -> Option<PathBuf> {
    let sparse = scene.join("sparse");
    let zero = sparse.join("0");
    if ColmapFormat::detect(&zero).is_some() {
        return Some(zero);
    }
    let mut best: Option<(u64, PathBuf)> = None;
    if let Ok(entries) = std::fs::read_dir(&sparse) {
        for entry in entries.flatten() {
            let dir = entry.path();
            let Some(format) = ColmapFormat::detect(&dir) else {
                continue;
            };
            let images = format.file(&dir, "images");
            let size = std::fs::metadata(&images).map_or(0, |m| m.len());
            if best.as_ref().is_none_or(|(s, _)| size > *s) {
                best = Some((size, dir));
            }
        }
    }
    if let Some((_, dir)) = best {
        return Some(dir);
    }
    [sparse, scene.to_path_buf()]
        .into_iter()
        .find(|dir| ColmapFormat::detect(dir).is_some())
}

pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| DataError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_names_and_counts_agree_with_colmap() {
        assert_eq!(CameraModel::from_id(0), Some(CameraModel::SimplePinhole));
        assert_eq!(CameraModel::from_id(4), Some(CameraModel::OpenCv));
        assert_eq!(CameraModel::from_id(12), None);
        assert_eq!(CameraModel::from_id(-1), None);
        for model in CameraModel::ALL {
            assert_eq!(CameraModel::from_id(model.id()), Some(model));
            assert_eq!(CameraModel::from_name(model.name()), Some(model));
        }
        assert_eq!(CameraModel::OpenCv.num_params(), 8);
    }

    #[test]
    fn unsupported_model_is_named() {
        let camera = ColmapCamera {
            id: 7,
            model: CameraModel::FullOpenCv,
            width: 100,
            height: 80,
            params: vec![
                50.0, 50.0, 50.0, 40.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
        };
        let error = camera.intrinsics(Path::new("cameras.bin")).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("camera 7") && message.contains("FULL_OPENCV"),
            "{message}"
        );
    }

    #[test]
    fn supported_models_map_to_pinhole_plus_distortion() {
        let camera = ColmapCamera {
            id: 1,
            model: CameraModel::SimpleRadial,
            width: 100,
            height: 80,
            params: vec![60.0, 50.0, 40.0, -0.1],
        };
        let (k, d) = camera.intrinsics(Path::new("c")).unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (60.0, 60.0, 50.0, 40.0));
        assert_eq!(d.k1, -0.1);
        let opencv = ColmapCamera {
            model: CameraModel::OpenCv,
            params: vec![60.0, 61.0, 50.0, 40.0, 0.1, 0.2, 0.3, 0.4],
            ..camera.clone()
        };
        let (k, d) = opencv.intrinsics(Path::new("c")).unwrap();
        assert_eq!((k.fx, k.fy), (60.0, 61.0));
        assert_eq!((d.k1, d.k2, d.p1, d.p2, d.k3), (0.1, 0.2, 0.3, 0.4, 0.0));
        let fisheye = ColmapCamera {
            model: CameraModel::OpenCvFisheye,
            params: vec![60.0, 61.0, 50.0, 40.0, 0.1, 0.2, 0.3, 0.4],
            ..camera.clone()
        };
        let (k, d) = fisheye.intrinsics(Path::new("c")).unwrap();
        assert_eq!((k.fx, k.fy, k.cx, k.cy), (60.0, 61.0, 50.0, 40.0));
        assert!(d.fisheye);
        assert_eq!(
            (d.k1, d.k2, d.k3, d.k4, d.p1, d.p2),
            (0.1, 0.2, 0.3, 0.4, 0.0, 0.0)
        );
        let broken = ColmapCamera {
            model: CameraModel::Pinhole,
            params: vec![0.0, 61.0, 50.0, 40.0],
            ..camera
        };
        assert!(matches!(
            broken.intrinsics(Path::new("c")),
            Err(DataError::InvalidIntrinsics { .. })
        ));
    }
}
