//! Every reader against damaged input: truncations and byte flips at deterministic positions
//! must give errors (or, for a flip that still makes a valid file, a value), never a panic.
//! This is the deterministic stand-in for a fuzzer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use ember_data::colmap::{
    ColmapFormat, ColmapModel, parse_cameras_binary, parse_cameras_text, parse_images_binary,
    parse_images_text, parse_points3d_binary, parse_points3d_text,
};
use ember_data::images::decode_rgb;
use ember_data::points::parse_ply;
use ember_data::splats::{compressed_ply, dot_splat, ply, spz};
use ember_data::transforms_json::parse_transforms;

use crate::common::data_path;

type Reader = fn(&[u8]) -> bool;

/// xorshift64*: a fixed sequence of positions and byte values.
struct Positions(u64);

impl Positions {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % below.max(1)
    }
}

/// Counts of what the damaged variants gave.
#[derive(Default, Debug)]
struct Outcome {
    truncated_errors: usize,
    truncated_total: usize,
    flipped_errors: usize,
    flipped_total: usize,
}

/// Runs `read` (true = parsed, false = error) on `truncations` prefixes and `flips` copies with
/// one to four bytes changed; a panic fails the test naming the variant.
fn damage(name: &str, bytes: &[u8], read: Reader, truncations: usize, flips: usize) -> Outcome {
    let mut outcome = Outcome::default();
    let run = |variant: &[u8], what: &str| -> bool {
        catch_unwind(AssertUnwindSafe(|| read(variant)))
            .unwrap_or_else(|_| panic!("{name}: the reader panicked on {what}"))
    };
    let step = (bytes.len() / truncations.max(1)).max(1);
    for len in (0..bytes.len()).step_by(step) {
        outcome.truncated_total += 1;
        if !run(&bytes[..len], &format!("the first {len} bytes")) {
            outcome.truncated_errors += 1;
        }
    }
    let mut rng = Positions(0x9e37_79b9_7f4a_7c15 ^ bytes.len() as u64);
    for k in 0..flips {
        let mut variant = bytes.to_vec();
        let count = 1 + k % 4;
        let mut changed = Vec::new();
        for _ in 0..count {
            let at = rng.next(variant.len());
            let value = rng.next(256) as u8;
            variant[at] = if value == variant[at] { !value } else { value };
            changed.push(at);
        }
        outcome.flipped_total += 1;
        if !run(&variant, &format!("bytes changed at {changed:?}")) {
            outcome.flipped_errors += 1;
        }
    }
    eprintln!("{name}: {outcome:?}");
    outcome
}

#[test]
fn colmap_binary_readers_survive_damage() {
    let Some(dir) = data_path("figurine_colmap/sparse/0") else {
        return;
    };
    let readers: [(&str, Reader); 3] = [
        ("cameras.bin", |b| {
            parse_cameras_binary(b, Path::new("cameras.bin")).is_ok()
        }),
        ("images.bin", |b| {
            parse_images_binary(b, Path::new("images.bin")).is_ok()
        }),
        ("points3D.bin", |b| {
            parse_points3d_binary(b, Path::new("points3D.bin")).is_ok()
        }),
    ];
    for (name, read) in readers {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let outcome = damage(name, &bytes, read, 300, 300);
        // Every strict prefix of a binary model file is an error.
        assert_eq!(outcome.truncated_errors, outcome.truncated_total, "{name}");
    }
}

#[test]
fn colmap_text_readers_survive_damage() {
    let Some(dir) = data_path("figurine_colmap/sparse/0") else {
        return;
    };
    let model = ColmapModel::read(&dir).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    model.write(tmp.path(), ColmapFormat::Text).unwrap();
    let readers: [(&str, Reader); 3] = [
        ("cameras.txt", |b| {
            parse_cameras_text(b, Path::new("cameras.txt")).is_ok()
        }),
        ("images.txt", |b| {
            parse_images_text(b, Path::new("images.txt")).is_ok()
        }),
        ("points3D.txt", |b| {
            parse_points3d_text(b, Path::new("points3D.txt")).is_ok()
        }),
    ];
    for (name, read) in readers {
        let bytes = std::fs::read(tmp.path().join(name)).unwrap();
        let outcome = damage(name, &bytes, read, 200, 300);
        assert!(outcome.flipped_errors > 0, "{name}: {outcome:?}");
    }
}

#[test]
fn json_and_ply_readers_survive_damage() {
    let (Some(lego), Some(smoke)) = (data_path("lego_400"), data_path("smoke_dataset")) else {
        return;
    };
    let json = std::fs::read(lego.join("transforms_train.json")).unwrap();
    let outcome = damage(
        "transforms_train.json",
        &json,
        |b| parse_transforms(b, Path::new("transforms_train.json")).is_ok(),
        300,
        300,
    );
    // A JSON document cut anywhere is invalid.
    assert_eq!(outcome.truncated_errors, outcome.truncated_total);
    let json = std::fs::read(smoke.join("transforms.json")).unwrap();
    damage(
        "transforms.json",
        &json,
        |b| parse_transforms(b, Path::new("transforms.json")).is_ok(),
        400,
        300,
    );

    let ply = std::fs::read(smoke.join("init.ply")).unwrap();
    let outcome = damage(
        "init.ply",
        &ply,
        |b| parse_ply(b, Path::new("init.ply")).is_ok(),
        2000,
        500,
    );
    assert_eq!(outcome.truncated_errors, outcome.truncated_total);
    let ascii = format!(
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n{}3 0 1 2\n",
        "0.5 1.5 -2 10 20 30\n".repeat(3)
    );
    damage(
        "ascii.ply",
        ascii.as_bytes(),
        |b| parse_ply(b, Path::new("ascii.ply")).is_ok(),
        1000,
        500,
    );
}

#[test]
fn splat_readers_survive_damage() {
    let (Some(tile), Some(fixtures), Some(biker)) = (
        data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply"),
        data_path("splats/splat-transform-fixtures"),
        data_path("splats/playcanvas-engine/biker.compressed.ply"),
    ) else {
        return;
    };
    let bytes = std::fs::read(tile).unwrap();
    let outcome = damage(
        "lod5_tile_0.ply",
        &bytes,
        |b| ply::parse(b, Path::new("t.ply")).is_ok(),
        1000,
        500,
    );
    assert_eq!(outcome.truncated_errors, outcome.truncated_total);
    let bytes = std::fs::read(fixtures.join("minimal.splat")).unwrap();
    damage(
        "minimal.splat",
        &bytes,
        |b| dot_splat::parse(b, Path::new("t.splat")).is_ok(),
        128,
        300,
    );
    for name in [
        "minimal-v2.spz",
        "minimal-v3.spz",
        "minimal-v4.spz",
        "minimal-raw.spz",
    ] {
        let bytes = std::fs::read(fixtures.join(name)).unwrap();
        let outcome = damage(
            name,
            &bytes,
            |b| spz::parse(b, Path::new("t.spz")).is_ok(),
            bytes.len(),
            500,
        );
        assert_eq!(outcome.truncated_errors, outcome.truncated_total, "{name}");
    }
    // The header and the first chunks are enough to exercise the compressed reader.
    let bytes = std::fs::read(biker).unwrap();
    let outcome = damage(
        "biker.compressed.ply",
        &bytes[..bytes.len().min(8192)],
        |b| compressed_ply::parse(b, Path::new("t.ply")).is_ok(),
        300,
        300,
    );
    assert_eq!(outcome.truncated_errors, outcome.truncated_total);
}

#[test]
fn image_decoders_survive_damage() {
    let (Some(smoke), Some(figurine)) = (data_path("smoke_dataset"), data_path("figurine_colmap"))
    else {
        return;
    };
    let png = std::fs::read(smoke.join("train/r_0.png")).unwrap();
    let outcome = damage(
        "r_0.png",
        &png,
        |b| decode_rgb(b, Path::new("r_0.png"), [1.0; 3]).is_ok(),
        200,
        200,
    );
    // Cut before the end of the image data (the last 12 bytes are the IEND chunk).
    let cut_inside = (0..png.len() - 12)
        .step_by((png.len() / 200).max(1))
        .count();
    assert!(outcome.truncated_errors >= cut_inside, "{outcome:?}");
    assert!(outcome.flipped_errors > 0);

    let jpeg = std::fs::read(figurine.join("images/DSC_5283.jpg")).unwrap();
    let outcome = damage(
        "DSC_5283.jpg",
        &jpeg,
        |b| decode_rgb(b, Path::new("DSC_5283.jpg"), [1.0; 3]).is_ok(),
        40,
        40,
    );
    // Every cut is an error (the decoder alone would fill the missing part with grey). Flipped
    // bytes inside the compressed data mostly decode to wrong pixels: JPEG has no checksum.
    assert_eq!(
        outcome.truncated_errors, outcome.truncated_total,
        "{outcome:?}"
    );
}
