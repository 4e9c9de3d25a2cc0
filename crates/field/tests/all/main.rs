//! `ember-field`'s tests: one binary (each test binary links all of Burn), one module per area.

// The helpers are the kernels tests' own (seeded inputs, the gsplat oracle cases): one copy.
#[path = "../../../kernels/tests/all/common.rs"]
#[allow(dead_code)]
mod common;
mod field_model;
mod render;
mod tile_lists;
