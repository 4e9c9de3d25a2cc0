//! The camera path JSON of `trainer render --path`, and every frame of any path it accepts:
//! finite, of the path's size, with a rotation the loaders would accept.
#![no_main]

use std::path::Path;

use ember_data::{Pose, parse_camera_path};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(path) = parse_camera_path(data, Path::new("path.json")) {
        let size = path.size();
        for camera in path.frames() {
            assert_eq!((camera.width, camera.height), size);
            assert!(
                [camera.fx, camera.fy, camera.cx, camera.cy]
                    .iter()
                    .all(|v| v.is_finite())
            );
            let pose = Pose {
                rotation: camera.rotation,
                translation: camera.translation,
            };
            assert_eq!(pose.problem(), None, "{camera:?}");
        }
    }
});
