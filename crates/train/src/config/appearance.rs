//! `[appearance]`: what belongs to each training photo's exposure and white balance, learned
//! beside the field and never drawn into it (see [`crate::appearance`]).

use serde::{Deserialize, Serialize};

/// Per-photo appearance: a colour transform per training photo, applied to the render before
/// the loss, so that a photo shot brighter, darker or warmer than the others does not pull the
/// scene's colours towards it. Held-out views, exports, the viewer and `trainer render` draw the
/// field without any photo's transform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AppearanceConfig {
    /// `"none"` (every photo is the field's colours), `"exposure"` (a gain and an offset per
    /// colour channel and photo: exposure and white balance) or `"bilateral_grid"` (a grid of
    /// affine colour maps per photo, by position and luminance: see [`crate::appearance`]).
    pub kind: AppearanceKind,
    /// Adam's learning rate of the per-photo parameters (log-gains and offsets). Each photo's
    /// parameters take one step per visit, so a scene of V photos trained for S steps moves
    /// them about S / V times.
    pub lr: f64,
    /// Weight `w` of the pull of the log-gains towards the identity: `w |g|^2` per photo,
    /// added to their gradient as `2 w g` (it keeps a photo that the field cannot explain from
    /// taking an extreme transform). The transform shared by every photo is not learned: the
    /// photos' parameters are kept averaging zero, so the field takes the capture's average
    /// exposure, the one a held-out photo of it most likely has.
    pub identity_pull: f64,
    /// Weight of the same pull on the offsets; unset, the kind's own
    /// ([`AppearanceConfig::offset_pull`]). Over the large even areas of a real photo a gain
    /// and an offset draw nearly the same colours, and a weak pull (1e-3) lets the exposure's
    /// offsets take up part of each photo's exposure (on cup_colmap's exposure variant the
    /// learned log-gains followed the applied ones with a slope of 0.5-0.8), which leaves the
    /// field's colours off on every held-out view. At 10 the gains come out as applied (slope
    /// 0.96) and the variant's held-out PSNR rose from 27.7 to 29.1 dB (with
    /// `saturation_bound`; BENCHMARKS.md). The bilateral grid measured worse with both
    /// (22.73 against 23.63 dB held out, 27.72 against 28.44 colour-corrected) and keeps 1e-3
    /// and no bound.
    pub offset_pull: Option<f64>,
    /// Where each photo's exposure starts: `"identity"` (a gain of 1), or `"keypoints"` (the
    /// exposure of a COLMAP capture only): the gains fitted from the colours the photos'
    /// keypoints show of the capture's 3D points, before the first step
    /// ([`ember_data::colmap::keypoint_exposures`]). With `lr = 0` they stay there: on a
    /// variant of cup_colmap whose held-out photos are at the capture's average exposure that
    /// measured 30.86 dB held out against 28.97 learned from the identity (the capture: 31.19;
    /// BENCHMARKS.md).
    pub init: AppearanceInit,
    /// First (0-based) step at which the transforms apply and learn; before it every photo is
    /// compared with the field's colours as they are.
    pub start: usize,
    /// Whether a photo's saturated channel values (255) count as a bound while a transform
    /// applies: a photo shot brighter clips its highlights, and 255 there says only "at least
    /// this bright", so where the transformed render is brighter the channel adds no loss
    /// (where it is darker, the photo pulls it up as any other pixel). Without it the clipped
    /// highlights of the brighter photos darken the field's, and the offsets bend each photo's
    /// transform to fit them (on cup_colmap's exposure variant, 12% of the training pixels:
    /// held-out PSNR 27.0 dB without, 27.7 with, 29.1 with the offsets held: BENCHMARKS.md).
    /// A photo composited over a white background has 255 there too: turn this off for such a
    /// scene. Unset, the kind's own ([`AppearanceConfig::saturation_bound`]).
    pub saturation_bound: Option<bool>,
    /// The bilateral grid's cells `[L, GH, GW]`: luminance levels, rows, columns (each in
    /// 2..=256; `kind = "bilateral_grid"` only). Coarser than gsplat's 8 x 16 x 16: a photo is
    /// visited far fewer times in an Ember run, and a fine grid takes up detail the field
    /// should learn (at 100x75 pixels, 4 x 4 x 4 measured 1 dB above 8 x 16 x 16:
    /// docs/benchmarks-history.md).
    pub grid: [usize; 3],
    /// Weight `w_tv` of the bilateral grid's total variation (the squared differences of
    /// neighbouring cells' maps, averaged per axis), added to each photo's gradient. 100
    /// measured best of 10, 100, 300 and 1000.
    pub tv_weight: f64,
}

impl Default for AppearanceConfig {
    fn default() -> Self {
        AppearanceConfig {
            kind: AppearanceKind::None,
            lr: 0.02,
            identity_pull: 1e-3,
            offset_pull: None,
            init: AppearanceInit::Identity,
            start: 0,
            saturation_bound: None,
            grid: [8, 8, 8],
            tv_weight: 100.0,
        }
    }
}

impl AppearanceConfig {
    /// The offsets' pull: `offset_pull` when set, else the kind's measured default (10 for
    /// the exposure, 1e-3 for the bilateral grid: see `offset_pull`).
    pub fn offset_pull(&self) -> f64 {
        self.offset_pull.unwrap_or(match self.kind {
            AppearanceKind::BilateralGrid => 1e-3,
            AppearanceKind::None | AppearanceKind::Exposure => 10.0,
        })
    }

    /// Whether saturated photo channels count as bounds: `saturation_bound` when set, else the
    /// kind's measured default (on for the exposure, off for the bilateral grid).
    pub fn saturation_bound(&self) -> bool {
        self.saturation_bound
            .unwrap_or(!matches!(self.kind, AppearanceKind::BilateralGrid))
    }

    /// Checks the values no type can; `Err` names the key.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.lr.is_finite() && self.lr >= 0.0) {
            return Err("`appearance.lr` must be a finite rate >= 0".to_string());
        }
        if !(self.identity_pull.is_finite() && self.identity_pull >= 0.0) {
            return Err("`appearance.identity_pull` must be finite and >= 0".to_string());
        }
        if !self.offset_pull.is_none_or(|w| w.is_finite() && w >= 0.0) {
            return Err("`appearance.offset_pull` must be finite and >= 0".to_string());
        }
        if !(self.tv_weight.is_finite() && self.tv_weight >= 0.0) {
            return Err("`appearance.tv_weight` must be finite and >= 0".to_string());
        }
        if self.init == AppearanceInit::Keypoints && self.kind != AppearanceKind::Exposure {
            return Err(
                "`appearance.init = \"keypoints\"` fits an exposure: it needs \
                 `appearance.kind = \"exposure\"`"
                    .to_string(),
            );
        }
        if self.grid.iter().any(|&n| !(2..=256).contains(&n)) {
            return Err(format!(
                "`appearance.grid` is {:?}; each of [levels, rows, columns] must lie in 2..=256",
                self.grid
            ));
        }
        Ok(())
    }
}

/// Which colour transform each training photo gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AppearanceKind {
    /// None: every photo is compared with the field's own colours.
    #[default]
    None,
    /// Per channel `c`: `exp(g_c) rgb_c + b_c`, six parameters a photo, starting at the
    /// identity (`g = b = 0`).
    Exposure,
    /// A bilateral grid of affine colour maps per photo (`grid`, `tv_weight`), sliced by pixel
    /// position and luminance: local and tone-dependent exposure and white balance.
    BilateralGrid,
}

/// Where each photo's transform starts ([`AppearanceConfig::init`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AppearanceInit {
    /// The identity: every photo starts as the field's colours.
    #[default]
    Identity,
    /// The exposure's log-gains fitted from a COLMAP capture's keypoints.
    Keypoints,
}
