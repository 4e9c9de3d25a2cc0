//! [`split_panoramas`]: 360° frames written out as a rig's perspective images, laid out for
//! COLMAP's rig support, with a `transforms.json` when their poses are known.
//!
//! The output folder:
//!
//! ```text
//! images/view_00/<frame>.jpg ... images/view_NN/<frame>.jpg   one folder per rig view (COLMAP's
//!                                                              single_camera_per_folder layout)
//! rig_config.json      the rig for `colmap rig_configurator`: view 0 the reference sensor, every
//!                      view's cam_from_rig rotation (quaternion w, x, y, z), no translation, and
//!                      its PINHOLE intrinsics
//! transforms.json      when every frame has a pose: the views as nerfstudio PINHOLE frames, with
//!                      the frame split Ember would make (every `test_every`-th frame held out
//!                      with all its views) as train_filenames / test_filenames
//! panoramas.json       the rig and the panoramas the views were cut from ([`PanoramaIndex`]):
//!                      once COLMAP has reconstructed the views into `sparse/`, the folder loads
//!                      as the panoramas themselves, posed by their views and cut at any rig
//! ```
//!
//! Frames decode in parallel, one panorama per thread at a time, each cut into its views (in
//! parallel) and encoded before the next is read: memory stays at a few panoramas whatever the
//! walk's length.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use image::ImageEncoder;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::resample::CutPlan;
use super::rig::{EquirectRig, RigCamera};
use crate::camera::Pose;
use crate::error::{DataError, Result};
use crate::images::{ImageSource, image_dimensions};
use crate::transforms_json::{
    FrameOut, PinholeOut, TransformsFile, TransformsOut, write_transforms,
};

/// `panoramas.json`: what [`split_panoramas`] cut, so that a COLMAP reconstruction of its views
/// can pose the panoramas themselves (see [`crate::Dataset::load`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanoramaIndex {
    /// The rig the views were cut with.
    pub rig: EquirectRig,
    /// The views' side, pixels.
    pub view_size: u32,
    /// The panoramas, in the order split.
    pub frames: Vec<IndexedPanorama>,
}

/// One panorama of a [`PanoramaIndex`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexedPanorama {
    /// The name its views carry (`images/view_KK/NAME.jpg`): the file's name without extension.
    pub name: String,
    /// The panorama file, absolute.
    pub path: PathBuf,
}

/// The name of the [`PanoramaIndex`] file in a split folder.
pub const PANORAMA_INDEX: &str = "panoramas.json";

/// One 360° frame to split: its file and, when known, its pose (world to camera, OpenCV axes,
/// of the panorama's camera).
#[derive(Debug, Clone, PartialEq)]
pub struct PanoramaFrame {
    /// The panorama file (PNG or JPEG, 2:1).
    pub path: PathBuf,
    /// Its pose, when known.
    pub pose: Option<Pose>,
}

/// The frames of `input`: a folder of panoramas (every `.jpg`, `.jpeg` and `.png` in it, in
/// name order, without poses), or a nerfstudio `transforms.json` (or a folder holding one) whose
/// frames are `EQUIRECTANGULAR`, with their poses and `ply_file_path`.
pub fn read_panorama_frames(input: &Path) -> Result<(Vec<PanoramaFrame>, Option<PathBuf>)> {
    let transforms = if input.is_dir() {
        input.join("transforms.json")
    } else {
        input.to_path_buf()
    };
    if transforms.is_file() {
        let file = TransformsFile::read(&transforms)?;
        let dir = transforms.parent().unwrap_or(Path::new("."));
        let mut frames = Vec::with_capacity(file.frames.len());
        let mut missing = Vec::new();
        for frame in &file.frames {
            if !frame.equirect {
                return Err(DataError::InvalidOption(format!(
                    "{}: frame {} ({}) is not EQUIRECTANGULAR: only panoramas are split",
                    transforms.display(),
                    frame.index,
                    frame.file_path
                )));
            }
            let path = dir.join(&frame.file_path);
            if !path.is_file() {
                missing.push(frame.file_path.clone());
            }
            frames.push(PanoramaFrame {
                path,
                pose: Some(frame.pose),
            });
        }
        if !missing.is_empty() {
            return Err(DataError::MissingImages {
                dir: dir.to_path_buf(),
                names: missing,
            });
        }
        let points = file.ply_file_path.map(|p| dir.join(p));
        return Ok((frames, points));
    }
    let entries = std::fs::read_dir(input).map_err(|e| DataError::io(input, e))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| DataError::io(input, e))?.path();
        let is_image = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["jpg", "jpeg", "png"].contains(&e.to_ascii_lowercase().as_str()));
        if is_image && path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(DataError::MissingImages {
            dir: input.to_path_buf(),
            names: vec!["*.jpg, *.jpeg or *.png (no panorama in the folder)".to_string()],
        });
    }
    paths.sort();
    Ok((
        paths
            .into_iter()
            .map(|path| PanoramaFrame { path, pose: None })
            .collect(),
        None,
    ))
}

/// How [`split_panoramas`] writes its images.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitOptions {
    /// The views each panorama is cut into.
    pub rig: EquirectRig,
    /// Write JPEG at this quality (1-100); `None` writes PNG.
    pub jpeg_quality: Option<u8>,
    /// Hold out every `test_every`-th frame in `transforms.json`'s split (`None`: none).
    pub test_every: Option<usize>,
}

impl Default for SplitOptions {
    fn default() -> Self {
        SplitOptions {
            rig: EquirectRig::default(),
            jpeg_quality: Some(95),
            test_every: Some(8),
        }
    }
}

/// What [`split_panoramas`] wrote and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitSummary {
    /// Frames split.
    pub frames: usize,
    /// Views written (frames times the rig's views).
    pub views: usize,
    /// The views' side, pixels.
    pub view_size: u32,
    /// The panoramas' size, pixels.
    pub panorama_size: (u32, u32),
    /// Whether a `transforms.json` was written (every frame had a pose).
    pub transforms: bool,
    /// Wall-clock seconds of the whole split.
    pub seconds: f64,
    /// Seconds spent reading and decoding, cutting, and encoding and writing, summed over
    /// the frames (which run in parallel).
    pub decode_seconds: f64,
    /// See [`SplitSummary::decode_seconds`].
    pub cut_seconds: f64,
    /// See [`SplitSummary::decode_seconds`].
    pub write_seconds: f64,
}

/// The name a frame's views take: the panorama's file name without its extension.
fn frame_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `images/view_KK/STEM.EXT`, relative to the output folder.
fn view_path(view: usize, stem: &str, extension: &str) -> String {
    format!("images/view_{view:02}/{stem}.{extension}")
}

#[derive(Serialize)]
struct RigConfigCamera {
    image_prefix: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    ref_sensor: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    cam_from_rig_rotation: Option<[f64; 4]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cam_from_rig_translation: Option<[f64; 3]>,
    camera_model_name: &'static str,
    camera_params: [f64; 4],
}

#[derive(Serialize)]
struct RigConfig {
    cameras: Vec<RigConfigCamera>,
}

/// COLMAP's `rig_config.json` for `cameras`: view 0 the reference, every other view's rotation
/// from it (`R_k R_0ᵀ`, as a quaternion `w, x, y, z`).
fn rig_config(cameras: &[RigCamera]) -> Vec<RigConfig> {
    let r0 = &cameras[0].rotation;
    let cameras = cameras
        .iter()
        .map(|c| {
            let r = &c.rotation;
            let relative: [f64; 9] = std::array::from_fn(|i| {
                let (row, col) = (i / 3, i % 3);
                (0..3).map(|k| r[3 * row + k] * r0[3 * col + k]).sum()
            });
            let k = &c.intrinsics;
            let reference = c.index == 0;
            RigConfigCamera {
                image_prefix: format!("view_{:02}/", c.index),
                ref_sensor: reference,
                cam_from_rig_rotation: (!reference)
                    .then(|| ember_kernels::quat::quat_from_rotation(relative)),
                cam_from_rig_translation: (!reference).then_some([0.0; 3]),
                camera_model_name: "PINHOLE",
                camera_params: [k.fx, k.fy, k.cx, k.cy],
            }
        })
        .collect();
    vec![RigConfig { cameras }]
}

/// Writes every frame's views into `out` (see the module doc), and `points` (a PLY point cloud
/// for initialisation) as `out/points.ply` named by the `transforms.json`; calls
/// `progress(done)` after each frame. All panoramas must have one size (else an error naming
/// the first that differs); two frames of one file name, or an `out` that already holds
/// `images/`, are refused.
pub fn split_panoramas(
    frames: &[PanoramaFrame],
    points: Option<&Path>,
    out: &Path,
    options: &SplitOptions,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<SplitSummary> {
    let started = Instant::now();
    if let Some(problem) = options.rig.problem() {
        return Err(DataError::InvalidOption(format!("the rig: {problem}")));
    }
    if options
        .jpeg_quality
        .is_some_and(|q| !(1..=100).contains(&q))
    {
        return Err(DataError::InvalidOption(
            "the JPEG quality must be 1-100".to_string(),
        ));
    }
    let Some(first) = frames.first() else {
        return Err(DataError::InvalidOption("no frame to split".to_string()));
    };
    let mut stems: Vec<(String, &Path)> = frames
        .iter()
        .map(|f| (frame_stem(&f.path), f.path.as_path()))
        .collect();
    stems.sort();
    if let Some(pair) = stems.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(DataError::InvalidOption(format!(
            "{} and {} have one name: their views would overwrite each other",
            pair[0].1.display(),
            pair[1].1.display()
        )));
    }
    let images_dir = out.join("images");
    if images_dir.exists() {
        return Err(DataError::InvalidOption(format!(
            "{} exists: split into a new folder",
            images_dir.display()
        )));
    }
    let size = image_dimensions(&first.path)?;
    if size.0 != 2 * size.1 {
        return Err(DataError::NotEquirectangular {
            path: first.path.clone(),
            width: size.0,
            height: size.1,
        });
    }
    for frame in &frames[1..] {
        let other = image_dimensions(&frame.path)?;
        if other != size {
            return Err(DataError::ImageSizeMismatch {
                path: frame.path.clone(),
                expected_width: size.0,
                expected_height: size.1,
                found_width: other.0,
                found_height: other.1,
            });
        }
    }
    let view_size = options.rig.native_size(size.0);
    let cameras = options.rig.cameras(view_size);
    for camera in &cameras {
        let dir = images_dir.join(format!("view_{:02}", camera.index));
        std::fs::create_dir_all(&dir).map_err(|e| DataError::io(&dir, e))?;
    }
    let extension = if options.jpeg_quality.is_some() {
        "jpg"
    } else {
        "png"
    };
    let plans: Vec<CutPlan> = cameras
        .par_iter()
        .map(|c| CutPlan::new(c, size.0 as usize, size.1 as usize))
        .collect();
    let done = AtomicUsize::new(0);
    let timings: Vec<[f64; 3]> = frames
        .par_iter()
        .map(|frame| -> Result<[f64; 3]> {
            let t = Instant::now();
            let bytes = std::fs::read(&frame.path).map_err(|e| DataError::io(&frame.path, e))?;
            let source = ImageSource {
                path: frame.path.clone(),
                file_size: size,
                size: (view_size, view_size),
                background: [0.0; 3],
                undistort: None,
                mask: None,
                panorama_view: Some(cameras[0]),
            };
            let panorama = source.decode_panorama(&bytes)?;
            drop(bytes);
            let decoded = t.elapsed().as_secs_f64();
            let stem = frame_stem(&frame.path);
            let written: Vec<Result<[f64; 2]>> = cameras
                .par_iter()
                .zip(&plans)
                .map(|(camera, plan)| {
                    let t = Instant::now();
                    let view = panorama.cut_with(
                        &ImageSource {
                            panorama_view: Some(*camera),
                            ..source.clone()
                        },
                        plan,
                    )?;
                    let cut = t.elapsed().as_secs_f64();
                    let t = Instant::now();
                    let path = out.join(view_path(camera.index, &stem, extension));
                    encode_view(&view.data, view_size, options.jpeg_quality, &path)?;
                    Ok([cut, t.elapsed().as_secs_f64()])
                })
                .collect();
            let mut seconds = [decoded, 0.0, 0.0];
            for view in written {
                let [cut, write] = view?;
                seconds[1] += cut;
                seconds[2] += write;
            }
            progress(done.fetch_add(1, Ordering::Relaxed) + 1);
            Ok(seconds)
        })
        .collect::<Result<_>>()?;
    let rig_path = out.join("rig_config.json");
    let json =
        serde_json::to_vec_pretty(&rig_config(&cameras)).map_err(|cause| DataError::Json {
            path: rig_path.clone(),
            cause,
        })?;
    crate::write_atomically(&rig_path, &json).map_err(|e| DataError::io(&rig_path, e))?;
    let index = PanoramaIndex {
        rig: options.rig.clone(),
        view_size,
        frames: frames
            .iter()
            .map(|f| {
                let path = std::path::absolute(&f.path).map_err(|e| DataError::io(&f.path, e))?;
                Ok(IndexedPanorama {
                    name: frame_stem(&f.path),
                    path,
                })
            })
            .collect::<Result<_>>()?,
    };
    let index_path = out.join(PANORAMA_INDEX);
    let json = serde_json::to_vec_pretty(&index).map_err(|cause| DataError::Json {
        path: index_path.clone(),
        cause,
    })?;
    crate::write_atomically(&index_path, &json).map_err(|e| DataError::io(&index_path, e))?;
    let posed: Option<Vec<Pose>> = frames.iter().map(|f| f.pose).collect();
    let ply = match points {
        Some(points) => {
            let copy = out.join("points.ply");
            let bytes = std::fs::read(points).map_err(|e| DataError::io(points, e))?;
            crate::write_atomically(&copy, &bytes).map_err(|e| DataError::io(&copy, e))?;
            Some("points.ply".to_string())
        }
        None => None,
    };
    if let Some(poses) = &posed {
        let split = FrameSplit {
            cameras: &cameras,
            extension,
            test_every: options.test_every,
            ply,
        };
        split.write(frames, poses, out)?;
    }
    let sum = |k: usize| timings.iter().map(|t| t[k]).sum::<f64>();
    Ok(SplitSummary {
        frames: frames.len(),
        views: frames.len() * cameras.len(),
        view_size,
        panorama_size: size,
        transforms: posed.is_some(),
        seconds: started.elapsed().as_secs_f64(),
        decode_seconds: sum(0),
        cut_seconds: sum(1),
        write_seconds: sum(2),
    })
}

/// How the views of posed frames go into `transforms.json`.
struct FrameSplit<'a> {
    cameras: &'a [RigCamera],
    extension: &'a str,
    test_every: Option<usize>,
    ply: Option<String>,
}

impl FrameSplit<'_> {
    /// `out/transforms.json`: every view of every frame as a PINHOLE frame posed by its rig,
    /// and the frame split of [`crate::DatasetOptions::test_every`] (frames in name order).
    fn write(self, frames: &[PanoramaFrame], poses: &[Pose], out: &Path) -> Result<()> {
        let mut order: Vec<usize> = (0..frames.len()).collect();
        order.sort_by_key(|&i| frame_stem(&frames[i].path));
        let mut entries = Vec::new();
        let (mut train, mut test) = (Vec::new(), Vec::new());
        let (cameras, extension) = (self.cameras, self.extension);
        for (rank, &i) in order.iter().enumerate() {
            let stem = frame_stem(&frames[i].path);
            let held_out = frames.len() > 1 && self.test_every.is_some_and(|k| rank % k == 0);
            for camera in cameras {
                let file_path = view_path(camera.index, &stem, extension);
                entries.push(FrameOut::new(
                    file_path.clone(),
                    &poses[i].turned(&camera.rotation),
                ));
                if held_out {
                    test.push(file_path);
                } else {
                    train.push(file_path);
                }
            }
        }
        let transforms = TransformsOut {
            camera_model: "PINHOLE".to_string(),
            pinhole: Some(PinholeOut::from(&cameras[0].intrinsics)),
            frames: entries,
            ply_file_path: self.ply,
            train_filenames: Some(train),
            test_filenames: Some(test),
        };
        write_transforms(&out.join("transforms.json"), &transforms)
    }
}

/// Encodes one view (RGB, `size` square) as JPEG at `quality` or PNG and writes it atomically.
fn encode_view(rgb: &[u8], size: u32, quality: Option<u8>, path: &Path) -> Result<()> {
    let mut bytes = Vec::new();
    let encoded =
        match quality {
            Some(q) => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, q)
                .write_image(rgb, size, size, image::ExtendedColorType::Rgb8),
            None => image::codecs::png::PngEncoder::new(&mut bytes).write_image(
                rgb,
                size,
                size,
                image::ExtendedColorType::Rgb8,
            ),
        };
    encoded.map_err(|cause| DataError::Image {
        path: path.to_path_buf(),
        cause,
    })?;
    crate::write_atomically(path, &bytes).map_err(|e| DataError::io(path, e))
}
