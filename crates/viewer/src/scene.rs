//! What the page is told about the scene on connect: its name, size, dataset cameras, and where
//! to put the camera first (a point to orbit, the up direction, a distance, the side to look
//! from) and what "fit to scene" frames (the bounds of the Gaussians, outliers left out).
//!
//! A scene without cameras (a bare splat file) says nothing of how it was captured, so its
//! framing follows conventions, stated here so that a user can predict them:
//! - **up** is -y: COLMAP's world inherits the first photo's axes, whose y points down, and
//!   3DGS files keep that world (a control in the page changes it);
//! - **bounds** are the 1st to 99th percentile of the centres on each axis: trained captures
//!   carry a few Gaussians far outside the scene (floaters, escaped Gaussians), and a box around
//!   all of them frames mostly empty space;
//! - **front**: the home view looks across the bounds' thinnest horizontal extent, at the
//!   scene's broadest face (a person's front or back, a facade, a guitar's top), from the side
//!   where the world's origin lies when it is outside the bounds (a capture's world starts at
//!   its first camera), else from the axis' negative side. Which of the two faces is the front
//!   is not in the data: the page's orbit turns it round.

use ember_kernels::CameraParams;
use ember_kernels::quat::symmetric_eigen;
use serde::Serialize;

/// Whether the server shows a fixed field or a training run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A splat file or checkpoint (`trainer view`).
    Scene,
    /// A run in progress (`trainer --view`): pause, resume and checkpoint work.
    Training,
}

/// Which split a dataset camera belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// A training view.
    Train,
    /// A held-out view.
    Test,
}

/// A camera of the dataset, which the page can jump to.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetCamera {
    /// The photo's name.
    pub name: String,
    /// Its split.
    pub split: Split,
    /// The camera (its photo's resolution).
    pub camera: CameraParams,
}

/// The scene as the page sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneInfo {
    /// What it is (a file or dataset name).
    pub name: String,
    /// Fixed scene or training run.
    pub mode: Mode,
    /// Gaussians (updated during training).
    pub gaussians: usize,
    /// SH degree of the field.
    pub sh_degree: usize,
    /// The point the page orbits around first, world units.
    pub target: [f64; 3],
    /// The scene's up direction, unit length.
    pub up: [f64; 3],
    /// The scene's size, world units (a first orbit distance).
    pub radius: f64,
    /// The box holding the Gaussians' centres, outliers left out (`None` before a training run
    /// has any): what "fit to scene" frames.
    pub bounds: Option<Bounds>,
    /// The direction from `target` towards the first view's eye, unit length, perpendicular to
    /// `up` (the home view of a scene without dataset cameras).
    pub front: [f64; 3],
    /// Dataset cameras; the photo of camera `i` is served at `/photo/i`.
    pub cameras: Vec<DatasetCamera>,
    /// Level of detail, when the renderer has a hierarchy of the scene (see
    /// [`SceneInfo::with_lod`]).
    pub lod: Option<LodInfo>,
    /// Whether frames are drawn with the 2D antialiasing filter unless the page asks otherwise:
    /// a field trained with it (`raster.antialiased`) is drawn with it (see
    /// [`SceneInfo::with_antialiased`]).
    pub antialiased: bool,
}

/// What the page learns of the scene's level-of-detail hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LodInfo {
    /// Nodes of the hierarchy, leaves included.
    pub nodes: usize,
    /// The threshold, pixels, frames are drawn at unless the page asks for another (0: off).
    pub threshold: f32,
}

/// An axis-aligned box, world units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bounds {
    /// The smallest corner.
    pub min: [f64; 3],
    /// The largest corner.
    pub max: [f64; 3],
}

impl Bounds {
    /// The box of the centres `means` (`[N, 3]` flattened) from the [`OUTLIER_SHARE`] to the
    /// `1 - OUTLIER_SHARE` quantile on each axis, non-finite rows left out; `None` without a
    /// finite centre.
    pub fn robust(means: &[f32]) -> Option<Bounds> {
        let rows: Vec<[f64; 3]> = means
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]].map(f64::from))
            .filter(|p| p.iter().all(|v| v.is_finite()))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let last = rows.len() - 1;
        let cut = (OUTLIER_SHARE * rows.len() as f64).floor() as usize;
        let (lo, hi) = (cut.min(last), last.saturating_sub(cut).max(cut.min(last)));
        let mut min = [0.0; 3];
        let mut max = [0.0; 3];
        for axis in 0..3 {
            let mut values: Vec<f64> = rows.iter().map(|p| p[axis]).collect();
            min[axis] = *values.select_nth_unstable_by(lo, f64::total_cmp).1;
            max[axis] = *values.select_nth_unstable_by(hi, f64::total_cmp).1;
        }
        Some(Bounds { min, max })
    }

    /// The box's centre.
    pub fn center(&self) -> [f64; 3] {
        [0, 1, 2].map(|i| 0.5 * (self.min[i] + self.max[i]))
    }

    /// Half the box's diagonal: the radius of the sphere around it.
    pub fn half_diagonal(&self) -> f64 {
        0.5 * (0..3)
            .map(|i| (self.max[i] - self.min[i]).powi(2))
            .sum::<f64>()
            .sqrt()
    }
}

/// The share of the centres left out of [`Bounds::robust`] at each end of each axis.
pub const OUTLIER_SHARE: f64 = 0.01;

/// `up` when nothing says which way it is: COLMAP's world inherits the first photo's axes,
/// whose y points down, and most captures are taken upright.
const DEFAULT_UP: [f64; 3] = [0.0, -1.0, 0.0];

impl SceneInfo {
    /// The same scene, drawn with level of detail (`lod`).
    pub fn with_lod(self, lod: Option<LodInfo>) -> SceneInfo {
        SceneInfo { lod, ..self }
    }

    /// The same scene, drawn with the 2D antialiasing filter by default when `antialiased`.
    pub fn with_antialiased(self, antialiased: bool) -> SceneInfo {
        SceneInfo {
            antialiased,
            ..self
        }
    }

    /// A scene framed by its dataset cameras when it has some: the orbit target where their
    /// optical axes pass closest (`focus`, e.g. from `ember_train::scene::cameras_focus`), up
    /// the mean of the cameras' up axes, the radius the median distance of the cameras from the
    /// target. Without cameras, by the centres `means` (`[N, 3]` flattened) and the module's
    /// conventions: the target is the centre of their [`Bounds::robust`], the radius half its
    /// diagonal.
    pub fn framed(
        name: String,
        mode: Mode,
        sh_degree: usize,
        means: &[f32],
        cameras: Vec<DatasetCamera>,
        focus: Option<[f64; 3]>,
    ) -> SceneInfo {
        let gaussians = means.len() / 3;
        let bounds = Bounds::robust(means);
        let target = focus.or(bounds.map(|b| b.center())).unwrap_or([0.0; 3]);
        let distance = |p: [f64; 3]| {
            ((p[0] - target[0]).powi(2) + (p[1] - target[1]).powi(2) + (p[2] - target[2]).powi(2))
                .sqrt()
        };
        let (up, radius) = if cameras.is_empty() {
            (DEFAULT_UP, bounds.map_or(1.0, |b| b.half_diagonal()))
        } else {
            let radius = median(cameras.iter().map(|c| distance(c.camera.center())));
            (capture_up(&cameras), radius)
        };
        let radius = if radius.is_finite() && radius > 0.0 {
            radius
        } else {
            1.0
        };
        let target = target.map(|v| if v.is_finite() { v } else { 0.0 });
        let front = match (&bounds, cameras.is_empty()) {
            (Some(bounds), true) => front_of(bounds, target, up),
            _ => {
                // The side the cameras stand on.
                let mut side = [0.0; 3];
                for c in &cameras {
                    let centre = c.camera.center();
                    for (axis, s) in side.iter_mut().enumerate() {
                        *s += centre[axis] - target[axis];
                    }
                }
                horizontal(side, up).unwrap_or_else(|| any_horizontal(up))
            }
        };
        SceneInfo {
            name,
            mode,
            gaussians,
            sh_degree,
            target,
            up,
            radius,
            bounds,
            front,
            cameras,
            lod: None,
            antialiased: false,
        }
    }
}

/// The up direction of a capture: the normal of the plane its cameras stand in when they stand
/// round the scene in one (an orbit: the smallest spread of their centres at most a quarter of
/// the middle one, and their optical axes not all along the normal, as they would be in a
/// forward-facing capture), turned to the side the cameras' up axes point to or, where those
/// lie in the plane (photos stored rotated by a quarter turn), the side the cameras look down
/// from; otherwise the mean of the cameras' up axes.
fn capture_up(cameras: &[DatasetCamera]) -> [f64; 3] {
    let n = cameras.len() as f64;
    let mean_of = |f: &dyn Fn(&CameraParams) -> [f64; 3]| -> [f64; 3] {
        let mut sum = [0.0; 3];
        for c in cameras {
            let v = f(&c.camera);
            for axis in 0..3 {
                sum[axis] += v[axis] / n;
            }
        }
        sum
    };
    // Rows 1 and 2 of R are the camera's y (down) and z (forward) axes in world coordinates.
    let mean_up = mean_of(&|c| [0, 1, 2].map(|i| -c.rotation[3 + i]));
    let mean_forward = mean_of(&|c| [0, 1, 2].map(|i| c.rotation[6 + i]));
    let fallback = normalised(mean_up).unwrap_or(DEFAULT_UP);
    if cameras.len() < 3 {
        return fallback;
    }
    let centre = mean_of(&|c| c.center());
    let mut covariance = [[0.0; 3]; 3];
    for c in cameras {
        let d = [0, 1, 2].map(|i| c.camera.center()[i] - centre[i]);
        for i in 0..3 {
            for j in 0..3 {
                covariance[i][j] += d[i] * d[j] / n;
            }
        }
    }
    let (values, vectors) = symmetric_eigen(covariance);
    let dot = |a: [f64; 3], b: [f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let normal = vectors[0];
    let flat = values[0] <= 0.25 * values[1] && values[1] > 0.0;
    let facing_forward = dot(mean_forward, normal).abs() > 0.9;
    if !flat || facing_forward {
        return fallback;
    }
    let sign = if dot(mean_up, normal).abs() > 0.3 {
        dot(mean_up, normal).signum()
    } else {
        -dot(mean_forward, normal).signum()
    };
    normal.map(|v| v * if sign == 0.0 { 1.0 } else { sign })
}

/// The home view's direction for a scene without cameras (see the module's conventions): of
/// the two horizontal world directions, the one the box is thinner along, towards the world's
/// origin when that lies outside the sphere around the box, else its negative side.
fn front_of(bounds: &Bounds, target: [f64; 3], up: [f64; 3]) -> [f64; 3] {
    let seed = any_horizontal(up);
    let across = cross(up, seed);
    let extent = |d: [f64; 3]| -> f64 {
        (0..3)
            .map(|i| (bounds.max[i] - bounds.min[i]) * d[i].abs())
            .sum()
    };
    let axis = if extent(seed) <= extent(across) {
        seed
    } else {
        across
    };
    let origin_distance = target.iter().map(|v| v * v).sum::<f64>().sqrt();
    let origin_side = if origin_distance <= bounds.half_diagonal() {
        -1.0
    } else {
        let to_origin: f64 = (0..3).map(|i| -target[i] * axis[i]).sum();
        if to_origin >= 0.0 { 1.0 } else { -1.0 }
    };
    axis.map(|v| v * origin_side)
}

/// `v` without its component along the unit `up`, normalised; `None` when `v` is (nearly)
/// vertical.
fn horizontal(v: [f64; 3], up: [f64; 3]) -> Option<[f64; 3]> {
    let along: f64 = (0..3).map(|i| v[i] * up[i]).sum();
    normalised([0, 1, 2].map(|i| v[i] - along * up[i]))
}

/// A horizontal unit vector for the unit `up`: the world axis most perpendicular to it, made
/// exactly horizontal.
fn any_horizontal(up: [f64; 3]) -> [f64; 3] {
    let axis = (0..3)
        .min_by(|&a, &b| up[a].abs().total_cmp(&up[b].abs()))
        .unwrap_or(0);
    let mut seed = [0.0; 3];
    seed[axis] = 1.0;
    horizontal(seed, up).unwrap_or([1.0, 0.0, 0.0])
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// The median of `values` (NaNs left out), 0 when there are none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.filter(|v| !v.is_nan()).collect();
    if values.is_empty() {
        return 0.0;
    }
    let mid = values.len() / 2;
    *values.select_nth_unstable_by(mid, f64::total_cmp).1
}

/// `v / |v|`, `None` for a (near) zero vector.
fn normalised(v: [f64; 3]) -> Option<[f64; 3]> {
    let norm = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    (norm > 1e-9 && norm.is_finite()).then(|| v.map(|x| x / norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera_at(position: [f64; 3], rotation: [f64; 9]) -> DatasetCamera {
        DatasetCamera {
            name: "c".into(),
            split: Split::Train,
            camera: CameraParams {
                rotation,
                translation: [0.0; 3],
                fx: 100.0,
                fy: 100.0,
                cx: 50.0,
                cy: 50.0,
                width: 100,
                height: 100,
            }
            .with_center(position),
        }
    }

    #[test]
    fn cameras_give_up_and_radius() {
        // Cameras on the x axis looking back at the origin, world z up: camera y (down) = -z.
        let looking_down_x = [0.0, 1.0, 0.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0];
        let cameras = vec![
            camera_at([4.0, 0.0, 0.0], looking_down_x),
            camera_at([5.0, 0.0, 0.0], looking_down_x),
            camera_at([6.0, 0.0, 0.0], looking_down_x),
        ];
        let info = SceneInfo::framed(
            "s".into(),
            Mode::Scene,
            0,
            &[0.0; 6],
            cameras,
            Some([0.0; 3]),
        );
        assert_eq!(info.up, [0.0, 0.0, 1.0]);
        assert!((info.radius - 5.0).abs() < 1e-12);
        assert_eq!(info.gaussians, 2);
        assert_eq!(info.front, [1.0, 0.0, 0.0]);
    }

    /// A camera at `centre` looking at the origin with `up` as its picture's up.
    fn looking_at_origin(centre: [f64; 3], up: [f64; 3]) -> DatasetCamera {
        let forward = normalised(centre.map(|v| -v)).unwrap();
        let right = normalised(cross(forward, up)).unwrap();
        let down = cross(forward, right);
        let rotation = [
            right[0], right[1], right[2], down[0], down[1], down[2], forward[0], forward[1],
            forward[2],
        ];
        camera_at(centre, rotation)
    }

    #[test]
    fn an_orbit_of_rotated_photos_is_still_upright() {
        // Twelve cameras on a ring at height 2 round the world's z axis, looking down at the
        // origin; their photos stored a quarter turn rotated (the picture's up is horizontal).
        let cameras: Vec<DatasetCamera> = (0..12)
            .map(|i| {
                let a = i as f64 * std::f64::consts::TAU / 12.0;
                let centre = [4.0 * a.cos(), 4.0 * a.sin(), 2.0];
                let level = normalised(cross(centre.map(|v| -v), [0.0, 0.0, 1.0])).unwrap();
                looking_at_origin(centre, level)
            })
            .collect();
        let info = SceneInfo::framed(
            "s".into(),
            Mode::Scene,
            0,
            &[],
            cameras.clone(),
            Some([0.0; 3]),
        );
        for (got, want) in info.up.iter().zip([0.0, 0.0, 1.0]) {
            assert!((got - want).abs() < 1e-9, "{:?}", info.up);
        }
        // Upright photos of the same orbit agree; a forward-facing capture (cameras in a plane
        // facing along its normal) keeps the mean of the cameras' up axes.
        let upright: Vec<DatasetCamera> = cameras
            .iter()
            .map(|c| looking_at_origin(c.camera.center(), [0.0, 0.0, 1.0]))
            .collect();
        let info = SceneInfo::framed("s".into(), Mode::Scene, 0, &[], upright, Some([0.0; 3]));
        assert!(info.up[2] > 1.0 - 1e-9, "{:?}", info.up);
        let facing: Vec<DatasetCamera> = (0..9)
            .map(|i| {
                let (x, y) = ((i % 3) as f64 - 1.0, (i / 3) as f64 - 1.0);
                camera_at([x, y, -5.0], [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
            })
            .collect();
        let info = SceneInfo::framed("s".into(), Mode::Scene, 0, &[], facing, Some([0.0; 3]));
        assert_eq!(info.up, [0.0, -1.0, 0.0]);
    }

    /// `[N, 3]` flattened: a grid filling the box `min..max`, `n` points a side.
    fn grid(min: [f32; 3], max: [f32; 3], n: usize) -> Vec<f32> {
        let at =
            |axis: usize, i: usize| min[axis] + (max[axis] - min[axis]) * i as f32 / (n - 1) as f32;
        let mut means = Vec::new();
        for i in 0..n {
            for j in 0..n {
                for k in 0..n {
                    means.extend([at(0, i), at(1, j), at(2, k)]);
                }
            }
        }
        means
    }

    #[test]
    fn bare_scene_is_framed_without_its_outliers() {
        // A figure 2 wide, 2 tall (along -y) and 1 deep, and 0.5% of far outliers and NaNs.
        let mut means = grid([-1.0, -2.0, -0.5], [1.0, 0.0, 0.5], 10);
        for k in 0..5 {
            let far = 1e5 * (k as f32 + 1.0);
            means.extend([far, -far, far]);
        }
        means.extend([f32::NAN; 3]);
        let info = SceneInfo::framed("s".into(), Mode::Scene, 3, &means, Vec::new(), None);
        let bounds = info.bounds.expect("bounds");
        for axis in 0..3 {
            assert!(
                bounds.min[axis] >= [-1.0, -2.0, -0.5][axis] - 1e-6,
                "{bounds:?}"
            );
            assert!(
                bounds.max[axis] <= [1.0, 0.0, 0.5][axis] + 1e-6,
                "{bounds:?}"
            );
        }
        assert!((info.target[1] + 1.0).abs() < 0.2, "{:?}", info.target);
        assert!(info.radius > 1.0 && info.radius < 2.0, "{}", info.radius);
        assert_eq!(info.up, DEFAULT_UP);
        // Looking across its depth (z), at its broad face; the origin is inside: from -z.
        assert_eq!(info.front, [0.0, 0.0, -1.0]);
    }

    #[test]
    fn bare_capture_is_seen_from_its_origin_side() {
        // A capture's world starts at its first camera: the scene lies away from the origin.
        for (z0, z1, side) in [(4.0, 6.0, -1.0), (-6.0, -4.0, 1.0)] {
            let means = grid([0.0, 0.0, z0], [4.0, 4.0, z1], 8);
            let info = SceneInfo::framed("s".into(), Mode::Scene, 0, &means, Vec::new(), None);
            assert_eq!(info.front, [0.0, 0.0, side], "z in {z0}..{z1}");
        }
    }

    #[test]
    fn empty_scene_has_a_usable_frame() {
        let info = SceneInfo::framed("s".into(), Mode::Scene, 0, &[], Vec::new(), None);
        assert_eq!(info.target, [0.0; 3]);
        assert_eq!(info.radius, 1.0);
        assert_eq!(info.bounds, None);
        assert!((info.front.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
