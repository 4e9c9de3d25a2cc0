//! Backend type aliases for the compiled cargo features, in one place for every crate of the
//! workspace (the facade re-exports them as `ember::backend`).

/// The CPU backend: ndarray with Ember's rayon kernels.
#[cfg(feature = "ndarray")]
pub type Cpu = burn::backend::NdArray<f32>;
/// [`Cpu`] with autodiff.
#[cfg(feature = "ndarray")]
pub type CpuAutodiff = burn::backend::Autodiff<Cpu>;
/// The CPU backend in `f64`: the oracle the gradient checks and the f32 kernels are held to.
#[cfg(feature = "ndarray")]
pub type Cpu64 = burn::backend::NdArray<f64>;

/// The wgpu backend (with fusion), running Ember's CubeCL kernels.
#[cfg(feature = "wgpu")]
pub type Wgpu = burn::backend::Wgpu<f32, i32, u32>;
/// [`Wgpu`] with autodiff.
#[cfg(feature = "wgpu")]
pub type WgpuAutodiff = burn::backend::Autodiff<Wgpu>;

/// The CUDA backend (with fusion), running Ember's CubeCL kernels compiled by NVRTC.
#[cfg(feature = "cuda")]
pub type Cuda = burn::backend::Cuda<f32, i32>;
/// [`Cuda`] with autodiff.
#[cfg(feature = "cuda")]
pub type CudaAutodiff = burn::backend::Autodiff<Cuda>;

/// The unfused CubeCL backends (no Burn fusion): what [`crate::sort`] runs on.
#[cfg(feature = "cuda")]
pub use crate::CudaCube;
#[cfg(feature = "wgpu")]
pub use crate::WgpuCube;

/// The preferred compiled backend: cuda, else wgpu, else ndarray.
#[cfg(feature = "cuda")]
pub type Default = Cuda;
/// The preferred compiled backend: cuda, else wgpu, else ndarray.
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type Default = Wgpu;
/// The preferred compiled backend: cuda, else wgpu, else ndarray.
#[cfg(all(feature = "ndarray", not(any(feature = "wgpu", feature = "cuda"))))]
pub type Default = Cpu;
/// [`Default`] with autodiff.
#[cfg(any(feature = "ndarray", feature = "wgpu", feature = "cuda"))]
pub type DefaultAutodiff = burn::backend::Autodiff<Default>;
