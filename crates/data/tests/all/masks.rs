//! Per-photo masks: a `masks/` folder beside a COLMAP scene's images (the three naming
//! conventions), nerfstudio's `mask_path`, the photo's own alpha (`alpha_as_mask`), and the
//! errors a user sees for a missing mask, a mask of another size and a mask that hides
//! everything.

use std::path::Path;

use ember_data::{DataError, Dataset, DatasetOptions, MaskSource};
use image::{GrayImage, Luma, Rgb, RgbImage, Rgba, RgbaImage};

const W: u32 = 32;
const H: u32 = 24;

fn write_photo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    RgbImage::from_fn(W, H, |x, y| Rgb([x as u8 * 8, y as u8 * 10, 90]))
        .save(path)
        .unwrap();
}

/// A mask of `width x height` that keeps the right half (white) and leaves out the left.
fn write_mask(path: &Path, width: u32, height: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    GrayImage::from_fn(width, height, |x, _| {
        Luma([if x >= width / 2 { 255 } else { 0 }])
    })
    .save(path)
    .unwrap();
}

/// A COLMAP text model of three pinhole views (`a.png`, `b.png`, `c.jpg`) with their photos.
fn colmap_scene(root: &Path) {
    let model = root.join("sparse/0");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("cameras.txt"),
        format!("1 PINHOLE {W} {H} 40 40 16 12\n"),
    )
    .unwrap();
    let images: String = ["a.png", "b.png", "c.jpg"]
        .iter()
        .enumerate()
        .map(|(i, name)| format!("{} 1 0 0 0 {i} 0 3 1 {name}\n\n", i + 1))
        .collect();
    std::fs::write(model.join("images.txt"), images).unwrap();
    std::fs::write(model.join("points3D.txt"), "").unwrap();
    for name in ["a.png", "b.png"] {
        write_photo(&root.join("images").join(name));
    }
    // A PNG under a .jpg name: the decoder sniffs the format from the bytes.
    write_photo(&root.join("images/c.jpg"));
}

fn all_views(options: DatasetOptions) -> DatasetOptions {
    DatasetOptions {
        test_every: None,
        ..options
    }
}

#[test]
fn a_masks_folder_gives_every_colmap_photo_its_mask() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    colmap_scene(root);
    // The three names a mask may have: the photo's, COLMAP's `<name>.png`, `<stem>.png`.
    write_mask(&root.join("masks/a.png"), W, H);
    write_mask(&root.join("masks/b.png.png"), W, H);
    write_mask(&root.join("masks/c.png"), 2 * W, 2 * H);
    let dataset = Dataset::load(root, &all_views(DatasetOptions::default())).unwrap();
    let masks: Vec<_> = dataset
        .train
        .iter()
        .map(|v| match &v.source.mask {
            Some(MaskSource::File(path)) => path.file_name().unwrap().to_owned(),
            other => panic!("{}: {other:?}", v.name),
        })
        .collect();
    assert_eq!(masks, ["a.png", "b.png.png", "c.png"]);
    for view in &dataset.train {
        let image = view.source.decode().unwrap();
        let mask = image.mask.as_ref().expect("a mask");
        assert_eq!(mask.len(), (W * H) as usize);
        // The full-size mask of c is shrunk to the photo; its edge blends one pixel.
        for y in 0..H as usize {
            let row = &mask[y * W as usize..(y + 1) * W as usize];
            assert!(row[..15].iter().all(|&m| m == 0), "{}: {row:?}", view.name);
            assert!(
                row[17..].iter().all(|&m| m == 255),
                "{}: {row:?}",
                view.name
            );
        }
        assert!(
            image
                .mask_tensor::<burn::backend::NdArray>(&Default::default())
                .is_some()
        );
    }

    // At half the size, the mask is resized with the photo.
    let half = Dataset::load(
        root,
        &all_views(DatasetOptions {
            downsample: 2,
            ..DatasetOptions::default()
        }),
    )
    .unwrap();
    let image = half.train[0].source.decode().unwrap();
    let mask = image.mask.unwrap();
    assert_eq!(mask.len(), (W * H / 4) as usize);
    assert_eq!((mask[0], mask[W as usize / 2 - 1]), (0, 255));
}

#[test]
fn mask_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    colmap_scene(root);
    write_mask(&root.join("masks/a.png"), W, H);
    write_mask(&root.join("masks/b.png"), W, H);
    let options = all_views(DatasetOptions::default());

    // c.jpg has none.
    let error = Dataset::load(root, &options).unwrap_err();
    assert!(matches!(error, DataError::MissingMask { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("c.jpg") && message.contains("c.png"),
        "{message}"
    );

    // Another size (not a whole multiple): an error at decoding naming mask and photo.
    write_mask(&root.join("masks/c.png"), W + 5, H);
    let dataset = Dataset::load(root, &options).unwrap();
    let error = dataset.train[2].source.decode().unwrap_err();
    assert!(
        matches!(error, DataError::MaskSizeMismatch { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("c.png") && message.contains("37x24") && message.contains("32x24"),
        "{message}"
    );

    // A mask that hides every pixel.
    GrayImage::from_pixel(W, H, Luma([0]))
        .save(root.join("masks/c.png"))
        .unwrap();
    let error = dataset.train[2].source.decode().unwrap_err();
    assert!(matches!(error, DataError::EmptyMask { .. }), "{error}");
    assert!(error.to_string().contains("c.png"), "{error}");

    // A masks folder and alpha_as_mask together.
    let error = Dataset::load(
        root,
        &DatasetOptions {
            alpha_as_mask: true,
            ..options.clone()
        },
    )
    .unwrap_err();
    assert!(matches!(error, DataError::InvalidOption(_)), "{error}");
    assert!(error.to_string().contains("masks"), "{error}");
}

#[test]
fn alpha_as_mask_takes_the_photos_alpha() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    colmap_scene(root);
    // a.png with alpha: opaque on the right half only.
    RgbaImage::from_fn(W, H, |x, _| {
        Rgba([10, 20, 30, if x >= W / 2 { 255 } else { 0 }])
    })
    .save(root.join("images/a.png"))
    .unwrap();
    let options = all_views(DatasetOptions {
        alpha_as_mask: true,
        ..DatasetOptions::default()
    });
    let dataset = Dataset::load(root, &options).unwrap();
    assert_eq!(dataset.train[0].source.mask, Some(MaskSource::Alpha));
    let image = dataset.train[0].source.decode().unwrap();
    let mask = image.mask.unwrap();
    assert_eq!((mask[0], mask[W as usize - 1]), (0, 255));
    // b.png has no alpha: it has no mask, which is an error naming it.
    let error = dataset.train[1].source.decode().unwrap_err();
    assert!(matches!(error, DataError::MissingMask { .. }), "{error}");
    assert!(error.to_string().contains("b.png"), "{error}");
}

#[test]
fn nerfstudio_mask_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for name in ["a", "b"] {
        write_photo(&root.join(format!("images/{name}.png")));
    }
    write_mask(&root.join("masks/a.png"), W, H);
    write_mask(&root.join("masks/b.png"), W, H);
    let scene = |b_mask: &str| {
        format!(
            r#"{{"fl_x": 40, "fl_y": 40, "cx": 16, "cy": 12, "w": {W}, "h": {H}, "frames": [
            {{"file_path": "images/a.png", "mask_path": "masks/a.png", "transform_matrix": [[1,0,0,0],[0,1,0,0],[0,0,1,3],[0,0,0,1]]}},
            {{"file_path": "images/b.png", {b_mask} "transform_matrix": [[1,0,0,1],[0,1,0,0],[0,0,1,3],[0,0,0,1]]}}]}}"#
        )
    };
    let options = all_views(DatasetOptions::default());
    std::fs::write(
        root.join("transforms.json"),
        scene(r#""mask_path": "masks/b.png","#),
    )
    .unwrap();
    let dataset = Dataset::load(root, &options).unwrap();
    for view in &dataset.train {
        let mask = view.source.decode().unwrap().mask.unwrap();
        assert_eq!((mask[0], mask[W as usize - 1]), (0, 255), "{}", view.name);
    }

    // A frame without mask_path among frames with one, in the same split or the other.
    std::fs::write(root.join("transforms.json"), scene("")).unwrap();
    let error = Dataset::load(root, &options).unwrap_err();
    assert!(matches!(error, DataError::MissingMask { .. }), "{error}");
    assert!(error.to_string().contains("b.png"), "{error}");
    let split = Dataset::load(root, &DatasetOptions::default()).unwrap_err();
    assert!(matches!(split, DataError::MissingMask { .. }), "{split}");
    assert!(split.to_string().contains("b.png"), "{split}");

    // A mask_path that names no file.
    std::fs::write(
        root.join("transforms.json"),
        scene(r#""mask_path": "masks/gone.png","#),
    )
    .unwrap();
    let error = Dataset::load(root, &options).unwrap_err();
    assert!(matches!(error, DataError::MissingMask { .. }), "{error}");
    assert!(error.to_string().contains("gone.png"), "{error}");
}
