//! What the page is told about the scene on connect: its name, size, dataset cameras, and where
//! to put the camera first (a point to orbit, the up direction, a distance).

use ember_kernels::CameraParams;
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
    /// Dataset cameras; the photo of camera `i` is served at `/photo/i`.
    pub cameras: Vec<DatasetCamera>,
}

/// `up` when nothing says which way it is: COLMAP's world inherits the first photo's axes,
/// whose y points down, and most captures are taken upright.
const DEFAULT_UP: [f64; 3] = [0.0, -1.0, 0.0];

impl SceneInfo {
    /// A scene framed by its dataset cameras when it has some: the orbit target where their
    /// optical axes pass closest (`focus`, e.g. from `ember_train::scene::cameras_focus`), else
    /// the median of `means` (`[N, 3]` flattened); up is the mean of the cameras' up axes; the
    /// radius is the median distance of the cameras from the target, else twice the median
    /// distance of the centres from it.
    pub fn framed(
        name: String,
        mode: Mode,
        sh_degree: usize,
        means: &[f32],
        cameras: Vec<DatasetCamera>,
        focus: Option<[f64; 3]>,
    ) -> SceneInfo {
        let gaussians = means.len() / 3;
        let target = focus.unwrap_or_else(|| {
            [0, 1, 2].map(|axis| median(means.iter().skip(axis).step_by(3).map(|&v| f64::from(v))))
        });
        let distance = |p: [f64; 3]| {
            ((p[0] - target[0]).powi(2) + (p[1] - target[1]).powi(2) + (p[2] - target[2]).powi(2))
                .sqrt()
        };
        let (up, radius) = if cameras.is_empty() {
            let spread = median(
                means
                    .chunks_exact(3)
                    .map(|p| distance([p[0], p[1], p[2]].map(f64::from))),
            );
            (DEFAULT_UP, 2.0 * spread)
        } else {
            // Row 1 of R is the camera's y axis (down) in world coordinates.
            let mut up = [0.0; 3];
            for c in &cameras {
                for (axis, u) in up.iter_mut().enumerate() {
                    *u -= c.camera.rotation[3 + axis];
                }
            }
            let radius = median(cameras.iter().map(|c| distance(c.camera.center())));
            (normalised(up).unwrap_or(DEFAULT_UP), radius)
        };
        let radius = if radius.is_finite() && radius > 0.0 {
            radius
        } else {
            1.0
        };
        SceneInfo {
            name,
            mode,
            gaussians,
            sh_degree,
            target: target.map(|v| if v.is_finite() { v } else { 0.0 }),
            up,
            radius,
            cameras,
        }
    }
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
    }

    #[test]
    fn points_alone_give_median_target() {
        // An outlier moves the median by one rank; a NaN row is left out.
        let means = [
            -1.0,
            -1.0,
            -1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            1.0,
            1.0,
            2.0,
            2.0,
            2.0,
            100.0,
            100.0,
            100.0,
            f32::NAN,
            f32::NAN,
            f32::NAN,
        ];
        let info = SceneInfo::framed("s".into(), Mode::Scene, 3, &means, Vec::new(), None);
        assert_eq!(info.target, [1.0, 1.0, 1.0]);
        assert_eq!(info.up, DEFAULT_UP);
        assert!(info.radius > 0.0 && info.radius.is_finite());
    }

    #[test]
    fn empty_scene_has_a_usable_frame() {
        let info = SceneInfo::framed("s".into(), Mode::Scene, 0, &[], Vec::new(), None);
        assert_eq!(info.target, [0.0; 3]);
        assert_eq!(info.radius, 1.0);
    }
}
