//! The tests of `ember-kernels`: one binary (each test binary links all of Burn), one module per
//! op. The GPU modules run with `--features wgpu` (lavapipe in CI) or `--features cuda`.

// Seeded inputs, comparisons and the gsplat oracle cases, shared with the field's and the
// facade's test binaries.
use ember_test_utils as common;

mod densify_stats;
mod field_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod field_gpu;
mod loss;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod loss_gpu;
mod noise;
mod optim;
mod project_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod project_gpu;
mod raster_cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod sort_gpu;
mod transform;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod transform_gpu;
