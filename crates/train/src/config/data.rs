//! `[data]`: where the views come from, and the built-in scene.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::TrainConfig;

/// Where the views come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// A scene folder (COLMAP, NeRF-Synthetic or nerfstudio, see `ember-data`); `None` trains
    /// on the built-in procedural scene ([`ProceduralConfig`]).
    pub path: Option<PathBuf>,
    /// Integer factor the images are shrunk by.
    pub downsample: u32,
    /// The longest image side after downsampling, pixels: `downsample` is raised to the
    /// smallest factor that brings every view within it; `None`: no limit.
    pub max_side: Option<u32>,
    /// At most this many views per split (evenly spaced); `None`: all.
    pub max_images: Option<usize>,
    /// Without split files, hold out every `test_every`-th view.
    pub test_every: Option<usize>,
    /// The views evaluation measures ([`EvalSplit`]).
    pub eval_split: EvalSplit,
    /// Background colour, RGB in `[0, 1]`: transparent pixels of RGBA images are composited
    /// over it, and the renderer draws it behind the splats.
    pub background: [f32; 3],
    /// Train each step against a new uniformly random background colour (the render's
    /// background and the target's, recomposited from its alpha; opaque images keep their
    /// pixels), so that transparent regions cannot be explained by a colour painted into them.
    /// Evaluation always uses `background`.
    pub random_background: bool,
    /// Use each photo's alpha channel as its mask: transparent pixels take no part in the loss
    /// or the metrics, instead of being composited over `background` (a photo without alpha
    /// is an error). Masks from files need no key: a `masks/` folder beside a COLMAP scene's
    /// `images/`, or a nerfstudio frame's `mask_path` (see `ember_data::DatasetOptions`).
    pub alpha_as_mask: bool,
    /// A PLY point cloud for initialisation, relative to the scene folder, replacing the
    /// scene's own points (e.g. `init.ply` of a NeRF-Synthetic-style folder).
    pub point_cloud: Option<PathBuf>,
    /// The pinhole views each 360° panorama (a nerfstudio `EQUIRECTANGULAR` frame) is cut
    /// into: `views` per ring at each of `pitch_deg`, the two `poles`, each `size` pixels
    /// (default: the panorama's density) seeing `fov_deg` (see `ember_data::EquirectRig`).
    /// All views of a held-out panorama are held out.
    pub equirect: ember_data::EquirectRig,
    /// Train on each training panorama whole, projected onto the sphere
    /// (`ember_field::panorama_batch_pass`), instead of on its rig's pinhole views; held-out
    /// panoramas are still cut into the rig, which evaluation measures. The projection runs on
    /// the host. Refused with what needs pinhole views: pose refinement, the multi-view
    /// error's densification, the 3D smoothing filter, a coarse-to-fine schedule and evaluating
    /// the training views.
    pub whole_panoramas: bool,
    /// Device memory for the training photos, MB: each is uploaded once, as 8-bit values, and
    /// kept on the training device while the total fits; the photos past it are uploaded at
    /// every step that uses them. 0 uploads every photo per step (see
    /// [`crate::targets::TargetImages`]).
    pub image_budget_mb: usize,
    /// The built-in scene used when `path` is `None`.
    pub procedural: ProceduralConfig,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            path: None,
            downsample: 1,
            max_side: None,
            max_images: None,
            test_every: Some(8),
            eval_split: EvalSplit::Test,
            background: [1.0, 1.0, 1.0],
            random_background: false,
            alpha_as_mask: false,
            point_cloud: None,
            equirect: ember_data::EquirectRig::default(),
            whole_panoramas: false,
            image_budget_mb: 4096,
            procedural: ProceduralConfig::default(),
        }
    }
}

/// The views an evaluation renders and measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EvalSplit {
    /// The held-out views: the dataset's test split (every `test_every`-th view of a capture,
    /// `transforms_test.json` of a NeRF-Synthetic scene), else its val split when it has no
    /// test split.
    #[default]
    Test,
    /// The dataset's val split (`transforms_val.json`).
    Val,
    /// The training views (how well the field fits what it saw).
    Train,
}

impl EvalSplit {
    /// Its name in a config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EvalSplit::Test => "test",
            EvalSplit::Val => "val",
            EvalSplit::Train => "train",
        }
    }
}

/// The built-in scene: a hidden Gaussian field (coloured shapes) rendered by Ember's own
/// renderer from cameras on a sphere around it (see [`crate::scene::procedural`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProceduralConfig {
    /// Image width and height, pixels.
    pub resolution: u32,
    /// Training views.
    pub train_views: usize,
    /// Held-out views.
    pub test_views: usize,
    /// Gaussians of the hidden scene.
    pub gaussians: usize,
    /// Sparse points handed to initialisation (noisy samples of the hidden Gaussians' centres).
    pub points: usize,
}

impl Default for ProceduralConfig {
    fn default() -> Self {
        ProceduralConfig {
            resolution: 64,
            train_views: 32,
            test_views: 8,
            gaussians: 1500,
            points: 500,
        }
    }
}

impl DataConfig {
    /// The key of `config` that whole panoramas cannot train with, if any.
    pub(super) fn whole_panorama_conflict(config: &TrainConfig) -> Option<&'static str> {
        if !config.data.whole_panoramas {
            return None;
        }
        let raster = &config.raster;
        [
            ("poses.refine", config.poses.refine),
            ("densify.error_weight", config.densify.error_weight > 0.0),
            (
                "raster.filter_3d",
                raster.antialiased && raster.filter_3d > 0.0,
            ),
            ("resolution.start", config.resolution.start > 1),
            (
                "data.eval_split",
                config.data.eval_split == EvalSplit::Train,
            ),
        ]
        .into_iter()
        .find_map(|(key, set)| set.then_some(key))
    }
}
