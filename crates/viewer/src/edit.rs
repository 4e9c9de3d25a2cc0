//! Editing the served scene from the page: the operations of `trainer edit` (a crop box or
//! sphere kept or deleted, opacity and size thresholds: [`SplatFilter`]) applied one after the
//! other, with undo and redo, and the result downloaded as a PLY file.
//!
//! The editor keeps the scene as loaded (host [`Splats`]) and the list of edits applied; the
//! scene drawn is the loaded one through each edit in turn, so undo and redo recompute it from
//! the original instead of keeping a copy per step. Each edit is a `trainer edit` command line
//! ([`EditFilter::flags`]): the page's download equals `trainer edit`'s output for those
//! commands run in order, byte for byte. A scene can also be replaced by another
//! ([`EditCommand::Open`]: a file dropped on the page), whose edits start afresh.

use std::path::Path;
use std::sync::Arc;

use ember_data::lod::build_hierarchy;
use ember_data::{HierarchyConfig, Region, SplatFilter, Splats};
use ember_field::splats::field_from_splats;
use ember_field::{GaussianField, GaussianHierarchy};
use ember_kernels::SplatBackend;
use serde::{Deserialize, Serialize};

use crate::frame::SceneLod;
use crate::scene::{Mode, SceneInfo};

/// A [`SplatFilter`] as the page sends it, in `trainer edit`'s terms (see PROTOCOL.md).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFilter {
    /// `--crop-box`: `[min x, min y, min z, max x, max y, max z]`, world units.
    #[serde(default)]
    pub crop_box: Option<[f64; 6]>,
    /// `--crop-sphere`: `[x, y, z, radius]`, world units.
    #[serde(default)]
    pub crop_sphere: Option<[f64; 4]>,
    /// `--outside`: keep what lies outside the region (delete the region).
    #[serde(default)]
    pub outside: bool,
    /// `--min-opacity`.
    #[serde(default)]
    pub min_opacity: Option<f64>,
    /// `--max-scale`, world units.
    #[serde(default)]
    pub max_scale: Option<f64>,
}

impl EditFilter {
    /// The filter, or why it cannot be one (both regions, or a setting out of range).
    pub fn filter(&self) -> Result<SplatFilter, String> {
        if self.crop_box.is_some() && self.crop_sphere.is_some() {
            return Err("give a crop box or a crop sphere, not both".into());
        }
        let filter = SplatFilter {
            region: Region::from_flags(self.crop_box, self.crop_sphere),
            outside: self.outside,
            min_opacity: self.min_opacity,
            max_scale: self.max_scale,
        };
        filter.check()?;
        Ok(filter)
    }

    /// The `trainer edit` flags of the filter. Numbers are written in their shortest form that
    /// reads back to the same `f64`, so the command does exactly what the page did.
    pub fn flags(&self) -> String {
        let list = |values: &[f64]| {
            values
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut flags = Vec::new();
        if let Some(b) = self.crop_box {
            flags.push(format!("--crop-box {}", list(&b)));
        }
        if let Some(s) = self.crop_sphere {
            flags.push(format!("--crop-sphere {}", list(&s)));
        }
        if self.outside {
            flags.push("--outside".into());
        }
        if let Some(o) = self.min_opacity {
            flags.push(format!("--min-opacity {o}"));
        }
        if let Some(s) = self.max_scale {
            flags.push(format!("--max-scale {s}"));
        }
        flags.join(" ")
    }
}

/// What a page asks of the editor.
#[derive(Debug, Clone, PartialEq)]
pub enum EditCommand {
    /// Keep what the filter selects.
    Apply(EditFilter),
    /// Take the last edit back.
    Undo,
    /// Apply the last edit taken back again.
    Redo,
    /// Show another scene instead (a file dropped on the page): the edits start afresh.
    Open {
        /// Its Gaussians.
        splats: Box<Splats>,
        /// Its file name.
        name: String,
    },
}

/// The editor's state as the pages see it (the `edits` message).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EditState {
    /// Gaussians in the scene now.
    pub gaussians: usize,
    /// Gaussians in the scene as loaded.
    pub original: usize,
    /// The edits applied, first first.
    pub applied: Vec<AppliedEdit>,
    /// Edits taken back that redo would apply again.
    pub redo: usize,
}

/// One edit of [`EditState::applied`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppliedEdit {
    /// The filter.
    pub filter: EditFilter,
    /// Its `trainer edit` flags.
    pub flags: String,
    /// Gaussians it removed.
    pub removed: usize,
}

/// The served scene under edit (see the [module docs](self)).
pub struct SceneEditor<B: SplatBackend> {
    original: Splats,
    applied: Vec<EditFilter>,
    undone: Vec<EditFilter>,
    current: Arc<Splats>,
    /// Gaussians each applied edit removed.
    removed: Vec<usize>,
    field: GaussianField<B>,
    lod: Option<SceneLod<B>>,
    /// How an opened scene is drawn through a hierarchy: at this threshold, from this many
    /// Gaussians on ([`SceneEditor::with_lod_for_opened`]).
    lod_for_opened: Option<(f32, usize)>,
    device: B::Device,
}

impl<B: SplatBackend> SceneEditor<B> {
    /// An editor of `splats`, drawn as `field` (the same Gaussians, possibly reordered as a
    /// hierarchy's leaves) and through `lod` when given (rebuilt with the default
    /// [`HierarchyConfig`] after each edit, at the same threshold).
    pub fn new(splats: Splats, field: GaussianField<B>, lod: Option<SceneLod<B>>) -> Self {
        let device = field.means.device();
        SceneEditor {
            current: Arc::new(splats.clone()),
            original: splats,
            applied: Vec::new(),
            undone: Vec::new(),
            removed: Vec::new(),
            field,
            lod,
            lod_for_opened: None,
            device,
        }
    }

    /// The same editor, drawing a scene opened later ([`EditCommand::Open`]) through a
    /// hierarchy at `threshold` pixels when it has at least `min_gaussians` (without this,
    /// opened scenes are drawn whole).
    pub fn with_lod_for_opened(mut self, threshold: f32, min_gaussians: usize) -> Self {
        self.lod_for_opened = Some((threshold, min_gaussians));
        self
    }

    /// What the pages are told of the scene now, named `name` (a scene without dataset
    /// cameras: the page frames its Gaussians).
    pub fn scene_info(&self, name: String) -> SceneInfo {
        let means = self.current.means.as_flattened();
        SceneInfo::framed(
            name,
            Mode::Scene,
            self.current.sh_degree,
            means,
            Vec::new(),
            None,
        )
        .with_lod(self.lod.as_ref().map(SceneLod::info))
    }

    /// The field to draw.
    pub fn field(&self) -> &GaussianField<B> {
        &self.field
    }

    /// Its level-of-detail hierarchy, when it is drawn through one.
    pub fn lod(&self) -> Option<&SceneLod<B>> {
        self.lod.as_ref()
    }

    /// The scene as edited.
    pub fn splats(&self) -> &Arc<Splats> {
        &self.current
    }

    /// The state the pages are told.
    pub fn state(&self) -> EditState {
        EditState {
            gaussians: self.current.len(),
            original: self.original.len(),
            applied: self
                .applied
                .iter()
                .zip(&self.removed)
                .map(|(filter, &removed)| AppliedEdit {
                    filter: *filter,
                    flags: filter.flags(),
                    removed,
                })
                .collect(),
            redo: self.undone.len(),
        }
    }

    /// Carries out `command`; on an error (a filter out of range, an edit that would keep
    /// nothing, nothing to undo or redo) the scene is unchanged.
    pub fn run(&mut self, command: EditCommand) -> Result<(), String> {
        match command {
            EditCommand::Apply(filter) => {
                let kept = self.current.filtered(&filter.filter()?);
                if kept.is_empty() {
                    return Err(format!(
                        "the edit keeps none of the {} Gaussians: not applied",
                        self.current.len()
                    ));
                }
                let removed = self.current.len() - kept.len();
                self.show(kept)?;
                self.removed.push(removed);
                self.applied.push(filter);
                self.undone.clear();
            }
            EditCommand::Undo => {
                let last = self.applied.len().checked_sub(1).ok_or("nothing to undo")?;
                let mut splats = self.original.clone();
                for filter in &self.applied[..last] {
                    splats = splats.filtered(&filter.filter()?);
                }
                self.show(splats)?;
                self.undone.extend(self.applied.pop());
                self.removed.pop();
            }
            EditCommand::Open { splats, name } => {
                if splats.is_empty() {
                    return Err(format!("{name} holds no Gaussians: not opened"));
                }
                if let Some(bad) = splats.non_finite() {
                    return Err(format!(
                        "{name}: {} of {} Gaussians hold NaN or infinite values (the first is \
                         index {}): not opened",
                        bad.count,
                        splats.len(),
                        bad.first
                    ));
                }
                let lod = self
                    .lod_for_opened
                    .filter(|&(_, min)| splats.len() >= min)
                    .map(|(threshold, _)| threshold);
                self.draw(&splats, lod)?;
                self.original = (*splats).clone();
                self.current = Arc::new(*splats);
                self.applied.clear();
                self.undone.clear();
                self.removed.clear();
            }
            EditCommand::Redo => {
                let filter = *self.undone.last().ok_or("nothing to redo")?;
                let kept = self.current.filtered(&filter.filter()?);
                let removed = self.current.len() - kept.len();
                self.show(kept)?;
                self.removed.push(removed);
                self.undone.pop();
                self.applied.push(filter);
            }
        }
        Ok(())
    }

    /// Draws `splats` from now on; on an error nothing changes.
    fn show(&mut self, splats: Splats) -> Result<(), String> {
        self.draw(&splats, self.lod.as_ref().map(|lod| lod.threshold))?;
        self.current = Arc::new(splats);
        Ok(())
    }

    /// Makes the field (and, at `lod` pixels, the hierarchy) that draw `splats`; on an error
    /// nothing changes.
    fn draw(&mut self, splats: &Splats, lod: Option<f32>) -> Result<(), String> {
        let (field, lod) = match lod {
            Some(threshold) => {
                let host =
                    build_hierarchy(splats, &HierarchyConfig::default(), Path::new("the scene"))
                        .map_err(|e| e.to_string())?;
                let hierarchy = GaussianHierarchy::from_splat_hierarchy(&host, &self.device)
                    .map_err(|e| e.to_string())?;
                (
                    hierarchy.leaf_field(),
                    Some(SceneLod {
                        hierarchy,
                        threshold,
                    }),
                )
            }
            None => (
                field_from_splats::<B>(splats, &self.device).map_err(|e| e.to_string())?,
                None,
            ),
        };
        self.field = field;
        self.lod = lod;
        Ok(())
    }
}

/// How many Gaussians of `splats` `filter` would keep.
pub fn kept_by(splats: &Splats, filter: &EditFilter) -> Result<usize, String> {
    let filter = filter.filter()?;
    Ok((0..splats.len())
        .filter(|&i| filter.keeps(splats, i))
        .count())
}

/// The file name a download of the scene `scene` (a path) as edited gets: its file name's stem
/// and `-edited.ply`, in characters every system accepts.
pub fn download_name(scene: &str) -> String {
    let file = scene
        .rsplit(['/', '\\'])
        .find(|s| !s.is_empty())
        .unwrap_or("scene");
    let stem = file
        .split('.')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("scene");
    let safe: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-edited.ply")
}
