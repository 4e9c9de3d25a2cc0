//! `transforms.json` in its two dialects.
//!
//! - **NeRF-Synthetic** (Blender): `camera_angle_x` (horizontal field of view, radians) and
//!   per-split files `transforms_{train,val,test}.json`; `file_path` usually has no extension
//!   (`./train/r_0` for `train/r_0.png`); the images are RGBA.
//! - **nerfstudio / instant-ngp**: `fl_x fl_y cx cy w h` (pixels), distortion `k1 k2 k3 p1 p2`
//!   (`k1 k2 k3 k4` for `OPENCV_FISHEYE`), `camera_model` (`OPENCV`, `PINHOLE`,
//!   `OPENCV_FISHEYE`, `EQUIRECTANGULAR` or absent), each
//!   either global or per frame (a frame's value wins); optional `train_filenames`,
//!   `val_filenames`, `test_filenames` (explicit splits) and `ply_file_path` (initial points).
//!
//! In both, `transform_matrix` is camera-to-world in OpenGL/Blender axes (4x4 or 3x4, row-major),
//! converted once by [`opengl_c2w_to_opencv_w2c`].
//!
//! An `EQUIRECTANGULAR` frame is a 360° panorama ([`crate::equirect`]): its pixels' directions
//! follow from its size alone, so focal lengths and principal point are not needed (and are
//! ignored when given), and distortion coefficients other than zero are refused.
//!
//! Focal lengths resolve as `fx = fl_x`, else from `camera_angle_x` (`0.5 w / tan(0.5 angle)`),
//! else `fl_y`; `fy = fl_y`, else from `camera_angle_y`, else `fx`. The principal point defaults
//! to the image centre, and `w h` to the size of the image file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::camera::{Distortion, Intrinsics, Pose, opengl_c2w_to_opencv_w2c};
use crate::error::{DataError, Result};

/// Intrinsics fields that may appear at the top level or in a frame.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct CameraFields {
    /// Horizontal field of view, radians.
    pub camera_angle_x: Option<f64>,
    /// Vertical field of view, radians.
    pub camera_angle_y: Option<f64>,
    /// Focal length along x, pixels.
    pub fl_x: Option<f64>,
    /// Focal length along y, pixels.
    pub fl_y: Option<f64>,
    /// Principal point x, pixels.
    pub cx: Option<f64>,
    /// Principal point y, pixels.
    pub cy: Option<f64>,
    /// Image width, pixels.
    pub w: Option<f64>,
    /// Image height, pixels.
    pub h: Option<f64>,
    /// Radial distortion.
    pub k1: Option<f64>,
    /// Radial distortion.
    pub k2: Option<f64>,
    /// Radial distortion.
    pub k3: Option<f64>,
    /// Fisheye/rational distortion; only accepted when zero.
    pub k4: Option<f64>,
    /// Tangential distortion.
    pub p1: Option<f64>,
    /// Tangential distortion.
    pub p2: Option<f64>,
    /// nerfstudio's camera model name.
    pub camera_model: Option<String>,
}

impl CameraFields {
    /// `self` with every field it lacks taken from `global`.
    fn or(&self, global: &CameraFields) -> CameraFields {
        CameraFields {
            camera_angle_x: self.camera_angle_x.or(global.camera_angle_x),
            camera_angle_y: self.camera_angle_y.or(global.camera_angle_y),
            fl_x: self.fl_x.or(global.fl_x),
            fl_y: self.fl_y.or(global.fl_y),
            cx: self.cx.or(global.cx),
            cy: self.cy.or(global.cy),
            w: self.w.or(global.w),
            h: self.h.or(global.h),
            k1: self.k1.or(global.k1),
            k2: self.k2.or(global.k2),
            k3: self.k3.or(global.k3),
            k4: self.k4.or(global.k4),
            p1: self.p1.or(global.p1),
            p2: self.p2.or(global.p2),
            camera_model: self.camera_model.clone().or(global.camera_model.clone()),
        }
    }
}

#[derive(Debug, Deserialize)]
struct RawFrame {
    file_path: String,
    #[serde(default)]
    mask_path: Option<String>,
    transform_matrix: Vec<Vec<f64>>,
    #[serde(flatten)]
    camera: CameraFields,
}

#[derive(Debug, Deserialize)]
struct RawFile {
    frames: Vec<RawFrame>,
    #[serde(flatten)]
    camera: CameraFields,
    #[serde(default)]
    ply_file_path: Option<String>,
    #[serde(default)]
    train_filenames: Option<Vec<String>>,
    #[serde(default)]
    val_filenames: Option<Vec<String>>,
    #[serde(default)]
    test_filenames: Option<Vec<String>>,
}

/// One frame: its image path as written, its pose, and its camera fields (frame over global).
#[derive(Debug, Clone, PartialEq)]
pub struct TransformsFrame {
    /// Index in `frames`.
    pub index: usize,
    /// `file_path` as written, relative to the JSON file's folder, maybe without extension.
    pub file_path: String,
    /// nerfstudio's `mask_path`, relative to the JSON file's folder: a greyscale image, black
    /// where the photo's pixels take no part in training or evaluation.
    pub mask_path: Option<String>,
    /// World-to-camera pose, OpenCV axes.
    pub pose: Pose,
    /// The camera fields that apply to this frame.
    pub camera: CameraFields,
    /// Lens distortion (zero when absent).
    pub distortion: Distortion,
    /// The frame is an equirectangular panorama (`camera_model: EQUIRECTANGULAR`).
    pub equirect: bool,
}

/// A parsed `transforms*.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct TransformsFile {
    /// The file.
    pub path: PathBuf,
    /// Its frames, in file order.
    pub frames: Vec<TransformsFrame>,
    /// `ply_file_path`, relative to the file's folder.
    pub ply_file_path: Option<String>,
    /// Explicit splits (`train_filenames`, `val_filenames`, `test_filenames`), when given.
    pub split_filenames: Option<[Vec<String>; 3]>,
}

impl TransformsFile {
    /// Reads and parses a `transforms*.json`.
    pub fn read(path: &Path) -> Result<TransformsFile> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        parse_transforms(&bytes, path)
    }
}

/// Parses the bytes of a `transforms*.json`; `path` names the file in errors.
///
/// Checks that every frame has a 4x4 or 3x4 finite rigid pose, a way to get its focal length,
/// and a supported camera model; image sizes are resolved later (they may need the image file).
pub fn parse_transforms(bytes: &[u8], path: &Path) -> Result<TransformsFile> {
    let raw: RawFile = serde_json::from_slice(bytes).map_err(|cause| DataError::Json {
        path: path.to_path_buf(),
        cause,
    })?;
    let mut frames = Vec::with_capacity(raw.frames.len());
    for (index, frame) in raw.frames.into_iter().enumerate() {
        let view = format!("frame {index} ({})", frame.file_path);
        let invalid_pose = |problem: String| DataError::InvalidPose {
            path: path.to_path_buf(),
            view: view.clone(),
            problem,
        };
        let m = &frame.transform_matrix;
        if !(m.len() == 3 || m.len() == 4) || m.iter().take(3).any(|row| row.len() != 4) {
            return Err(invalid_pose(format!(
                "transform_matrix must be 4x4 or 3x4, found {} rows of lengths {:?}",
                m.len(),
                m.iter().map(Vec::len).collect::<Vec<_>>()
            )));
        }
        let mut c2w = [[0.0; 4]; 3];
        for (dst, src) in c2w.iter_mut().zip(m) {
            dst.copy_from_slice(src);
        }
        if c2w.iter().flatten().any(|v| !v.is_finite()) {
            return Err(invalid_pose("non-finite value in transform_matrix".into()));
        }
        let pose = opengl_c2w_to_opencv_w2c(&c2w);
        if let Some(problem) = pose.problem() {
            return Err(invalid_pose(problem));
        }
        let camera = frame.camera.or(&raw.camera);
        let missing = |problem: &str| DataError::MissingIntrinsics {
            path: path.to_path_buf(),
            frame: index,
            problem: problem.to_string(),
        };
        let equirect = camera.camera_model.as_deref() == Some("EQUIRECTANGULAR");
        if !equirect
            && camera.fl_x.is_none()
            && camera.fl_y.is_none()
            && camera.camera_angle_x.is_none()
            && camera.camera_angle_y.is_none()
        {
            return Err(missing(
                "no focal length (fl_x, fl_y, camera_angle_x or camera_angle_y)",
            ));
        }
        let fisheye = camera.camera_model.as_deref() == Some("OPENCV_FISHEYE");
        if let Some(model) = &camera.camera_model
            && !["OPENCV", "PINHOLE", "OPENCV_FISHEYE", "EQUIRECTANGULAR"].contains(&model.as_str())
        {
            return Err(DataError::UnsupportedCameraModel {
                path: path.to_path_buf(),
                camera_id: index as u64,
                model: model.clone(),
            });
        }
        if !fisheye && camera.k4.is_some_and(|k4| k4 != 0.0) {
            return Err(DataError::UnsupportedCameraModel {
                path: path.to_path_buf(),
                camera_id: index as u64,
                model: "OPENCV with k4 (fisheye or rational distortion)".to_string(),
            });
        }
        let distortion = Distortion {
            k1: camera.k1.unwrap_or(0.0),
            k2: camera.k2.unwrap_or(0.0),
            k3: camera.k3.unwrap_or(0.0),
            k4: camera.k4.unwrap_or(0.0),
            p1: camera.p1.unwrap_or(0.0),
            p2: camera.p2.unwrap_or(0.0),
            fisheye,
        };
        if equirect && !distortion.is_none() {
            return Err(DataError::InvalidIntrinsics {
                path: path.to_path_buf(),
                camera: format!("frame {index} ({})", frame.file_path),
                problem: format!(
                    "an EQUIRECTANGULAR panorama has no lens distortion, but it is given \
                     k1={} k2={} k3={} k4={} p1={} p2={}",
                    distortion.k1,
                    distortion.k2,
                    distortion.k3,
                    distortion.k4,
                    distortion.p1,
                    distortion.p2
                ),
            });
        }
        frames.push(TransformsFrame {
            index,
            file_path: frame.file_path,
            mask_path: frame.mask_path,
            pose,
            camera,
            distortion,
            equirect,
        });
    }
    let split_filenames = match (raw.train_filenames, raw.val_filenames, raw.test_filenames) {
        (None, None, None) => None,
        (train, val, test) => Some([
            train.unwrap_or_default(),
            val.unwrap_or_default(),
            test.unwrap_or_default(),
        ]),
    };
    Ok(TransformsFile {
        path: path.to_path_buf(),
        frames,
        ply_file_path: raw.ply_file_path,
        split_filenames,
    })
}

impl TransformsFrame {
    /// The frame's size from `w h` when given, else `None`; errors when they are not positive
    /// whole numbers.
    pub fn declared_size(&self, path: &Path) -> Result<Option<(u32, u32)>> {
        let invalid = |problem: String| DataError::InvalidIntrinsics {
            path: path.to_path_buf(),
            camera: format!("frame {}", self.index),
            problem,
        };
        match (self.camera.w, self.camera.h) {
            (Some(w), Some(h)) => {
                let whole = |v: f64| v.is_finite() && v >= 1.0 && v <= u32::MAX as f64;
                if !whole(w) || !whole(h) || w.fract() != 0.0 || h.fract() != 0.0 {
                    return Err(invalid(format!("w={w} h={h} is not an image size")));
                }
                Ok(Some((w as u32, h as u32)))
            }
            _ => Ok(None),
        }
    }

    /// The frame's pinhole intrinsics for an image of `size` (from `w h` or the file).
    pub fn intrinsics(&self, size: (u32, u32), path: &Path) -> Result<Intrinsics> {
        let c = &self.camera;
        let (w, h) = (size.0 as f64, size.1 as f64);
        let from_angle = |extent: f64, angle: f64| 0.5 * extent / (0.5 * angle).tan();
        let fx = c
            .fl_x
            .or(c.camera_angle_x.map(|a| from_angle(w, a)))
            .or(c.fl_y)
            .or(c.camera_angle_y.map(|a| from_angle(h, a)));
        let Some(fx) = fx else {
            return Err(DataError::MissingIntrinsics {
                path: path.to_path_buf(),
                frame: self.index,
                problem: "no focal length".to_string(),
            });
        };
        let fy = c
            .fl_y
            .or(c.camera_angle_y.map(|a| from_angle(h, a)))
            .unwrap_or(fx);
        let intrinsics = Intrinsics {
            fx,
            fy,
            cx: c.cx.unwrap_or(0.5 * w),
            cy: c.cy.unwrap_or(0.5 * h),
            width: size.0,
            height: size.1,
        };
        if let Some(problem) = intrinsics.problem() {
            return Err(DataError::InvalidIntrinsics {
                path: path.to_path_buf(),
                camera: format!("frame {}", self.index),
                problem,
            });
        }
        if !self.distortion.is_finite() {
            return Err(DataError::InvalidIntrinsics {
                path: path.to_path_buf(),
                camera: format!("frame {}", self.index),
                problem: "non-finite distortion coefficient".to_string(),
            });
        }
        Ok(intrinsics)
    }
}

/// A nerfstudio `transforms.json` to write ([`write_transforms`]): one camera for every frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformsOut {
    /// `PINHOLE` (with the intrinsics below) or `EQUIRECTANGULAR` (without).
    pub camera_model: String,
    /// The pinhole intrinsics, pixels; `None` for panoramas.
    #[serde(flatten)]
    pub pinhole: Option<PinholeOut>,
    /// The frames.
    pub frames: Vec<FrameOut>,
    /// Initial points, relative to the file's folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ply_file_path: Option<String>,
    /// Explicit training frames (`file_path`s); with `test_filenames`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub train_filenames: Option<Vec<String>>,
    /// Explicit held-out frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_filenames: Option<Vec<String>>,
}

/// The intrinsics of [`TransformsOut`], nerfstudio's names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PinholeOut {
    /// Focal length along x, pixels.
    pub fl_x: f64,
    /// Focal length along y, pixels.
    pub fl_y: f64,
    /// Principal point x, pixels.
    pub cx: f64,
    /// Principal point y, pixels.
    pub cy: f64,
    /// Image width, pixels.
    pub w: u32,
    /// Image height, pixels.
    pub h: u32,
}

impl From<&Intrinsics> for PinholeOut {
    fn from(k: &Intrinsics) -> PinholeOut {
        PinholeOut {
            fl_x: k.fx,
            fl_y: k.fy,
            cx: k.cx,
            cy: k.cy,
            w: k.width,
            h: k.height,
        }
    }
}

/// One frame of a [`TransformsOut`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FrameOut {
    /// The image, relative to the file's folder.
    pub file_path: String,
    /// Camera to world, OpenGL axes ([`Pose::to_opengl_c2w`]).
    pub transform_matrix: [[f64; 4]; 4],
}

impl FrameOut {
    /// The frame of the image `file_path` taken from `pose` (world to camera, OpenCV axes).
    pub fn new(file_path: String, pose: &Pose) -> FrameOut {
        FrameOut {
            file_path,
            transform_matrix: pose.to_opengl_c2w(),
        }
    }
}

/// Writes `transforms` to `path` as pretty JSON, atomically.
pub fn write_transforms(path: &Path, transforms: &TransformsOut) -> Result<()> {
    let json = serde_json::to_vec_pretty(transforms).map_err(|cause| DataError::Json {
        path: path.to_path_buf(),
        cause,
    })?;
    crate::write_atomically(path, &json).map_err(|e| DataError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MATRIX: &str = "[[1,0,0,0.5],[0,1,0,0],[0,0,1,4],[0,0,0,1]]";

    #[test]
    fn nerf_synthetic_focal_from_angle() {
        let json = format!(
            r#"{{"camera_angle_x": 0.6911112070083618, "frames": [{{"file_path": "./train/r_0", "rotation": 0.01, "transform_matrix": {MATRIX}}}]}}"#
        );
        let file = parse_transforms(json.as_bytes(), Path::new("t.json")).unwrap();
        let frame = &file.frames[0];
        assert_eq!(frame.declared_size(Path::new("t.json")).unwrap(), None);
        let k = frame.intrinsics((400, 400), Path::new("t.json")).unwrap();
        assert!((k.fx - 555.5555).abs() < 1e-3, "{}", k.fx);
        assert_eq!((k.fy, k.cx, k.cy), (k.fx, 200.0, 200.0));
        assert_eq!(frame.pose.center(), [0.5, 0.0, 4.0]);
    }

    #[test]
    fn nerfstudio_per_frame_overrides_global() {
        let json = format!(
            r#"{{"fl_x": 100, "fl_y": 101, "cx": 50, "cy": 40, "w": 100, "h": 80, "k1": 0.1, "camera_model": "OPENCV",
                "train_filenames": ["a.png"], "ply_file_path": "sparse.ply",
                "frames": [{{"file_path": "a.png", "transform_matrix": {MATRIX}}},
                           {{"file_path": "b.png", "fl_x": 200, "w": 200, "p2": 0.01, "transform_matrix": {MATRIX}}}]}}"#
        );
        let file = parse_transforms(json.as_bytes(), Path::new("t.json")).unwrap();
        assert_eq!(file.ply_file_path.as_deref(), Some("sparse.ply"));
        assert_eq!(file.split_filenames.as_ref().unwrap()[0], vec!["a.png"]);
        let path = Path::new("t.json");
        let a = &file.frames[0];
        let size = a.declared_size(path).unwrap().unwrap();
        let k = a.intrinsics(size, path).unwrap();
        assert_eq!(
            (k.fx, k.fy, k.cx, k.cy, k.width, k.height),
            (100.0, 101.0, 50.0, 40.0, 100, 80)
        );
        assert_eq!(a.distortion.k1, 0.1);
        let b = &file.frames[1];
        let k = b
            .intrinsics(b.declared_size(path).unwrap().unwrap(), path)
            .unwrap();
        assert_eq!((k.fx, k.width), (200.0, 200));
        assert_eq!((b.distortion.k1, b.distortion.p2), (0.1, 0.01));
    }

    #[test]
    fn written_files_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transforms.json");
        let pose = Pose::from_quaternion([0.9, 0.1, -0.3, 0.2], [0.5, 1.0, -2.0]).unwrap();
        let k = Intrinsics {
            fx: 100.0,
            fy: 101.0,
            cx: 50.0,
            cy: 40.0,
            width: 100,
            height: 80,
        };
        for pinhole in [Some(PinholeOut::from(&k)), None] {
            let out = TransformsOut {
                camera_model: if pinhole.is_some() {
                    "PINHOLE"
                } else {
                    "EQUIRECTANGULAR"
                }
                .to_string(),
                pinhole,
                frames: vec![FrameOut::new("a.png".to_string(), &pose)],
                ply_file_path: None,
                train_filenames: Some(vec!["a.png".to_string()]),
                test_filenames: Some(Vec::new()),
            };
            write_transforms(&path, &out).unwrap();
            let back = TransformsFile::read(&path).unwrap();
            let frame = &back.frames[0];
            assert_eq!(frame.equirect, pinhole.is_none());
            assert!((0..9).all(|i| (frame.pose.rotation[i] - pose.rotation[i]).abs() < 1e-12));
            assert!(
                (0..3).all(|i| (frame.pose.translation[i] - pose.translation[i]).abs() < 1e-12)
            );
            if pinhole.is_some() {
                let size = frame.declared_size(&path).unwrap().unwrap();
                assert_eq!(frame.intrinsics(size, &path).unwrap(), k);
            }
            assert_eq!(back.split_filenames.unwrap()[0], vec!["a.png"]);
        }
        assert!(!dir.path().join("transforms.json.tmp").exists());
    }

    #[test]
    fn typed_errors() {
        let path = Path::new("t.json");
        let no_focal =
            format!(r#"{{"frames": [{{"file_path": "a", "transform_matrix": {MATRIX}}}]}}"#);
        assert!(matches!(
            parse_transforms(no_focal.as_bytes(), path),
            Err(DataError::MissingIntrinsics { frame: 0, .. })
        ));
        let unknown = format!(
            r#"{{"fl_x": 1, "camera_model": "FISHEYE624", "frames": [{{"file_path": "a", "transform_matrix": {MATRIX}}}]}}"#
        );
        let error = parse_transforms(unknown.as_bytes(), path).unwrap_err();
        assert!(error.to_string().contains("FISHEYE624"), "{error}");
        // A panorama needs no focal length, and may have no distortion.
        let equirectangular = format!(
            r#"{{"camera_model": "EQUIRECTANGULAR", "frames": [{{"file_path": "a", "transform_matrix": {MATRIX}}}]}}"#
        );
        let file = parse_transforms(equirectangular.as_bytes(), path).unwrap();
        assert!(file.frames[0].equirect);
        let distorted = format!(
            r#"{{"camera_model": "EQUIRECTANGULAR", "k1": 0.02, "frames": [{{"file_path": "a", "transform_matrix": {MATRIX}}}]}}"#
        );
        let error = parse_transforms(distorted.as_bytes(), path).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("t.json: camera `frame 0 (a)`")
                && error.to_string().contains("k1=0.02"),
            "{error}"
        );
        let fisheye = format!(
            r#"{{"fl_x": 1, "k1": 0.1, "k4": 0.01, "camera_model": "OPENCV_FISHEYE", "frames": [{{"file_path": "a", "transform_matrix": {MATRIX}}}]}}"#
        );
        let file = parse_transforms(fisheye.as_bytes(), path).unwrap();
        let d = file.frames[0].distortion;
        assert!(d.fisheye && d.k1 == 0.1 && d.k4 == 0.01, "{d:?}");
        let scaled = r#"{"fl_x": 1, "frames": [{"file_path": "a", "transform_matrix": [[2,0,0,0],[0,1,0,0],[0,0,1,0]]}]}"#;
        let error = parse_transforms(scaled.as_bytes(), path).unwrap_err();
        assert!(error.to_string().contains("frame 0 (a)"), "{error}");
        let short =
            r#"{"fl_x": 1, "frames": [{"file_path": "a", "transform_matrix": [[1,0,0],[0,1,0]]}]}"#;
        assert!(matches!(
            parse_transforms(short.as_bytes(), path),
            Err(DataError::InvalidPose { .. })
        ));
        let huge = r#"{"fl_x": 1, "frames": [{"file_path": "a", "transform_matrix": [[1,0,0,1e999],[0,1,0,0],[0,0,1,0]]}]}"#;
        assert!(parse_transforms(huge.as_bytes(), path).is_err());
        let not_json = b"{\"frames\": [";
        assert!(matches!(
            parse_transforms(not_json, path),
            Err(DataError::Json { .. })
        ));
    }
}
