//! Integration tests of `ember-train` (one binary; modules by topic).

mod align;
mod antialiasing;
mod appearance;
mod batch;
mod captures;
mod common;
mod config_files;
mod densify;
mod eval_cache;
mod lego;
mod lpips;
mod masks;
mod parallel;
mod poses;
mod procedural;
mod rates;
mod resume;
mod smoke;
mod step_paths;
mod time;
mod visible_adam;
#[cfg(feature = "wgpu")]
mod wgpu;
