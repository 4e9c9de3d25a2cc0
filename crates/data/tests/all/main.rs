//! `ember-data`'s integration tests: one binary, one module per area.

mod common;
mod smoke;
