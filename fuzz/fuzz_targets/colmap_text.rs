//! The three COLMAP text readers on arbitrary bytes.
#![no_main]

use std::path::Path;

use ember_data::colmap::{parse_cameras_text, parse_images_text, parse_points3d_text};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.txt");
    let _ = parse_cameras_text(data, path);
    let _ = parse_images_text(data, path);
    let _ = parse_points3d_text(data, path);
});
