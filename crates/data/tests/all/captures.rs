//! The two phone-style captures with COLMAP models: `cup_colmap` (a SIMPLE_PINHOLE camera per
//! photo) and `mouse_colmap` (portrait and landscape photos, three of them unregistered).

use ember_data::{Dataset, DatasetOptions};

use crate::common::data_path;

#[test]
fn cup_has_a_camera_per_photo_and_every_eighth_held_out() {
    let Some(root) = data_path("cup_colmap") else {
        return;
    };
    let dataset = Dataset::load(&root, &DatasetOptions::default()).unwrap();
    // 77 photos: indices 0, 8, ..., 72 are held out.
    assert_eq!((dataset.train.len(), dataset.test.len()), (67, 10));
    assert!(
        dataset.unregistered.is_empty(),
        "{:?}",
        dataset.unregistered
    );
    let mut focals: Vec<f64> = dataset.all_views().map(|v| v.intrinsics.fx).collect();
    focals.sort_by(f64::total_cmp);
    focals.dedup();
    assert!(focals.len() > 10, "per-photo intrinsics: {focals:?}");
    assert!(dataset.points.as_ref().is_some_and(|p| p.len() == 9262));
}

#[test]
fn mouse_names_its_unregistered_photos_and_keeps_both_orientations() {
    let Some(root) = data_path("mouse_colmap") else {
        return;
    };
    let dataset = Dataset::load(&root, &DatasetOptions::default()).unwrap();
    assert_eq!(dataset.train.len() + dataset.test.len(), 56);
    assert_eq!(dataset.unregistered.len(), 3, "{:?}", dataset.unregistered);
    for name in &dataset.unregistered {
        assert!(root.join("images").join(name).is_file(), "{name}");
        assert!(
            dataset.all_views().all(|v| &v.name != name),
            "{name} is in a split"
        );
    }
    let sizes: std::collections::BTreeSet<(u32, u32)> = dataset
        .all_views()
        .map(|v| (v.intrinsics.width, v.intrinsics.height))
        .collect();
    assert!(
        sizes.contains(&(1440, 1920)) && sizes.contains(&(1920, 1440)),
        "{sizes:?}"
    );
}

#[test]
fn max_side_raises_the_downsample_factor_to_fit() {
    let Some(root) = data_path("mouse_colmap") else {
        return;
    };
    let options = DatasetOptions {
        max_side: Some(500),
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(&root, &options).unwrap();
    // 1920 px / 4 = 480 <= 500 < 1920 / 3.
    assert_eq!(dataset.downsample, 4);
    for view in dataset.all_views() {
        let k = view.intrinsics;
        assert!(
            k.width.max(k.height) == 480 && k.width.min(k.height) == 360,
            "{k:?}"
        );
    }
}
