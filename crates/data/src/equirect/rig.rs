//! [`EquirectRig`]: the pinhole views a panorama is cut into (the layout of [`super`]'s module
//! doc).

use serde::{Deserialize, Serialize};

use crate::camera::Intrinsics;

/// The pinhole views each panorama is cut into (`data.equirect` in a training config): `views`
/// per ring at each pitch of `pitch_deg`, plus straight up and down with `poles`, each a square
/// of `size` pixels seeing `fov_deg` degrees across.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EquirectRig {
    /// Views per ring, evenly spaced in yaw (the first looks along the panorama's centre
    /// column).
    pub views: u32,
    /// Field of view of every view, degrees, across the square (below 180).
    pub fov_deg: f64,
    /// Side of every view, pixels, before the dataset's `downsample`; `None`: the panorama's
    /// own density at a view's centre, `W tan(fov / 2) / π` for a panorama `W` pixels wide.
    pub size: Option<u32>,
    /// Pitch of each ring, degrees, positive up (every other ring is turned by half a yaw
    /// step).
    pub pitch_deg: Vec<f64>,
    /// Add a view straight up and one straight down.
    pub poles: bool,
}

impl Default for EquirectRig {
    /// Eight views of 90° on the horizon and the two poles: the whole sphere.
    fn default() -> Self {
        EquirectRig {
            views: 8,
            fov_deg: 90.0,
            size: None,
            pitch_deg: vec![0.0],
            poles: true,
        }
    }
}

/// One view of a rig, for a panorama of a given width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RigCamera {
    /// Index in the rig (rings in `pitch_deg` order, yaw increasing; then up, then down).
    pub index: usize,
    /// Rotation from the panorama camera's axes to this view's, 3x3 row-major (OpenCV axes):
    /// `p_view = R p_panorama`; the view's world-to-camera rotation is `R` times the
    /// panorama's.
    pub rotation: [f64; 9],
    /// The view's pinhole intrinsics (square pixels, principal point at the centre).
    pub intrinsics: Intrinsics,
}

impl RigCamera {
    /// The view of yaw `yaw` and pitch `pitch` (radians) for an image of `size` pixels seeing
    /// `fov` radians across.
    pub fn looking(index: usize, yaw: f64, pitch: f64, fov: f64, size: u32) -> RigCamera {
        let (sy, cy) = yaw.sin_cos();
        let (sp, cp) = pitch.sin_cos();
        let forward = [cp * sy, -sp, cp * cy];
        let right = [cy, 0.0, -sy];
        let down = cross(forward, right);
        let focal = 0.5 * f64::from(size) / (0.5 * fov).tan();
        let centre = 0.5 * f64::from(size);
        RigCamera {
            index,
            rotation: [
                right[0], right[1], right[2], down[0], down[1], down[2], forward[0], forward[1],
                forward[2],
            ],
            intrinsics: Intrinsics {
                fx: focal,
                fy: focal,
                cx: centre,
                cy: centre,
                width: size,
                height: size,
            },
        }
    }

    /// The view's forward axis in the panorama camera's axes.
    pub fn forward(&self) -> [f64; 3] {
        [self.rotation[6], self.rotation[7], self.rotation[8]]
    }

    /// Whether the direction `d` (panorama camera's axes) falls inside the view's image.
    pub fn sees(&self, d: [f64; 3]) -> bool {
        let r = &self.rotation;
        let p =
            [0, 1, 2].map(|row| r[3 * row] * d[0] + r[3 * row + 1] * d[1] + r[3 * row + 2] * d[2]);
        if p[2] <= 0.0 {
            return false;
        }
        let k = &self.intrinsics;
        let x = k.fx * p[0] / p[2] + k.cx;
        let y = k.fy * p[1] / p[2] + k.cy;
        (0.0..=f64::from(k.width)).contains(&x) && (0.0..=f64::from(k.height)).contains(&y)
    }
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

impl EquirectRig {
    /// `None` when the rig can cut views, else what is wrong with it (named by its keys).
    pub fn problem(&self) -> Option<String> {
        if !(self.fov_deg.is_finite() && self.fov_deg > 0.0 && self.fov_deg < 180.0) {
            return Some(format!(
                "fov_deg = {} is not a pinhole's field of view (above 0, below 180)",
                self.fov_deg
            ));
        }
        if let Some(bad) = self
            .pitch_deg
            .iter()
            .find(|p| !(p.is_finite() && (-90.0..=90.0).contains(*p)))
        {
            return Some(format!("pitch_deg holds {bad}, outside -90..=90"));
        }
        if self.size == Some(0) || self.size.is_some_and(|s| s > 16384) {
            return Some(format!(
                "size = {} is not a view size (1..=16384 pixels)",
                self.size.unwrap_or_default()
            ));
        }
        if self.view_count() == 0 {
            return Some(format!(
                "the rig has no views (views = {}, {} pitches, poles = {}): it covers nothing",
                self.views,
                self.pitch_deg.len(),
                self.poles
            ));
        }
        None
    }

    /// Views per panorama.
    pub fn view_count(&self) -> usize {
        self.views as usize * self.pitch_deg.len() + if self.poles { 2 } else { 0 }
    }

    /// The side of a view cut from a panorama `width` pixels wide, before any downsampling:
    /// [`EquirectRig::size`], else the panorama's density at the view's centre.
    pub fn native_size(&self, width: u32) -> u32 {
        self.size.unwrap_or_else(|| {
            let side =
                f64::from(width) * (0.5 * self.fov_deg.to_radians()).tan() / std::f64::consts::PI;
            (side.round() as u32).max(1)
        })
    }

    /// The views, each `size` pixels square, in [`RigCamera::index`] order.
    pub fn cameras(&self, size: u32) -> Vec<RigCamera> {
        let fov = self.fov_deg.to_radians();
        let mut cameras = Vec::with_capacity(self.view_count());
        let step = std::f64::consts::TAU / f64::from(self.views.max(1));
        for (ring, pitch) in self.pitch_deg.iter().enumerate() {
            let offset = if ring % 2 == 1 { 0.5 * step } else { 0.0 };
            for k in 0..self.views {
                let yaw = offset + step * f64::from(k);
                let index = cameras.len();
                cameras.push(RigCamera::looking(
                    index,
                    yaw,
                    pitch.to_radians(),
                    fov,
                    size,
                ));
            }
        }
        if self.poles {
            for pitch in [90.0f64, -90.0] {
                let index = cameras.len();
                cameras.push(RigCamera::looking(
                    index,
                    0.0,
                    pitch.to_radians(),
                    fov,
                    size,
                ));
            }
        }
        cameras
    }

    /// The fraction of all directions that some view sees, from `samples` directions spread
    /// evenly over the sphere (a Fibonacci lattice).
    pub fn coverage(&self, samples: usize) -> f64 {
        let cameras = self.cameras(64);
        if cameras.is_empty() || samples == 0 {
            return 0.0;
        }
        let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
        let seen = (0..samples)
            .filter(|&i| {
                let y = 1.0 - 2.0 * (i as f64 + 0.5) / samples as f64;
                let radius = (1.0 - y * y).sqrt();
                let angle = golden * i as f64;
                let d = [radius * angle.cos(), y, radius * angle.sin()];
                cameras.iter().any(|c| c.sees(d))
            })
            .count();
        seen as f64 / samples as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotation_is_orthonormal(r: &[f64; 9]) -> bool {
        (0..3).all(|a| {
            (0..3).all(|b| {
                let dot: f64 = (0..3).map(|k| r[3 * a + k] * r[3 * b + k]).sum();
                (dot - if a == b { 1.0 } else { 0.0 }).abs() < 1e-12
            })
        })
    }

    #[test]
    fn the_default_rig_covers_the_sphere_with_right_handed_views() {
        let rig = EquirectRig::default();
        assert_eq!(rig.problem(), None);
        assert_eq!(rig.view_count(), 10);
        assert_eq!(rig.native_size(2048), 652);
        let cameras = rig.cameras(100);
        for c in &cameras {
            assert!(rotation_is_orthonormal(&c.rotation), "{c:?}");
            let r = &c.rotation;
            let det = r[0] * (r[4] * r[8] - r[5] * r[7]) - r[1] * (r[3] * r[8] - r[5] * r[6])
                + r[2] * (r[3] * r[7] - r[4] * r[6]);
            assert!((det - 1.0).abs() < 1e-12);
        }
        // The first view looks along the panorama's forward axis, the third to its right
        // (yaw 90°), the up view along -y (OpenCV's up).
        assert!(
            cameras[0]
                .forward()
                .iter()
                .zip([0.0, 0.0, 1.0])
                .all(|(a, b)| (a - b).abs() < 1e-12)
        );
        assert!(
            cameras[2]
                .forward()
                .iter()
                .zip([1.0, 0.0, 0.0])
                .all(|(a, b)| (a - b).abs() < 1e-12)
        );
        assert!(
            cameras[8]
                .forward()
                .iter()
                .zip([0.0, -1.0, 0.0])
                .all(|(a, b)| (a - b).abs() < 1e-12)
        );
        assert_eq!(rig.coverage(20_000), 1.0);
        let ring = EquirectRig {
            poles: false,
            ..EquirectRig::default()
        };
        let covered = ring.coverage(20_000);
        // The ring reaches about ±43° of latitude: sin(43°) of the sphere.
        assert!(
            (covered - 43f64.to_radians().sin()).abs() < 0.02,
            "{covered}"
        );
    }

    #[test]
    fn rigs_that_cannot_cut_views_are_refused() {
        let nothing = EquirectRig {
            views: 0,
            poles: false,
            ..EquirectRig::default()
        };
        assert!(nothing.problem().unwrap().contains("covers nothing"));
        assert_eq!(nothing.coverage(100), 0.0);
        let wide = EquirectRig {
            fov_deg: 180.0,
            ..EquirectRig::default()
        };
        assert!(wide.problem().unwrap().contains("fov_deg"));
        let tilted = EquirectRig {
            pitch_deg: vec![0.0, 95.0],
            ..EquirectRig::default()
        };
        assert!(tilted.problem().unwrap().contains("pitch_deg"));
        let empty = EquirectRig {
            size: Some(0),
            ..EquirectRig::default()
        };
        assert!(empty.problem().unwrap().contains("size"));
    }
}
