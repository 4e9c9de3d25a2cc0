//! The 3DGS PLY splat reader (binary and ASCII) and the compressed-PLY reader on arbitrary bytes.
#![no_main]

use std::path::Path;

use ember_data::splats::{compressed_ply, ply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ply::parse(data, Path::new("fuzz.ply"));
    let _ = compressed_ply::parse(data, Path::new("fuzz.compressed.ply"));
});
