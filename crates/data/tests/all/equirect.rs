//! 360° datasets: nerfstudio `EQUIRECTANGULAR` frames cut into rigs of pinhole views, split by
//! frame, decoded once per panorama; bad panoramas and rigs refused by name.

use std::path::Path;

use ember_data::equirect::{SplitOptions, direction, read_panorama_frames, split_panoramas};
use ember_data::{
    DataError, Dataset, DatasetOptions, EquirectRig, ImageLoader, LoaderOptions, View,
};
use image::{Rgb, RgbImage};

use crate::common::data_path;

/// The colour a smooth test panorama gives a world direction `d` (unit): `127.5 + 120 d`.
fn colour_of(d: [f64; 3]) -> [f64; 3] {
    d.map(|x| 127.5 + 120.0 * x)
}

/// A `w x h` panorama whose pixel colours encode their directions in the world, for a
/// panorama camera turned by `yaw` radians about the world's y axis.
fn smooth_panorama(w: u32, h: u32, yaw: f64) -> RgbImage {
    RgbImage::from_fn(w, h, |i, j| {
        let d = direction(
            f64::from(i) + 0.5,
            f64::from(j) + 0.5,
            f64::from(w),
            f64::from(h),
        );
        // Camera to world: a turn by `yaw` about y.
        let (s, c) = yaw.sin_cos();
        let world = [c * d[0] + s * d[2], d[1], -s * d[0] + c * d[2]];
        Rgb(colour_of(world).map(|v| v.round() as u8))
    })
}

/// nerfstudio's camera-to-world (OpenGL axes) of a panorama at `centre` turned by `yaw` about
/// the world's y axis (OpenCV camera axes map to OpenGL ones by flipping y and z).
fn c2w(centre: [f64; 3], yaw: f64) -> String {
    let (s, c) = yaw.sin_cos();
    // OpenCV rotation camera->world: columns x, y, z of the camera in the world.
    let r = [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]];
    let rows: Vec<String> = (0..3)
        .map(|i| format!("[{}, {}, {}, {}]", r[i][0], -r[i][1], -r[i][2], centre[i]))
        .collect();
    format!("[{}, [0, 0, 0, 1]]", rows.join(", "))
}

/// A folder with `frames` smooth panoramas of `w x h` and a transforms.json declaring them
/// EQUIRECTANGULAR (`extra` is spliced into the file's top level).
fn write_scene(dir: &Path, frames: usize, w: u32, h: u32, extra: &str) {
    std::fs::create_dir_all(dir.join("frames")).unwrap();
    let mut entries = Vec::new();
    for k in 0..frames {
        let yaw = 0.3 * k as f64;
        smooth_panorama(w, h, yaw)
            .save(dir.join(format!("frames/{k:03}.png")))
            .unwrap();
        entries.push(format!(
            r#"{{"file_path": "frames/{k:03}.png", "transform_matrix": {}}}"#,
            c2w([k as f64, 0.5, -0.25 * k as f64], yaw)
        ));
    }
    let json = format!(
        r#"{{"camera_model": "EQUIRECTANGULAR", {extra} "frames": [{}]}}"#,
        entries.join(", ")
    );
    std::fs::write(dir.join("transforms.json"), json).unwrap();
}

/// The world direction of pixel `(x, y)`'s centre in `view`.
fn world_direction(view: &View, x: u32, y: u32) -> [f64; 3] {
    let k = &view.intrinsics;
    let q = [
        (f64::from(x) + 0.5 - k.cx) / k.fx,
        (f64::from(y) + 0.5 - k.cy) / k.fy,
        1.0,
    ];
    let r = &view.pose.rotation;
    let d: [f64; 3] = std::array::from_fn(|c| (0..3).map(|k| q[k] * r[3 * k + c]).sum());
    let norm = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
    d.map(|v| v / norm)
}

#[test]
fn panoramas_become_rigs_split_by_frame() {
    let dir = tempfile::tempdir().unwrap();
    write_scene(dir.path(), 9, 256, 128, "");
    let options = DatasetOptions {
        equirect: EquirectRig {
            size: Some(48),
            ..EquirectRig::default()
        },
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(dir.path(), &options).unwrap();
    // Frames 0 and 8 are held out (every 8th), with all ten views of each.
    assert_eq!((dataset.train.len(), dataset.test.len()), (70, 20));
    assert!(
        dataset
            .test
            .iter()
            .all(|v| v.name.starts_with("frames/000.png#") || v.name.starts_with("frames/008.png#"))
    );
    assert_eq!(dataset.test[3].name, "frames/000.png#3");
    for view in dataset.all_views() {
        let frame: usize = view.name[7..10].parse().unwrap();
        let centre = view.pose.center();
        let expected = [frame as f64, 0.5, -0.25 * frame as f64];
        assert!(
            (0..3).all(|i| (centre[i] - expected[i]).abs() < 1e-9),
            "{}: centre {centre:?}",
            view.name
        );
        assert_eq!((view.intrinsics.width, view.intrinsics.height), (48, 48));
    }
    // Every pixel shows the world direction it looks along (the panorama encodes it).
    for view in [
        &dataset.train[0],
        &dataset.train[13],
        &dataset.train[29],
        &dataset.test[19],
    ] {
        let image = view.source.decode().unwrap();
        for (x, y) in [(0, 0), (24, 24), (47, 5), (10, 40)] {
            let expected = colour_of(world_direction(view, x, y));
            let got = image.pixel(x, y).unwrap();
            for c in 0..3 {
                assert!(
                    (f64::from(got[c]) - expected[c]).abs() < 4.0,
                    "{} ({x}, {y}): {got:?} vs {expected:?}",
                    view.name
                );
            }
        }
    }
    // The loader decodes each panorama once, however its views are asked for.
    let loader = ImageLoader::new(
        dataset.train.iter().map(|v| v.source.clone()).collect(),
        LoaderOptions::default(),
    )
    .unwrap();
    loader.get(15).unwrap().unwrap();
    assert_eq!(loader.stats().panoramas_decoded, 1);
    assert_eq!(loader.stats().images_decoded, 10);
    loader.preload().unwrap();
    let stats = loader.stats();
    assert_eq!((stats.panoramas_decoded, stats.images_decoded), (7, 70));
    assert_eq!(stats.cache_misses, 1);
    assert!(
        stats.to_string().contains("70 views cut from 7 panoramas"),
        "{stats}"
    );
    assert_eq!(
        *loader.get(42).unwrap().unwrap(),
        dataset.train[42].source.decode().unwrap()
    );

    // Downsampling divides the views' size, as a photo's.
    let half = Dataset::load(
        dir.path(),
        &DatasetOptions {
            downsample: 2,
            ..options.clone()
        },
    )
    .unwrap();
    assert_eq!(half.train[0].intrinsics.width, 24);
    // The default size gives a view's centre the panorama's density: 256 tan(45°) / π.
    let default = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap();
    assert_eq!(default.train[0].intrinsics.width, 81);
}

#[test]
fn bad_panoramas_and_rigs_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_scene(dir.path(), 3, 64, 32, "");
    // A frame that is not 2:1.
    RgbImage::new(60, 32)
        .save(dir.path().join("frames/001.png"))
        .unwrap();
    let error = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(error, DataError::NotEquirectangular { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("frames/001.png") && message.contains("60x32"),
        "{message}"
    );
    // A frame missing.
    std::fs::remove_file(dir.path().join("frames/001.png")).unwrap();
    let error = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(error, DataError::MissingImages { .. })
            && error.to_string().contains("frames/001.png"),
        "{error}"
    );
    // A rig that covers nothing.
    let empty = DatasetOptions {
        equirect: EquirectRig {
            views: 0,
            poles: false,
            ..EquirectRig::default()
        },
        ..DatasetOptions::default()
    };
    let error = Dataset::load(dir.path(), &empty).unwrap_err();
    assert!(error.to_string().contains("data.equirect"), "{error}");
    assert!(error.to_string().contains("covers nothing"), "{error}");
    // Distortion parameters on a panorama.
    let distorted = tempfile::tempdir().unwrap();
    write_scene(distorted.path(), 2, 64, 32, r#""k1": 0.05, "#);
    let error = Dataset::load(distorted.path(), &DatasetOptions::default()).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("transforms.json") && message.contains("EQUIRECTANGULAR"),
        "{message}"
    );
    // A panorama whose data is cut short: the dataset loads (it reads headers), decoding its
    // views names the file, once for the view asked and once for the views cut with it.
    let truncated = tempfile::tempdir().unwrap();
    write_scene(truncated.path(), 3, 64, 32, "");
    let frame = truncated.path().join("frames/002.png");
    let bytes = std::fs::read(&frame).unwrap();
    std::fs::write(&frame, &bytes[..bytes.len() / 2]).unwrap();
    let dataset = Dataset::load(truncated.path(), &DatasetOptions::default()).unwrap();
    let loader = ImageLoader::new(
        dataset.train.iter().map(|v| v.source.clone()).collect(),
        LoaderOptions::default(),
    )
    .unwrap();
    let error = loader.preload().unwrap_err().to_string();
    assert!(error.contains("frames/002.png"), "{error}");
    let view = dataset
        .train
        .iter()
        .position(|v| v.name == "frames/002.png#3")
        .unwrap();
    let error = loader.get(view).unwrap().unwrap_err().to_string();
    assert!(
        error.contains("frames/002.png") && error.contains("cannot decode"),
        "{error}"
    );
    // A declared size that is not the file's.
    let declared = tempfile::tempdir().unwrap();
    write_scene(declared.path(), 2, 64, 32, r#""w": 128, "h": 64, "#);
    let error = Dataset::load(declared.path(), &DatasetOptions::default()).unwrap_err();
    assert!(
        matches!(error, DataError::ImageSizeMismatch { .. }),
        "{error}"
    );
}

/// The shared real panoramas, read through a transforms.json that names them by absolute path:
/// every view decodes and matches the panorama shrunk to the views' density (a 128-pixel view
/// of 90° has the density of a 512-pixel-wide panorama), looked up along each pixel's ray.
#[test]
fn real_panoramas_cut_into_views() {
    for name in ["pannellum_examplepano.jpg", "py360convert_demo_equirec.png"] {
        let Some(panorama) = data_path(&format!("equirect/{name}")) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"camera_model": "EQUIRECTANGULAR", "frames": [{{"file_path": "{}", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}}]}}"#,
            panorama.canonicalize().unwrap().display()
        );
        std::fs::write(dir.path().join("transforms.json"), json).unwrap();
        let options = DatasetOptions {
            equirect: EquirectRig {
                size: Some(128),
                ..EquirectRig::default()
            },
            ..DatasetOptions::default()
        };
        let dataset = Dataset::load(dir.path(), &options).unwrap();
        assert_eq!(dataset.train.len(), 10, "{name}");
        let full = image::open(&panorama).unwrap().into_rgb8();
        let small = image::imageops::resize(&full, 512, 256, image::imageops::FilterType::Triangle);
        // The ring: its pixels lie within 45° of the horizon, where the shrunk panorama's
        // density matches (near the poles it is anisotropic, the views are not).
        for view in &dataset.train[..8] {
            let image = view.source.decode().unwrap();
            let mut error = 0.0;
            for y in 0..128 {
                for x in 0..128 {
                    // In the panorama camera's axes: through the view's rig rotation.
                    let rig = view.source.panorama_view.unwrap();
                    let k = &rig.intrinsics;
                    let q = [
                        (f64::from(x) + 0.5 - k.cx) / k.fx,
                        (f64::from(y) + 0.5 - k.cy) / k.fy,
                        1.0,
                    ];
                    let r = &rig.rotation;
                    let d: [f64; 3] =
                        std::array::from_fn(|c| (0..3).map(|k| q[k] * r[3 * k + c]).sum());
                    let (u, v) = ember_data::equirect::panorama_position(d, 512.0, 256.0);
                    let expected = small.get_pixel((u as u32).min(511), (v as u32).min(255));
                    let got = image.pixel(x, y).unwrap();
                    error += (0..3)
                        .map(|c| (f64::from(got[c]) - f64::from(expected.0[c])).abs())
                        .sum::<f64>();
                }
            }
            let mean = error / (128.0 * 128.0 * 3.0);
            assert!(
                mean < 8.0,
                "{name} {}: mean error {mean:.2} levels",
                view.name
            );
        }
    }
}

/// A COLMAP scene in the rig layout `trainer data split360` writes (`view_KK/FRAME`) holds
/// out whole frames: every view of every 8th frame.
#[test]
fn a_colmap_rig_is_split_by_frame() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("sparse/0");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("cameras.txt"), "1 PINHOLE 8 8 8 8 4 4\n").unwrap();
    std::fs::write(model.join("points3D.txt"), "").unwrap();
    let mut images = String::new();
    let mut id = 1;
    for view in 0..2 {
        let folder = dir.path().join(format!("images/view_{view:02}"));
        std::fs::create_dir_all(&folder).unwrap();
        for frame in 0..9 {
            RgbImage::new(8, 8)
                .save(folder.join(format!("f{frame}.png")))
                .unwrap();
            images.push_str(&format!(
                "{id} 1 0 0 0 {frame} 0 {view} 1 view_{view:02}/f{frame}.png\n\n"
            ));
            id += 1;
        }
    }
    std::fs::write(model.join("images.txt"), images).unwrap();
    let dataset = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap();
    let mut test: Vec<&str> = dataset.test.iter().map(|v| v.name.as_str()).collect();
    test.sort();
    assert_eq!(
        test,
        [
            "view_00/f0.png",
            "view_00/f8.png",
            "view_01/f0.png",
            "view_01/f8.png"
        ]
    );
    assert_eq!(dataset.train.len(), 14);
}

/// The layout other tools write for panoramas (nerfstudio's Blender add-on and its own
/// equirectangular exports): global intrinsics that a panorama does not need (`fl_x`, `cx`, ...),
/// zero distortion coefficients, `w h`, per-frame `camera_model`: it loads without edits.
#[test]
fn another_tools_equirectangular_layout_loads_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    write_scene(
        dir.path(),
        3,
        128,
        64,
        r#""fl_x": 64.0, "fl_y": 64.0, "cx": 64.0, "cy": 32.0, "w": 128, "h": 64, "k1": 0.0, "k2": 0.0, "p1": 0.0, "p2": 0.0, "aabb_scale": 16, "#,
    );
    let dataset = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap();
    assert_eq!(dataset.all_views().count(), 30);
    // A camera_model given per frame, over a global perspective camera.
    let mixed = r#"{"fl_x": 50, "camera_model": "PINHOLE", "frames": [
        {"file_path": "frames/000.png", "camera_model": "EQUIRECTANGULAR", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,0],[0,0,0,1]]}]}"#;
    std::fs::write(dir.path().join("transforms.json"), mixed).unwrap();
    let dataset = Dataset::load(dir.path(), &DatasetOptions::default()).unwrap();
    assert_eq!(dataset.train.len(), 10);
}

/// The folder `split360` writes, once COLMAP has reconstructed its views (here: a text model
/// written from the views' own poses), loads as the panoramas themselves: each posed by its
/// views, cut at the rig the options ask (not the split's), split by frame: the same views as
/// the walk's own transforms.json gives.
#[test]
fn a_colmap_reconstruction_of_split_views_poses_the_panoramas() {
    let dir = tempfile::tempdir().unwrap();
    let walk = dir.path().join("walk");
    write_scene(&walk, 9, 128, 64, "");
    let (frames, _) = read_panorama_frames(&walk).unwrap();
    let split = dir.path().join("split");
    let options = SplitOptions {
        rig: EquirectRig {
            size: Some(32),
            ..EquirectRig::default()
        },
        jpeg_quality: None,
        test_every: Some(8),
    };
    split_panoramas(&frames, None, &split, &options, &|_| {}).unwrap();
    let views = Dataset::load(&split, &DatasetOptions::default()).unwrap();
    std::fs::remove_file(split.join("transforms.json")).unwrap();
    let model = split.join("sparse/0");
    std::fs::create_dir_all(&model).unwrap();
    let k = &views.train[0].intrinsics;
    std::fs::write(
        model.join("cameras.txt"),
        format!("1 PINHOLE 32 32 {} {} {} {}\n", k.fx, k.fy, k.cx, k.cy),
    )
    .unwrap();
    std::fs::write(model.join("points3D.txt"), "").unwrap();
    let mut images = String::new();
    for (i, view) in views.all_views().enumerate() {
        let q = ember_kernels::quat::quat_from_rotation(view.pose.rotation);
        let t = view.pose.translation;
        let name = view.name.strip_prefix("images/").unwrap();
        images.push_str(&format!(
            "{} {:.17} {:.17} {:.17} {:.17} {:.17} {:.17} {:.17} 1 {name}\n\n",
            i + 1,
            q[0],
            q[1],
            q[2],
            q[3],
            t[0],
            t[1],
            t[2]
        ));
    }
    std::fs::write(model.join("images.txt"), images).unwrap();

    let cube = DatasetOptions {
        equirect: EquirectRig {
            views: 4,
            size: Some(24),
            ..EquirectRig::default()
        },
        ..DatasetOptions::default()
    };
    let from_colmap = Dataset::load(&split, &cube).unwrap();
    let from_walk = Dataset::load(&walk, &cube).unwrap();
    assert_eq!(
        (from_colmap.train.len(), from_colmap.test.len()),
        (42, 12),
        "7 frames of 6 views trained, 2 held out (frames 0 and 8)"
    );
    for (a, b) in from_colmap.all_views().zip(from_walk.all_views()) {
        assert_eq!(format!("frames/{}", a.name), b.name);
        assert!((0..9).all(|i| (a.pose.rotation[i] - b.pose.rotation[i]).abs() < 1e-9));
        assert!((0..3).all(|i| (a.pose.translation[i] - b.pose.translation[i]).abs() < 1e-9));
        assert_eq!(a.source.decode().unwrap(), b.source.decode().unwrap());
    }
}
