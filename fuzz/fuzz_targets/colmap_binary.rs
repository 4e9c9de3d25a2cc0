//! The three COLMAP binary readers on arbitrary bytes: errors are fine, panics and aborts are not.
#![no_main]

use std::path::Path;

use ember_data::colmap::{parse_cameras_binary, parse_images_binary, parse_points3d_binary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.bin");
    let _ = parse_cameras_binary(data, path);
    let _ = parse_images_binary(data, path);
    let _ = parse_points3d_binary(data, path);
});
