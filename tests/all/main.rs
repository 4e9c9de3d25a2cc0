//! Ember's integration tests across crates: one binary (each test binary links all of Burn), one
//! module per area. Each crate's own tests are in its `tests/` (the kernels' in
//! `crates/kernels/tests/all`, the field's in `crates/field/tests/all`).

// The helpers are the kernels tests' own (seeded inputs, data paths): one copy.
#[path = "../../crates/kernels/tests/all/common.rs"]
#[allow(dead_code)]
mod common;
mod loss;
mod transform_cpu;
