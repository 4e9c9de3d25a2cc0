//! The backends a `trainer` build can run on, and the one dispatch from `--backend` to a
//! concrete Burn backend type ([`on_backend!`]), which every command goes through.

use anyhow::{Result, anyhow};
use clap::ValueEnum;
use ember_train::config::DistributedConfig;

#[cfg(feature = "ndarray")]
pub use ember_kernels::backend::Cpu;
#[cfg(feature = "cuda")]
pub use ember_kernels::backend::Cuda;
#[cfg(feature = "wgpu")]
pub use ember_kernels::backend::Wgpu;

/// `--backend`: a backend by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// CPU (ndarray + Ember's rayon kernels).
    Ndarray,
    /// wgpu (Vulkan, Metal, DX12).
    Wgpu,
    /// CUDA.
    Cuda,
}

impl Backend {
    /// The name `--backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ndarray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Cuda => "cuda",
        }
    }

    /// The default: cuda, then wgpu, then ndarray, the first one compiled in.
    pub fn default_compiled() -> Backend {
        if cfg!(feature = "cuda") {
            Backend::Cuda
        } else if cfg!(feature = "wgpu") {
            Backend::Wgpu
        } else {
            Backend::Ndarray
        }
    }

    /// The error for a backend this build does not have.
    pub fn not_compiled(self) -> anyhow::Error {
        anyhow!(
            "the {} backend is not compiled in: rebuild with `--features {}`",
            self.name(),
            self.name()
        )
    }
}

/// Evaluates `$body` with `$B` the concrete (non-autodiff) Burn backend that `$backend` names,
/// or returns the error of a backend this build does not have; on cuda it first checks that the
/// NVIDIA driver loads.
macro_rules! on_backend {
    ($backend:expr, $B:ident => $body:expr) => {
        match $backend {
            #[cfg(feature = "ndarray")]
            $crate::backend::Backend::Ndarray => {
                type $B = $crate::backend::Cpu;
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::backend::Backend::Wgpu => {
                type $B = $crate::backend::Wgpu;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::backend::Backend::Cuda => {
                $crate::backend::cuda_driver_check()?;
                type $B = $crate::backend::Cuda;
                $body
            }
            #[allow(unreachable_patterns)]
            other => Err(other.not_compiled()),
        }
    };
}
pub(crate) use on_backend;

/// The devices of a run's local peers on a backend: one, or one per data-parallel peer
/// (`distributed.devices`).
pub trait PeerDevices: burn::tensor::backend::Backend {
    /// The devices, or why this backend cannot train on that many.
    fn peer_devices(distributed: &DistributedConfig) -> Result<Vec<Self::Device>>;
}

/// Every peer shares the one CPU device.
#[cfg(feature = "ndarray")]
impl PeerDevices for Cpu {
    fn peer_devices(distributed: &DistributedConfig) -> Result<Vec<Self::Device>> {
        Ok(vec![Default::default(); distributed.local_peers()])
    }
}

#[cfg(feature = "wgpu")]
impl PeerDevices for Wgpu {
    fn peer_devices(distributed: &DistributedConfig) -> Result<Vec<Self::Device>> {
        if distributed.local_peers() > 1 {
            anyhow::bail!(
                "--devices: data-parallel training on wgpu is not supported: burn-collective \
                 0.21 cannot move tensors between wgpu devices, and peers sharing one fused \
                 wgpu device mix up its streams (use --backend cuda or ndarray)"
            );
        }
        Ok(vec![Default::default()])
    }
}

/// Device `i` is GPU `i`.
#[cfg(feature = "cuda")]
impl PeerDevices for Cuda {
    fn peer_devices(distributed: &DistributedConfig) -> Result<Vec<Self::Device>> {
        if distributed.devices.is_empty() {
            return Ok(vec![Default::default()]);
        }
        Ok(distributed
            .devices
            .iter()
            .map(|&index| burn::backend::cuda::CudaDevice { index })
            .collect())
    }
}

/// An error, instead of CubeCL's panic on its device thread, when the NVIDIA driver's library
/// cannot be loaded (a CUDA build run on a machine without an NVIDIA GPU).
#[cfg(feature = "cuda")]
pub fn cuda_driver_check() -> Result<()> {
    // SAFETY: only opens the library under its candidate names, as CubeCL would; no symbol
    // of it is called here.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return Ok(());
    }
    anyhow::bail!(
        "the cuda backend needs the NVIDIA driver's library (libcuda.so), which this machine \
         does not have; choose another backend with --backend ndarray{}",
        if cfg!(feature = "wgpu") {
            " or --backend wgpu"
        } else {
            ""
        }
    )
}
