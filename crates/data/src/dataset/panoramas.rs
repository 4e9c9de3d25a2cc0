//! 360° scenes in [`Dataset::load`](super::Dataset::load): a panorama frame cut into the views of
//! [`DatasetOptions::equirect`], a COLMAP rig layout split by frame, and a COLMAP reconstruction
//! of `trainer data split360`'s views loaded as the panoramas themselves.

use std::collections::HashSet;
use std::path::Path;

use super::{
    Dataset, DatasetOptions, PendingView, View, colmap_dataset, evenly_spaced, finish_views,
    read_colmap_model, split_every,
};
use crate::camera::{CameraModel, Distortion, Intrinsics, Pose};
use crate::equirect::{IndexedPanorama, PANORAMA_INDEX, PanoramaIndex};
use crate::error::{DataError, Result};
use crate::images::{ImageSource, image_dimensions};

/// The views of [`DatasetOptions::equirect`] cut from the panorama of `p` (a nerfstudio
/// `EQUIRECTANGULAR` frame): each looks from the frame's centre, turned by its rig rotation,
/// named `FILE#K` for view `K` of the rig.
pub(super) fn panorama_views(
    p: PendingView,
    described_in: &Path,
    options: &DatasetOptions,
) -> Result<Vec<View>> {
    let file_size = image_dimensions(&p.path)?;
    let n = options.downsample;
    let native_width = if p.prescaled {
        file_size.0 * n
    } else {
        file_size.0
    };
    let declared = match &p.frame {
        Some(frame) => frame.declared_size(described_in)?,
        None => None,
    };
    if let Some((w, h)) = declared {
        let expected = if p.prescaled {
            (
                (w as f64 / n as f64).round() as u32,
                (h as f64 / n as f64).round() as u32,
            )
        } else {
            (w, h)
        };
        if expected.0.abs_diff(file_size.0) > u32::from(p.prescaled)
            || expected.1.abs_diff(file_size.1) > u32::from(p.prescaled)
        {
            return Err(DataError::ImageSizeMismatch {
                path: p.path.clone(),
                expected_width: expected.0,
                expected_height: expected.1,
                found_width: file_size.0,
                found_height: file_size.1,
            });
        }
    }
    if file_size.0 != 2 * file_size.1 {
        return Err(DataError::NotEquirectangular {
            path: p.path.clone(),
            width: file_size.0,
            height: file_size.1,
        });
    }
    if options.whole_panoramas {
        // Even, so that the panorama is exactly twice as wide as high.
        let width = (2 * (f64::from(native_width) / f64::from(2 * n)).round() as u32).max(2);
        let (w, h) = (f64::from(width), f64::from(width / 2));
        return Ok(vec![View {
            name: p.name,
            pose: p.pose,
            intrinsics: Intrinsics {
                fx: w / std::f64::consts::TAU,
                fy: w / std::f64::consts::TAU,
                cx: w / 2.0,
                cy: h / 2.0,
                width,
                height: width / 2,
            },
            model: CameraModel::Equirectangular,
            distortion: Distortion::default(),
            source: ImageSource {
                path: p.path,
                file_size,
                size: (width, width / 2),
                background: options.background,
                undistort: None,
                mask: p.mask,
                panorama_view: None,
            },
        }]);
    }
    let rig = &options.equirect;
    let size = ((f64::from(rig.native_size(native_width)) / f64::from(n)).round() as u32).max(1);
    Ok(rig
        .cameras(size)
        .into_iter()
        .map(|camera| View {
            name: format!("{}#{}", p.name, camera.index),
            pose: p.pose.turned(&camera.rotation),
            intrinsics: camera.intrinsics,
            model: CameraModel::Pinhole,
            distortion: Distortion::default(),
            source: ImageSource {
                path: p.path.clone(),
                file_size,
                size: (size, size),
                background: options.background,
                undistort: None,
                mask: p.mask.clone(),
                panorama_view: Some(camera),
            },
        })
        .collect())
}

/// The frame of each view when a COLMAP scene's images are laid out as a rig (`CAMERA/FRAME`:
/// one folder per camera, as `trainer data split360` writes them and COLMAP's rig support
/// reads them): the part after the folder. `None` unless every name has one folder and at
/// least two folders share a frame name.
pub(super) fn rig_frames(views: &[View]) -> Option<Vec<String>> {
    let parts: Vec<(&str, &str)> = views
        .iter()
        .map(|v| {
            v.name
                .split_once('/')
                .filter(|(_, frame)| !frame.contains('/'))
        })
        .collect::<Option<_>>()?;
    let mut folders_of: std::collections::HashMap<&str, HashSet<&str>> = Default::default();
    for (folder, frame) in &parts {
        folders_of.entry(frame).or_default().insert(folder);
    }
    folders_of
        .values()
        .any(|folders| folders.len() > 1)
        .then(|| parts.iter().map(|(_, frame)| frame.to_string()).collect())
}

/// Splits views by their `frames` (one per view): every `test_every`-th frame in name order is
/// held out with all its views, as [`split_every`] holds out views.
pub(super) fn split_by_frame(
    views: Vec<View>,
    frames: &[String],
    test_every: Option<usize>,
) -> (Vec<View>, Vec<View>) {
    let mut names: Vec<&String> = frames.iter().collect();
    names.sort();
    names.dedup();
    let held_out: HashSet<&String> = match test_every {
        Some(k) if names.len() > 1 => names.into_iter().step_by(k).collect(),
        _ => HashSet::new(),
    };
    let (test, train): (Vec<_>, Vec<_>) = views
        .into_iter()
        .zip(frames)
        .partition(|(_, frame)| held_out.contains(frame));
    (
        train.into_iter().map(|(v, _)| v).collect(),
        test.into_iter().map(|(v, _)| v).collect(),
    )
}

/// A COLMAP reconstruction of the views `trainer data split360` cut (`images/view_KK/NAME.ext`,
/// beside its `panoramas.json`): the panoramas themselves, each posed by its registered views
/// (each view's pose turned back by its rig rotation, averaged: the quaternions' normalised
/// mean, the centres' mean) and cut into [`DatasetOptions::equirect`]'s views, split by
/// frame. Panoramas none of whose views COLMAP registered are listed in
/// [`Dataset::unregistered`].
pub(super) fn load_colmap_panoramas(
    root: &Path,
    model_dir: &Path,
    options: &DatasetOptions,
) -> Result<Dataset> {
    let index_path = root.join(PANORAMA_INDEX);
    let bytes = std::fs::read(&index_path).map_err(|e| DataError::io(&index_path, e))?;
    let index: PanoramaIndex = serde_json::from_slice(&bytes).map_err(|cause| DataError::Json {
        path: index_path.clone(),
        cause,
    })?;
    if let Some(problem) = index.rig.problem() {
        return Err(DataError::InvalidOption(format!(
            "{}: its rig: {problem}",
            index_path.display()
        )));
    }
    let (format, model) = read_colmap_model(model_dir)?;
    let images_path = format.file(model_dir, "images");
    let split_rig = index.rig.cameras(index.view_size);
    let mut poses: std::collections::HashMap<String, Vec<Pose>> = Default::default();
    for image in &model.images {
        let view = image.name.split_once('/').and_then(|(folder, file)| {
            let k: usize = folder.strip_prefix("view_")?.parse().ok()?;
            Some((split_rig.get(k)?, Path::new(file).file_stem()?.to_str()?))
        });
        let Some((camera, name)) = view else {
            return Err(DataError::InvalidOption(format!(
                "{}: image `{}` is not one of {}'s views (view_KK/NAME)",
                images_path.display(),
                image.name,
                index_path.display()
            )));
        };
        let r = &camera.rotation;
        let back = [r[0], r[3], r[6], r[1], r[4], r[7], r[2], r[5], r[8]];
        let pose = image.pose(&images_path)?.turned(&back);
        poses.entry(name.to_string()).or_default().push(pose);
    }
    let mut frames: Vec<&IndexedPanorama> = index.frames.iter().collect();
    frames.sort_by(|a, b| a.name.cmp(&b.name));
    let mut unregistered = Vec::new();
    let mut pending = Vec::new();
    for frame in frames {
        let Some(views) = poses.get(&frame.name) else {
            unregistered.push(frame.name.clone());
            continue;
        };
        let name = frame
            .path
            .file_name()
            .map_or_else(|| frame.name.clone(), |n| n.to_string_lossy().into_owned());
        pending.push(PendingView {
            name,
            pose: mean_pose(views),
            intrinsics: None,
            frame: None,
            distortion: Distortion::default(),
            path: frame.path.clone(),
            prescaled: false,
            mask: None,
            panorama: true,
        });
    }
    let pending: Vec<PendingView> = evenly_spaced(pending.len(), options.max_images)
        .into_iter()
        .map(|i| pending[i].clone())
        .collect();
    let (train, test) = split_every(pending, options.test_every);
    let dir = root.to_path_buf();
    let views = [
        finish_views(train, &index_path, &dir, options)?,
        Vec::new(),
        finish_views(test, &index_path, &dir, &options.held_out())?,
    ];
    let mut dataset = colmap_dataset(root, model_dir, format, &model, views, options)?;
    dataset.unregistered = unregistered;
    Ok(dataset)
}

/// The mean of poses that should agree (one frame's, through each of its views): the rotation
/// of the normalised mean of their quaternions (signs aligned with the first), the mean centre.
fn mean_pose(poses: &[Pose]) -> Pose {
    let quaternions: Vec<[f64; 4]> = poses
        .iter()
        .map(|p| ember_kernels::quat::quat_from_rotation(p.rotation))
        .collect();
    let mut sum = [0.0; 4];
    for q in &quaternions {
        let sign = if (0..4).map(|i| q[i] * quaternions[0][i]).sum::<f64>() < 0.0 {
            -1.0
        } else {
            1.0
        };
        for i in 0..4 {
            sum[i] += sign * q[i];
        }
    }
    let mut centre = [0.0; 3];
    for p in poses {
        let c = p.center();
        for a in 0..3 {
            centre[a] += c[a] / poses.len() as f64;
        }
    }
    // The quaternions of rotations are unit and sign-aligned: their sum is far from zero.
    let rotation = Pose::from_quaternion(sum, [0.0; 3]).map_or(poses[0].rotation, |p| p.rotation);
    let translation = std::array::from_fn(|row| {
        -(0..3)
            .map(|k| rotation[3 * row + k] * centre[k])
            .sum::<f64>()
    });
    Pose {
        rotation,
        translation,
    }
}
