//! `ember-data`'s integration tests: one binary, one module per area.

mod captures;
mod colmap_roundtrip;
mod common;
mod corruption;
mod equirect;
mod errors;
mod exposures;
mod figurine;
mod lego;
mod loader;
mod masks;
mod nerfstudio;
mod smoke;
mod splats;
