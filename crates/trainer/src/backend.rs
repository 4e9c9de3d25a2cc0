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

    /// The backend when neither `--backend` nor `EMBER_BACKEND` names one: the first compiled
    /// in of cuda, wgpu and ndarray, except that a wgpu build whose adapter is a software
    /// rasterizer (no GPU: Mesa's lavapipe, SwiftShader, WARP) runs on ndarray when that is
    /// compiled in too, since the CPU's own kernels are many times faster than a GPU emulated on
    /// the CPU. Returns the backend and, for that fallback, the line that says so.
    pub fn default_here() -> (Backend, Option<String>) {
        Backend::default_given(Backend::default_compiled(), software_wgpu_adapter)
    }

    /// [`Backend::default_here`] with the compiled default and the probe for a software adapter
    /// (its name, or `None` for a hardware one) given.
    pub fn default_given(
        compiled: Backend,
        software_adapter: impl FnOnce() -> Option<String>,
    ) -> (Backend, Option<String>) {
        if compiled != Backend::Wgpu || !cfg!(feature = "ndarray") {
            return (compiled, None);
        }
        match software_adapter() {
            Some(name) => (
                Backend::Ndarray,
                Some(format!(
                    "backend ndarray: wgpu's adapter here is {name}, a GPU emulated on the CPU \
                     (--backend wgpu to use it anyway)"
                )),
            ),
            None => (compiled, None),
        }
    }

    /// The first one compiled in of cuda, wgpu and ndarray.
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

/// Where `XDG_RUNTIME_DIR` is not set (a server, a container, an SSH session), Mesa's Vulkan
/// drivers (lavapipe, where there is no GPU) print "error: XDG_RUNTIME_DIR is invalid or not
/// set in the environment." twice while wgpu starts, though nothing is wrong: libwayland reads
/// the variable to look for a display and only asks that it be an absolute path. It is then set
/// to a folder that does not exist (`<temp>/ember-no-display`), where no display is found,
/// quietly. Call before any other thread starts: changing the environment is not thread-safe.
#[cfg(feature = "wgpu")]
pub fn quiet_display_probe() {
    let set = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|dir| std::path::Path::new(&dir).is_absolute());
    if !set {
        // SAFETY: called first thing in `main`'s command, before any other thread exists.
        unsafe {
            std::env::set_var(
                "XDG_RUNTIME_DIR",
                std::env::temp_dir().join("ember-no-display"),
            );
        }
    }
}

/// Nothing to quiet without wgpu.
#[cfg(not(feature = "wgpu"))]
pub fn quiet_display_probe() {}

/// The name of the adapter wgpu would run on when that is a software rasterizer (its device type
/// is the CPU), as CubeCL picks it for the default device (the high-performance adapter, unless
/// `CUBECL_WGPU_DEFAULT_DEVICE` chooses one: then the user chose, and this says `None`); `None`
/// too when no adapter is found (running on wgpu then says why).
#[cfg(feature = "wgpu")]
fn software_wgpu_adapter() -> Option<String> {
    if std::env::var_os("CUBECL_WGPU_DEFAULT_DEVICE").is_some() {
        return None;
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let request = instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
    });
    let runtime = tokio::runtime::Builder::new_current_thread().build().ok()?;
    let info = runtime.block_on(request).ok()?.get_info();
    (info.device_type == wgpu::DeviceType::Cpu).then_some(info.name)
}

#[cfg(not(feature = "wgpu"))]
fn software_wgpu_adapter() -> Option<String> {
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a wgpu default on a software adapter gives way, to ndarray, with a line naming the
    /// adapter; a hardware adapter keeps wgpu, and no other default asks for the adapter.
    #[test]
    fn a_software_wgpu_adapter_gives_way_to_ndarray() {
        let (backend, note) = Backend::default_given(Backend::Wgpu, || Some("llvmpipe".into()));
        assert_eq!(backend, Backend::Ndarray);
        let note = note.expect("the fallback is said");
        assert!(
            note.contains("llvmpipe") && note.contains("--backend wgpu"),
            "{note}"
        );
        assert_eq!(
            Backend::default_given(Backend::Wgpu, || None),
            (Backend::Wgpu, None)
        );
        for compiled in [Backend::Ndarray, Backend::Cuda] {
            let unasked = || -> Option<String> { panic!("{compiled:?} asked for wgpu's adapter") };
            assert_eq!(Backend::default_given(compiled, unasked), (compiled, None));
        }
    }
}
