//! `ember-field`'s tests: one binary (each test binary links all of Burn), one module per area.

// Seeded inputs and the gsplat oracle cases, shared with the kernels' tests.
use ember_test_utils as common;

mod coverage;
mod field_model;
mod lod;
mod panorama;
mod render;
mod smoothing;
mod tile_lists;
