//! Camera paths: key views at given times, and the cameras of every video frame between them,
//! the `--path` of `trainer render`.
//!
//! # File format
//! JSON, unknown keys refused at every level:
//!
//! ```json
//! {"fps": 30, "keyframes": [
//!   {"time": 0.0, "camera": {"rotation": [1,0,0, 0,1,0, 0,0,1], "translation": [0,0,4],
//!                            "fx": 100, "fy": 100, "cx": 32, "cy": 24, "width": 64, "height": 48}},
//!   {"time": 2.0, "camera": {"...": "the same fields"}}
//! ], "render": {"background": [1, 1, 1], "sh_degree": 1, "lod_threshold": 1.0}}
//! ```
//!
//! - `fps`: frames per second, positive and at most [`MAX_FPS`]; 30 when absent.
//! - `render` (optional, every key optional): how every frame is drawn, as the viewer's page
//!   drew it when it saved the path ([`PathRender`]): `background` RGB in `[0, 1]`, `sh_degree`
//!   0 to 3 (at most the scene's), `lod_threshold` pixels from 0 to [`MAX_LOD_THRESHOLD`] (level
//!   of detail, as the viewer draws it; 0 or absent draws every Gaussian).
//! - `keyframes[i].time`: seconds, finite, strictly increasing; at least one keyframe.
//! - `keyframes[i].camera`: a [`CameraParams`] in its JSON form (the `--camera` file of
//!   `trainer render`), checked as [`parse_camera_file`](crate::parse_camera_file) checks one;
//!   every keyframe has the same `width` and `height`, and its centre `-R^T t` lies within
//!   `f32` range (where the Gaussians are).
//!
//! # Frames
//! Frame `i` is at `t0 + i / fps` for `i` in `0..=floor((t_last - t0) fps)` (one frame for one
//! keyframe), at most [`MAX_FRAMES`]. Between two keyframes, with `s` the fraction of the
//! segment's duration elapsed:
//! - the camera centre follows a Catmull-Rom spline through the keyframe centres with the
//!   keyframe times as knots (cubic Hermite, tangent at key `j`
//!   `(c[j+1] - c[j-1]) / (t[j+1] - t[j-1])`; at the ends the end point is duplicated one
//!   segment beyond), so the speed is continuous across keyframes;
//! - the rotation is the quaternion slerp from one key's rotation to the next's, `s` of the way
//!   along the shorter arc;
//! - `fx`, `fy`, `cx`, `cy` move linearly.
//!
//! At a keyframe's time the frame is that keyframe's camera as given; between keyframes the
//! rotation is orthonormal to rounding (1e-15).

use std::path::Path;

use ember_kernels::CameraParams;
use ember_kernels::quat::quat_from_rotation;

use crate::camera::check_camera;
use crate::error::{DataError, Result};

/// The highest frame rate a path may ask for, frames per second.
pub const MAX_FPS: f64 = 240.0;

/// The most frames a path may make (at 30 fps, 55 minutes).
pub const MAX_FRAMES: usize = 100_000;

/// The frame rate of a path file without `fps`, frames per second.
const DEFAULT_FPS: f64 = 30.0;

/// The largest `render.lod_threshold` a path may ask for, pixels (the viewer's limit).
pub const MAX_LOD_THRESHOLD: f64 = 64.0;

/// How every frame of a path is drawn (the file's `render`): what the viewer's page showed.
/// `None` leaves the renderer's own choice (black, every band the scene has, every Gaussian).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRender {
    /// RGB behind the splats, each in `[0, 1]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<[f64; 3]>,
    /// The highest SH degree evaluated, 0 to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sh_degree: Option<u32>,
    /// Level of detail, pixels (0 to [`MAX_LOD_THRESHOLD`]; 0 draws every Gaussian).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lod_threshold: Option<f64>,
}

/// One key view of a [`CameraPath`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keyframe {
    /// When the path passes through this view, seconds.
    pub time: f64,
    /// The view: world-to-camera pose and pinhole intrinsics, OpenCV axes.
    pub camera: CameraParams,
}

/// A path file as JSON holds it, before any check.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PathFile {
    #[serde(default = "default_fps")]
    fps: f64,
    keyframes: Vec<Keyframe>,
    #[serde(default)]
    render: PathRender,
}

fn default_fps() -> f64 {
    DEFAULT_FPS
}

/// A checked camera path (see the [module docs](self) for the rules): at least one keyframe,
/// strictly increasing finite times, one image size, a frame rate in `(0, MAX_FPS]`, at most
/// [`MAX_FRAMES`] frames. Serialises to the file format [`parse_camera_path`] reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CameraPath {
    fps: f64,
    keyframes: Vec<Keyframe>,
    #[serde(skip_serializing_if = "is_default")]
    render: PathRender,
}

fn is_default(render: &PathRender) -> bool {
    *render == PathRender::default()
}

/// Reads a camera path file (the `--path` of `trainer render`; format in the [module
/// docs](self)). `path` names the file in errors, which also name the field
/// (`keyframes[2].time: ...`).
pub fn parse_camera_path(bytes: &[u8], path: &Path) -> Result<CameraPath> {
    let file: PathFile = serde_json::from_slice(bytes).map_err(|cause| DataError::Json {
        path: path.to_path_buf(),
        cause,
    })?;
    let problem = |field: String, problem: String| DataError::CameraPath {
        path: path.to_path_buf(),
        field,
        problem,
    };
    if file.fps.is_nan() || file.fps <= 0.0 || file.fps > MAX_FPS {
        return Err(problem(
            "fps".to_string(),
            format!(
                "{} frames per second is out of range (more than 0, at most {MAX_FPS})",
                file.fps
            ),
        ));
    }
    let render = &file.render;
    if let Some(bg) = render
        .background
        .filter(|bg| !bg.iter().all(|c| (0.0..=1.0).contains(c)))
    {
        return Err(problem(
            "render.background".to_string(),
            format!("{bg:?}: each channel must be in [0, 1]"),
        ));
    }
    if let Some(degree) = render.sh_degree.filter(|&d| d > 3) {
        return Err(problem(
            "render.sh_degree".to_string(),
            format!("{degree}: at most 3"),
        ));
    }
    if let Some(t) = render
        .lod_threshold
        .filter(|t| !(0.0..=MAX_LOD_THRESHOLD).contains(t))
    {
        return Err(problem(
            "render.lod_threshold".to_string(),
            format!("{t}: pixels from 0 (every Gaussian) to {MAX_LOD_THRESHOLD}"),
        ));
    }
    let (Some(first), Some(last)) = (file.keyframes.first(), file.keyframes.last()) else {
        return Err(problem(
            "keyframes".to_string(),
            "no keyframes: a path needs at least one".to_string(),
        ));
    };
    for (i, key) in file.keyframes.iter().enumerate() {
        let name = format!("keyframes[{i}]");
        if !key.time.is_finite() {
            return Err(problem(
                format!("{name}.time"),
                format!("{} is not a finite number of seconds", key.time),
            ));
        }
        if i > 0 {
            let before = file.keyframes[i - 1].time;
            if key.time <= before {
                return Err(problem(
                    format!("{name}.time"),
                    format!(
                        "{} is not after keyframes[{}].time ({before}): times must increase",
                        key.time,
                        i - 1
                    ),
                ));
            }
        }
        check_camera(&key.camera, path, &format!("{name}.camera"))?;
        let (width, height) = (key.camera.width, key.camera.height);
        if (width, height) != (first.camera.width, first.camera.height) {
            return Err(problem(
                format!("{name}.camera"),
                format!(
                    "{width}x{height}, but keyframes[0].camera is {}x{}: every keyframe must \
                     have the same size",
                    first.camera.width, first.camera.height
                ),
            ));
        }
        let center = key.camera.center();
        if center
            .iter()
            .any(|v| v.is_nan() || v.abs() > f64::from(f32::MAX))
        {
            return Err(problem(
                format!("{name}.camera"),
                format!("centre -R^T t = {center:?} is beyond f32 range, where no Gaussian can be"),
            ));
        }
    }
    let last_index = ((last.time - first.time) * file.fps + 1e-9).floor();
    if last_index.is_nan() || last_index >= MAX_FRAMES as f64 {
        return Err(problem(
            "fps".to_string(),
            format!(
                "{} s (keyframes[0].time to keyframes[{}].time) at {} fps makes more than the \
                 {MAX_FRAMES} frames a path may have",
                last.time - first.time,
                file.keyframes.len() - 1,
                file.fps
            ),
        ));
    }
    Ok(CameraPath {
        fps: file.fps,
        keyframes: file.keyframes,
        render: file.render,
    })
}

impl CameraPath {
    /// Frames per second.
    pub fn fps(&self) -> f64 {
        self.fps
    }

    /// The key views, in time order (at least one).
    pub fn keyframes(&self) -> &[Keyframe] {
        &self.keyframes
    }

    /// How every frame is drawn (the file's `render`).
    pub fn render(&self) -> &PathRender {
        &self.render
    }

    /// Width and height of every frame, pixels.
    pub fn size(&self) -> (u32, u32) {
        let camera = &self.keyframes[0].camera;
        (camera.width, camera.height)
    }

    /// Number of frames: `floor((t_last - t0) fps) + 1` (`1e-9` of a frame forgiven, so a
    /// duration that is a whole number of frames ends on a frame), at most [`MAX_FRAMES`].
    pub fn frame_count(&self) -> usize {
        let span = self.keyframes[self.keyframes.len() - 1].time - self.keyframes[0].time;
        (span * self.fps + 1e-9).floor() as usize + 1
    }

    /// When frame `index` is shown: `t0 + index / fps`, seconds.
    pub fn frame_time(&self, index: usize) -> f64 {
        self.keyframes[0].time + index as f64 / self.fps
    }

    /// The camera of every frame, in order ([`Self::frame_count`] of them).
    pub fn frames(&self) -> impl ExactSizeIterator<Item = CameraParams> + '_ {
        (0..self.frame_count()).map(|i| self.camera_at(self.frame_time(i)))
    }

    /// The camera at `time` (seconds): a keyframe's camera as given at its time, the first
    /// before the first and the last after the last, interpolated in between (module docs).
    pub fn camera_at(&self, time: f64) -> CameraParams {
        let keys = &self.keyframes;
        let last = keys.len() - 1;
        if time.is_nan() || time <= keys[0].time {
            return keys[0].camera;
        }
        if time >= keys[last].time {
            return keys[last].camera;
        }
        // keys[k].time <= time < keys[k + 1].time, with 0 <= k < last.
        let k = keys.partition_point(|key| key.time <= time) - 1;
        let (from, to) = (&keys[k], &keys[k + 1]);
        if time == from.time {
            return from.camera;
        }
        let duration = to.time - from.time;
        let s = ((time - from.time) / duration).clamp(0.0, 1.0);

        let (c0, c1) = (from.camera.center(), to.camera.center());
        let (m0, m1) = (self.tangent(k, duration), self.tangent(k + 1, duration));
        let h01 = s * s * (3.0 - 2.0 * s);
        let h10 = s * (1.0 - s) * (1.0 - s);
        let h11 = s * s * (s - 1.0);
        let center = [0, 1, 2].map(|a| c0[a] + h01 * (c1[a] - c0[a]) + h10 * m0[a] + h11 * m1[a]);

        let q = slerp(
            quat_from_rotation(from.camera.rotation),
            quat_from_rotation(to.camera.rotation),
            s,
        );
        let lerp = |a: f64, b: f64| a + s * (b - a);
        let (a, b) = (&from.camera, &to.camera);
        CameraParams {
            rotation: ember_kernels::quat::rotation_matrix(q),
            translation: [0.0; 3],
            fx: lerp(a.fx, b.fx),
            fy: lerp(a.fy, b.fy),
            cx: lerp(a.cx, b.cx),
            cy: lerp(a.cy, b.cy),
            width: a.width,
            height: a.height,
        }
        .with_center(center)
    }

    /// The Catmull-Rom tangent of the centre at keyframe `j`, in world units per segment of
    /// `duration` seconds: `(c[j+1] - c[j-1]) duration / (t[j+1] - t[j-1])`, where a missing
    /// neighbour is the end keyframe itself one segment beyond. Needs two keyframes or more.
    fn tangent(&self, j: usize, duration: f64) -> [f64; 3] {
        let keys = &self.keyframes;
        let last = keys.len() - 1;
        let (before, after) = (&keys[j.saturating_sub(1)], &keys[(j + 1).min(last)]);
        let reach = if j == 0 {
            2.0 * (keys[1].time - keys[0].time)
        } else if j == last {
            2.0 * (keys[last].time - keys[last - 1].time)
        } else {
            after.time - before.time
        };
        let (c_before, c_after) = (before.camera.center(), after.camera.center());
        let scale = duration / reach;
        [0, 1, 2].map(|a| (c_after[a] - c_before[a]) * scale)
    }
}

/// `q / |q|`.
fn normalized(q: [f64; 4]) -> [f64; 4] {
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    q.map(|v| v / norm)
}

/// The unit quaternion `s` (0 to 1) of the way from `a` to `b` along the shorter arc, at
/// constant angular speed; a normalised linear blend where the two are within `1e-6` rad.
fn slerp(a: [f64; 4], b: [f64; 4], s: f64) -> [f64; 4] {
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    // q and -q are the same rotation: take the one nearer `a`.
    let (b, dot) = if dot < 0.0 {
        (b.map(|v| -v), -dot)
    } else {
        (b, dot)
    };
    let angle = dot.min(1.0).acos();
    let (wa, wb) = if angle < 1e-6 {
        (1.0 - s, s)
    } else {
        let sin = angle.sin();
        (((1.0 - s) * angle).sin() / sin, (s * angle).sin() / sin)
    };
    normalized([0, 1, 2, 3].map(|i| wa * a[i] + wb * b[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "path.json";

    /// A 64x48 camera at centre `center` with rotation `rotation` and focal length `fx`.
    fn camera(rotation: [f64; 9], center: [f64; 3], fx: f64) -> CameraParams {
        CameraParams {
            rotation,
            translation: [0.0; 3],
            fx,
            fy: fx,
            cx: 32.0,
            cy: 24.0,
            width: 64,
            height: 48,
        }
        .with_center(center)
    }

    const IDENTITY: [f64; 9] = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];

    /// The rotation by `angle` radians about the world y axis.
    fn about_y(angle: f64) -> [f64; 9] {
        let (s, c) = angle.sin_cos();
        [c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c]
    }

    fn path_json(fps: Option<f64>, keys: &[(f64, CameraParams)]) -> String {
        let keyframes: Vec<Keyframe> = keys
            .iter()
            .map(|&(time, camera)| Keyframe { time, camera })
            .collect();
        let mut json = serde_json::json!({ "keyframes": keyframes });
        if let Some(fps) = fps {
            json["fps"] = fps.into();
        }
        json.to_string()
    }

    fn parse(json: &str) -> Result<CameraPath> {
        parse_camera_path(json.as_bytes(), Path::new(FILE))
    }

    fn error(json: &str) -> String {
        parse(json).expect_err("a bad path").to_string()
    }

    fn max_difference(a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    /// Largest entry of `R R^T - I`, and the determinant.
    fn orthonormality(r: &[f64; 9]) -> (f64, f64) {
        let mut worst = 0.0f64;
        for i in 0..3 {
            for j in 0..3 {
                let dot: f64 = (0..3).map(|k| r[3 * i + k] * r[3 * j + k]).sum();
                worst = worst.max((dot - if i == j { 1.0 } else { 0.0 }).abs());
            }
        }
        let det = r[0] * (r[4] * r[8] - r[5] * r[7]) - r[1] * (r[3] * r[8] - r[5] * r[6])
            + r[2] * (r[3] * r[7] - r[4] * r[6]);
        (worst, det)
    }

    /// Three keys turning and moving, the middle one off the frame grid.
    fn three_keys() -> Vec<(f64, CameraParams)> {
        vec![
            (0.0, camera(IDENTITY, [0.0, 0.0, -4.0], 60.0)),
            (0.25, camera(about_y(0.7), [2.0, 0.5, -3.0], 70.0)),
            (0.5, camera(about_y(-2.5), [3.0, -1.0, 1.0], 50.0)),
        ]
    }

    #[test]
    fn frame_count_covers_the_keyframe_times() {
        let keys = three_keys();
        let path = parse(&path_json(Some(10.0), &keys)).unwrap();
        // 0.5 s at 10 fps: frames at 0.0, 0.1, ..., 0.5.
        assert_eq!(path.frame_count(), 6);
        assert_eq!(path.frames().len(), 6);
        assert_eq!(path.size(), (64, 48));
        // The default frame rate is 30.
        let default = parse(&path_json(None, &keys)).unwrap();
        assert_eq!(default.fps(), 30.0);
        assert_eq!(default.frame_count(), 16);
        // 1 s at 24 fps ends on a frame; 1.02 s does not add one.
        let one_second = [(0.0, keys[0].1), (1.0, keys[1].1)];
        assert_eq!(
            parse(&path_json(Some(24.0), &one_second))
                .unwrap()
                .frame_count(),
            25
        );
        let longer = [(0.0, keys[0].1), (1.02, keys[1].1)];
        assert_eq!(
            parse(&path_json(Some(24.0), &longer))
                .unwrap()
                .frame_count(),
            25
        );
        // One keyframe is one frame, its camera.
        let single = parse(&path_json(Some(24.0), &keys[..1])).unwrap();
        assert_eq!(single.frames().collect::<Vec<_>>(), vec![keys[0].1]);
    }

    #[test]
    fn the_path_passes_through_every_keyframe_and_rotations_stay_orthonormal() {
        let path = parse(&path_json(Some(10.0), &three_keys())).unwrap();
        // The keys as parsed (JSON text may not give back every last bit of a float).
        let keys: Vec<(f64, CameraParams)> = path
            .keyframes()
            .iter()
            .map(|k| (k.time, k.camera))
            .collect();
        for &(time, key) in &keys {
            assert_eq!(path.camera_at(time), key);
            // Just beside the key, within 1e-9.
            let near = path.camera_at(time - 1e-13);
            assert!(max_difference(&near.rotation, &key.rotation) < 1e-9);
            assert!(max_difference(&near.center(), &key.center()) < 1e-9);
            assert!((near.fx - key.fx).abs() < 1e-9);
        }
        assert_eq!(path.frames().next(), Some(keys[0].1));
        assert_eq!(path.frames().last(), Some(keys[2].1));
        for i in 0..=100 {
            let camera = path.camera_at(i as f64 * 0.005);
            let (worst, det) = orthonormality(&camera.rotation);
            assert!(
                worst < 1e-9 && (det - 1.0).abs() < 1e-9,
                "{i}: {worst} {det}"
            );
            assert!(camera.fx >= 50.0 && camera.fx <= 70.0);
        }
        // Before the first key and after the last the path holds still.
        assert_eq!(path.camera_at(-1.0), keys[0].1);
        assert_eq!(path.camera_at(9.0), keys[2].1);
    }

    #[test]
    fn half_way_through_a_quarter_turn_is_an_eighth_turn() {
        let quarter = std::f64::consts::FRAC_PI_2;
        let keys = [
            (0.0, camera(IDENTITY, [0.0, 0.0, 0.0], 60.0)),
            (1.0, camera(about_y(quarter), [0.0, 0.0, 0.0], 80.0)),
        ];
        let path = parse(&path_json(Some(2.0), &keys)).unwrap();
        let middle = path.frames().nth(1).expect("three frames");
        assert!(
            max_difference(&middle.rotation, &about_y(quarter / 2.0)) < 1e-12,
            "{:?}",
            middle.rotation
        );
        assert!((middle.fx - 70.0).abs() < 1e-12);
        // A quarter of the way is a sixteenth of a turn: constant angular speed.
        let quarter_way = path.camera_at(0.25);
        assert!(max_difference(&quarter_way.rotation, &about_y(quarter / 4.0)) < 1e-12);
        // Shortest arc: a turn of 350 degrees goes back by 10.
        let long_way = [
            (0.0, keys[0].1),
            (1.0, camera(about_y(350f64.to_radians()), [0.0; 3], 60.0)),
        ];
        let path = parse(&path_json(Some(2.0), &long_way)).unwrap();
        let middle = path.camera_at(0.5);
        assert!(max_difference(&middle.rotation, &about_y((-5f64).to_radians())) < 1e-12);
    }

    #[test]
    fn the_centre_follows_a_catmull_rom_spline_in_time() {
        // Centres on a line at constant speed, unevenly spaced keys: the spline keeps the speed.
        let keys: Vec<(f64, CameraParams)> = [0.0, 0.5, 2.0, 2.5]
            .iter()
            .map(|&t| (t, camera(IDENTITY, [2.0 * t, 0.0, -4.0], 60.0)))
            .collect();
        let path = parse(&path_json(Some(8.0), &keys)).unwrap();
        // Interior segment: tangents are exact, so the straight line is reproduced.
        for t in [0.75, 1.0, 1.25, 1.5, 1.75] {
            let center = path.camera_at(t).center();
            assert!(
                max_difference(&center, &[2.0 * t, 0.0, -4.0]) < 1e-12,
                "{t}"
            );
        }
        // The curve stays on the line between the end keys, moving forward.
        let mut previous = f64::NEG_INFINITY;
        for camera in path.frames() {
            let c = camera.center();
            assert!(c[1].abs() < 1e-12 && (c[2] + 4.0).abs() < 1e-12);
            assert!(c[0] > previous);
            previous = c[0];
        }
    }

    #[test]
    fn a_path_that_holds_still_stays_still() {
        let key = camera(about_y(1.1), [1.0, 2.0, 3.0], 60.0);
        let path = parse(&path_json(
            Some(30.0),
            &[(0.0, key), (1.0, key), (3.0, key)],
        ))
        .unwrap();
        assert_eq!(path.frame_count(), 91);
        for camera in path.frames() {
            assert!(max_difference(&camera.rotation, &key.rotation) < 1e-12);
            assert!(max_difference(&camera.translation, &key.translation) < 1e-12);
            assert_eq!(
                (camera.fx, camera.cx, camera.width),
                (key.fx, key.cx, key.width)
            );
        }
    }

    #[test]
    fn bad_paths_name_the_file_and_the_field() {
        let keys = three_keys();
        let good = path_json(Some(10.0), &keys);
        let cases: Vec<(String, &[&str])> = vec![
            (
                good.replacen("\"keyframes\"", "\"speed\": 1, \"keyframes\"", 1),
                &["unknown field `speed`"],
            ),
            (
                good.replacen("\"time\"", "\"duration\": 1, \"time\"", 1),
                &["unknown field `duration`"],
            ),
            (
                path_json(Some(10.0), &[keys[0], keys[1], (0.25, keys[2].1)]),
                &["keyframes[2].time", "not after keyframes[1].time (0.25)"],
            ),
            (
                path_json(Some(10.0), &[keys[1], keys[0]]),
                &["keyframes[1].time", "must increase"],
            ),
            (
                path_json(
                    Some(10.0),
                    &[
                        keys[0],
                        keys[1],
                        (
                            1.0,
                            CameraParams {
                                width: 32,
                                ..keys[2].1
                            },
                        ),
                    ],
                ),
                &[
                    "keyframes[2].camera",
                    "32x48",
                    "keyframes[0].camera is 64x48",
                ],
            ),
            (path_json(Some(10.0), &[]), &["keyframes: no keyframes"]),
            (r#"{"fps": 30}"#.to_string(), &["missing field `keyframes`"]),
            (path_json(Some(0.0), &keys), &["fps: 0 frames per second"]),
            (path_json(Some(-5.0), &keys), &["fps: -5"]),
            (path_json(Some(241.0), &keys), &["fps: 241", "at most 240"]),
            (good.replacen("10.0", "1e999", 1), &["number out of range"]),
            (
                good.replacen("\"time\":0.25", "\"time\":1e999", 1),
                &["number out of range"],
            ),
            (
                path_json(Some(240.0), &[keys[0], (1000.0, keys[1].1)]),
                &["fps:", "more than the 100000 frames"],
            ),
            (
                path_json(
                    Some(10.0),
                    &[
                        keys[0],
                        (
                            1.0,
                            CameraParams {
                                rotation: [2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                                ..keys[1].1
                            },
                        ),
                    ],
                ),
                &["pose of `keyframes[1].camera` is invalid", "orthonormal"],
            ),
            (
                path_json(
                    Some(10.0),
                    &[
                        keys[0],
                        (
                            1.0,
                            CameraParams {
                                fy: -1.0,
                                ..keys[1].1
                            },
                        ),
                    ],
                ),
                &["camera `keyframes[1].camera` has invalid intrinsics"],
            ),
            (
                path_json(
                    Some(10.0),
                    &[(0.0, camera(IDENTITY, [1e300, 0.0, 0.0], 60.0))],
                ),
                &["keyframes[0].camera", "beyond f32 range"],
            ),
            (r#"{"fps": 30, "keyframes": ["#.to_string(), &["EOF"]),
            (
                good.replacen("{", r#"{"render": {"background": [0, 1.5, 0]}, "#, 1),
                &["render.background", "[0, 1]"],
            ),
            (
                good.replacen("{", r#"{"render": {"sh_degree": 4}, "#, 1),
                &["render.sh_degree: 4", "at most 3"],
            ),
            (
                good.replacen("{", r#"{"render": {"lod_threshold": 65}, "#, 1),
                &["render.lod_threshold: 65"],
            ),
            (
                good.replacen("{", r#"{"render": {"lod": 1}, "#, 1),
                &["unknown field `lod`"],
            ),
        ];
        for (json, expected) in cases {
            let message = error(&json);
            assert!(message.starts_with(FILE), "{message}");
            for text in expected {
                assert!(message.contains(text), "expected `{text}` in {message}");
            }
        }
    }

    #[test]
    fn render_settings_are_read_and_written_back() {
        let keys = three_keys();
        let plain = parse(&path_json(None, &keys)).unwrap();
        assert_eq!(*plain.render(), PathRender::default());
        assert!(
            !serde_json::to_string(&plain).unwrap().contains("render"),
            "a path without settings is written without them"
        );
        let json = path_json(None, &keys).replacen(
            "{",
            r#"{"render": {"background": [1, 1, 1], "sh_degree": 1, "lod_threshold": 2.5}, "#,
            1,
        );
        let path = parse(&json).unwrap();
        let want = PathRender {
            background: Some([1.0; 3]),
            sh_degree: Some(1),
            lod_threshold: Some(2.5),
        };
        assert_eq!(*path.render(), want);
        let again = parse(&serde_json::to_string(&path).unwrap()).unwrap();
        assert_eq!(again, path);
    }

    #[test]
    fn a_path_survives_a_json_round_trip() {
        let path = parse(&path_json(Some(12.5), &three_keys())).unwrap();
        let json = serde_json::to_vec(&path).unwrap();
        assert_eq!(parse_camera_path(&json, Path::new(FILE)).unwrap(), path);
        let text = String::from_utf8(json).unwrap();
        assert!(text.starts_with(r#"{"fps":12.5,"keyframes":[{"time":0.0,"camera":{"rotation""#));
    }
}
