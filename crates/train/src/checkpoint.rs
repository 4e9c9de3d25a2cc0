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
//!
//! Metadata (strings): `format` (`ember-train checkpoint v1`), `step`, `sh_rest_coefficients`,
//! `strategy`, `adam.<group>.steps`, and `config` (the run's TOML, for the record).

use std::collections::HashMap;
use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_field::SplatAutodiffBackend;
use safetensors::tensor::{Dtype, TensorView};

use crate::error::{TrainError, write_atomically};
use crate::params::{ParamGroup, to_host};
use crate::timing::Phase;
use crate::trainer::{Inner, Trainer};

/// The `format` metadata value of the files this version writes.
pub const FORMAT: &str = "ember-train checkpoint v1";

struct Entry {
    name: String,
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
        let views = entries
            .iter()
            .map(|e| {
                TensorView::new(Dtype::F32, e.shape.clone(), &e.bytes)
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
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<(), TrainError> {
        let bytes = std::fs::read(path).map_err(|e| TrainError::io(path, e))?;
        let bad = |m: String| TrainError::checkpoint(path, m);
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let tensors = safetensors::SafeTensors::deserialize(&bytes)
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
        let strategy = get("strategy")?;
        if strategy != self.strategy.name() {
            return Err(bad(format!(
                "it was written with the `{strategy}` densification strategy, this run uses `{}`",
                self.strategy.name()
            )));
        }
        let device = self.device.clone();
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
        let tensor2 = |name: &str| -> Result<Tensor<Inner<B>, 2>, TrainError> {
            let (shape, values) = read(name)?;
            if shape.len() != 2 {
                return Err(bad(format!(
                    "tensor `{name}` has shape {shape:?}, not [N, C]"
                )));
            }
            Ok(Tensor::from_data(
                TensorData::new(values, [shape[0], shape[1]]),
                &device,
            ))
        };
        let mut field = self.field.clone();
        let mut adam = self.adam.clone();
        let k = number("sh_rest_coefficients")? as usize;
        let model_k = self.field.sh_rest.dims()[1];
        if k != model_k {
            return Err(bad(format!(
                "{k} SH coefficients beyond DC per channel, this run's model has {model_k}"
            )));
        }
        let mut n = None;
        for group in ParamGroup::ALL {
            let name = group.name();
            let param = tensor2(&format!("param.{name}"))?;
            let expected_cols = group.columns(&self.field).dims()[1];
            let [rows, cols] = param.dims();
            if cols != expected_cols || n.is_some_and(|n| n != rows) {
                return Err(bad(format!(
                    "`param.{name}` has shape [{rows}, {cols}], expected [N, {expected_cols}]"
                )));
            }
            n = Some(rows);
            let exp_avg = tensor2(&format!("adam.{name}.exp_avg"))?;
            let exp_avg_sq = tensor2(&format!("adam.{name}.exp_avg_sq"))?;
            if exp_avg.dims() != [rows, cols] || exp_avg_sq.dims() != [rows, cols] {
                return Err(bad(format!(
                    "Adam moments of `{name}` do not match the parameter"
                )));
            }
            group.set_columns(&mut adam.exp_avg, exp_avg);
            group.set_columns(&mut adam.exp_avg_sq, exp_avg_sq);
            adam.steps[group.index()] = number(&format!("adam.{name}.steps"))?;
            group.set_columns(&mut field, param);
        }
        let n = n.unwrap_or(0);
        let mut strategy_state = Vec::new();
        for name in tensors.names() {
            if let Some(key) = name.strip_prefix("strategy.") {
                let (shape, values) = read(name)?;
                if shape != [n] {
                    return Err(bad(format!("`{name}` has shape {shape:?}, expected [{n}]")));
                }
                strategy_state.push((
                    key.to_string(),
                    Tensor::from_data(TensorData::new(values, [n]), &device),
                ));
            }
        }
        // Checkpoint tensor names come back in no particular order: sort for determinism.
        strategy_state.sort_by(|a, b| a.0.cmp(&b.0));
        self.strategy.load_state(strategy_state)?;
        self.field = field;
        self.generation += 1;
        self.adam = adam;
        self.step = number("step")? as usize;
        Ok(())
    }
}
