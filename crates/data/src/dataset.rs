//! A scene on disk as views (camera + image source) split into train / val / test, with an
//! optional point cloud and the scene extent.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ember_kernels::CameraParams;
use rayon::prelude::*;

use crate::camera::{CameraModel, Distortion, Intrinsics, Pose, camera_params};
use crate::colmap::{ColmapFormat, ColmapModel, find_model_dir};
use crate::equirect::{EquirectRig, PANORAMA_INDEX};
use crate::error::{DataError, Result};
use crate::images::{ImageSource, MaskSource, image_dimensions};
use crate::points::PointCloud;
use crate::transforms_json::{TransformsFile, TransformsFrame};

mod panoramas;

use panoramas::{load_colmap_panoramas, panorama_views, rig_frames, split_by_frame};

/// How a scene is loaded. The defaults follow the 3DGS conventions.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetOptions {
    /// Integer factor the images are shrunk by (1 = full resolution). A COLMAP (or nerfstudio)
    /// scene's `images_N/` folder is used when it exists, else the images are resized on load;
    /// the intrinsics are scaled to match either way.
    pub downsample: u32,
    /// At most this many views per split file (or in total, for a scene split by
    /// [`DatasetOptions::test_every`]), chosen evenly spaced in name order.
    pub max_images: Option<usize>,
    /// Without explicit split files, every `test_every`-th view in name order (starting with the
    /// first) is held out for testing; `None` trains on every view. A scene of a single view
    /// trains on it.
    pub test_every: Option<usize>,
    /// Colour that transparent pixels are composited over, RGB in `[0, 1]` (white for the
    /// NeRF-Synthetic benchmark).
    pub background: [f32; 3],
    /// Undistort images of distorted cameras when decoding (their views are then pinhole);
    /// `false` keeps the images as they are and carries the coefficients in
    /// [`View::distortion`].
    pub undistort: bool,
    /// A PLY point cloud for initialisation, relative to the scene folder; it replaces the
    /// scene's own points (COLMAP `points3D`, or `ply_file_path` of a nerfstudio file).
    pub point_cloud: Option<PathBuf>,
    /// The COLMAP images folder under the scene folder.
    pub images_dir: String,
    /// The longest image side allowed after downsampling, pixels: `downsample` is raised to
    /// the smallest factor that brings every view within it (phone photos of 4000 px train
    /// at a size the machine can afford without a per-scene `downsample`). `None`: no limit.
    pub max_side: Option<u32>,
    /// Use each photo's alpha channel as its mask (transparent pixels take no part in the loss
    /// or the metrics) instead of compositing it over the background; a photo without alpha is
    /// an error. Without it, masks come from a `masks/` folder beside a COLMAP scene's images
    /// (`masks_N/` beside `images_N/`; the mask of `a.jpg` is `a.jpg`, `a.jpg.png` or `a.png`)
    /// or from a nerfstudio frame's `mask_path`.
    pub alpha_as_mask: bool,
    /// The pinhole views each 360° panorama (a nerfstudio `EQUIRECTANGULAR` frame) is cut
    /// into; they share the frame's pose and split, and their size is divided by
    /// `downsample` like a photo's.
    pub equirect: EquirectRig,
    /// A training panorama is one view of the whole panorama ([`CameraModel::Equirectangular`],
    /// its width divided by `downsample`, rounded to even) instead of its rig's views; the
    /// held-out ones are still cut into the rig. `max_side` is measured on the rig's views.
    pub whole_panoramas: bool,
}

impl DatasetOptions {
    /// The options the held-out splits load with: every panorama cut into its rig.
    fn held_out(&self) -> DatasetOptions {
        DatasetOptions {
            whole_panoramas: false,
            ..self.clone()
        }
    }
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            downsample: 1,
            max_images: None,
            test_every: Some(8),
            background: [1.0, 1.0, 1.0],
            undistort: true,
            point_cloud: None,
            images_dir: "images".to_string(),
            max_side: None,
            alpha_as_mask: false,
            equirect: EquirectRig::default(),
            whole_panoramas: false,
        }
    }
}

/// Which loader read the scene.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetFormat {
    /// A COLMAP sparse model in this folder.
    Colmap {
        /// The model folder (`sparse/0`, ...).
        model_dir: PathBuf,
        /// Its encoding.
        format: ColmapFormat,
    },
    /// Per-split `transforms_{train,val,test}.json` files (NeRF-Synthetic layout).
    TransformsSplits,
    /// One `transforms.json` (nerfstudio / instant-ngp layout).
    Transforms {
        /// The file.
        file: PathBuf,
    },
}

impl DatasetFormat {
    /// The layout of the scene folder `path`, from which files it holds, without reading them:
    /// per-split `transforms_*.json` first, then one `transforms.json`, then a COLMAP model (the order
    /// [`Dataset::load`] tries them in); `None` when it is none of these.
    pub fn detect(path: &Path) -> Option<DatasetFormat> {
        if path.join("transforms_train.json").is_file() {
            return Some(DatasetFormat::TransformsSplits);
        }
        let file = path.join("transforms.json");
        if file.is_file() {
            return Some(DatasetFormat::Transforms { file });
        }
        let model_dir = find_model_dir(path)?;
        let format = ColmapFormat::detect(&model_dir)?;
        Some(DatasetFormat::Colmap { model_dir, format })
    }
}

/// One camera and where its image comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The image's name as the dataset spells it (COLMAP name, or transforms `file_path`).
    pub name: String,
    /// World-to-camera pose, OpenCV axes.
    pub pose: Pose,
    /// Pinhole intrinsics of the delivered image (after downsampling); of a whole panorama's,
    /// only the size.
    pub intrinsics: Intrinsics,
    /// Pinhole, or a whole equirectangular panorama ([`DatasetOptions::whole_panoramas`]).
    pub model: CameraModel,
    /// Distortion still present in the delivered image: zero when the camera is pinhole or the
    /// image is undistorted on load ([`DatasetOptions::undistort`]). Ember's projection
    /// (`ember-kernels`) is pinhole only and does not apply it.
    pub distortion: Distortion,
    /// How to produce the image.
    pub source: ImageSource,
}

impl View {
    /// The camera for `ember-kernels`' projection.
    pub fn camera(&self) -> CameraParams {
        camera_params(&self.pose, &self.intrinsics)
    }

    /// Projects a world point to pixel coordinates `(u, v)` and depth, with the kernels'
    /// convention (pixel `(0, 0)` covers `[0, 1) x [0, 1)`); `None` behind the camera.
    pub fn project(&self, point: [f64; 3]) -> Option<([f64; 2], f64)> {
        let [x, y, z] = self.pose.transform_point(point);
        if z <= 0.0 {
            return None;
        }
        let k = &self.intrinsics;
        Some(([k.fx * x / z + k.cx, k.fy * y / z + k.cy], z))
    }
}

/// A loaded scene.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The scene folder.
    pub root: PathBuf,
    /// What was read.
    pub format: DatasetFormat,
    /// Training views, in name order (or file order for per-split files).
    pub train: Vec<View>,
    /// Validation views (NeRF-Synthetic `transforms_val.json`, nerfstudio `val_filenames`).
    pub val: Vec<View>,
    /// Held-out test views.
    pub test: Vec<View>,
    /// Points for initialisation, when the scene has them.
    pub points: Option<PointCloud>,
    /// Mean of the training camera centres, world units.
    pub center: [f64; 3],
    /// The 3DGS "cameras extent": 1.1 times the largest distance of a training camera centre
    /// from [`Dataset::center`], world units (learning rates of positions scale with it).
    pub extent: f64,
    /// Image files in a COLMAP scene's image folder that its model does not register (photos
    /// COLMAP could not place), in name order: not part of any split.
    pub unregistered: Vec<String>,
    /// The factor the images were shrunk by ([`DatasetOptions::downsample`], raised to honour
    /// [`DatasetOptions::max_side`]).
    pub downsample: u32,
}

impl Dataset {
    /// Loads the scene at `path`: a folder with a COLMAP model (`sparse/0`, the largest model
    /// in `sparse/`, `sparse/` or the folder itself; beside a `panoramas.json` of
    /// `trainer data split360`, the panoramas its views were cut from), with
    /// `transforms_train.json`, or with `transforms.json`; or a `transforms*.json` file itself.
    pub fn load(path: &Path, options: &DatasetOptions) -> Result<Dataset> {
        let dataset = Self::load_at(path, options)?;
        let Some(max_side) = options.max_side else {
            return Ok(dataset);
        };
        if max_side == 0 {
            return Err(DataError::InvalidOption(
                "max_side must be at least 1 pixel".to_string(),
            ));
        }
        let longest = dataset
            .all_views()
            .filter(|v| v.model == CameraModel::Pinhole)
            .map(|v| v.intrinsics.width.max(v.intrinsics.height))
            .max()
            .unwrap_or(0);
        if longest <= max_side {
            return Ok(dataset);
        }
        // The views' sizes are already `downsample` times smaller than the files'.
        let native = u64::from(longest) * u64::from(options.downsample);
        let downsample = u32::try_from(native.div_ceil(u64::from(max_side))).unwrap_or(u32::MAX);
        Self::load_at(
            path,
            &DatasetOptions {
                downsample,
                ..options.clone()
            },
        )
    }

    /// [`Dataset::load`] at `options.downsample`, without `max_side`.
    fn load_at(path: &Path, options: &DatasetOptions) -> Result<Dataset> {
        if options.downsample == 0 {
            return Err(DataError::InvalidOption(
                "downsample must be at least 1".to_string(),
            ));
        }
        if let Some(problem) = options.equirect.problem() {
            return Err(DataError::InvalidOption(format!(
                "data.equirect: {problem}"
            )));
        }
        if options.test_every.is_some_and(|n| n < 2) {
            return Err(DataError::InvalidOption(
                "test_every must be at least 2 (None trains on every view)".to_string(),
            ));
        }
        if path.is_file() {
            let root = path.parent().unwrap_or(Path::new(".")).to_path_buf();
            return load_transforms(&root, path, options);
        }
        if !path.is_dir() {
            return Err(DataError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder"),
            ));
        }
        match DatasetFormat::detect(path) {
            Some(DatasetFormat::TransformsSplits) => load_transform_splits(path, options),
            Some(DatasetFormat::Transforms { file }) => load_transforms(path, &file, options),
            Some(DatasetFormat::Colmap { model_dir, .. })
                if path.join(PANORAMA_INDEX).is_file() =>
            {
                load_colmap_panoramas(path, &model_dir, options)
            }
            Some(DatasetFormat::Colmap { model_dir, .. }) => load_colmap(path, &model_dir, options),
            None => Err(DataError::NotADataset {
                path: path.to_path_buf(),
            }),
        }
    }

    /// Every view: train, then val, then test.
    pub fn all_views(&self) -> impl Iterator<Item = &View> {
        self.train.iter().chain(&self.val).chain(&self.test)
    }
}

/// The indices of `max` items evenly spaced over `0..len` (all of them when `max >= len` or
/// there is no `max`): the views a `max_images` or `max_views` keeps.
pub fn evenly_spaced(len: usize, max: Option<usize>) -> Vec<usize> {
    match max {
        Some(max) if max < len => (0..max).map(|i| i * len / max).collect(),
        _ => (0..len).collect(),
    }
}

/// A view's camera before images are looked at.
#[derive(Clone)]
struct PendingView {
    name: String,
    pose: Pose,
    /// Intrinsics at the camera's native resolution, or `None` when the size comes from the file
    /// (transforms.json without `w h`).
    intrinsics: Option<Intrinsics>,
    frame: Option<TransformsFrame>,
    distortion: Distortion,
    path: PathBuf,
    /// Whether `path` is in an `images_N/` folder already shrunk by `downsample`.
    prescaled: bool,
    mask: Option<MaskSource>,
    /// The file is a 360° panorama, cut into [`DatasetOptions::equirect`]'s views.
    panorama: bool,
}

/// Finds `path`, trying image extensions when it has none that exists.
fn find_image(path: &Path) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    for ext in ["png", "jpg", "jpeg", "PNG", "JPG", "JPEG"] {
        let mut name = path.as_os_str().to_owned();
        name.push(".");
        name.push(ext);
        let candidate = PathBuf::from(name);
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

/// Turns pending views into views: checks every image exists (listing all missing ones), reads
/// the image headers in parallel, checks the sizes, and sets up downsampling and undistortion;
/// a panorama becomes the views of [`DatasetOptions::equirect`], in rig order.
fn finish_views(
    pending: Vec<PendingView>,
    described_in: &Path,
    images_dir: &Path,
    options: &DatasetOptions,
) -> Result<Vec<View>> {
    let missing: Vec<String> = pending
        .iter()
        .filter(|p| !p.path.is_file())
        .map(|p| p.name.clone())
        .collect();
    if !missing.is_empty() {
        return Err(DataError::MissingImages {
            dir: images_dir.to_path_buf(),
            names: missing,
        });
    }
    let n = options.downsample;
    let views: Vec<Vec<View>> = pending
        .into_par_iter()
        .map(|p| {
            if p.panorama {
                return panorama_views(p, described_in, options);
            }
            let file_size = image_dimensions(&p.path)?;
            let native = match (&p.intrinsics, &p.frame) {
                (Some(k), _) => *k,
                (None, Some(frame)) => {
                    // The camera's size is the file's, or N times it for an `images_N/` file.
                    let size = if p.prescaled {
                        (file_size.0 * n, file_size.1 * n)
                    } else {
                        file_size
                    };
                    frame.intrinsics(size, described_in)?
                }
                (None, None) => unreachable!("pending views have intrinsics or a frame"),
            };
            let mismatch = |expected: (u32, u32)| DataError::ImageSizeMismatch {
                path: p.path.clone(),
                expected_width: expected.0,
                expected_height: expected.1,
                found_width: file_size.0,
                found_height: file_size.1,
            };
            let (file_intrinsics, size) = if p.prescaled {
                // Tools that write `images_N/` round either way; accept one pixel of slack.
                let expected = (
                    (native.width as f64 / n as f64).round() as u32,
                    (native.height as f64 / n as f64).round() as u32,
                );
                if expected.0.abs_diff(file_size.0) > 1 || expected.1.abs_diff(file_size.1) > 1 {
                    return Err(mismatch(expected));
                }
                (native.resized(file_size.0, file_size.1), file_size)
            } else {
                if (native.width, native.height) != file_size {
                    return Err(mismatch((native.width, native.height)));
                }
                let size = (
                    ((native.width as f64 / n as f64).round() as u32).max(1),
                    ((native.height as f64 / n as f64).round() as u32).max(1),
                );
                (native, size)
            };
            let undistort = options.undistort && !p.distortion.is_none();
            Ok(vec![View {
                name: p.name,
                pose: p.pose,
                intrinsics: file_intrinsics.resized(size.0, size.1),
                model: CameraModel::Pinhole,
                distortion: if undistort {
                    Distortion::default()
                } else {
                    p.distortion
                },
                source: ImageSource {
                    path: p.path,
                    file_size,
                    size,
                    background: options.background,
                    undistort: undistort.then_some((file_intrinsics, p.distortion)),
                    mask: p.mask,
                    panorama_view: None,
                },
            }])
        })
        .collect::<Result<_>>()?;
    Ok(views.into_iter().flatten().collect())
}

/// Splits views (or frames) sorted by name into (train, test) by `test_every`; a single one is
/// kept for training rather than held out.
fn split_every<T>(views: Vec<T>, test_every: Option<usize>) -> (Vec<T>, Vec<T>) {
    if views.len() < 2 {
        return (views, Vec::new());
    }
    let mut train = Vec::new();
    let mut test = Vec::new();
    for (i, view) in views.into_iter().enumerate() {
        match test_every {
            Some(k) if i % k == 0 => test.push(view),
            _ => train.push(view),
        }
    }
    (train, test)
}

/// Mean of the camera centres and 1.1 times the largest distance from it.
fn camera_extent(views: &[View]) -> ([f64; 3], f64) {
    if views.is_empty() {
        return ([0.0; 3], 0.0);
    }
    let centers: Vec<[f64; 3]> = views.iter().map(|v| v.pose.center()).collect();
    let mut mean = [0.0; 3];
    for c in &centers {
        for k in 0..3 {
            mean[k] += c[k] / centers.len() as f64;
        }
    }
    let radius = centers
        .iter()
        .map(|c| (0..3).map(|k| (c[k] - mean[k]).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    (mean, 1.1 * radius)
}

fn assemble(
    root: &Path,
    format: DatasetFormat,
    [train, val, test]: [Vec<View>; 3],
    points: Option<PointCloud>,
    options: &DatasetOptions,
) -> Result<Dataset> {
    if train.is_empty() {
        return Err(DataError::EmptySplit {
            path: root.to_path_buf(),
            split: "train",
        });
    }
    let points = match &options.point_cloud {
        Some(ply) => Some(PointCloud::read_ply(&root.join(ply))?),
        None => points,
    };
    let (center, extent) = camera_extent(&train);
    Ok(Dataset {
        root: root.to_path_buf(),
        format,
        train,
        val,
        test,
        points,
        center,
        extent,
        unregistered: Vec::new(),
        downsample: options.downsample,
    })
}

/// The COLMAP model in `model_dir` and the format it is written in.
fn read_colmap_model(model_dir: &Path) -> Result<(ColmapFormat, ColmapModel)> {
    let format = ColmapFormat::detect(model_dir).ok_or_else(|| DataError::NotADataset {
        path: model_dir.to_path_buf(),
    })?;
    Ok((format, ColmapModel::read_format(model_dir, format)?))
}

/// A COLMAP scene's dataset from its split `views` (train, val, test), with the model's 3D
/// points when it has any.
fn colmap_dataset(
    root: &Path,
    model_dir: &Path,
    format: ColmapFormat,
    model: &ColmapModel,
    views: [Vec<View>; 3],
    options: &DatasetOptions,
) -> Result<Dataset> {
    let points = (!model.points3d.is_empty()).then(|| PointCloud::from_colmap(&model.points3d));
    assemble(
        root,
        DatasetFormat::Colmap {
            model_dir: model_dir.to_path_buf(),
            format,
        },
        views,
        points,
        options,
    )
}

fn load_colmap(root: &Path, model_dir: &Path, options: &DatasetOptions) -> Result<Dataset> {
    let (format, model) = read_colmap_model(model_dir)?;
    let cameras_path = format.file(model_dir, "cameras");
    let images_path = format.file(model_dir, "images");
    let n = options.downsample;
    let prescaled_dir = root.join(format!("{}_{n}", options.images_dir));
    let prescaled = n > 1 && prescaled_dir.is_dir();
    let images_dir = if prescaled {
        prescaled_dir
    } else {
        root.join(&options.images_dir)
    };
    let masks_dir = [
        prescaled.then(|| root.join(format!("masks_{n}"))),
        Some(root.join("masks")),
    ]
    .into_iter()
    .flatten()
    .find(|dir| dir.is_dir());
    if options.alpha_as_mask
        && let Some(dir) = &masks_dir
    {
        return Err(DataError::InvalidOption(format!(
            "alpha_as_mask is set but {} holds masks too: use one or the other",
            dir.display()
        )));
    }
    let mut images: Vec<_> = model.images.iter().collect();
    images.sort_by(|a, b| a.name.cmp(&b.name));
    let mut pending = Vec::new();
    for index in evenly_spaced(images.len(), options.max_images) {
        let image = images[index];
        let camera =
            model
                .cameras
                .get(&image.camera_id)
                .ok_or_else(|| DataError::MissingCamera {
                    path: images_path.clone(),
                    image: image.name.clone(),
                    camera_id: image.camera_id as u64,
                })?;
        let (intrinsics, distortion) = camera.intrinsics(&cameras_path)?;
        let path = images_dir.join(&image.name);
        let mask = match &masks_dir {
            _ if options.alpha_as_mask => Some(MaskSource::Alpha),
            Some(dir) => Some(MaskSource::File(find_mask(dir, &image.name, &path)?)),
            None => None,
        };
        pending.push(PendingView {
            name: image.name.clone(),
            pose: image.pose(&images_path)?,
            intrinsics: Some(intrinsics),
            frame: None,
            distortion,
            path,
            prescaled,
            mask,
            panorama: false,
        });
    }
    let views = finish_views(pending, &images_path, &images_dir, options)?;
    let (train, test) = match rig_frames(&views) {
        Some(frames) => split_by_frame(views, &frames, options.test_every),
        None => split_every(views, options.test_every),
    };
    let mut dataset = colmap_dataset(
        root,
        model_dir,
        format,
        &model,
        [train, Vec::new(), test],
        options,
    )?;
    dataset.unregistered = unregistered_images(&images_dir, &model)?;
    Ok(dataset)
}

/// The mask of photo `name` (at `photo`) in `dir`: `name` itself, `name.png` (COLMAP's own
/// convention) or `name` with its extension replaced by `png`.
fn find_mask(dir: &Path, name: &str, photo: &Path) -> Result<PathBuf> {
    let same = dir.join(name);
    let candidates = [
        same.clone(),
        dir.join(format!("{name}.png")),
        same.with_extension("png"),
    ];
    candidates
        .iter()
        .find(|c| c.is_file())
        .cloned()
        .ok_or_else(|| DataError::MissingMask {
            photo: photo.to_path_buf(),
            problem: format!(
                "{} has masks but none for this photo (looked for {})",
                dir.display(),
                candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// The image files (by extension, case-insensitive) in `images_dir` that no image of `model`
/// names, in name order.
fn unregistered_images(images_dir: &Path, model: &ColmapModel) -> Result<Vec<String>> {
    let registered: std::collections::HashSet<&str> = model
        .images
        .iter()
        .map(|image| image.name.as_str())
        .collect();
    let entries = std::fs::read_dir(images_dir).map_err(|e| DataError::io(images_dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| DataError::io(images_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_image = Path::new(&name)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| {
                ["jpg", "jpeg", "png"]
                    .iter()
                    .any(|known| e.eq_ignore_ascii_case(known))
            });
        if is_image && !registered.contains(name.as_str()) && entry.path().is_file() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// The views of `frames` of one transforms file. `masked` is a frame with a `mask_path` among
/// others of the file than `frames` (a split's other part): if any frame has a mask, every
/// one of `frames` needs one.
fn transforms_views(
    file: &TransformsFile,
    frames: Vec<&TransformsFrame>,
    masked: Option<&TransformsFrame>,
    options: &DatasetOptions,
) -> Result<Vec<View>> {
    let dir = file.path.parent().unwrap_or(Path::new("."));
    let n = options.downsample;
    let mut pending = Vec::with_capacity(frames.len());
    let mut missing = Vec::new();
    let masked = masked.or_else(|| frames.iter().find(|f| f.mask_path.is_some()).copied());
    if options.alpha_as_mask
        && let Some(frame) = masked
    {
        return Err(DataError::InvalidOption(format!(
            "alpha_as_mask is set but {} gives frame `{}` a mask_path: use one or the other",
            file.path.display(),
            frame.file_path
        )));
    }
    for frame in frames {
        let written = dir.join(&frame.file_path);
        // nerfstudio writes `images_N/` beside `images/` with the same file names.
        let prescaled_path = (n > 1)
            .then(|| {
                let relative = Path::new(&frame.file_path);
                let mut parts = relative.components();
                let first = parts.next()?.as_os_str().to_str()?;
                (first == "images").then(|| dir.join(format!("images_{n}")).join(parts.as_path()))
            })
            .flatten()
            .and_then(|p| find_image(&p));
        let (path, prescaled) = match prescaled_path {
            Some(p) => (p, true),
            None => match find_image(&written) {
                Some(p) => (p, false),
                None => {
                    missing.push(frame.file_path.clone());
                    continue;
                }
            },
        };
        let intrinsics = match frame.declared_size(&file.path)? {
            // A panorama's views are made from its file's size (`panorama_views`).
            Some(size) if !frame.equirect => Some(frame.intrinsics(size, &file.path)?),
            _ => None,
        };
        let mask = match (&frame.mask_path, masked) {
            _ if options.alpha_as_mask => Some(MaskSource::Alpha),
            (Some(mask_path), _) => {
                let mask = dir.join(mask_path);
                if !mask.is_file() {
                    return Err(DataError::MissingMask {
                        photo: path,
                        problem: format!(
                            "its mask_path in {} names {}, which is not a file",
                            file.path.display(),
                            mask.display()
                        ),
                    });
                }
                Some(MaskSource::File(mask))
            }
            (None, Some(other)) => {
                return Err(DataError::MissingMask {
                    photo: path,
                    problem: format!(
                        "{} gives frame `{}` a mask_path but not this one",
                        file.path.display(),
                        other.file_path
                    ),
                });
            }
            (None, None) => None,
        };
        pending.push(PendingView {
            name: frame.file_path.clone(),
            pose: frame.pose,
            intrinsics,
            frame: Some(frame.clone()),
            distortion: frame.distortion,
            path,
            prescaled,
            mask,
            panorama: frame.equirect,
        });
    }
    if !missing.is_empty() {
        return Err(DataError::MissingImages {
            dir: dir.to_path_buf(),
            names: missing,
        });
    }
    finish_views(pending, &file.path, dir, options)
}

fn load_transform_splits(root: &Path, options: &DatasetOptions) -> Result<Dataset> {
    let mut splits: [Vec<View>; 3] = Default::default();
    let mut points = None;
    let held_out = options.held_out();
    for (slot, split) in splits.iter_mut().zip(["train", "val", "test"]) {
        let path = root.join(format!("transforms_{split}.json"));
        if split != "train" && !path.is_file() {
            continue;
        }
        let file = TransformsFile::read(&path)?;
        let frames: Vec<&TransformsFrame> = evenly_spaced(file.frames.len(), options.max_images)
            .into_iter()
            .map(|i| &file.frames[i])
            .collect();
        let options = if split == "train" { options } else { &held_out };
        *slot = transforms_views(&file, frames, None, options)?;
        if split == "train"
            && let Some(ply) = &file.ply_file_path
        {
            points = Some(PointCloud::read_ply(&root.join(ply))?);
        }
    }
    assemble(
        root,
        DatasetFormat::TransformsSplits,
        splits,
        points,
        options,
    )
}

fn load_transforms(root: &Path, path: &Path, options: &DatasetOptions) -> Result<Dataset> {
    let file = TransformsFile::read(path)?;
    let mut frames: Vec<&TransformsFrame> = file.frames.iter().collect();
    frames.sort_by(|a, b| a.file_path.cmp(&b.file_path));
    let frames: Vec<&TransformsFrame> = evenly_spaced(frames.len(), options.max_images)
        .into_iter()
        .map(|i| frames[i])
        .collect();
    let splits = match &file.split_filenames {
        Some(lists) => {
            // nerfstudio lists paths as written in `file_path`; match them with or without a
            // leading `./`.
            let clean = |s: &str| s.trim_start_matches("./").to_string();
            let sets: Vec<HashSet<String>> = lists
                .iter()
                .map(|l| l.iter().map(|s| clean(s)).collect())
                .collect();
            let mut out: [Vec<View>; 3] = Default::default();
            let held_out = options.held_out();
            for (split, (slot, set)) in out.iter_mut().zip(&sets).enumerate() {
                let chosen: Vec<&TransformsFrame> = frames
                    .iter()
                    .copied()
                    .filter(|f| set.contains(&clean(&f.file_path)))
                    .collect();
                let options = if split == 0 { options } else { &held_out };
                *slot = transforms_views(&file, chosen, None, options)?;
            }
            out
        }
        None => {
            // Split by frame, so that every view cut from a held-out panorama is held out; a
            // frame with a mask makes every frame of either split need one.
            let masked = frames.iter().find(|f| f.mask_path.is_some()).copied();
            let (train, test) = split_every(frames, options.test_every);
            [
                transforms_views(&file, train, masked, options)?,
                Vec::new(),
                transforms_views(&file, test, masked, &options.held_out())?,
            ]
        }
    };
    let points = match &file.ply_file_path {
        Some(ply) => Some(PointCloud::read_ply(&root.join(ply))?),
        None => None,
    };
    assemble(
        root,
        DatasetFormat::Transforms {
            file: path.to_path_buf(),
        },
        splits,
        points,
        options,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evenly_spaced_picks_spread_indices() {
        assert_eq!(evenly_spaced(10, Some(3)), vec![0, 3, 6]);
        assert_eq!(evenly_spaced(4, Some(10)), vec![0, 1, 2, 3]);
        assert_eq!(evenly_spaced(4, None), vec![0, 1, 2, 3]);
        assert!(evenly_spaced(4, Some(0)).is_empty());
    }

    #[test]
    fn the_layout_is_detected_in_the_order_load_tries() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(DatasetFormat::detect(dir.path()), None);
        let model = dir.path().join("sparse").join("0");
        std::fs::create_dir_all(&model).unwrap();
        for file in ["cameras.txt", "images.txt"] {
            std::fs::write(model.join(file), "").unwrap();
        }
        assert_eq!(
            DatasetFormat::detect(dir.path()),
            Some(DatasetFormat::Colmap {
                model_dir: model,
                format: ColmapFormat::Text
            })
        );
        let file = dir.path().join("transforms.json");
        std::fs::write(&file, "{}").unwrap();
        assert_eq!(
            DatasetFormat::detect(dir.path()),
            Some(DatasetFormat::Transforms { file })
        );
        std::fs::write(dir.path().join("transforms_train.json"), "{}").unwrap();
        assert_eq!(
            DatasetFormat::detect(dir.path()),
            Some(DatasetFormat::TransformsSplits)
        );
    }

    #[test]
    fn bad_options_are_refused() {
        // An empty folder of its own: a shared one (the crate's) may meanwhile hold what
        // another test wrote, and once made this test fail in CI.
        let empty = tempfile::tempdir().unwrap();
        let here = empty.path();
        let zero = DatasetOptions {
            downsample: 0,
            ..DatasetOptions::default()
        };
        assert!(matches!(
            Dataset::load(here, &zero),
            Err(DataError::InvalidOption(_))
        ));
        assert!(matches!(
            Dataset::load(here, &DatasetOptions::default()),
            Err(DataError::NotADataset { .. })
        ));
    }
}
