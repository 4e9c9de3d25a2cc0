//! The training config a command line names: a `--config` file or one of the presets compiled
//! into the binary (picked by the backend and the dataset's layout), then the command line's
//! overrides. Training, `bench train`, `bench view` and `benchmark` read theirs through
//! [`load_config`].

use std::path::PathBuf;

use anyhow::{Context, Result};
use ember_data::DatasetFormat;
use ember_train::TrainConfig;

use crate::backend::Backend;

/// A preset compiled into the binary, used when there is no `--config`.
struct Preset {
    /// Its file in the repository.
    file: &'static str,
    /// Its text.
    toml: &'static str,
    /// What it is for, for the run's first line.
    what: &'static str,
}

/// Without `--data`: the built-in procedural scene.
const QUICK: Preset = Preset {
    file: "configs/quick.toml",
    toml: include_str!("../../../configs/quick.toml"),
    what: "the procedural demo",
};

/// `--data` on a real capture, CPU backend.
const CAPTURE_CPU: Preset = Preset {
    file: "configs/colmap-cpu.toml",
    toml: include_str!("../../../configs/colmap-cpu.toml"),
    what: "real captures on the CPU",
};

/// `--data` on a real capture, GPU backends.
const CAPTURE_GPU: Preset = Preset {
    file: "configs/colmap.toml",
    toml: include_str!("../../../configs/colmap.toml"),
    what: "real captures on a GPU",
};

/// `--data` on a 360° capture (`EQUIRECTANGULAR` frames), CPU backend.
const PANORAMAS_CPU: Preset = Preset {
    file: "configs/equirect-cpu.toml",
    toml: include_str!("../../../configs/equirect-cpu.toml"),
    what: "360° captures on the CPU",
};

/// `--data` on a NeRF-Synthetic scene (`transforms_train.json`), CPU backend.
const SYNTHETIC_CPU: Preset = Preset {
    file: "configs/lego-cpu.toml",
    toml: include_str!("../../../configs/lego-cpu.toml"),
    what: "NeRF-Synthetic scenes on the CPU",
};

/// `--data` on a NeRF-Synthetic scene, GPU backends.
const SYNTHETIC_GPU: Preset = Preset {
    file: "configs/h100.toml",
    toml: include_str!("../../../configs/h100.toml"),
    what: "NeRF-Synthetic scenes on a GPU",
};

/// The training config and its overrides (the run's, and `bench train`'s).
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// TOML config (default: the built-in configs/quick.toml).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Scene folder (COLMAP, NeRF-Synthetic or nerfstudio); overrides `data.path`.
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// Steps; overrides `steps`.
    #[arg(long)]
    pub steps: Option<usize>,
    /// Seed; overrides `seed`.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override any config field, e.g. `--set optim.lr_opacity=0.05` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Train data-parallel on these devices, one peer each (e.g. `0,1,2,3`); overrides
    /// `distributed.devices`. On cuda device `i` is GPU `i`; on wgpu and ndarray every peer
    /// shares the default device.
    #[arg(long, value_name = "I,..", value_delimiter = ',')]
    pub devices: Option<Vec<usize>>,
    /// This process's node in a multi-node run (`distributed.nodes > 1`); overrides
    /// `distributed.node_rank`, so that every machine can share one config file.
    #[arg(long, value_name = "R")]
    pub node_rank: Option<usize>,
    /// The LPIPS weights for the held-out evaluation (safetensors, scripts/lpips-weights.py);
    /// overrides `eval.lpips_weights` (default: the file EMBER_LPIPS_WEIGHTS names, else the
    /// weights Ember ships).
    #[arg(long, value_name = "FILE")]
    pub lpips_weights: Option<PathBuf>,
    /// The backend the run uses (the global `--backend`), which picks the built-in preset.
    #[arg(skip = Backend::default_compiled())]
    pub backend: Backend,
}

/// Whether the scene at `data` holds 360° panoramas: a `transforms.json` of `EQUIRECTANGULAR`
/// frames, or a COLMAP reconstruction of `trainer data split360`'s views beside its
/// `panoramas.json`. A file that does not parse does not: loading it says why.
fn holds_panoramas(data: &std::path::Path) -> bool {
    let file = match DatasetFormat::detect(data) {
        Some(DatasetFormat::Transforms { file }) => file,
        Some(DatasetFormat::Colmap { .. }) => {
            return data.join(ember_data::equirect::PANORAMA_INDEX).is_file();
        }
        _ if data.is_file() => data.to_path_buf(),
        _ => return false,
    };
    ember_data::transforms_json::TransformsFile::read(&file)
        .is_ok_and(|t| t.frames.iter().any(|f| f.equirect))
}

impl ConfigArgs {
    /// The built-in preset these arguments train with when there is no `--config`: the
    /// procedural demo without `--data`; for a scene, the NeRF-Synthetic preset for the
    /// per-split layout, the 360° one for panoramas (on the CPU; a GPU takes the real-capture
    /// one and its default rig) and the real-capture one for the others, sized for the CPU on
    /// ndarray and for a GPU on the other backends.
    fn preset(&self) -> &'static Preset {
        let cpu = self.backend == Backend::Ndarray;
        match &self.data {
            None => &QUICK,
            Some(data) if DatasetFormat::detect(data) == Some(DatasetFormat::TransformsSplits) => {
                if cpu {
                    &SYNTHETIC_CPU
                } else {
                    &SYNTHETIC_GPU
                }
            }
            Some(data) if cpu && holds_panoramas(data) => &PANORAMAS_CPU,
            Some(_) => {
                if cpu {
                    &CAPTURE_CPU
                } else {
                    &CAPTURE_GPU
                }
            }
        }
    }

    /// Where the config comes from, for the first line of a run, `--print-config` and
    /// benchmark files: the file or the built-in preset (whose schedule differs from the
    /// library defaults a file starts from), and the command-line overrides.
    pub fn origin(&self) -> String {
        let mut origin = match &self.config {
            Some(path) => path.display().to_string(),
            None => format!(
                "the built-in preset {} ({}; keys a --config file leaves out take the library \
                 defaults instead, e.g. {} steps)",
                self.preset().file,
                self.preset().what,
                TrainConfig::default().steps
            ),
        };
        let mut overrides: Vec<String> = self.set.iter().map(|s| format!("--set {s}")).collect();
        overrides.extend(
            self.data
                .as_ref()
                .map(|d| format!("--data {}", d.display())),
        );
        overrides.extend(self.steps.map(|n| format!("--steps {n}")));
        overrides.extend(self.devices.as_ref().map(|d| {
            let list: Vec<String> = d.iter().map(usize::to_string).collect();
            format!("--devices {}", list.join(","))
        }));
        overrides.extend(self.seed.map(|n| format!("--seed {n}")));
        overrides.extend(self.node_rank.map(|n| format!("--node-rank {n}")));
        if !overrides.is_empty() {
            origin.push_str(&format!(", with {}", overrides.join(" ")));
        }
        origin
    }
}

/// The config `args` name, with their overrides applied, validated.
pub fn load_config(args: &ConfigArgs) -> Result<TrainConfig> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_file(path)
            .with_context(|| format!("reading the config {}", path.display()))?,
        None => {
            let preset = args.preset();
            TrainConfig::from_toml_str(preset.toml, &format!("{} (built in)", preset.file))?
        }
    };
    config = config.with_overrides(&args.set)?;
    if let Some(data) = &args.data {
        config.data.path = Some(data.clone());
    }
    if let Some(steps) = args.steps {
        config.steps = steps;
    }
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if let Some(devices) = &args.devices {
        config.distributed.devices = devices.clone();
    }
    if let Some(rank) = args.node_rank {
        config.distributed.node_rank = rank;
    }
    if let Some(weights) = &args.lpips_weights {
        config.eval.lpips_weights = Some(weights.clone());
    }
    config.validate()?;
    Ok(config)
}
