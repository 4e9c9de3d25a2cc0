//! Checkpoints: parameters, Adam moments and step counts, the densification accumulators and
//! the step, in one safetensors file (written atomically), so that a resumed run continues with
//! exactly the state an uninterrupted one had.
//!
//! | tensor                     | shape          |
//! |----------------------------|----------------|
//! | `param.<group>`            | `[N, columns]` |
//! | `adam.<group>.exp_avg`     | `[N, columns]` |
//! | `adam.<group>.exp_avg_sq`  | `[N, columns]` |
//! | `strategy.<name>`          | `[N]`          |
//! | `appearance.params`        | `[V, P]`       |
//! | `appearance.exp_avg`       | `[V, P]`       |
//! | `appearance.exp_avg_sq`    | `[V, P]`       |
//! | `appearance.steps`         | `[V]`          |
//! | `poses.state`              | `[V, 25]` F64  |
//! | `smoothing.variance`       | `[N]`          |
//!
//! The `appearance.*` tensors are there when the run learns each training photo's appearance
//! (`V` photos of `P` parameters each, [`crate::appearance`]); the step counts are stored as
//! exact f32 integers. `poses.state` is there when the run refines its training cameras'
//! poses: per camera the correction's rotation (9, row-major) and translation (3), Adam's two
//! moments (6 each) and its step count, in f64 as they are learned ([`crate::poses`]).
//! `smoothing.variance` is there when the run draws through a 3D smoothing filter
//! (`raster.antialiased`): the filter in use at the step, so that a resumed run draws the
//! same field and [`CheckpointFile::field`] returns the field as drawn.
//!
//! Metadata (strings): `format` (`ember-train checkpoint v1`), `step`, `sh_rest_coefficients`,
//! `strategy`, `adam.<group>.steps`, `training_seconds` (the run's training time so far, so
//! that a resumed run's time axis goes on; `0` when a file has none), and `config` (the run's
//! TOML, for the record).

use std::collections::HashMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_field::{GaussianField, SmoothingFilter, SplatAutodiffBackend};
use safetensors::tensor::{Dtype, TensorView};

use crate::appearance::AppearanceState;
use crate::error::{TrainError, write_atomically};
use crate::params::ParamGroup;
use crate::poses::STATE_PER_CAMERA;
use crate::timing::Phase;
use crate::trainer::{Inner, Trainer, smoothing_filter};
use ember_field::to_host;

/// The `format` metadata value of the files this version writes.
pub const FORMAT: &str = "ember-train checkpoint v1";

struct Entry {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn entry<B: Backend, const D: usize>(
    name: String,
    tensor: Tensor<B, D>,
) -> Result<Entry, TrainError> {
    let shape = tensor.dims().to_vec();
    let values = to_host(tensor, "checkpoint tensor")?;
    Ok(Entry {
        name,
        dtype: Dtype::F32,
        shape,
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

impl<B: SplatAutodiffBackend> Trainer<B> {
    /// Writes the full training state to `path` (atomically: a temporary file, then a rename).
    pub fn save_checkpoint(&mut self, path: &Path) -> Result<(), TrainError> {
        let started = std::time::Instant::now();
        let mut entries = Vec::new();
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("step".to_string(), self.step.to_string());
        meta.insert(
            "training_seconds".to_string(),
            self.training_seconds.to_string(),
        );
        meta.insert(
            "sh_rest_coefficients".to_string(),
            self.field.sh_rest.dims()[1].to_string(),
        );
        meta.insert("strategy".to_string(), self.strategy.name().to_string());
        meta.insert("config".to_string(), self.config.to_toml_string());
        // Every group as `[N, columns]` (`ParamGroup::columns`), the format's layout.
        for group in ParamGroup::ALL {
            let name = group.name();
            entries.push(entry(format!("param.{name}"), group.columns(&self.field))?);
            entries.push(entry(
                format!("adam.{name}.exp_avg"),
                group.columns(&self.adam.exp_avg),
            )?);
            entries.push(entry(
                format!("adam.{name}.exp_avg_sq"),
                group.columns(&self.adam.exp_avg_sq),
            )?);
            meta.insert(
                format!("adam.{name}.steps"),
                self.adam.steps[group.index()].to_string(),
            );
        }
        for (name, tensor) in self.strategy.state() {
            entries.push(entry(format!("strategy.{name}"), tensor)?);
        }
        if let Some(appearance) = &self.appearance {
            let state = appearance.state()?;
            let photos = state.steps.len();
            let rows = [photos, state.params.len() / photos.max(1)].to_vec();
            let bytes = |values: &[f32]| values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let steps: Vec<f32> = state.steps.iter().map(|&s| s as f32).collect();
            for (name, shape, values) in [
                ("params", rows.clone(), &state.params),
                ("exp_avg", rows.clone(), &state.exp_avg),
                ("exp_avg_sq", rows, &state.exp_avg_sq),
                ("steps", vec![photos], &steps),
            ] {
                entries.push(Entry {
                    name: format!("appearance.{name}"),
                    dtype: Dtype::F32,
                    shape,
                    bytes: bytes(values),
                });
            }
        }
        if let Some(poses) = &self.poses {
            let state = poses.state();
            entries.push(Entry {
                name: "poses.state".to_string(),
                dtype: Dtype::F64,
                shape: vec![state.len() / STATE_PER_CAMERA, STATE_PER_CAMERA],
                bytes: state.iter().flat_map(|v| v.to_le_bytes()).collect(),
            });
        }
        if let Some(filter) = &self.smoothing {
            entries.push(entry(
                "smoothing.variance".to_string(),
                filter.variance.clone(),
            )?);
        }
        let views = entries
            .iter()
            .map(|e| {
                TensorView::new(e.dtype, e.shape.clone(), &e.bytes)
                    .map(|v| (e.name.clone(), v))
                    .map_err(|err| TrainError::checkpoint(path, err.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = safetensors::serialize(views, Some(meta))
            .map_err(|e| TrainError::checkpoint(path, e.to_string()))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
        }
        write_atomically(path, &bytes)?;
        self.times.add(Phase::Output, started.elapsed());
        Ok(())
    }

    /// Restores the state saved by [`Trainer::save_checkpoint`] into this trainer (built for
    /// the same scene and config); afterwards [`Trainer::step`] continues from the saved step.
    /// Nothing changes when the file is refused.
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<(), TrainError> {
        let bytes = std::fs::read(path).map_err(|e| TrainError::io(path, e))?;
        let file = CheckpointFile::parse(&bytes, path)?;
        let bad = |m: String| TrainError::checkpoint(path, m);
        // Checked before anything is touched: a refused file changes nothing.
        let poses = match (&self.poses, &file.poses) {
            (Some(poses), Some(state)) => {
                let mut restored = poses.clone();
                restored.load_state(state).map_err(&bad)?;
                Some(restored)
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad(
                    "it holds no camera poses and this run refines them (`poses.refine = \
                     true`; resume with the config the checkpoint was trained with)"
                        .to_string(),
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    "it holds refined camera poses and this run has `poses.refine = false` \
                     (resume with the config the checkpoint was trained with)"
                        .to_string(),
                ));
            }
        };
        // Both depend on the config: the one the checkpoint was written with is in its
        // metadata and in its run folder's `config.toml`.
        if file.strategy != self.strategy.name() {
            return Err(bad(format!(
                "it was written with the `{}` densification strategy, this run uses `{}` \
                 (resume with the config the checkpoint was trained with)",
                file.strategy,
                self.strategy.name()
            )));
        }
        let model_k = self.field.sh_rest.dims()[1];
        if file.sh_rest_coefficients != model_k {
            return Err(bad(format!(
                "{} SH coefficients beyond DC per channel, this run's model has {model_k} \
                 (resume with the config the checkpoint was trained with)",
                file.sh_rest_coefficients
            )));
        }
        let device = self.device.clone();
        let upload = |rows: &HostRows| -> Tensor<Inner<B>, 2> {
            Tensor::from_data(
                TensorData::new(rows.values.clone(), [file.gaussians, rows.columns]),
                &device,
            )
        };
        let mut field = self.field.clone();
        let mut adam = self.adam.clone();
        for (group, saved) in ParamGroup::ALL.into_iter().zip(&file.groups) {
            group.set_columns(&mut field, upload(&saved.param));
            group.set_columns(&mut adam.exp_avg, upload(&saved.exp_avg));
            group.set_columns(&mut adam.exp_avg_sq, upload(&saved.exp_avg_sq));
            adam.steps[group.index()] = saved.adam_steps;
        }
        let strategy_state = file
            .strategy_state
            .into_iter()
            .map(|(key, values)| {
                let n = values.len();
                (
                    key,
                    Tensor::from_data(TensorData::new(values, [n]), &device),
                )
            })
            .collect();
        match (&mut self.appearance, &file.appearance) {
            (Some(appearance), Some(state)) => {
                // Checked before the strategy's state is touched: a refused file changes nothing.
                let mut restored = appearance.clone();
                restored.load_state(state).map_err(&bad)?;
                *appearance = restored;
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(bad(
                    "it holds no per-photo appearance and this run learns one \
                     (resume with the config the checkpoint was trained with)"
                        .to_string(),
                ));
            }
            (None, Some(_)) => {
                return Err(bad("it holds a per-photo appearance and this run has \
                     `appearance.kind = \"none\"` (resume with the config the checkpoint was \
                     trained with)"
                    .to_string()));
            }
        }
        self.strategy.load_state(strategy_state)?;
        if poses.is_some() {
            self.poses = poses;
        }
        self.smoothing = match (&self.smoothing, file.smoothing) {
            (None, _) => None,
            (Some(_), Some(variance)) => Some(SmoothingFilter::from_variance(Tensor::from_data(
                TensorData::new(variance, [file.gaussians]),
                &device,
            ))),
            // A file from a run without the filter: measured for its Gaussians.
            (Some(_), None) => smoothing_filter(&self.config, &self.scene, &field),
        };
        self.field = field;
        self.generation += 1;
        self.adam = adam;
        self.step = file.step;
        self.training_seconds = file.training_seconds;
        Ok(())
    }
}

/// `[N, columns]` f32 values, row-major, as a checkpoint stores a parameter or moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRows {
    /// Values per Gaussian.
    pub columns: usize,
    /// `N * columns` values.
    pub values: Vec<f32>,
}

/// One parameter group of a checkpoint: the parameter, its Adam moments and step count.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedGroup {
    /// `param.<group>`.
    pub param: HostRows,
    /// `adam.<group>.exp_avg`.
    pub exp_avg: HostRows,
    /// `adam.<group>.exp_avg_sq`.
    pub exp_avg_sq: HostRows,
    /// `adam.<group>.steps`.
    pub adam_steps: u64,
}

/// A checkpoint file read into host memory and checked for consistency on its own (every
/// tensor present, F32, of the shape the others imply), before anything touches a trainer.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFile {
    /// The step the run had completed.
    pub step: usize,
    /// The run's training time at that step, seconds (`0` when the file does not say).
    pub training_seconds: f64,
    /// SH coefficients beyond DC per channel (`K` of `sh_rest` `[N, K, 3]`).
    pub sh_rest_coefficients: usize,
    /// The densification strategy's name.
    pub strategy: String,
    /// Number of Gaussians.
    pub gaussians: usize,
    /// One entry per [`ParamGroup`], in [`ParamGroup::ALL`] order.
    pub groups: Vec<SavedGroup>,
    /// `strategy.<name>` tensors `[N]`, sorted by name.
    pub strategy_state: Vec<(String, Vec<f32>)>,
    /// The `appearance.*` tensors, when the run learned each photo's appearance.
    pub appearance: Option<AppearanceState>,
    /// `poses.state` (`[V, 25]`, row-major), when the run refined its cameras' poses.
    pub poses: Option<Vec<f64>>,
    /// `smoothing.variance` `[N]`, when the run drew through a 3D smoothing filter.
    pub smoothing: Option<Vec<f32>>,
}

impl CheckpointFile {
    /// The field the checkpoint holds as the run drew it, on `device` (to view or export it:
    /// its 3D smoothing filter, when it has one, folded in; resuming training goes through
    /// [`Trainer::load_checkpoint`]); `path` names the file in errors.
    pub fn field<B: ember_kernels::SmoothingOps>(
        &self,
        device: &B::Device,
        path: &Path,
    ) -> Result<GaussianField<B>, TrainError> {
        let n = self.gaussians;
        let k = self.sh_rest_coefficients;
        let rows = |group: ParamGroup| -> Tensor<B, 2> {
            let saved = &self.groups[group.index()].param;
            Tensor::from_data(
                TensorData::new(saved.values.clone(), [n, saved.columns]),
                device,
            )
        };
        let field = GaussianField::from_tensors(
            rows(ParamGroup::Means),
            rows(ParamGroup::Quats),
            rows(ParamGroup::LogScales),
            rows(ParamGroup::Opacity).reshape([n]),
            rows(ParamGroup::ShDc).reshape([n, 1, 3]),
            rows(ParamGroup::ShRest).reshape([n, k, 3]),
            None,
        )
        .map_err(|e| TrainError::checkpoint(path, e.to_string()))?;
        Ok(match &self.smoothing {
            Some(variance) => SmoothingFilter::from_variance(Tensor::from_data(
                TensorData::new(variance.clone(), [n]),
                device,
            ))
            .apply(&field)
            .map_err(|e| TrainError::checkpoint(path, e.to_string()))?,
            None => field,
        })
    }

    /// Parses the bytes of a checkpoint; `path` names the file in errors. Allocates at most
    /// the size of the tensors the file holds (the values are copied once, out of `bytes`).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<CheckpointFile, TrainError> {
        let bad = |m: String| TrainError::checkpoint(path, m);
        let (_, metadata) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let tensors = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let meta = metadata.metadata().clone().unwrap_or_default();
        let get = |key: &str| -> Result<&String, TrainError> {
            meta.get(key)
                .ok_or_else(|| bad(format!("no `{key}` in the metadata")))
        };
        if get("format")? != FORMAT {
            return Err(bad(format!(
                "format `{}` (this version reads `{FORMAT}`)",
                get("format")?
            )));
        }
        let number = |key: &str| -> Result<u64, TrainError> {
            get(key)?
                .parse::<u64>()
                .map_err(|_| bad(format!("`{key}` is not a count")))
        };
        let count = |key: &str| -> Result<usize, TrainError> {
            usize::try_from(number(key)?).map_err(|_| bad(format!("`{key}` is too large")))
        };
        let read = |name: &str| -> Result<(Vec<usize>, Vec<f32>), TrainError> {
            let view = tensors
                .tensor(name)
                .map_err(|_| bad(format!("no tensor `{name}`")))?;
            if view.dtype() != Dtype::F32 {
                return Err(bad(format!(
                    "tensor `{name}` is {:?}, not F32",
                    view.dtype()
                )));
            }
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Ok((view.shape().to_vec(), values))
        };
        let sh_rest_coefficients = count("sh_rest_coefficients")?;
        // SH degree 4 has 24; beyond that the file cannot have come from Ember.
        if sh_rest_coefficients > 24 {
            return Err(bad(format!(
                "`sh_rest_coefficients` is {sh_rest_coefficients}, more than SH degree 4's 24"
            )));
        }
        let rows = |tensor: &str, columns: usize, gaussians: Option<usize>| {
            let (shape, values) = read(tensor)?;
            match shape[..] {
                [n, c] if c == columns && gaussians.is_none_or(|g| g == n) => {
                    Ok((n, HostRows { columns, values }))
                }
                _ => Err(bad(format!(
                    "`{tensor}` has shape {shape:?}, expected [N, {columns}]{}",
                    gaussians
                        .map(|n| format!(" with N = {n}"))
                        .unwrap_or_default()
                ))),
            }
        };
        let mut gaussians = None;
        let mut groups = Vec::with_capacity(ParamGroup::ALL.len());
        for group in ParamGroup::ALL {
            let name = group.name();
            let columns = group.width(sh_rest_coefficients);
            let (n, param) = rows(&format!("param.{name}"), columns, gaussians)?;
            gaussians = Some(n);
            let (_, exp_avg) = rows(&format!("adam.{name}.exp_avg"), columns, gaussians)?;
            let (_, exp_avg_sq) = rows(&format!("adam.{name}.exp_avg_sq"), columns, gaussians)?;
            groups.push(SavedGroup {
                param,
                exp_avg,
                exp_avg_sq,
                adam_steps: number(&format!("adam.{name}.steps"))?,
            });
        }
        let gaussians = gaussians.unwrap_or(0);
        let mut strategy_state = Vec::new();
        for name in tensors.names() {
            if let Some(key) = name.strip_prefix("strategy.") {
                let (shape, values) = read(name)?;
                if shape != [gaussians] {
                    return Err(bad(format!(
                        "`{name}` has shape {shape:?}, expected [{gaussians}]"
                    )));
                }
                strategy_state.push((key.to_string(), values));
            }
        }
        // Tensor names come back in no particular order: sorted, loading is deterministic.
        strategy_state.sort_by(|a, b| a.0.cmp(&b.0));
        let appearance = match tensors.names().iter().any(|n| n.starts_with("appearance.")) {
            false => None,
            true => {
                let (shape, steps) = read("appearance.steps")?;
                let [photos] = shape[..] else {
                    return Err(bad(format!(
                        "`appearance.steps` has shape {shape:?}, expected [V]"
                    )));
                };
                if steps.iter().any(|s| !(s.fract() == 0.0 && *s >= 0.0)) {
                    return Err(bad(
                        "`appearance.steps` holds a value that is not a count".into()
                    ));
                }
                let width = match read("appearance.params")?.0[..] {
                    [_, width] if width > 0 => width,
                    ref shape => {
                        return Err(bad(format!(
                            "`appearance.params` has shape {shape:?}, expected [V, P]"
                        )));
                    }
                };
                let (_, params) = rows("appearance.params", width, Some(photos))?;
                let (_, exp_avg) = rows("appearance.exp_avg", width, Some(photos))?;
                let (_, exp_avg_sq) = rows("appearance.exp_avg_sq", width, Some(photos))?;
                Some(AppearanceState {
                    params: params.values,
                    exp_avg: exp_avg.values,
                    exp_avg_sq: exp_avg_sq.values,
                    steps: steps.iter().map(|&s| s as u64).collect(),
                })
            }
        };
        let poses = match tensors.names().contains(&"poses.state") {
            false => None,
            true => {
                let view = tensors
                    .tensor("poses.state")
                    .map_err(|_| bad("no tensor `poses.state`".to_string()))?;
                match (view.dtype(), view.shape()) {
                    (Dtype::F64, [_, STATE_PER_CAMERA]) => Some(
                        view.data()
                            .chunks_exact(8)
                            .map(|b| f64::from_le_bytes(b.try_into().expect("eight bytes")))
                            .collect(),
                    ),
                    (dtype, shape) => {
                        return Err(bad(format!(
                            "`poses.state` is {dtype:?} {shape:?}, expected F64 [V, \
                             {STATE_PER_CAMERA}]"
                        )));
                    }
                }
            }
        };
        let smoothing = match tensors.names().contains(&"smoothing.variance") {
            false => None,
            true => {
                let (shape, values) = read("smoothing.variance")?;
                if shape != [gaussians] {
                    return Err(bad(format!(
                        "`smoothing.variance` has shape {shape:?}, expected [{gaussians}]"
                    )));
                }
                if values.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(bad(
                        "`smoothing.variance` holds a value that is not a variance".into(),
                    ));
                }
                Some(values)
            }
        };
        Ok(CheckpointFile {
            step: count("step")?,
            training_seconds: match meta.get("training_seconds") {
                None => 0.0,
                Some(text) => text
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| bad("`training_seconds` is not a number of seconds".into()))?,
            },
            sh_rest_coefficients,
            strategy: get("strategy")?.clone(),
            gaussians,
            groups,
            strategy_state,
            appearance,
            poses,
            smoothing,
        })
    }
}
