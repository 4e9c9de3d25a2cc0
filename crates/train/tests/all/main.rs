//! Integration tests of `ember-train` (one binary; modules by topic).

mod common;
mod config_files;
mod densify;
mod eval_cache;
mod lego;
mod procedural;
mod resume;
mod smoke;
#[cfg(feature = "wgpu")]
mod wgpu;
