//! [`TrainError`]: why a run could not start, continue or save.

use std::path::{Path, PathBuf};

/// Everything that can stop training, naming what and where.
///
/// Each message holds its cause, so only the wrapped `ember-data`, model and kernel errors are
/// [`std::error::Error::source`]s; a report that walks the chain prints every cause once.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A config document or override was refused.
    #[error("{origin}: {message}")]
    Config {
        /// The file (or `--set`, or `config` for value checks).
        origin: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The scene could not be read.
    #[error(transparent)]
    Data(#[from] ember_data::DataError),
    /// The model could not be built or holds non-finite values.
    #[error(transparent)]
    Model(#[from] ember_field::ModelError),
    /// The field could not be written as a splat file.
    #[error(transparent)]
    WriteField(#[from] ember_field::splats::WriteFieldError),
    /// The renderer refused a camera or the field.
    #[error("rendering view {view}: {cause}")]
    Render {
        /// The view's name.
        view: String,
        /// The renderer's reason.
        cause: ember_field::RenderError,
    },
    /// The loss refused a render and its target (mismatched sizes).
    #[error("loss on view {view}: {cause}")]
    Loss {
        /// The view's name.
        view: String,
        /// The loss's reason.
        cause: ember_kernels::LossError,
    },
    /// A training loss of the user's own ([`Trainer::set_loss`](crate::Trainer::set_loss))
    /// failed on a view.
    #[error("the training loss on view {view}: {message}")]
    CustomLoss {
        /// The view's name.
        view: String,
        /// What the loss said.
        message: String,
    },
    /// The densification statistics' kernel refused the step's screen gradients or extents.
    #[error(transparent)]
    DensifyStats(#[from] ember_kernels::DensifyStatsError),
    /// The MCMC refinement's position noise refused the field's tensors.
    #[error(transparent)]
    Noise(#[from] ember_kernels::NoiseError),
    /// The scene cannot be trained on (no views, mismatched image sizes, ...).
    #[error("scene: {0}")]
    Scene(String),
    /// The loss became NaN or infinite; the step was not applied.
    #[error(
        "the loss became {loss} at step {step} (view {view}); the step was not applied{}",
        last_checkpoint.as_ref().map(|p| format!("; the last good checkpoint is {}", p.display())).unwrap_or_default()
    )]
    NonFiniteLoss {
        /// The step that produced it.
        step: usize,
        /// The training view rendered.
        view: String,
        /// The value.
        loss: f32,
        /// The newest checkpoint written before it, when there is one.
        last_checkpoint: Option<PathBuf>,
    },
    /// The observer asked the run to stop ([`RunObserver::stop_requested`](crate::RunObserver::stop_requested)):
    /// the step in progress was finished and a checkpoint written.
    #[error(
        "interrupted after step {step}: wrote {} (continue with --resume {})",
        checkpoint.display(),
        checkpoint.display()
    )]
    Interrupted {
        /// The last step completed.
        step: usize,
        /// The checkpoint written at that step.
        checkpoint: PathBuf,
    },
    /// A checkpoint is malformed or does not fit the run.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// Reading back the step's values from the device failed (one transaction for several
    /// tensors; a single tensor's readback is `ember_field::to_host`'s `ModelError::Readback`).
    #[error("reading {what} from the device: {message}")]
    Readback {
        /// Which tensors.
        what: &'static str,
        /// The backend's message.
        message: String,
    },
    /// A collective operation between the peers of a data-parallel run failed (or was
    /// abandoned because another peer stopped with an error).
    #[error("data-parallel peer {peer}: {message}")]
    Collective {
        /// The peer's rank.
        peer: usize,
        /// What failed.
        message: String,
    },
    /// The replicas of a data-parallel run no longer hold the same parameters.
    #[error(
        "data-parallel peer {peer}: after step {step} its parameters differ from peer 0's (hash {hash:016x} against {reference:016x})"
    )]
    ReplicasDiverged {
        /// The step just completed.
        step: usize,
        /// The rank of the first peer whose parameters differ (every peer reports the same).
        peer: usize,
        /// The hash of its parameters' bits ([`crate::params::parameter_hash`]).
        hash: u64,
        /// Peer 0's.
        reference: u64,
    },
    /// Waiting for the device to finish its queued work failed.
    #[error("waiting for the device after the {phase} phase: {message}")]
    DeviceSync {
        /// The phase just queued.
        phase: &'static str,
        /// The backend's message.
        message: String,
    },
}

impl TrainError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, cause: std::io::Error) -> TrainError {
        TrainError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    /// A checkpoint problem on `path`.
    pub fn checkpoint(path: &Path, message: impl Into<String>) -> TrainError {
        TrainError::Checkpoint {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// [`ember_data::write_atomically`] with the error naming `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    ember_data::write_atomically(path, bytes).map_err(|e| TrainError::io(path, e))
}
