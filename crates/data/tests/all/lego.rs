//! `lego_400`: NeRF-Synthetic layout, per-split files, RGBA PNGs on white.

use ember_data::{Dataset, DatasetFormat, DatasetOptions, View};

use crate::common::data_path;

fn load(options: &DatasetOptions) -> Option<Dataset> {
    let root = data_path("lego_400")?;
    Some(Dataset::load(&root, options).unwrap())
}

#[test]
fn lego_splits_intrinsics_and_poses() {
    let Some(dataset) = load(&DatasetOptions::default()) else {
        return;
    };
    assert_eq!(dataset.format, DatasetFormat::TransformsSplits);
    assert_eq!(
        (dataset.train.len(), dataset.val.len(), dataset.test.len()),
        (100, 100, 200)
    );
    assert!(dataset.points.is_none());
    for view in dataset.all_views() {
        let camera = view.camera();
        assert_eq!((camera.width, camera.height), (400, 400));
        // 0.5 * 400 / tan(0.5 * 0.6911112070083618)
        assert!((camera.fx - 555.5555).abs() < 1e-3, "{}", camera.fx);
        assert_eq!((camera.fy, camera.cx, camera.cy), (camera.fx, 200.0, 200.0));
        let c = view.pose.center();
        let radius = (c[0] * c[0] + c[1] * c[1] + c[2] * c[2]).sqrt();
        assert!(
            (radius - 4.03).abs() < 0.01,
            "{}: radius {radius}",
            view.name
        );
        // Every camera looks at the object at the origin: it projects near the image centre.
        let (uv, depth) = view.project([0.0; 3]).expect("origin in front");
        assert!((depth - radius).abs() < 0.5, "{}: depth {depth}", view.name);
        assert!(
            (uv[0] - 200.0).abs() < 40.0 && (uv[1] - 200.0).abs() < 40.0,
            "{}",
            view.name
        );
    }
    assert_eq!(dataset.train[0].name, "./train/r_0");
    assert!(
        dataset.train[0]
            .source
            .path
            .ends_with("lego_400/train/r_0.png")
    );
    // The 3DGS extent: 1.1 x the largest distance of a training camera from their mean. The
    // cameras sit on the upper hemisphere, so the mean is above the origin and the extent is
    // more than 1.1 x the radius (5.20 for this scene).
    let centers: Vec<[f64; 3]> = dataset.train.iter().map(|v| v.pose.center()).collect();
    let mean: Vec<f64> = (0..3)
        .map(|k| centers.iter().map(|c| c[k]).sum::<f64>() / 100.0)
        .collect();
    assert!(mean[2] > 1.0, "{mean:?}");
    let farthest = centers
        .iter()
        .map(|c| (0..3).map(|k| (c[k] - mean[k]).powi(2)).sum::<f64>().sqrt())
        .fold(0.0, f64::max);
    assert!((dataset.extent - 1.1 * farthest).abs() < 1e-9);
    assert!((dataset.extent - 5.20).abs() < 0.01, "{}", dataset.extent);
}

fn top_left_and_centre(view: &View) -> ([u8; 3], [u8; 3]) {
    let image = view.source.decode().unwrap();
    let (w, h) = (image.width, image.height);
    (
        image.pixel(0, 0).unwrap(),
        image.pixel(w / 2, h / 2).unwrap(),
    )
}

#[test]
fn lego_composites_on_the_chosen_background() {
    let Some(white) = load(&DatasetOptions::default()) else {
        return;
    };
    let (corner, centre) = top_left_and_centre(&white.train[0]);
    assert_eq!(corner, [255, 255, 255]);
    // The model covers the centre of the first view: not background.
    assert_ne!(centre, [255, 255, 255]);
    let black = load(&DatasetOptions {
        background: [0.0; 3],
        max_images: Some(1),
        ..DatasetOptions::default()
    })
    .unwrap();
    let (corner, centre_on_black) = top_left_and_centre(&black.train[0]);
    assert_eq!(corner, [0, 0, 0]);
    assert_eq!(centre_on_black, centre, "opaque pixels do not depend on it");
}

#[test]
fn lego_downsample_and_max_images() {
    let Some(dataset) = load(&DatasetOptions {
        downsample: 4,
        max_images: Some(10),
        ..DatasetOptions::default()
    }) else {
        return;
    };
    assert_eq!(
        (dataset.train.len(), dataset.val.len(), dataset.test.len()),
        (10, 10, 10)
    );
    // Evenly spaced: r_0, r_10, r_20, ...
    assert_eq!(dataset.train[1].name, "./train/r_10");
    let view = &dataset.test[3];
    let camera = view.camera();
    assert_eq!((camera.width, camera.height), (100, 100));
    assert!((camera.fx - 555.5555 / 4.0).abs() < 1e-3);
    assert_eq!((camera.cx, camera.cy), (50.0, 50.0));
    let image = view.source.decode().unwrap();
    assert_eq!((image.width, image.height), (100, 100));
    assert_eq!(image.pixel(0, 0), Some([255, 255, 255]));
}
