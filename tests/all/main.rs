//! Ember's integration tests: one binary (each test binary links all of Burn), one module per area.

mod common;
mod field_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod field_gpu;
mod loss;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod loss_gpu;
mod optim;
mod project_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod project_gpu;
mod raster_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod sort_gpu;
mod transform_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod transform_gpu;
