//! A nerfstudio-style `transforms.json`: global and per-frame intrinsics, distortion, file paths
//! without extension, explicit filename splits, `images_N/`, and `ply_file_path`.

use std::path::Path;

use ember_data::{Dataset, DatasetFormat, DatasetOptions};
use image::{Rgb, RgbImage};

fn write_png(path: &Path, width: u32, height: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    RgbImage::from_pixel(width, height, Rgb([200, 100, 50]))
        .save(path)
        .unwrap();
}

const SCENE: &str = r#"{
  "camera_model": "OPENCV",
  "fl_x": 40, "fl_y": 41, "cx": 16, "cy": 12, "w": 32, "h": 24,
  "k1": 0.01, "k2": 0.0, "p1": 0.0, "p2": 0.0,
  "ply_file_path": "points.ply",
  "train_filenames": ["images/a.png", "images/c"],
  "test_filenames": ["./images/b.png"],
  "frames": [
    {"file_path": "images/b.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,3],[0,0,0,1]]},
    {"file_path": "images/a.png", "transform_matrix": [[1,0,0,1],[0,1,0,0],[0,0,1,3],[0,0,0,1]]},
    {"file_path": "images/c", "fl_x": 80, "fl_y": 80, "cx": 32, "cy": 24, "w": 64, "h": 48,
     "transform_matrix": [[1,0,0,-1],[0,1,0,0],[0,0,1,3]]}
  ]
}"#;

const PLY: &str = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n1 1 1\n";

#[test]
fn nerfstudio_scene_with_explicit_splits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::write(root.join("transforms.json"), SCENE).unwrap();
    std::fs::write(root.join("points.ply"), PLY).unwrap();
    write_png(&root.join("images/a.png"), 32, 24);
    write_png(&root.join("images/b.png"), 32, 24);
    write_png(&root.join("images/c.png"), 64, 48);
    write_png(&root.join("images_2/a.png"), 16, 12);
    write_png(&root.join("images_2/b.png"), 16, 12);
    write_png(&root.join("images_2/c.png"), 32, 24);

    let dataset = Dataset::load(root, &DatasetOptions::default()).unwrap();
    assert!(matches!(dataset.format, DatasetFormat::Transforms { .. }));
    let names: Vec<&str> = dataset.train.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["images/a.png", "images/c"]);
    assert_eq!(dataset.test.len(), 1);
    assert_eq!(dataset.test[0].name, "images/b.png");
    assert_eq!(dataset.points.as_ref().unwrap().len(), 2);
    assert!(dataset.points.as_ref().unwrap().colors.is_none());

    let a = &dataset.train[0];
    let camera = a.camera();
    assert_eq!(
        (camera.fx, camera.fy, camera.cx, camera.cy),
        (40.0, 41.0, 16.0, 12.0)
    );
    // OpenGL camera at x = 1 looking down -z: the origin is 3 in front and 1 to the left.
    assert_eq!(a.pose.center(), [1.0, 0.0, 3.0]);
    let (uv, depth) = a.project([0.0; 3]).unwrap();
    assert_eq!(depth, 3.0);
    assert!((uv[0] - (16.0 - 40.0 / 3.0)).abs() < 1e-12 && (uv[1] - 12.0).abs() < 1e-12);
    // Distorted: undistorted on load, so the view is pinhole.
    assert!(a.distortion.is_none());
    assert_eq!(a.source.undistort.unwrap().1.k1, 0.01);
    // Per-frame intrinsics and a file path without extension.
    let c = &dataset.train[1];
    assert!(c.source.path.ends_with("images/c.png"));
    assert_eq!((c.intrinsics.fx, c.intrinsics.width), (80.0, 64));
    assert_eq!(c.source.decode().unwrap().width, 64);

    // downsample = 2 takes `images_2/` and halves the intrinsics.
    let half = Dataset::load(
        root,
        &DatasetOptions {
            downsample: 2,
            ..DatasetOptions::default()
        },
    )
    .unwrap();
    let c = &half.train[1];
    assert!(c.source.path.ends_with("images_2/c.png"));
    assert_eq!(
        (c.intrinsics.fx, c.intrinsics.cx, c.intrinsics.width),
        (40.0, 16.0, 32)
    );
    assert_eq!(c.source.decode().unwrap().width, 32);

    // Loading the JSON file directly is the same scene.
    let direct = Dataset::load(&root.join("transforms.json"), &DatasetOptions::default()).unwrap();
    assert_eq!(direct.train, dataset.train);
}
