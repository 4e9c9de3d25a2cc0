//! `[poses]`: refining the training cameras' poses beside the field (see [`crate::poses`]).

use serde::{Deserialize, Serialize};

/// Camera pose refinement: a rotation and a translation correction per training camera,
/// learned with the field, for captures whose poses (COLMAP's, a phone's) are off by a fraction
/// of a degree. Held-out cameras keep their given poses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PosesConfig {
    /// Whether the training cameras' poses are learned.
    pub refine: bool,
    /// First (0-based) step at which the corrections learn; before it the field forms from
    /// the given poses (a correction learned against an empty field only chases noise).
    pub start: usize,
    /// Adam's learning rate of the rotation corrections, radians. Each camera's correction
    /// takes one step per visit, so a scene of V photos trained for S steps moves it about
    /// S / V times.
    pub lr_rotation: f64,
    /// Adam's learning rate of the translation corrections, in units of the scene's extent
    /// (the cameras' spread, as the centres' rate). A tenth of the rotation's: for a camera
    /// a few scene units from what it sees, a shift across the view draws nearly what a turn
    /// does, and the faster of the two takes the correction (on cup_colmap's pose variant,
    /// equal rates left the shifts further off than they started: BENCHMARKS.md).
    pub lr_translation: f64,
    /// The rates at the last step as a fraction of the first ones, reached by an exponential
    /// decay from `start`. Adam steps a camera by about its rate whatever the gradient's size,
    /// so late steps at a high rate walk cameras that are already right: on cup_colmap's pose
    /// variant 0.01 measured 29.30 dB held out against 28.82 at 0.1 (BENCHMARKS.md).
    pub lr_final: f64,
    /// What holds the refined cameras' common frame: `"none"` or `"mean"` (see [`PoseAnchor`]).
    pub anchor: PoseAnchor,
}

/// What keeps the refined cameras, as a whole, where the given poses put them.
///
/// Turning or shifting every camera and the field together draws the same photos, so the
/// training loss neither pulls that common motion nor holds it: refined cameras and their
/// field may drift together, and held-out cameras, which keep their given poses, then see
/// the field from a frame it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PoseAnchor {
    /// Nothing holds the frame.
    #[default]
    None,
    /// After every step the rig's common motion (the mean turn of the cameras in the world's
    /// frame, and the move of their centres' centroid) is taken out of every refined camera:
    /// the cameras keep the given ones' centroid and mean orientation, and the field the given
    /// frame (up to the mean of the poses' own errors, which no photo can show).
    Mean,
}

impl Default for PosesConfig {
    fn default() -> Self {
        PosesConfig {
            refine: false,
            start: 500,
            lr_rotation: 2e-3,
            lr_translation: 2e-4,
            lr_final: 0.01,
            anchor: PoseAnchor::None,
        }
    }
}

impl PosesConfig {
    /// Checks the values no type can; `Err` names the key.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.lr_rotation.is_finite() && self.lr_rotation >= 0.0) {
            return Err("`poses.lr_rotation` must be a finite rate >= 0".to_string());
        }
        if !(self.lr_translation.is_finite() && self.lr_translation >= 0.0) {
            return Err("`poses.lr_translation` must be a finite rate >= 0".to_string());
        }
        if !(self.lr_final.is_finite() && self.lr_final > 0.0 && self.lr_final <= 1.0) {
            return Err("`poses.lr_final` must be in (0, 1]".to_string());
        }
        Ok(())
    }
}
