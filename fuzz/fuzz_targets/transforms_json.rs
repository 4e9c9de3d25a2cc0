//! The transforms.json parser, and the intrinsics of every frame it accepts.
#![no_main]

use std::path::Path;

use ember_data::transforms_json::parse_transforms;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("transforms.json");
    if let Ok(file) = parse_transforms(data, path) {
        for frame in &file.frames {
            if let Ok(size) = frame.declared_size(path) {
                let _ = frame.intrinsics(size.unwrap_or((64, 48)), path);
            }
        }
    }
});
