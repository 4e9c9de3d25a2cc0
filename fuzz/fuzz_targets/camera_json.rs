//! The camera JSON of `trainer render --camera`, and the kernels' camera of any it accepts.
#![no_main]

use std::path::Path;

use ember_data::camera::{CameraFile, camera_params};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((pose, intrinsics)) = CameraFile::parse(data, Path::new("camera.json")) {
        let _ = camera_params(&pose, &intrinsics);
    }
});
