//! [`TrainScene`]: the views a run trains and evaluates on, from a dataset on disk or from the
//! built-in procedural scene.

use std::path::Path;
use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember_data::{
    CameraModel, Dataset, DatasetOptions, DecodedImage, ImageLoader, LoaderOptions, View,
};
use ember_field::{Camera, GaussianField, RenderOptions, SplatBackend, render};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::config::{DataConfig, EvalSplit, ProceduralConfig};
use crate::error::TrainError;
use ember_field::to_host;

/// A camera and the name of its image.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneView {
    /// The image's name (file name, or `procedural_NNN`).
    pub name: String,
    /// The camera, OpenCV axes, world to camera: a pinhole's, or a whole panorama's (the
    /// training views when [`TrainScene::panoramas`]).
    pub camera: Camera,
}

/// Where the images of a split come from.
#[derive(Clone)]
enum Images {
    /// Decoded from files on demand, cached by `ember-data`'s loader (shared when the
    /// evaluation measures the training views).
    Files(Arc<ImageLoader>),
    /// Held in memory (the procedural scene).
    Memory(Vec<Arc<DecodedImage>>),
}

impl Images {
    fn get(&self, index: usize) -> Result<Arc<DecodedImage>, TrainError> {
        match self {
            Images::Files(loader) => loader
                .get(index)
                .ok_or_else(|| TrainError::Scene(format!("no image {index}")))?
                .map_err(TrainError::from),
            Images::Memory(images) => images
                .get(index)
                .cloned()
                .ok_or_else(|| TrainError::Scene(format!("no image {index}"))),
        }
    }
}

/// A training scene: train and held-out views with their images, initialisation points and the
/// scene's scale.
pub struct TrainScene {
    /// What the scene is (the dataset folder, or `procedural`).
    pub name: String,
    /// Training views.
    pub train: Vec<SceneView>,
    /// The views evaluation measures: `data.eval_split` (by default the dataset's test split,
    /// else its val split).
    pub eval: Vec<SceneView>,
    /// Points for initialisation, `[M, 3]` flattened, with linear RGB colours `[M, 3]` in `[0, 1]`.
    pub points: Option<(Vec<f32>, Vec<f32>)>,
    /// Mean of the training camera centres, world units.
    pub center: [f64; 3],
    /// The 3DGS cameras extent (1.1 x the largest camera distance from `center`).
    pub extent: f64,
    /// Background colour, RGB.
    pub background: [f32; 3],
    /// What the user should know about how the scene was read (photos left out, a raised
    /// downsample factor), one line each.
    pub notes: Vec<String>,
    /// The training views are whole equirectangular panoramas (`data.whole_panoramas`): a step
    /// draws them onto the sphere, not through a pinhole.
    pub panoramas: bool,
    train_images: Images,
    eval_images: Images,
}

impl std::fmt::Debug for TrainScene {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainScene")
            .field("name", &self.name)
            .field("train", &self.train.len())
            .field("eval", &self.eval.len())
            .field("points", &self.points.as_ref().map(|p| p.0.len() / 3))
            .field("extent", &self.extent)
            .finish()
    }
}

impl TrainScene {
    /// The scene `config` names: the dataset at `config.path`, else the procedural scene.
    /// Every image is decoded up front (in parallel) so that training never waits on a file.
    /// The procedural scene's images are rendered on backend `B` (use the training device's).
    pub fn load<B: SplatBackend>(
        config: &DataConfig,
        seed: u64,
        device: &B::Device,
    ) -> Result<TrainScene, TrainError> {
        match &config.path {
            Some(path) => Self::from_dataset(path, config),
            None => {
                let mut scene =
                    procedural::<B>(&config.procedural, config.background, seed, device)?;
                if config.alpha_as_mask {
                    scene.mask_by_alpha()?;
                }
                match config.eval_split {
                    EvalSplit::Test => {}
                    EvalSplit::Val => {
                        return Err(TrainError::Scene(
                            "the procedural scene has no val split (data.eval_split = \"val\"): \
                             evaluate on \"test\" or \"train\""
                                .to_string(),
                        ));
                    }
                    EvalSplit::Train => {
                        scene.eval = scene.train.clone();
                        scene.eval_images = scene.train_images.clone();
                    }
                }
                Ok(scene)
            }
        }
    }

    /// Gives every photo held in memory its alpha as its mask (`data.alpha_as_mask` for the
    /// procedural scene; photos from files get theirs when decoded); a fully transparent photo
    /// is an error naming it.
    fn mask_by_alpha(&mut self) -> Result<(), TrainError> {
        for (views, images) in [
            (&self.train, &mut self.train_images),
            (&self.eval, &mut self.eval_images),
        ] {
            let Images::Memory(images) = images else {
                continue;
            };
            for (view, image) in views.iter().zip(images.iter_mut()) {
                let mask: Vec<u8> = match &image.transparency {
                    Some(t) => t.iter().map(|&t| 255 - t).collect(),
                    None => Vec::new(),
                };
                if !mask.iter().any(|&m| m > 0) {
                    return Err(TrainError::Scene(format!(
                        "{}: data.alpha_as_mask, but its alpha hides every pixel",
                        view.name
                    )));
                }
                *image = Arc::new(DecodedImage {
                    mask: Some(mask),
                    ..(**image).clone()
                });
            }
        }
        Ok(())
    }

    /// A dataset on disk.
    pub fn from_dataset(path: &Path, config: &DataConfig) -> Result<TrainScene, TrainError> {
        let options = DatasetOptions {
            downsample: config.downsample,
            max_side: config.max_side,
            max_images: config.max_images,
            test_every: config.test_every,
            background: config.background,
            point_cloud: config.point_cloud.clone(),
            alpha_as_mask: config.alpha_as_mask,
            equirect: config.equirect.clone(),
            whole_panoramas: config.whole_panoramas,
            ..DatasetOptions::default()
        };
        let dataset = Dataset::load(path, &options)?;
        let eval_views = match config.eval_split {
            EvalSplit::Test if !dataset.test.is_empty() => &dataset.test,
            EvalSplit::Test => &dataset.val,
            EvalSplit::Val if dataset.val.is_empty() => {
                return Err(TrainError::Scene(format!(
                    "{} has no val split (data.eval_split = \"val\"; a capture split by \
                     test_every has only train and test views)",
                    path.display()
                )));
            }
            EvalSplit::Val => &dataset.val,
            EvalSplit::Train => &dataset.train,
        };
        if dataset.train.is_empty() {
            return Err(TrainError::Scene(format!(
                "{} has no training views",
                path.display()
            )));
        }
        let loader = |views: &[View]| -> Result<Arc<ImageLoader>, TrainError> {
            let loader = ImageLoader::new(
                views.iter().map(|v| v.source.clone()).collect(),
                LoaderOptions {
                    shuffle: false,
                    ..LoaderOptions::default()
                },
            )?;
            loader.preload()?;
            Ok(Arc::new(loader))
        };
        let to_scene = |views: &[View]| -> Vec<SceneView> {
            views
                .iter()
                .map(|v| SceneView {
                    name: v.name.clone(),
                    camera: v.camera(),
                })
                .collect()
        };
        let points = dataset.points.as_ref().filter(|p| !p.is_empty()).map(|p| {
            let xyz: Vec<f32> = p.positions.iter().flatten().copied().collect();
            let rgb: Vec<f32> = match &p.colors {
                Some(c) => c.iter().flatten().map(|&v| f32::from(v) / 255.0).collect(),
                None => vec![0.5; xyz.len()],
            };
            (xyz, rgb)
        });
        let mut notes = Vec::new();
        if dataset.downsample != config.downsample {
            notes.push(format!(
                "images downsampled {}x (not {}x) so that no side exceeds max_side = {} px",
                dataset.downsample,
                config.downsample,
                config.max_side.unwrap_or_default()
            ));
        }
        if !dataset.unregistered.is_empty() {
            const SHOWN: usize = 10;
            let mut names =
                dataset.unregistered[..dataset.unregistered.len().min(SHOWN)].join(", ");
            if dataset.unregistered.len() > SHOWN {
                names.push_str(&format!(" and {} more", dataset.unregistered.len() - SHOWN));
            }
            notes.push(format!(
                "warning: {} photo(s) in the image folder are not registered in the COLMAP model and are \
                 skipped: {names}",
                dataset.unregistered.len()
            ));
        }
        let train_images = Images::Files(loader(&dataset.train)?);
        Ok(TrainScene {
            name: path.display().to_string(),
            train: to_scene(&dataset.train),
            eval: to_scene(eval_views),
            points,
            center: dataset.center,
            extent: dataset.extent,
            background: config.background,
            notes,
            panoramas: dataset
                .train
                .iter()
                .all(|v| v.model == CameraModel::Equirectangular),
            train_images: train_images.clone(),
            eval_images: if config.eval_split == EvalSplit::Train {
                train_images
            } else {
                Images::Files(loader(eval_views)?)
            },
        })
    }

    /// Training image `index` (`[H, W, 3]` `u8`).
    pub fn train_image(&self, index: usize) -> Result<Arc<DecodedImage>, TrainError> {
        self.train_images.get(index)
    }

    /// Held-out image `index`.
    pub fn eval_image(&self, index: usize) -> Result<Arc<DecodedImage>, TrainError> {
        self.eval_images.get(index)
    }

    /// The region the scene's training cameras and initialisation points span: the cameras'
    /// mean centre ([`TrainScene::center`]) and the largest distance of a camera centre or a
    /// point from it, world units.
    pub fn region(&self) -> ([f64; 3], f64) {
        let center = self.center;
        let distance = |p: [f64; 3]| {
            ((p[0] - center[0]).powi(2) + (p[1] - center[1]).powi(2) + (p[2] - center[2]).powi(2))
                .sqrt()
        };
        let cameras = self.train.iter().map(|v| distance(v.camera.center()));
        let points = self.points.iter().flat_map(|(xyz, _)| {
            xyz.chunks_exact(3)
                .map(|p| distance([p[0], p[1], p[2]].map(f64::from)))
        });
        let radius = cameras
            .chain(points)
            .filter(|d| d.is_finite())
            .fold(0.0, f64::max);
        (center, radius)
    }

    /// The axis-aligned bounds of the initialisation points, as `(centre, half size)`; without
    /// points, a cube of half size `extent` around the point the training cameras look at
    /// ([`cameras_focus`]; the mean camera centre lies off the object for cameras that surround
    /// it from one side, e.g. NeRF-Synthetic's upper hemisphere).
    pub fn bounds(&self) -> ([f32; 3], f32) {
        if let Some((xyz, _)) = &self.points {
            let mut lo = [f32::INFINITY; 3];
            let mut hi = [f32::NEG_INFINITY; 3];
            for p in xyz.chunks_exact(3) {
                for a in 0..3 {
                    lo[a] = lo[a].min(p[a]);
                    hi[a] = hi[a].max(p[a]);
                }
            }
            let centre = core::array::from_fn(|a| 0.5 * (lo[a] + hi[a]));
            let half = (0..3).map(|a| 0.5 * (hi[a] - lo[a])).fold(0.0f32, f32::max);
            return (centre, half.max(1e-3));
        }
        let cameras: Vec<Camera> = self.train.iter().map(|v| v.camera).collect();
        let focus = cameras_focus(&cameras).unwrap_or(self.center);
        (focus.map(|c| c as f32), self.extent as f32)
    }
}

impl TrainScene {
    /// `count` points uniform in the cube `(centre, half)` among those at least `fraction` of
    /// the training cameras see (in front of the camera, inside its image), each coloured by
    /// the mean of its pixel in up to 8 of those photos; `[count, 3]` positions and linear RGB
    /// in `[0, 1]`, flattened. Candidates are drawn until `count` are kept or 64 `count` were
    /// tried, so a volume that no camera sees yields fewer points (an error when none).
    pub fn view_volume_points(
        &self,
        count: usize,
        (centre, half): ([f32; 3], f32),
        fraction: f64,
        rng: &mut impl rand::Rng,
    ) -> Result<(Vec<f32>, Vec<f32>), TrainError> {
        if self.panoramas {
            return Err(TrainError::Scene(format!(
                "{}: the view volume is what the pinhole training cameras see, and these are \
                 whole panoramas: start from the scene's points or at random (`init.mode`)",
                self.name
            )));
        }
        let cameras: Vec<Camera> = self.train.iter().map(|v| v.camera).collect();
        let needed = ((fraction * cameras.len() as f64).ceil() as usize).max(1);
        let poses: Vec<ember_data::Pose> = cameras
            .iter()
            .map(|cam| ember_data::Pose {
                rotation: cam.rotation,
                translation: cam.translation,
            })
            .collect();
        let images = (0..cameras.len())
            .map(|i| self.train_image(i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut xyz = Vec::with_capacity(3 * count);
        let mut rgb = Vec::with_capacity(3 * count);
        let mut seen = Vec::with_capacity(cameras.len());
        let mut tries = 0usize;
        while xyz.len() < 3 * count && tries < 64 * count {
            tries += 1;
            let p: [f64; 3] = core::array::from_fn(|a| {
                f64::from(centre[a] + half * (2.0 * rng.random::<f32>() - 1.0))
            });
            seen.clear();
            for (i, (cam, pose)) in cameras.iter().zip(&poses).enumerate() {
                let c = pose.transform_point(p);
                if c[2] <= 1e-6 {
                    continue;
                }
                let u = cam.fx * c[0] / c[2] + cam.cx;
                let v = cam.fy * c[1] / c[2] + cam.cy;
                if u >= 0.0 && v >= 0.0 && u < f64::from(cam.width) && v < f64::from(cam.height) {
                    seen.push((i, u as usize, v as usize));
                }
            }
            if seen.len() < needed {
                continue;
            }
            let mut colour = [0.0f32; 3];
            let step = seen.len().div_ceil(8);
            let samples = seen.iter().step_by(step);
            let n = samples.clone().count() as f32;
            for &(i, u, v) in samples {
                let image = &images[i];
                let at = 3 * (v * image.width as usize + u);
                for (c, value) in colour.iter_mut().zip(&image.data[at..at + 3]) {
                    *c += f32::from(*value) / 255.0 / n;
                }
            }
            xyz.extend(p.map(|v| v as f32));
            rgb.extend(colour);
        }
        if xyz.is_empty() {
            return Err(TrainError::Scene(format!(
                "no point of the initialisation box (centre {centre:?}, half side {half}) is seen \
                 by {needed} of the {} training cameras: lower init.view_fraction or use \
                 init.mode = \"random\"",
                cameras.len()
            )));
        }
        Ok((xyz, rgb))
    }
}

/// The point closest (least squares) to every camera's optical axis: where a set of cameras
/// looks. `None` when the axes are (nearly) parallel.
pub fn cameras_focus(cameras: &[Camera]) -> Option<[f64; 3]> {
    let mut a = [[0.0f64; 3]; 3];
    let mut b = [0.0f64; 3];
    for cam in cameras {
        let (r, t) = (&cam.rotation, &cam.translation);
        let centre: [f64; 3] =
            core::array::from_fn(|k| -(r[k] * t[0] + r[3 + k] * t[1] + r[6 + k] * t[2]));
        // The optical axis in world coordinates is the third row of R.
        let d = [r[6], r[7], r[8]];
        for i in 0..3 {
            for j in 0..3 {
                let m = f64::from(u8::from(i == j)) - d[i] * d[j];
                a[i][j] += m;
                b[i] += m * centre[j];
            }
        }
    }
    // Cramer's rule on the 3x3 system a p = b.
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&a);
    let scale = a.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    if d.is_nan() || d.abs() <= 1e-9 * scale.powi(3) {
        return None;
    }
    let solved: [f64; 3] = core::array::from_fn(|k| {
        let mut m = a;
        for row in 0..3 {
            m[row][k] = b[row];
        }
        det(&m) / d
    });
    solved.iter().all(|v| v.is_finite()).then_some(solved)
}

/// The 3DGS cameras extent of a set of cameras: `(centre, 1.1 x largest distance)`.
pub fn cameras_extent(cameras: &[Camera]) -> ([f64; 3], f64) {
    let centres: Vec<[f64; 3]> = cameras
        .iter()
        .map(|c| {
            let (r, t) = (&c.rotation, &c.translation);
            // centre = -R^T t
            core::array::from_fn(|a| -(r[a] * t[0] + r[3 + a] * t[1] + r[6 + a] * t[2]))
        })
        .collect();
    let n = centres.len().max(1) as f64;
    let centre: [f64; 3] = core::array::from_fn(|a| centres.iter().map(|c| c[a]).sum::<f64>() / n);
    let radius = centres
        .iter()
        .map(|c| {
            (0..3)
                .map(|a| (c[a] - centre[a]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .fold(0.0, f64::max);
    (centre, 1.1 * radius.max(1e-6))
}

/// A camera at `eye` looking at `target` (OpenCV axes, world `+z` up), square image of `size`
/// pixels with a 50 degree field of view.
pub fn look_at(eye: [f64; 3], target: [f64; 3], size: u32) -> Camera {
    let mut camera = look_at_origin(std::array::from_fn(|k| eye[k] - target[k]), size);
    // The world shifted so that `target` is the origin: `t' = t - R target`.
    for (r, t) in camera.translation.iter_mut().enumerate() {
        *t -= (0..3)
            .map(|c| camera.rotation[3 * r + c] * target[c])
            .sum::<f64>();
    }
    camera
}

/// A camera at `eye` looking at the origin (OpenCV axes, world `+z` up), square image of
/// `size` pixels with a 50 degree field of view.
pub fn look_at_origin(eye: [f64; 3], size: u32) -> Camera {
    let norm = |v: [f64; 3]| {
        let l = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        v.map(|x| x / l)
    };
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let forward = norm(eye.map(|x| -x));
    let right = norm(cross(forward, [0.0, 0.0, 1.0]));
    let down = cross(forward, right);
    // Rows of R are the camera axes in world coordinates; t = -R eye.
    let rotation = [
        right[0], right[1], right[2], down[0], down[1], down[2], forward[0], forward[1], forward[2],
    ];
    let translation: [f64; 3] =
        core::array::from_fn(|r| -(0..3).map(|c| rotation[3 * r + c] * eye[c]).sum::<f64>());
    let focal = 0.5 * f64::from(size) / (25.0f64.to_radians()).tan();
    Camera {
        rotation,
        translation,
        fx: focal,
        fy: focal,
        cx: 0.5 * f64::from(size),
        cy: 0.5 * f64::from(size),
        width: size,
        height: size,
    }
}

/// The hidden field of the procedural scene: a coloured torus around a striped ball, sitting on
/// a checkered floor, `n` Gaussians in total, all inside the unit cube.
pub fn procedural_field<B: Backend>(
    n: usize,
    seed: u64,
    device: &B::Device,
) -> Result<GaussianField<B>, TrainError> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x05ee_d0f5_ce7e);
    let (mut means, mut colours, mut scales) = (Vec::new(), Vec::new(), Vec::new());
    let tau = std::f32::consts::TAU;
    for i in 0..n {
        let (u, v) = (rng.random::<f32>(), rng.random::<f32>());
        let (p, c, s) = match i % 3 {
            0 => {
                // Torus of radius 0.55 and tube 0.12; hue around the ring.
                let (a, b) = (u * tau, v * tau);
                let r = 0.55 + 0.12 * b.cos();
                let p = [r * a.cos(), r * a.sin(), 0.12 * b.sin()];
                let c = [
                    0.5 + 0.5 * a.cos(),
                    0.5 + 0.5 * (a + tau / 3.0).cos(),
                    0.5 + 0.5 * (a + 2.0 * tau / 3.0).cos(),
                ];
                (p, c, 0.035)
            }
            1 => {
                // Ball of radius 0.3 with horizontal stripes.
                let z = 2.0 * u - 1.0;
                let r = (1.0 - z * z).max(0.0).sqrt();
                let p = [
                    0.3 * r * (v * tau).cos(),
                    0.3 * r * (v * tau).sin(),
                    0.3 * z,
                ];
                let stripe = ((z * 4.0).floor() as i32).rem_euclid(2) == 0;
                let c = if stripe {
                    [0.95, 0.9, 0.2]
                } else {
                    [0.15, 0.3, 0.85]
                };
                (p, c, 0.03)
            }
            _ => {
                // Checkered floor below the shapes.
                let p = [1.6 * u - 0.8, 1.6 * v - 0.8, -0.45];
                let check = ((u * 8.0).floor() as i32 + (v * 8.0).floor() as i32) % 2 == 0;
                let c = if check {
                    [0.85, 0.85, 0.8]
                } else {
                    [0.25, 0.2, 0.2]
                };
                (p, c, 0.045)
            }
        };
        means.extend(p);
        colours.extend(c);
        scales.push(s);
    }
    let config = ember_field::GaussianFieldConfig::new()
        .with_opacity(0.9)
        .with_seed(seed);
    let field = GaussianField::<B>::from_points(&config, &means, &colours, device)?;
    let log_scales: Vec<f32> = scales.iter().flat_map(|s: &f32| [s.ln(); 3]).collect();
    let log_scales = Tensor::from_data(burn::tensor::TensorData::new(log_scales, [n, 3]), device);
    Ok(GaussianField::from_tensors(
        field.means.val(),
        field.quats.val(),
        log_scales,
        field.opacity_logits.val(),
        field.sh_dc.val(),
        field.sh_rest.val(),
        None,
    )?)
}

/// The built-in scene: [`procedural_field`] rendered on backend `B` from cameras spread over a
/// sphere of radius 2.6 (training views on a Fibonacci spiral over the upper part, held-out
/// views on a ring between them), with noisy samples of its centres as initialisation points.
pub fn procedural<B: SplatBackend>(
    config: &ProceduralConfig,
    background: [f32; 3],
    seed: u64,
    device: &B::Device,
) -> Result<TrainScene, TrainError> {
    let field = procedural_field::<B>(config.gaussians, seed, device)?;
    let golden = std::f64::consts::PI * (3.0 - 5.0f64.sqrt());
    let radius = 2.6;
    let train_eyes: Vec<[f64; 3]> = (0..config.train_views)
        .map(|i| {
            // z from 0.95 down to -0.2 of the radius: above and around, a little below.
            let z = 0.95 - 1.15 * (i as f64 + 0.5) / config.train_views as f64;
            let r = (1.0 - z * z).sqrt();
            let a = golden * i as f64;
            [radius * r * a.cos(), radius * r * a.sin(), radius * z]
        })
        .collect();
    let eval_eyes: Vec<[f64; 3]> = (0..config.test_views)
        .map(|i| {
            let a = std::f64::consts::TAU * (i as f64 + 0.25) / config.test_views as f64;
            let z: f64 = 0.45;
            let r = (1.0 - z * z).sqrt();
            [radius * r * a.cos(), radius * r * a.sin(), radius * z]
        })
        .collect();
    let options = RenderOptions::default().with_background(background);
    let render_all = |eyes: &[[f64; 3]], prefix: &str| -> Result<_, TrainError> {
        let mut views = Vec::new();
        let mut images = Vec::new();
        for (i, eye) in eyes.iter().enumerate() {
            let camera = look_at_origin(*eye, config.resolution);
            let name = format!("{prefix}_{i:03}");
            let out = render(&field, &camera, &options).map_err(|cause| TrainError::Render {
                view: name.clone(),
                cause,
            })?;
            let rgb = to_host(out.rgb, "procedural image")?;
            let alpha = to_host(out.alpha, "procedural alpha")?;
            let to_u8 = |v: f32| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
            images.push(Arc::new(DecodedImage {
                width: config.resolution,
                height: config.resolution,
                data: rgb.iter().map(|&v| to_u8(v)).collect(),
                transparency: Some(alpha.iter().map(|&a| to_u8(1.0 - a)).collect()),
                mask: None,
            }));
            views.push(SceneView { name, camera });
        }
        Ok((views, images))
    };
    let (train, train_images) = render_all(&train_eyes, "train")?;
    let (eval, eval_images) = render_all(&eval_eyes, "test")?;
    let (center, extent) = cameras_extent(&train.iter().map(|v| v.camera).collect::<Vec<_>>());

    // Initialisation points: a random subset of the hidden centres, jittered, in grey (as a
    // sparse reconstruction would give positions but only rough colours).
    let means = to_host(field.means.val(), "procedural means")?;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9017);
    let count = config.points.min(config.gaussians);
    let mut xyz = Vec::with_capacity(3 * count);
    for _ in 0..count {
        let i = rng.random_range(0..config.gaussians);
        for a in 0..3 {
            xyz.push(means[3 * i + a] + 0.05 * (rng.random::<f32>() - 0.5));
        }
    }
    let rgb = vec![0.5; xyz.len()];
    Ok(TrainScene {
        name: "procedural".to_string(),
        train,
        eval,
        points: (count > 0).then_some((xyz, rgb)),
        center,
        extent,
        background,
        notes: Vec::new(),
        panoramas: false,
        train_images: Images::Memory(train_images),
        eval_images: Images::Memory(eval_images),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_at_puts_the_origin_at_the_centre() {
        let cam = look_at_origin([1.0, 2.0, 1.5], 64);
        // p_cam = R * 0 + t: the origin straight ahead.
        let t = cam.translation;
        assert!(
            t[0].abs() < 1e-9 && t[1].abs() < 1e-9 && t[2] > 0.0,
            "{t:?}"
        );
        let (centre, extent) = cameras_extent(&[cam, look_at_origin([-1.0, -2.0, -1.5], 64)]);
        assert!(centre.iter().all(|c| c.abs() < 1e-9));
        let d = (1.0f64 + 4.0 + 2.25).sqrt();
        assert!((extent - 1.1 * d).abs() < 1e-9);
    }

    #[test]
    fn focus_is_where_cameras_on_one_side_look() {
        // Cameras on the upper half of a sphere: their mean centre is high above the origin,
        // the point they look at is the origin.
        let cams: Vec<Camera> = [
            [3.0, 0.0, 1.0],
            [0.0, 3.0, 2.0],
            [-2.0, -2.0, 2.5],
            [0.5, 0.2, 3.0],
        ]
        .iter()
        .map(|e| look_at_origin(*e, 32))
        .collect();
        let focus = cameras_focus(&cams).unwrap();
        assert!(focus.iter().all(|v| v.abs() < 1e-9), "{focus:?}");
        let parallel = vec![look_at_origin([0.0, 0.0, 3.0], 8); 3];
        assert!(cameras_focus(&parallel).is_none());
    }

    #[test]
    fn procedural_scene_is_deterministic_and_not_blank() {
        let config = ProceduralConfig {
            resolution: 16,
            train_views: 3,
            test_views: 2,
            gaussians: 300,
            points: 50,
        };
        use ember_kernels::backend::Cpu;
        let device = Default::default();
        let a = procedural::<Cpu>(&config, [1.0; 3], 1, &device).unwrap();
        let b = procedural::<Cpu>(&config, [1.0; 3], 1, &device).unwrap();
        assert_eq!(a.train.len(), 3);
        assert_eq!(a.eval.len(), 2);
        let (ia, ib) = (a.train_image(0).unwrap(), b.train_image(0).unwrap());
        assert_eq!(ia.data, ib.data);
        assert!(ia.data.iter().any(|&v| v < 200), "the shapes are visible");
        assert_eq!(a.points.as_ref().unwrap().0.len(), 150);
    }
}
