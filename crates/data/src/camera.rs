//! Cameras as Ember uses them: pinhole intrinsics, lens distortion, and a world-to-camera pose in
//! OpenCV axes (x right, y down, z forward). The one conversion from the OpenGL/Blender
//! camera-to-world convention of `transforms.json` lives here:
//! [`opengl_c2w_to_opencv_w2c`].

use std::path::Path;

use ember_kernels::CameraParams;

use crate::error::{DataError, Result};

/// Pinhole intrinsics, pixels. Pixel `(i, j)` covers `[i, i + 1) x [j, j + 1)`, so its centre is
/// at `(i + 0.5, j + 0.5)` (the COLMAP and OpenCV convention).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Intrinsics {
    /// Focal length along x, pixels.
    pub fx: f64,
    /// Focal length along y, pixels.
    pub fy: f64,
    /// Principal point x, pixels from the left edge.
    pub cx: f64,
    /// Principal point y, pixels from the top edge.
    pub cy: f64,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
}

impl Intrinsics {
    /// The same camera for an image of `width x height` pixels covering the same field of view:
    /// focal lengths and principal point scale by `width / self.width` along x and
    /// `height / self.height` along y (exact for any resize that maps the image's edges onto
    /// each other, which is what a resize does).
    pub fn resized(&self, width: u32, height: u32) -> Intrinsics {
        let sx = width as f64 / self.width as f64;
        let sy = height as f64 / self.height as f64;
        Intrinsics {
            fx: self.fx * sx,
            fy: self.fy * sy,
            cx: self.cx * sx,
            cy: self.cy * sy,
            width,
            height,
        }
    }

    /// `None` when every value is finite and the focal lengths and size are positive, else
    /// what is wrong.
    pub fn problem(&self) -> Option<String> {
        let values = [self.fx, self.fy, self.cx, self.cy];
        if values.iter().any(|v| !v.is_finite()) {
            return Some(format!(
                "non-finite value in fx={} fy={} cx={} cy={}",
                self.fx, self.fy, self.cx, self.cy
            ));
        }
        if self.fx <= 0.0 || self.fy <= 0.0 {
            return Some(format!(
                "focal lengths must be positive (fx={}, fy={})",
                self.fx, self.fy
            ));
        }
        if self.width == 0 || self.height == 0 {
            return Some(format!(
                "image size {}x{} is empty",
                self.width, self.height
            ));
        }
        None
    }
}

/// How a view's camera maps directions to pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CameraModel {
    /// A pinhole camera through its [`Intrinsics`].
    #[default]
    Pinhole,
    /// A whole 360° equirectangular panorama `W x W / 2` in the pose's axes (the map of
    /// [`crate::equirect`]); of its intrinsics only the size is used.
    Equirectangular,
}

/// Lens distortion in the OpenCV (Brown-Conrady) model, acting on normalised image coordinates
/// `(x, y) = (X / Z, Y / Z)`:
///
/// ```text
/// r2 = x^2 + y^2,  radial = 1 + k1 r2 + k2 r2^2 + k3 r2^3
/// x_d = x radial + 2 p1 x y + p2 (r2 + 2 x^2)
/// y_d = y radial + p1 (r2 + 2 y^2) + 2 p2 x y
/// ```
///
/// COLMAP's SIMPLE_RADIAL (`k1`), RADIAL (`k1, k2`) and OPENCV (`k1, k2, p1, p2`) models and
/// nerfstudio's `k1 k2 k3 p1 p2` are all special cases.
///
/// With `fisheye` set it is the equidistant fisheye model instead (OpenCV's `cv::fisheye`,
/// COLMAP's and nerfstudio's OPENCV_FISHEYE), acting on the angle `theta = atan(r)` of the ray:
///
/// ```text
/// theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8)
/// (x_d, y_d) = (x, y) theta_d / r
/// ```
///
/// The coefficients are dimensionless, so
/// they do not change when the image is resized.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Distortion {
    /// First radial coefficient.
    pub k1: f64,
    /// Second radial coefficient.
    pub k2: f64,
    /// Third radial coefficient.
    pub k3: f64,
    /// First tangential coefficient.
    pub p1: f64,
    /// Second tangential coefficient.
    pub p2: f64,
    /// Fourth radial coefficient (fisheye only).
    pub k4: f64,
    /// The equidistant fisheye model: `k1..k4` act on the ray's angle; `p1`, `p2` are unused.
    pub fisheye: bool,
}

impl Distortion {
    /// Whether this is the identity (every coefficient zero): a pure pinhole camera.
    pub fn is_none(&self) -> bool {
        *self == Distortion::default()
    }

    /// Whether every coefficient is finite.
    pub fn is_finite(&self) -> bool {
        [self.k1, self.k2, self.k3, self.k4, self.p1, self.p2]
            .iter()
            .all(|v| v.is_finite())
    }

    /// Distorts normalised coordinates: where a ray through the ideal pinhole point `(x, y)`
    /// lands on the real sensor.
    pub fn distort(&self, x: f64, y: f64) -> (f64, f64) {
        let r2 = x * x + y * y;
        if self.fisheye {
            let r = r2.sqrt();
            if r < 1e-12 {
                return (x, y);
            }
            let theta = r.atan();
            let t2 = theta * theta;
            let theta_d =
                theta * (1.0 + t2 * (self.k1 + t2 * (self.k2 + t2 * (self.k3 + t2 * self.k4))));
            let scale = theta_d / r;
            return (x * scale, y * scale);
        }
        let radial = 1.0 + r2 * (self.k1 + r2 * (self.k2 + r2 * self.k3));
        let xd = x * radial + 2.0 * self.p1 * x * y + self.p2 * (r2 + 2.0 * x * x);
        let yd = y * radial + self.p1 * (r2 + 2.0 * y * y) + 2.0 * self.p2 * x * y;
        (xd, yd)
    }

    /// Undistorts normalised coordinates (the inverse of [`Distortion::distort`]): by
    /// fixed-point iteration, which converges for the mild distortions of real lenses (the last
    /// iterate after 20 steps otherwise); for a fisheye, by Newton's method on the angle.
    pub fn undistort(&self, xd: f64, yd: f64) -> (f64, f64) {
        if self.fisheye {
            // Newton's method on theta (1 + k1 theta^2 + ...) = theta_d, then r = tan(theta).
            let theta_d = (xd * xd + yd * yd).sqrt();
            if theta_d < 1e-12 {
                return (xd, yd);
            }
            let mut theta = theta_d;
            for _ in 0..20 {
                let t2 = theta * theta;
                let f = theta
                    * (1.0 + t2 * (self.k1 + t2 * (self.k2 + t2 * (self.k3 + t2 * self.k4))))
                    - theta_d;
                let df = 1.0
                    + t2 * (3.0 * self.k1
                        + t2 * (5.0 * self.k2 + t2 * (7.0 * self.k3 + t2 * 9.0 * self.k4)));
                let step = f / df;
                theta -= step;
                if step.abs() < 1e-15 {
                    break;
                }
            }
            let scale = theta.tan() / theta_d;
            return (xd * scale, yd * scale);
        }
        let (mut x, mut y) = (xd, yd);
        for _ in 0..20 {
            let (fx, fy) = self.distort(x, y);
            let (dx, dy) = (fx - xd, fy - yd);
            x -= dx;
            y -= dy;
            if dx.abs() + dy.abs() < 1e-12 {
                break;
            }
        }
        (x, y)
    }
}

/// A rigid world-to-camera transform in OpenCV axes: `p_cam = R p_world + t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pose {
    /// Rotation `R`, 3x3 row-major.
    pub rotation: [f64; 9],
    /// Translation `t`.
    pub translation: [f64; 3],
}

impl Pose {
    /// The pose from a COLMAP world-to-camera quaternion `(w, x, y, z)` (normalised here) and
    /// translation. `None` when the quaternion is zero or not finite.
    pub fn from_quaternion(q: [f64; 4], translation: [f64; 3]) -> Option<Pose> {
        let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !norm.is_finite() || norm < 1e-12 {
            return None;
        }
        let rotation = ember_kernels::quat::rotation_matrix(q.map(|v| v / norm));
        Some(Pose {
            rotation,
            translation,
        })
    }

    /// The camera centre in world coordinates, `-R^T t`.
    pub fn center(&self) -> [f64; 3] {
        let r = &self.rotation;
        let t = &self.translation;
        [
            -(r[0] * t[0] + r[3] * t[1] + r[6] * t[2]),
            -(r[1] * t[0] + r[4] * t[1] + r[7] * t[2]),
            -(r[2] * t[0] + r[5] * t[1] + r[8] * t[2]),
        ]
    }

    /// A world point in camera coordinates, `R p + t`.
    pub fn transform_point(&self, p: [f64; 3]) -> [f64; 3] {
        let r = &self.rotation;
        let t = &self.translation;
        [
            r[0] * p[0] + r[1] * p[1] + r[2] * p[2] + t[0],
            r[3] * p[0] + r[4] * p[1] + r[5] * p[2] + t[1],
            r[6] * p[0] + r[7] * p[1] + r[8] * p[2] + t[2],
        ]
    }

    /// The pose of a camera fixed to this one and turned by `rotation` (row-major, from this
    /// camera's axes to its own): the same centre, world-to-camera rotation `rotation R`.
    pub fn turned(&self, rotation: &[f64; 9]) -> Pose {
        let (a, r, t) = (rotation, &self.rotation, &self.translation);
        Pose {
            rotation: std::array::from_fn(|i| {
                let (row, col) = (i / 3, i % 3);
                (0..3).map(|k| a[3 * row + k] * r[3 * k + col]).sum()
            }),
            translation: std::array::from_fn(|row| (0..3).map(|k| a[3 * row + k] * t[k]).sum()),
        }
    }

    /// The camera-to-world matrix in the OpenGL/Blender axes of `transforms.json` (4x4,
    /// row-major): the inverse of [`opengl_c2w_to_opencv_w2c`].
    pub fn to_opengl_c2w(&self) -> [[f64; 4]; 4] {
        let r = &self.rotation;
        let c = self.center();
        // The camera's axes in the world are R's rows; OpenGL's y and z are OpenCV's negated.
        let sign = [1.0, -1.0, -1.0];
        let mut m = [[0.0; 4]; 4];
        for (i, row) in m.iter_mut().take(3).enumerate() {
            for j in 0..3 {
                row[j] = r[3 * j + i] * sign[j];
            }
            row[3] = c[i];
        }
        m[3][3] = 1.0;
        m
    }

    /// `None` when every value is finite and the rotation is orthonormal with determinant +1
    /// (to `1e-3`), else what is wrong.
    pub fn problem(&self) -> Option<String> {
        if self
            .rotation
            .iter()
            .chain(self.translation.iter())
            .any(|v| !v.is_finite())
        {
            return Some("non-finite value in the pose".to_string());
        }
        let r = &self.rotation;
        let mut worst = 0.0f64;
        for i in 0..3 {
            for j in 0..3 {
                let dot: f64 = (0..3).map(|k| r[3 * i + k] * r[3 * j + k]).sum();
                let expected = if i == j { 1.0 } else { 0.0 };
                worst = worst.max((dot - expected).abs());
            }
        }
        if worst > 1e-3 {
            return Some(format!(
                "rotation is not orthonormal (R R^T differs from I by {worst:.3e})"
            ));
        }
        let det = r[0] * (r[4] * r[8] - r[5] * r[7]) - r[1] * (r[3] * r[8] - r[5] * r[6])
            + r[2] * (r[3] * r[7] - r[4] * r[6]);
        if det < 0.0 {
            return Some("rotation is a reflection (determinant -1)".to_string());
        }
        None
    }
}

/// Converts a camera-to-world matrix in the OpenGL/Blender convention (x right, y up, the camera
/// looking down -z), as `transforms.json` stores it (4x4 or 3x4, row-major), to Ember's OpenCV
/// world-to-camera [`Pose`].
///
/// OpenCV's camera axes are OpenGL's with y and z negated, so the OpenCV camera-to-world
/// rotation is `R_gl diag(1, -1, -1)` (the second and third columns negated), and the
/// world-to-camera pose is its inverse: `R = R_cv^T`, `t = -R c` with `c` the camera centre
/// (the last column). This is the only place in Ember that converts between the two.
pub fn opengl_c2w_to_opencv_w2c(c2w: &[[f64; 4]; 3]) -> Pose {
    // Columns of the OpenCV camera-to-world rotation: x kept, y and z negated.
    let col = |j: usize, sign: f64| [c2w[0][j] * sign, c2w[1][j] * sign, c2w[2][j] * sign];
    let axes = [col(0, 1.0), col(1, -1.0), col(2, -1.0)];
    let center = [c2w[0][3], c2w[1][3], c2w[2][3]];
    // The world-to-camera rotation's rows are the camera axes expressed in the world.
    let mut rotation = [0.0; 9];
    for (i, axis) in axes.iter().enumerate() {
        rotation[3 * i..3 * i + 3].copy_from_slice(axis);
    }
    let translation = [0, 1, 2].map(|i| {
        -(rotation[3 * i] * center[0]
            + rotation[3 * i + 1] * center[1]
            + rotation[3 * i + 2] * center[2])
    });
    Pose {
        rotation,
        translation,
    }
}

/// The kernels' camera for a pose and pinhole intrinsics (distortion is not part of it: see
/// [`View::distortion`](crate::View::distortion)).
pub fn camera_params(pose: &Pose, intrinsics: &Intrinsics) -> CameraParams {
    CameraParams {
        rotation: pose.rotation,
        translation: pose.translation,
        fx: intrinsics.fx,
        fy: intrinsics.fy,
        cx: intrinsics.cx,
        cy: intrinsics.cy,
        width: intrinsics.width,
        height: intrinsics.height,
    }
}

/// Reads a camera file, the `--camera` of `trainer render`: [`CameraParams`]'s JSON form
/// (`rotation`, 9 numbers, row-major world-to-camera `R`; `translation`, 3; `fx`, `fy`, `cx`,
/// `cy` and `width`, `height` in pixels; OpenCV axes, `p_cam = R p_world + t`; unknown keys
/// refused). `path` names the file in errors. The camera is checked as the dataset loaders check
/// every view: an orthonormal rotation with determinant +1, finite values, positive focal
/// lengths and size.
pub fn parse_camera_file(bytes: &[u8], path: &Path) -> Result<CameraParams> {
    let camera: CameraParams = serde_json::from_slice(bytes).map_err(|cause| DataError::Json {
        path: path.to_path_buf(),
        cause,
    })?;
    check_camera(&camera, path, "camera")?;
    Ok(camera)
}

/// Every camera of a camera list read from `path`, with its name, in order: the
/// `cameras.json` a run that refines its poses writes, `{"cameras": [{"name": .., "refined":
/// .., "camera": {..}}, ..]}` (each `camera` in the form of [`parse_camera_file`], checked as it
/// checks one).
pub fn parse_camera_list(bytes: &[u8], path: &Path) -> Result<Vec<(String, CameraParams)>> {
    /// Other keys of an entry (`refined`) say how the camera came to be, which no reader needs.
    #[derive(serde::Deserialize)]
    struct Entry {
        name: String,
        camera: CameraParams,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct List {
        cameras: Vec<Entry>,
    }
    let list: List = serde_json::from_slice(bytes).map_err(|cause| DataError::Json {
        path: path.to_path_buf(),
        cause,
    })?;
    list.cameras
        .into_iter()
        .map(|entry| {
            check_camera(&entry.camera, path, &format!("cameras[{}]", entry.name))?;
            Ok((entry.name, entry.camera))
        })
        .collect()
}

/// The camera named `name` in the camera list read from `path` ([`parse_camera_list`]).
pub fn find_camera(bytes: &[u8], path: &Path, name: &str) -> Result<CameraParams> {
    let cameras = parse_camera_list(bytes, path)?;
    match cameras.iter().find(|(n, _)| n == name) {
        Some((_, camera)) => Ok(*camera),
        None => Err(DataError::UnknownCamera {
            path: path.to_path_buf(),
            name: name.to_string(),
            known: cameras.into_iter().map(|(n, _)| n).collect(),
        }),
    }
}

/// The check [`parse_camera_file`] makes of a camera read from `path`, where `name` (`camera`,
/// `keyframes[2].camera`) says which camera of the file it is: an orthonormal rotation with
/// determinant +1 (to `1e-3`), finite values, positive focal lengths and size.
pub(crate) fn check_camera(camera: &CameraParams, path: &Path, name: &str) -> Result<()> {
    let pose = Pose {
        rotation: camera.rotation,
        translation: camera.translation,
    };
    if let Some(problem) = pose.problem() {
        return Err(DataError::InvalidPose {
            path: path.to_path_buf(),
            view: name.to_string(),
            problem,
        });
    }
    let intrinsics = Intrinsics {
        fx: camera.fx,
        fy: camera.fy,
        cx: camera.cx,
        cy: camera.cy,
        width: camera.width,
        height: camera.height,
    };
    if let Some(problem) = intrinsics.problem() {
        return Err(DataError::InvalidIntrinsics {
            path: path.to_path_buf(),
            camera: name.to_string(),
            problem,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera_json(rotation: &str) -> String {
        format!(
            r#"{{"rotation": {rotation}, "translation": [0, 0, 4],
                "fx": 100, "fy": 100, "cx": 32, "cy": 24, "width": 64, "height": 48}}"#
        )
    }

    #[test]
    fn a_camera_file_parses_and_bad_ones_name_the_problem() {
        let path = Path::new("cam.json");
        let camera =
            parse_camera_file(camera_json("[1,0,0, 0,1,0, 0,0,1]").as_bytes(), path).unwrap();
        assert_eq!(camera.translation, [0.0, 0.0, 4.0]);
        assert_eq!(camera.center(), [0.0, 0.0, -4.0]);
        assert_eq!((camera.width, camera.height), (64, 48));
        let zero = parse_camera_file(camera_json("[0,0,0, 0,0,0, 0,0,0]").as_bytes(), path)
            .unwrap_err()
            .to_string();
        assert!(zero.contains("cam.json") && zero.contains("pose"), "{zero}");
        let unknown = parse_camera_file(br#"{"rotation": [1,0,0,0,1,0,0,0,1], "fov": 1}"#, path)
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("cam.json") && unknown.contains("fov"),
            "{unknown}"
        );
        let zero_size =
            camera_json("[1,0,0, 0,1,0, 0,0,1]").replace("\"width\": 64", "\"width\": 0");
        let error = parse_camera_file(zero_size.as_bytes(), path)
            .unwrap_err()
            .to_string();
        assert!(error.contains("intrinsics"), "{error}");
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < tol)
    }

    #[test]
    fn opengl_camera_looking_at_origin_sees_it_in_front() {
        // Camera at (0, 0, 4) in OpenGL axes looking down -z: identity rotation.
        let c2w = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 4.0],
        ];
        let pose = opengl_c2w_to_opencv_w2c(&c2w);
        assert!(pose.problem().is_none());
        assert!(close(&pose.center(), &[0.0, 0.0, 4.0], 1e-12));
        // The origin is 4 units in front (OpenCV +z), and world +y (up) is image -y (up).
        assert!(close(
            &pose.transform_point([0.0; 3]),
            &[0.0, 0.0, 4.0],
            1e-12
        ));
        let up = pose.transform_point([0.0, 1.0, 0.0]);
        assert!(up[1] < 0.0 && (up[2] - 4.0).abs() < 1e-12);
        let right = pose.transform_point([1.0, 0.0, 0.0]);
        assert!(right[0] > 0.0);
    }

    #[test]
    fn quaternion_rotation_is_orthonormal_and_matches_axis_angle() {
        // 90 degrees about z: x -> y.
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let pose = Pose::from_quaternion([h, 0.0, 0.0, h], [1.0, 2.0, 3.0]).unwrap();
        assert!(pose.problem().is_none());
        let p = pose.transform_point([1.0, 0.0, 0.0]);
        assert!(close(&p, &[1.0, 3.0, 3.0], 1e-12));
        // An unnormalised quaternion gives the same rotation.
        let scaled = Pose::from_quaternion([2.0 * h, 0.0, 0.0, 2.0 * h], [1.0, 2.0, 3.0]).unwrap();
        assert!(close(&scaled.rotation, &pose.rotation, 1e-12));
        assert!(Pose::from_quaternion([0.0; 4], [0.0; 3]).is_none());
        assert!(Pose::from_quaternion([f64::NAN, 0.0, 0.0, 1.0], [0.0; 3]).is_none());
    }

    #[test]
    fn opengl_camera_to_world_round_trips() {
        let pose = Pose::from_quaternion([0.3, -0.2, 0.9, 0.1], [0.5, -1.5, 2.0]).unwrap();
        let m = pose.to_opengl_c2w();
        let c2w = [m[0], m[1], m[2]];
        let back = opengl_c2w_to_opencv_w2c(&c2w);
        assert!(close(&back.rotation, &pose.rotation, 1e-12));
        assert!(close(&back.translation, &pose.translation, 1e-12));
        // Turned by a quarter turn about the camera's y axis: the same centre, the camera's
        // forward axis now its old x axis.
        let quarter = [0.0, 0.0, -1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        let turned = pose.turned(&quarter);
        assert!(close(&turned.center(), &pose.center(), 1e-12));
        assert!(close(&turned.rotation[6..9], &pose.rotation[0..3], 1e-12));
    }

    #[test]
    fn center_inverts_the_transform() {
        let pose = Pose::from_quaternion([0.3, -0.2, 0.9, 0.1], [0.5, -1.5, 2.0]).unwrap();
        let c = pose.center();
        assert!(close(&pose.transform_point(c), &[0.0; 3], 1e-12));
    }

    #[test]
    fn pose_problems_are_reported() {
        let mut pose = Pose::from_quaternion([1.0, 0.0, 0.0, 0.0], [0.0; 3]).unwrap();
        pose.translation[1] = f64::INFINITY;
        assert!(pose.problem().unwrap().contains("non-finite"));
        let mut scaled = Pose::from_quaternion([1.0, 0.0, 0.0, 0.0], [0.0; 3]).unwrap();
        scaled.rotation[0] = 2.0;
        assert!(scaled.problem().unwrap().contains("orthonormal"));
        let mut mirrored = Pose::from_quaternion([1.0, 0.0, 0.0, 0.0], [0.0; 3]).unwrap();
        mirrored.rotation[8] = -1.0;
        assert!(mirrored.problem().unwrap().contains("reflection"));
    }

    #[test]
    fn fisheye_distortion_follows_the_equidistant_model_and_inverts() {
        let d = Distortion {
            k1: -0.01,
            k2: 0.002,
            k3: -0.0005,
            k4: 0.0001,
            fisheye: true,
            ..Distortion::default()
        };
        // A ray at 45 degrees lands at theta_d = theta (1 + k1 theta^2 + ...) from the centre.
        let theta = std::f64::consts::FRAC_PI_4;
        let t2 = theta * theta;
        let expected = theta * (1.0 + t2 * (-0.01 + t2 * (0.002 + t2 * (-0.0005 + t2 * 0.0001))));
        let (xd, yd) = d.distort(1.0, 0.0);
        assert!((xd - expected).abs() < 1e-12 && yd == 0.0, "{xd}");
        // With no coefficients a fisheye still bends rays: r -> atan(r).
        let (xd, _) = Distortion {
            fisheye: true,
            ..Distortion::default()
        }
        .distort(1.0, 0.0);
        assert!((xd - theta).abs() < 1e-12);
        for &(x, y) in &[(0.0, 0.0), (0.3, -0.2), (-0.5, 0.4), (0.6, 0.6)] {
            let (xd, yd) = d.distort(x, y);
            let (xu, yu) = d.undistort(xd, yd);
            assert!((xu - x).abs() < 1e-9 && (yu - y).abs() < 1e-9, "{x},{y}");
        }
        assert!(!d.is_none());
    }

    #[test]
    fn undistort_inverts_distort() {
        let d = Distortion {
            k1: -0.12,
            k2: 0.03,
            k3: -0.001,
            p1: 0.001,
            p2: -0.0007,
            ..Distortion::default()
        };
        for &(x, y) in &[(0.0, 0.0), (0.3, -0.2), (-0.5, 0.4), (0.6, 0.6)] {
            let (xd, yd) = d.distort(x, y);
            let (xu, yu) = d.undistort(xd, yd);
            assert!((xu - x).abs() < 1e-9 && (yu - y).abs() < 1e-9, "{x},{y}");
        }
        assert!(Distortion::default().is_none());
        assert!(!d.is_none());
    }

    #[test]
    fn resized_intrinsics_scale_per_axis() {
        let k = Intrinsics {
            fx: 1000.0,
            fy: 1010.0,
            cx: 500.0,
            cy: 330.0,
            width: 1000,
            height: 660,
        };
        let half = k.resized(500, 330);
        assert_eq!(
            (half.fx, half.fy, half.cx, half.cy),
            (500.0, 505.0, 250.0, 165.0)
        );
        assert!(k.problem().is_none());
        let bad = Intrinsics { fx: -1.0, ..k };
        assert!(bad.problem().unwrap().contains("positive"));
    }
}
