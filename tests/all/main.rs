//! Ember's integration tests: one binary (each test binary links all of Burn), one module per area.

mod common;
mod field_cpu;
mod field_model;
#[cfg(feature = "wgpu")]
mod field_wgpu;
