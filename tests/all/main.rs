//! Ember's integration tests across crates: one binary (each test binary links all of Burn), one
//! module per area. Each crate's own tests are its own (the kernels' beside each op, in
//! `crates/kernels/src/<op>/tests.rs`; the field's in `crates/field/tests/all`).

// Seeded inputs and data paths, shared with the kernels' tests.
use ember_test_utils as common;

mod loss;
mod transform_cpu;
