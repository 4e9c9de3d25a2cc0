//! Ember's integration tests across crates: one binary (each test binary links all of Burn), one
//! module per area. Each crate's own tests are in its `tests/` (the kernels' in
//! `crates/kernels/tests/all`).

mod common;
mod field_model;
mod loss;
mod render;
mod transform_cpu;
