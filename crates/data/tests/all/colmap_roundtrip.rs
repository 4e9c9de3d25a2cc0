//! A COLMAP model written by Ember reads back identically, in text and in binary.

use ember_data::colmap::{ColmapFormat, ColmapModel};

use crate::common::data_path;

#[test]
fn figurine_model_round_trips_through_text_and_binary() {
    let Some(root) = data_path("figurine_colmap/sparse/0") else {
        return;
    };
    let original = ColmapModel::read_format(&root, ColmapFormat::Binary).unwrap();
    let dir = tempfile::tempdir().unwrap();

    let text_dir = dir.path().join("text");
    original.write(&text_dir, ColmapFormat::Text).unwrap();
    let from_text = ColmapModel::read_format(&text_dir, ColmapFormat::Text).unwrap();
    assert_eq!(from_text, original);

    // Text written by Ember, converted to binary, reads back the same in binary.
    let binary_dir = dir.path().join("binary");
    from_text.write(&binary_dir, ColmapFormat::Binary).unwrap();
    let from_binary = ColmapModel::read_format(&binary_dir, ColmapFormat::Binary).unwrap();
    assert_eq!(from_binary, original);
    // Auto-detection prefers binary and finds text.
    assert_eq!(ColmapModel::read(&text_dir).unwrap(), original);

    // And the binary files are byte-for-byte COLMAP's own.
    for name in ["cameras.bin", "images.bin", "points3D.bin"] {
        let ours = std::fs::read(binary_dir.join(name)).unwrap();
        let colmaps = std::fs::read(root.join(name)).unwrap();
        assert!(ours == colmaps, "{name} differs from COLMAP's");
    }
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&text_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "tmp"))
        .collect();
    assert!(leftovers.is_empty());
}
