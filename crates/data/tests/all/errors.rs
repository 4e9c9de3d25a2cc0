//! Each problem a user's scene can have gives its typed error, naming the file and the problem.
//! The scenes are written to temporary folders, so these run without the shared data.

use std::path::Path;

use ember_data::{DataError, Dataset, DatasetOptions};
use image::{Rgb, RgbImage};

use crate::common::data_path;

fn write_png(path: &Path, width: u32, height: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    RgbImage::from_pixel(width, height, Rgb([40, 80, 120]))
        .save(path)
        .unwrap();
}

/// A COLMAP text scene with the given `cameras.txt` line and images `names` (all with identity
/// rotation, camera 1).
fn colmap_scene(root: &Path, camera: &str, names: &[&str]) {
    let sparse = root.join("sparse/0");
    std::fs::create_dir_all(&sparse).unwrap();
    std::fs::write(sparse.join("cameras.txt"), format!("# cameras\n{camera}\n")).unwrap();
    let mut images = String::from("# images\n");
    for (i, name) in names.iter().enumerate() {
        images.push_str(&format!("{} 1 0 0 0 0 0 {} 1 {name}\n\n", i + 1, 4 + i));
    }
    std::fs::write(sparse.join("images.txt"), images).unwrap();
}

#[test]
fn colmap_text_scene_loads_and_undistorts() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(
        tmp.path(),
        "1 SIMPLE_RADIAL 16 12 20 8 6 -0.05",
        &["a.png", "b.png"],
    );
    write_png(&tmp.path().join("images/a.png"), 16, 12);
    write_png(&tmp.path().join("images/b.png"), 16, 12);
    let dataset = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap();
    // Two views: the first held out; no points3D file means no points.
    assert_eq!((dataset.train.len(), dataset.test.len()), (1, 1));
    assert!(dataset.points.is_none());
    let view = &dataset.train[0];
    assert!(view.distortion.is_none(), "undistorted on load");
    assert_eq!(view.source.undistort.unwrap().1.k1, -0.05);
    let image = view.source.decode().unwrap();
    // A uniform image stays uniform through the remap (edges repeat).
    assert!(image.data.chunks(3).all(|p| p == [40, 80, 120]));

    let carried = Dataset::load(
        tmp.path(),
        &DatasetOptions {
            undistort: false,
            ..DatasetOptions::default()
        },
    )
    .unwrap();
    assert_eq!(carried.train[0].distortion.k1, -0.05);
    assert!(carried.train[0].source.undistort.is_none());
}

#[test]
fn missing_images_are_all_listed() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(
        tmp.path(),
        "1 PINHOLE 8 6 10 10 4 3",
        &["a.png", "b.png", "sub/c.png"],
    );
    write_png(&tmp.path().join("images/a.png"), 8, 6);
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    match &error {
        DataError::MissingImages { dir, names } => {
            assert_eq!(dir, &tmp.path().join("images"));
            assert_eq!(names, &["b.png", "sub/c.png"]);
        }
        other => panic!("expected MissingImages, got {other}"),
    }
    assert!(
        error
            .to_string()
            .contains("2 image file(s) not found: b.png, sub/c.png")
    );
}

#[test]
fn image_size_mismatch_names_the_file_and_both_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "1 PINHOLE 10 6 10 10 5 3", &["a.png"]);
    write_png(&tmp.path().join("images/a.png"), 8, 6);
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(
            error,
            DataError::ImageSizeMismatch {
                found_width: 8,
                expected_width: 10,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("a.png: image is 8x6 but its camera says 10x6")
    );
}

#[test]
fn images_n_folder_is_used_for_downsampling() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "1 PINHOLE 17 12 20 20 8.5 6", &["a.png"]);
    write_png(&tmp.path().join("images/a.png"), 17, 12);
    // 17 / 2 = 8.5: tools round either way.
    write_png(&tmp.path().join("images_2/a.png"), 8, 6);
    let options = DatasetOptions {
        downsample: 2,
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(tmp.path(), &options).unwrap();
    let view = &dataset.train[0];
    assert!(view.source.path.ends_with("images_2/a.png"));
    assert_eq!((view.intrinsics.width, view.intrinsics.height), (8, 6));
    assert_eq!((view.intrinsics.fy, view.intrinsics.cy), (10.0, 3.0));
    assert!((view.intrinsics.fx - 20.0 * 8.0 / 17.0).abs() < 1e-12);
    let image = view.source.decode().unwrap();
    assert_eq!((image.width, image.height), (8, 6));
    // Without images_3/ the full-resolution images are resized on load.
    let options = DatasetOptions {
        downsample: 3,
        ..DatasetOptions::default()
    };
    let view = &Dataset::load(tmp.path(), &options).unwrap().train[0];
    assert!(view.source.path.ends_with("images/a.png"));
    assert_eq!(view.source.size, (6, 4));
}

#[test]
fn an_opencv_fisheye_scene_loads_and_is_undistorted_on_decode() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(
        tmp.path(),
        "1 OPENCV_FISHEYE 16 12 20 20 8 6 0.05 -0.01 0.002 -0.0005",
        &["a.png", "b.png"],
    );
    write_png(&tmp.path().join("images/a.png"), 16, 12);
    write_png(&tmp.path().join("images/b.png"), 16, 12);
    let dataset = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap();
    let view = &dataset.train[0];
    assert!(view.distortion.is_none(), "undistorted on load");
    let (_, distortion) = view.source.undistort.unwrap();
    assert!(distortion.fisheye);
    assert_eq!(
        (distortion.k1, distortion.k2, distortion.k3, distortion.k4),
        (0.05, -0.01, 0.002, -0.0005)
    );
    let image = view.source.decode().unwrap();
    assert!(image.data.chunks(3).all(|p| p == [40, 80, 120]));
}

#[test]
fn unsupported_camera_model_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "1 FOV 8 6 10 10 4 3 0.1", &["a.png"]);
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(&error, DataError::UnsupportedCameraModel { camera_id: 1, model, .. } if model == "FOV"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("cameras.txt: camera 1 uses the FOV model")
    );
}

#[test]
fn image_with_unknown_camera_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "2 PINHOLE 8 6 10 10 4 3", &["a.png"]);
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(error, DataError::MissingCamera { camera_id: 1, .. }),
        "{error}"
    );
}

#[test]
fn non_finite_pose_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "1 PINHOLE 8 6 10 10 4 3", &[]);
    std::fs::write(
        tmp.path().join("sparse/0/images.txt"),
        "1 nan 0 0 0 0 0 1 1 a.png\n\n2 1 0 0 0 inf 0 1 1 b.png\n\n",
    )
    .unwrap();
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(&error, DataError::InvalidPose { view, .. } if view == "a.png"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("images.txt: pose of `a.png` is invalid")
    );
}

#[test]
fn transforms_without_intrinsics_names_file_and_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let json = r#"{"frames": [{"file_path": "a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,4],[0,0,0,1]]}]}"#;
    std::fs::write(tmp.path().join("transforms.json"), json).unwrap();
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(error, DataError::MissingIntrinsics { frame: 0, .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("transforms.json: frame 0 has no intrinsics")
    );
}

#[test]
fn truncated_images_bin_in_a_scene_names_the_file() {
    let Some(figurine) = data_path("figurine_colmap/sparse/0") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let sparse = tmp.path().join("sparse/0");
    std::fs::create_dir_all(&sparse).unwrap();
    std::fs::copy(figurine.join("cameras.bin"), sparse.join("cameras.bin")).unwrap();
    let images = std::fs::read(figurine.join("images.bin")).unwrap();
    std::fs::write(sparse.join("images.bin"), &images[..images.len() / 3]).unwrap();
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(matches!(error, DataError::Truncated { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("images.bin: file ends early at byte"),
        "{message}"
    );
}

#[test]
fn corrupt_image_file_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    colmap_scene(tmp.path(), "1 PINHOLE 8 6 10 10 4 3", &["a.png"]);
    std::fs::create_dir_all(tmp.path().join("images")).unwrap();
    std::fs::write(
        tmp.path().join("images/a.png"),
        b"\x89PNG\r\n\x1a\nnot really",
    )
    .unwrap();
    let error = Dataset::load(tmp.path(), &DatasetOptions::default()).unwrap_err();
    assert!(matches!(error, DataError::Image { .. }), "{error}");
    assert!(error.to_string().contains("a.png: cannot decode image"));
}
