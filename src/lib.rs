//! # Ember
//!
//! Differentiable Gaussian splatting on [Burn](https://burn.dev) and CubeCL: a learnable
//! [`GaussianField`](field::GaussianField) queried by fused kernels with hand-written backward
//! passes, on CUDA, wgpu and the CPU (ndarray) from one kernel source.
//!
//! Scenes on disk (COLMAP, transforms.json, point clouds), splat files (3DGS PLY, `.splat`,
//! SPZ, compressed PLY) and the image pipeline are in [`data`]; [`splats`] turns a splat file
//! into a field and back; the training loop (config, loss, per-group Adam, densification,
//! evaluation, checkpoints) is in [`train`].
//!
//! This facade re-exports the workspace crates and names the backends selected by cargo
//! features:
//!
//! | feature             | backend alias        | device                    |
//! |---------------------|----------------------|---------------------------|
//! | `ndarray` (default) | [`backend::Cpu`]     | the CPU (rayon kernels)   |
//! | `wgpu`              | `backend::Wgpu`      | Vulkan / Metal / DX12 GPU |
//! | `cuda`              | `backend::Cuda`      | NVIDIA GPU (NVRTC)        |
//!
//! Each has an `Autodiff` twin (`CpuAutodiff`, `WgpuAutodiff`, `CudaAutodiff`) for training.
//! [`backend::Default`] is the fastest compiled one (cuda, then wgpu, then ndarray).

pub use ember_data as data;
pub use ember_field as field;
pub use ember_kernels as kernels;
pub use ember_train as train;

/// Between splat files and fields (`ember_field::splats`).
pub use ember_field::splats;

/// Backend type aliases for the compiled cargo features.
pub use ember_kernels::backend;

/// The names research code usually needs.
pub mod prelude {
    pub use ember_data::HierarchyConfig;
    pub use ember_field::{
        Camera, Covariance, DEFAULT_LOD_THRESHOLD, FieldError, FieldOptions, GaussianField,
        GaussianFieldConfig, GaussianHierarchy, ModelError, RenderError, RenderOptions,
        RenderOutput, Similarity, SplatAutodiffBackend, SplatBackend, lod_cut, render,
        render_batch, render_lod, transform_camera,
    };
    pub use ember_kernels::{ProjectOptions, field_query};
}
