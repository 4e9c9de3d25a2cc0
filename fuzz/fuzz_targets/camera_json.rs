//! The camera JSON of `trainer render --camera`, and the centre of any camera it accepts.
#![no_main]

use std::path::Path;

use ember_data::parse_camera_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(camera) = parse_camera_file(data, Path::new("camera.json")) {
        let _ = camera.center();
    }
});
