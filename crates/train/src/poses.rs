//! Camera pose refinement: a rotation and translation correction per training camera, learned
//! with the field (`[poses] refine = true`).
//!
//! ## The correction
//! Camera `v` is drawn through its given pose moved by a correction `(R_v, tau_v)`: a point it
//! sees at `p` is seen at `R_v p + tau_v` (a turn about its centre, then a shift in its own
//! axes; [`ember_kernels::project::pose`]). Each step, the projection's gradient with respect
//! to a further correction `(tau, omega)` of the camera as drawn
//! ([`PoseMoments::gradient`]) takes one Adam step, `delta`, applied on the left:
//!
//! ```text
//! R_v <- exp([delta_omega]x) R_v,      tau_v <- exp([delta_omega]x) tau_v + delta_tau
//! ```
//!
//! so the moments live in the tangent space at the current correction and no angle wraps.
//! Each camera keeps its own moments and step count (one step per visit, as each photo's
//! appearance: [`crate::appearance`]). The rates decay exponentially from `poses.start` to
//! `poses.lr_final` of themselves at the last step; the translation's is in units of the
//! scene's extent, as the centres' is.
//!
//! The held-out cameras keep their given poses: the field the refined cameras teach is measured
//! from the poses a user gave.
//!
//! ## The common frame (`poses.anchor = "mean"`)
//! Every camera moved by one rigid motion `M` of the world, with the field moved by `M`,
//! draws the same photos, so nothing in the loss holds the corrections' common part. The rig's
//! motion is measured as the given noise is made, a turn about each camera's centre and a move
//! of the centre: with `P_v = V_v^-1` camera `v`'s camera-to-world pose as given (rotation
//! `R_v^T`, centre `c_v`) and `P'_v` as drawn (`R'_v^T`, `c'_v`),
//!
//! ```text
//! omega = mean_v log(R'_v^T R_v),      M(x) = exp([omega]x) (x - mean c_v) + mean c'_v,
//! P'_v <- M^-1 P'_v   (V'_v <- V'_v M)   for every camera,
//! ```
//!
//! after every step: the drawn cameras' centroid is the given one's exactly, their mean turn
//! zero to first order (each step removes what that step's few cameras added, divided among all
//! of them), and the cameras stand to one another as before. A camera turned about its own
//! centre moves no centre, so it adds to the rig's turn and not to its shift.
//!
//! ## What it costs
//! The gradient is four small matrix products over the Gaussians per view and one read of a few
//! hundred numbers (which waits for the device): the poses are host values, as the cameras
//! are. A batch of several views runs the projection's backward once per view, so that each
//! camera gets its own gradient (the same work as one backward over all of them).

use ember_field::Camera;
use ember_kernels::project::pose::{compose, invert, rotation_matrix, rotation_vector};
use serde::{Deserialize, Serialize};

use crate::config::{PoseAnchor, PosesConfig};

/// One training camera's correction and its Adam state.
#[derive(Debug, Clone, PartialEq)]
struct Correction {
    /// `R_v`, row-major.
    rotation: [f64; 9],
    /// `tau_v`, scene units, in the camera's axes.
    translation: [f64; 3],
    /// Adam's moments over `(tau, omega)`.
    exp_avg: [f64; 6],
    exp_avg_sq: [f64; 6],
    steps: u32,
}

impl Correction {
    const IDENTITY: Correction = Correction {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0; 3],
        exp_avg: [0.0; 6],
        exp_avg_sq: [0.0; 6],
        steps: 0,
    };
}

/// The training cameras' pose corrections, with their optimiser state (see the module docs).
#[derive(Debug, Clone)]
pub struct CameraPoses {
    config: PosesConfig,
    corrections: Vec<Correction>,
    /// Adam's decays and epsilon.
    betas: (f64, f64),
    eps: f64,
    /// The scene's extent: the translation's rate is in these units.
    extent: f64,
    /// The run's steps, for the rates' decay.
    steps: usize,
}

/// Values per camera in [`CameraPoses::state`]: the rotation (9), the translation (3), Adam's
/// two moments (6 each) and the step count.
pub const STATE_PER_CAMERA: usize = 9 + 3 + 6 + 6 + 1;

/// The rig's common motion ([`CameraPoses::rig_motion`]).
struct RigMotion {
    /// Mean rotation vector of the cameras' turns in the world's frame.
    omega: [f64; 3],
    /// Centroid of the given cameras' centres.
    given_centroid: [f64; 3],
    /// Centroid of the drawn cameras' centres.
    drawn_centroid: [f64; 3],
}

/// How far refinement moved a set of cameras.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CameraMotion {
    /// Mean turn, degrees.
    pub mean_degrees: f64,
    /// Largest turn, degrees.
    pub max_degrees: f64,
    /// Mean move of the camera centre, scene units.
    pub mean_shift: f64,
    /// Largest move of the camera centre, scene units.
    pub max_shift: f64,
    /// The rig's common turn, degrees: the angle of the mean rotation vector of the cameras'
    /// turns in the world's frame (a turn of the whole rig, which no photo shows; held at zero
    /// by `poses.anchor = "mean"`, to first order).
    pub common_degrees: f64,
    /// How far the cameras' centroid moved, scene units (held at zero by `"mean"`).
    pub common_shift: f64,
}

impl CameraPoses {
    /// Identity corrections for `cameras` training cameras, or `None` when `config` does not
    /// refine. `adam` is the run's `(beta1, beta2, eps)`; `extent` the scene's; `steps` the
    /// run's.
    pub fn new(
        config: &PosesConfig,
        cameras: usize,
        adam: (f64, f64, f64),
        extent: f64,
        steps: usize,
    ) -> Option<CameraPoses> {
        config.refine.then(|| CameraPoses {
            config: config.clone(),
            corrections: vec![Correction::IDENTITY; cameras],
            betas: (adam.0, adam.1),
            eps: adam.2,
            extent,
            steps,
        })
    }

    /// The corrections and their Adam state, `[V, STATE_PER_CAMERA]` row-major (what a
    /// checkpoint keeps, in f64: a resumed run continues bit for bit).
    pub fn state(&self) -> Vec<f64> {
        self.corrections
            .iter()
            .flat_map(|c| {
                c.rotation
                    .iter()
                    .chain(&c.translation)
                    .chain(&c.exp_avg)
                    .chain(&c.exp_avg_sq)
                    .copied()
                    .chain([c.steps as f64])
            })
            .collect()
    }

    /// Restores [`CameraPoses::state`] of a run over the same cameras; `Err` says what does
    /// not match. Nothing changes on an error.
    pub fn load_state(&mut self, state: &[f64]) -> Result<(), String> {
        let cameras = self.corrections.len();
        if state.len() != cameras * STATE_PER_CAMERA {
            return Err(format!(
                "it holds the poses of {} cameras, this run has {cameras}",
                state.len() / STATE_PER_CAMERA
            ));
        }
        let mut corrections = Vec::with_capacity(cameras);
        for row in state.chunks_exact(STATE_PER_CAMERA) {
            let steps = row[24];
            if !(row.iter().all(|v| v.is_finite()) && steps.fract() == 0.0 && steps >= 0.0) {
                return Err(
                    "its pose corrections hold a value that is not finite or a step \
                     count that is not a count"
                        .to_string(),
                );
            }
            let take = |at: usize, n: usize| row[at..at + n].to_vec();
            corrections.push(Correction {
                rotation: take(0, 9).try_into().expect("nine values"),
                translation: take(9, 3).try_into().expect("three values"),
                exp_avg: take(12, 6).try_into().expect("six values"),
                exp_avg_sq: take(18, 6).try_into().expect("six values"),
                steps: steps as u32,
            });
        }
        self.corrections = corrections;
        Ok(())
    }

    /// Whether the corrections learn at (0-based) step `step`.
    pub fn active_at(&self, step: usize) -> bool {
        step >= self.config.start
    }

    /// Camera `v` as drawn: `given` moved by its correction.
    pub fn camera(&self, v: usize, given: &Camera) -> Camera {
        let c = &self.corrections[v];
        given.moved_by(&c.rotation, &c.translation)
    }

    /// The rates `(rotation, translation)` at (0-based) step `step`.
    fn rates(&self, step: usize) -> (f64, f64) {
        let span = self.steps.saturating_sub(self.config.start).max(1) as f64;
        let t = (step.saturating_sub(self.config.start) as f64 / span).min(1.0);
        let decay = self.config.lr_final.powf(t);
        (
            self.config.lr_rotation * decay,
            self.config.lr_translation * self.extent * decay,
        )
    }

    /// One Adam step of camera `v`'s correction at (0-based) step `step`, from the loss's
    /// gradient `[dL/dtau (3), dL/domega (3)]` at the camera as drawn.
    pub fn update(&mut self, v: usize, grad: [f64; 6], step: usize) {
        let (lr_rotation, lr_translation) = self.rates(step);
        let (b1, b2) = self.betas;
        let eps = self.eps;
        let c = &mut self.corrections[v];
        c.steps += 1;
        let bias1 = 1.0 - b1.powi(c.steps as i32);
        let bias2 = 1.0 - b2.powi(c.steps as i32);
        let mut delta = [0.0; 6];
        for e in 0..6 {
            c.exp_avg[e] = b1 * c.exp_avg[e] + (1.0 - b1) * grad[e];
            c.exp_avg_sq[e] = b2 * c.exp_avg_sq[e] + (1.0 - b2) * grad[e] * grad[e];
            let lr = if e < 3 { lr_translation } else { lr_rotation };
            delta[e] = -lr * (c.exp_avg[e] / bias1) / ((c.exp_avg_sq[e] / bias2).sqrt() + eps);
        }
        let turn = rotation_matrix([delta[3], delta[4], delta[5]]);
        (c.rotation, c.translation) = compose(
            &turn,
            &[delta[0], delta[1], delta[2]],
            &c.rotation,
            &c.translation,
        );
    }

    /// The rig's common motion (see the module docs): the mean rotation vector `omega` of the
    /// cameras' turns in the world's frame, and the given and drawn centroids of their centres.
    fn rig_motion<'a>(&self, given: impl Iterator<Item = &'a Camera>) -> RigMotion {
        let count = self.corrections.len().max(1) as f64;
        let mut motion = RigMotion {
            omega: [0.0; 3],
            given_centroid: [0.0; 3],
            drawn_centroid: [0.0; 3],
        };
        for (c, camera) in self.corrections.iter().zip(given) {
            let drawn = camera.moved_by(&c.rotation, &c.translation);
            let (drawn_to_world, _) = invert(&drawn.rotation, &[0.0; 3]);
            let (turn, _) = compose(&drawn_to_world, &[0.0; 3], &camera.rotation, &[0.0; 3]);
            let (omega, a, b) = (rotation_vector(&turn), camera.center(), drawn.center());
            for k in 0..3 {
                motion.omega[k] += omega[k] / count;
                motion.given_centroid[k] += a[k] / count;
                motion.drawn_centroid[k] += b[k] / count;
            }
        }
        motion
    }

    /// Takes the rig's common motion out of every camera (`poses.anchor = "mean"`; see the
    /// module docs); nothing happens under `"none"`. `given` yields the training cameras as
    /// given, in order (walked twice: once for the motion, once to take it out).
    pub fn hold_frame<'a>(&mut self, given: impl Iterator<Item = &'a Camera> + Clone) {
        if self.config.anchor == PoseAnchor::None || self.corrections.is_empty() {
            return;
        }
        let rig = self.rig_motion(given.clone());
        let turn = rotation_matrix(rig.omega);
        let turned: [f64; 3] = core::array::from_fn(|i| {
            (0..3)
                .map(|k| turn[3 * i + k] * rig.given_centroid[k])
                .sum::<f64>()
        });
        let shift: [f64; 3] = core::array::from_fn(|i| rig.drawn_centroid[i] - turned[i]);
        for (c, camera) in self.corrections.iter_mut().zip(given) {
            let drawn = camera.moved_by(&c.rotation, &c.translation);
            let (held_r, held_t) = compose(&drawn.rotation, &drawn.translation, &turn, &shift);
            let (r, t) = invert(&camera.rotation, &camera.translation);
            (c.rotation, c.translation) = compose(&held_r, &held_t, &r, &t);
        }
    }

    /// Camera `v`'s correction as `(degrees turned, camera centre moved in scene units)`.
    pub fn moved(&self, v: usize, given: &Camera) -> (f64, f64) {
        let r = &self.corrections[v].rotation;
        let cos = ((r[0] + r[4] + r[8] - 1.0) / 2.0).clamp(-1.0, 1.0);
        let (a, b) = (given.center(), self.camera(v, given).center());
        let shift = (0..3).map(|k| (a[k] - b[k]).powi(2)).sum::<f64>().sqrt();
        (cos.acos().to_degrees(), shift)
    }

    /// How far the corrections moved `given` (the training cameras, in order).
    pub fn motion(&self, given: &[Camera]) -> CameraMotion {
        let moved: Vec<(f64, f64)> = given
            .iter()
            .enumerate()
            .map(|(v, camera)| self.moved(v, camera))
            .collect();
        let count = moved.len().max(1) as f64;
        let rig = self.rig_motion(given.iter());
        let norm = |v: [f64; 3]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        CameraMotion {
            mean_degrees: moved.iter().map(|m| m.0).sum::<f64>() / count,
            max_degrees: moved.iter().map(|m| m.0).fold(0.0, f64::max),
            mean_shift: moved.iter().map(|m| m.1).sum::<f64>() / count,
            max_shift: moved.iter().map(|m| m.1).fold(0.0, f64::max),
            common_degrees: norm(rig.omega).to_degrees(),
            common_shift: norm(core::array::from_fn(|k| {
                rig.drawn_centroid[k] - rig.given_centroid[k]
            })),
        }
    }
}
