//! Ember's datasets: the scenes a user brings, read from disk, and the image pipeline that feeds
//! training.
//!
//! # Formats
//! | source | files | notes |
//! |---|---|---|
//! | COLMAP | `sparse/0/{cameras,images,points3D}.{bin,txt}` + `images/` | binary and text, read and written ([`colmap`]); `sparse/0`, else the largest model in `sparse/`; `images_N/` for pre-downscaled sets; a rig layout (`CAMERA/FRAME` names) split by frame; beside a `panoramas.json` ([`equirect::split`]) the panoramas its views were cut from |
//! | NeRF-Synthetic | `transforms_{train,val,test}.json` | `camera_angle_x`; RGBA PNGs composited over [`DatasetOptions::background`] |
//! | nerfstudio / instant-ngp | `transforms.json` | `fl_x fl_y cx cy w h`, `k1 k2 k3 p1 p2` (`k1..k4` for OPENCV_FISHEYE), global or per frame; `file_path` with or without extension; `train/val/test_filenames`; `ply_file_path`; `mask_path`; `camera_model: EQUIRECTANGULAR` frames cut into a rig of pinhole views ([`equirect`], [`DatasetOptions::equirect`]) |
//! | point clouds | COLMAP `points3D`, PLY | [`PointCloud`]: ASCII and binary PLY, `x y z` + optional `red green blue` |
//! | trained splats | 3DGS PLY, `.splat`, SPZ, PlayCanvas compressed PLY | [`Splats`], see [`splats`]: read and write by extension, [`convert`], [`transform`], [`info`] |
//! | level-of-detail hierarchies | a 3DGS PLY of the leaves + `lod_node`, `lod_parent` elements | [`SplatHierarchy`], see [`lod`]: [`build_hierarchy`] (moment matching over a Morton order), [`read_hierarchy`], [`write_hierarchy`] |
//! | camera paths | JSON: `fps`, `keyframes` of `time` + camera | [`CameraPath`], see [`camera_path`]: the cameras of every video frame between key views (`trainer render --path`) |
//!
//! Camera models: SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV, OPENCV_FISHEYE
//! (COLMAP), and nerfstudio's OPENCV, PINHOLE, OPENCV_FISHEYE and EQUIRECTANGULAR (a 360°
//! panorama, 2:1, each frame cut into pinhole views that share its pose and are split
//! together: every view of a held-out frame is held out). Distorted images are **undistorted when decoded** (remapped to
//! the pinhole camera with the same intrinsics and size, see [`images::undistort`]), so every
//! [`View`] is a pinhole camera; with [`DatasetOptions::undistort`] off the images are left as
//! they are and the coefficients are carried in [`View::distortion`], which Ember's projection
//! does not apply yet.
//!
//! # Conventions
//! - Poses are world-to-camera in OpenCV axes (x right, y down, z forward), `p_cam = R p + t`,
//!   as in `ember-kernels`' [`CameraParams`](ember_kernels::CameraParams) ([`View::camera`]).
//!   The OpenGL/Blender camera-to-world of `transforms.json` is converted in one place,
//!   [`opengl_c2w_to_opencv_w2c`].
//! - Pixel `(0, 0)` covers `[0, 1) x [0, 1)`; its centre is `(0.5, 0.5)`.
//! - Images are `[H, W, 3]` RGB, `u8` in memory, `f32` in `[0, 1]` on a device.
//! - Split: explicit split files when present (per-split JSONs, nerfstudio filename lists), else
//!   every 8th view in name order is held out for testing (the 3DGS convention,
//!   [`DatasetOptions::test_every`]).
//! - [`Dataset::extent`] is the 3DGS "cameras extent": 1.1 times the largest distance of a
//!   training camera centre from their mean.
//! - Masks ([`MaskSource`]): a `masks/` folder beside a COLMAP scene's images (`masks_N/`
//!   beside `images_N/`), a nerfstudio frame's `mask_path`, or the photo's alpha with
//!   [`DatasetOptions::alpha_as_mask`]; white keeps a pixel, black leaves it out
//!   ([`DecodedImage::mask`]). Every photo of a scene has one or none does.
//!
//! # Not supported
//! The other COLMAP camera models (FULL_OPENCV, FOV, SIMPLE_RADIAL_FISHEYE, RADIAL_FISHEYE,
//! THIN_PRISM_FISHEYE: they load as records but are refused as cameras, by name); the part of a
//! fisheye's view beyond the pinhole image of the same size (undistortion keeps the centre); COLMAP split lists (COLMAP
//! scenes use [`DatasetOptions::test_every`]); depth maps and per-image exposure metadata;
//! 3DGS-layout PLY attributes beyond position and colour in [`PointCloud`] (a splat file is
//! read by [`read_splats`]).
//! Undistortion keeps the image size and repeats edge pixels where the distorted image has no
//! data (COLMAP's undistorter crops instead).
//!
//! # Errors
//! Everything that reads a file returns [`DataError`], which names the file and the problem;
//! nothing panics on user data. The binary readers check record counts against the file size
//! before allocating. Every reader is a libFuzzer target in the repository's `fuzz/` folder
//! (`scripts/fuzz.sh`, on the stable toolchain; see `FUZZING.md`); the test suite's
//! `corruption` module runs every reader, image decoders included, on deterministic truncations
//! and byte flips.

#![warn(missing_docs)]

pub mod camera;
pub mod camera_path;
pub mod colmap;
mod dataset;
pub mod equirect;
mod error;
pub mod images;
mod loader;
pub mod lod;
mod ply;
pub mod points;
pub mod splats;
pub mod transforms_json;

use std::path::Path;

pub use camera::{
    CameraModel, Distortion, Intrinsics, Pose, find_camera, opengl_c2w_to_opencv_w2c,
    parse_camera_file, parse_camera_list,
};
pub use camera_path::{CameraPath, Keyframe, PathRender, parse_camera_path};
pub use dataset::{Dataset, DatasetFormat, DatasetOptions, View, evenly_spaced};
pub use equirect::{EquirectRig, RigCamera};
pub use error::{DataError, Result};
pub use images::{DecodedImage, DecodedPanorama, ImageSource, MaskSource};
pub use loader::{DevicePrefetcher, ImageLoader, IoStats, LoaderOptions, Prefetcher, Sample};
pub use lod::{
    HierarchyConfig, LodGeometry, SplatHierarchy, build_hierarchy, read_hierarchy, write_hierarchy,
};
pub use points::PointCloud;
pub use splats::edit::{Region, SplatFilter, edit};
pub use splats::{
    NonFinite, SplatFormat, SplatInfo, Splats, convert, info, parse_splats, read_splats, transform,
    write_splats,
};

/// Writes `bytes` to `path` through a temporary file in the same folder (`path` + `.tmp`) and a
/// rename, so an interrupted write never leaves a truncated file behind; on an error the
/// temporary file is removed. The error is the I/O cause alone: callers name `path` in their own
/// error type (the user's path, not the temporary one). Every file Ember writes goes through here.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        // Nothing to report if the temporary file was never created.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
