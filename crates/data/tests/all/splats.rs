//! Splat files: the 3DGS PLY round trip on trained tiles, the `minimal*` fixtures (one 2x2
//! grid in every format), and the `biker` scene decoded from SPZ v4 and from PlayCanvas'
//! compressed PLY, which must agree within the two quantisations.

use std::path::Path;

use ember_data::splats::{SH_C0, SplatFormat, Splats, read_splats, write_splats};
use ember_data::{convert, info, transform};
use ember_kernels::Similarity;

use crate::common::data_path;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn bits(splats: &Splats) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    out.extend(splats.means.iter().flatten().map(|v| v.to_bits()));
    out.extend(splats.quats.iter().flatten().map(|v| v.to_bits()));
    out.extend(splats.log_scales.iter().flatten().map(|v| v.to_bits()));
    out.extend(splats.opacity_logits.iter().map(|v| v.to_bits()));
    out.extend(splats.sh_dc.iter().flatten().map(|v| v.to_bits()));
    out.extend(splats.sh_rest.iter().map(|v| v.to_bits()));
    out
}

/// Row-major `R S^2 R^T` of a Gaussian (quaternion normalised here).
fn covariance(q: [f32; 4], log_scales: [f32; 3]) -> [f64; 9] {
    let n = q.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
    let r = ember_kernels::quat::rotation_matrix(q.map(|v| f64::from(v) / n));
    let s2 = log_scales.map(|v| (2.0 * f64::from(v)).exp());
    std::array::from_fn(|k| {
        let (i, j) = (k / 3, k % 3);
        (0..3).map(|m| r[3 * i + m] * s2[m] * r[3 * j + m]).sum()
    })
}

#[test]
fn ply_round_trip_is_bit_exact_on_trained_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let mut lowest = f32::MAX;
    for lod in [5, 4, 3, 2] {
        let Some(path) = data_path(&format!(
            "splats/gaussiansplats3d-pr477/lod{lod}_tile_0.ply"
        )) else {
            return;
        };
        let splats = read_splats(&path).unwrap();
        assert_eq!(splats.sh_degree, 3, "{}", path.display());
        // The file's quirks must be kept: unnormalised quaternions, log-scales near -23.
        assert!(splats.quats.iter().any(|q| {
            let n2: f32 = q.iter().map(|v| v * v).sum();
            (n2 - 1.0).abs() > 1e-3
        }));
        assert!(splats.log_scales.iter().flatten().any(|&s| s < -15.0));
        lowest = splats
            .log_scales
            .iter()
            .flatten()
            .fold(lowest, |a, &b| a.min(b));
        let copy = dir.path().join(format!("lod{lod}.ply"));
        write_splats(&copy, &splats).unwrap();
        let back = read_splats(&copy).unwrap();
        assert_eq!(bits(&back), bits(&splats), "lod{lod}");
        assert_eq!(back.sh_degree, splats.sh_degree);
    }
    assert!(lowest < -23.0, "{lowest}");
    let counts: Vec<usize> = [5, 4, 3, 2]
        .iter()
        .map(|lod| {
            info(&dir.path().join(format!("lod{lod}.ply")))
                .unwrap()
                .count
        })
        .collect();
    assert_eq!(counts, [111, 489, 1971, 6831]);
}

#[test]
fn minimal_fixtures_decode_to_the_same_grid() {
    let Some(dir) = data_path("splats/splat-transform-fixtures") else {
        return;
    };
    let reference = read_splats(&dir.join("minimal.splat")).unwrap();
    assert_eq!(reference.len(), 4);
    let grid = [
        [-1.0, 0.0, -1.0],
        [0.0, 0.0, -1.0],
        [-1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0],
    ];
    assert_eq!(reference.means, grid);
    for name in [
        "minimal-v2.spz",
        "minimal-v3.spz",
        "minimal-v4.spz",
        "minimal-raw.spz",
    ] {
        let s = read_splats(&dir.join(name)).unwrap();
        assert_eq!(s.len(), 4, "{name}");
        assert_eq!(s.sh_degree, 0, "{name}");
        assert_eq!(s.means, grid, "{name}");
        for i in 0..4 {
            let a = sigmoid(s.opacity_logits[i]);
            let b = sigmoid(reference.opacity_logits[i]);
            assert!((a - b).abs() <= 1.0 / 255.0, "{name} opacity {a} vs {b}");
            // Isotropic Gaussians: compare covariances, which do not depend on the rotation.
            let ca = covariance(s.quats[i], s.log_scales[i]);
            let cb = covariance(reference.quats[i], reference.log_scales[i]);
            for k in 0..9 {
                // Scales are 1/16 apart in log space in SPZ: about 13% in variance.
                assert!(
                    (ca[k] - cb[k]).abs() <= 0.14 * cb[0],
                    "{name} covariance {ca:?} vs {cb:?}"
                );
            }
        }
        if name == "minimal-v3.spz" || name == "minimal-v4.spz" {
            for i in 0..4 {
                for c in 0..3 {
                    let a = SH_C0 * s.sh_dc[i][c] + 0.5;
                    let b = SH_C0 * reference.sh_dc[i][c] + 0.5;
                    assert!((a - b).abs() <= 2.0 / 255.0, "{name} colour {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn biker_spz_and_compressed_ply_agree_within_quantisation() {
    let Some(dir) = data_path("splats/playcanvas-engine") else {
        return;
    };
    let spz = read_splats(&dir.join("biker.spz")).unwrap();
    let compressed = read_splats(&dir.join("biker.compressed.ply")).unwrap();
    assert_eq!(spz.len(), 152_746);
    assert_eq!(compressed.len(), 152_746);
    let [lo, hi] = compressed.bounds().unwrap();
    let log_lo = compressed
        .log_scales
        .iter()
        .flatten()
        .fold(f32::MAX, |a, &b| a.min(b));
    let log_hi = compressed
        .log_scales
        .iter()
        .flatten()
        .fold(f32::MIN, |a, &b| a.max(b));
    let mut worst = [0.0f32; 5];
    for i in 0..spz.len() {
        for c in 0..3 {
            // SPZ: 12 fractional bits. Compressed: at most 10 bits over a chunk's range, which
            // lies inside the scene's.
            let tolerance = 0.5 / 4096.0 + 0.5 * (hi[c] - lo[c]) / 1023.0;
            let d = (spz.means[i][c] - compressed.means[i][c]).abs();
            assert!(d <= tolerance, "Gaussian {i} axis {c}: {d} > {tolerance}");
            worst[0] = worst[0].max(d);
            // SPZ's log-scale step is 1/16; the encoder that wrote the file does not round to
            // nearest (differences reach 0.045 > 1/32), so allow one whole step.
            let tolerance = 1.0 / 32.0 + 0.5 * (log_hi - log_lo) / 1023.0;
            // SPZ's byte range clamps log-scales to [-10, 5.9375]: there only the side is known.
            let (a, b) = (spz.log_scales[i][c], compressed.log_scales[i][c]);
            let d = if a == -10.0 {
                (b - a).max(0.0)
            } else if a == 255.0 / 16.0 - 10.0 {
                (a - b).max(0.0)
            } else {
                (a - b).abs()
            };
            assert!(
                d <= tolerance,
                "Gaussian {i} log-scale {c}: {d} > {tolerance}: {a} vs {b}"
            );
            worst[1] = worst[1].max(d);
            let d =
                ((SH_C0 * spz.sh_dc[i][c] + 0.5) - (SH_C0 * compressed.sh_dc[i][c] + 0.5)).abs();
            worst[2] = worst[2].max(d);
        }
        let d = (sigmoid(spz.opacity_logits[i]) - sigmoid(compressed.opacity_logits[i])).abs();
        worst[3] = worst[3].max(d);
        let dot: f32 = spz.quats[i]
            .iter()
            .zip(&compressed.quats[i])
            .map(|(a, b)| a * b)
            .sum::<f32>()
            .abs();
        worst[4] = worst[4].max(1.0 - dot);
    }
    eprintln!(
        "biker SPZ vs compressed PLY, worst: position {}, log-scale {}, colour {}, opacity {}, 1 - |q.q'| {}",
        worst[0], worst[1], worst[2], worst[3], worst[4]
    );
    // Colour: SPZ's 8 bits over 1/0.15 of dc (about 0.0037 in colour) and the chunk's 8-bit
    // colour range; opacity: 8 bits in both.
    assert!(worst[2] <= 0.02, "colour {}", worst[2]);
    assert!(worst[3] <= 1.0 / 255.0 + 1e-6, "opacity {}", worst[3]);
    // Quaternions: 9 bits (SPZ) and 10 bits (compressed) per component.
    assert!(worst[4] <= 1e-5, "rotation {}", worst[4]);
}

#[test]
fn guitar_compressed_ply_reads() {
    let Some(path) = data_path("splats/playcanvas-engine/guitar.compressed.ply") else {
        return;
    };
    let summary = info(&path).unwrap();
    assert_eq!(summary.count, 90_854);
    assert_eq!(summary.format, SplatFormat::CompressedPly);
    assert_eq!(summary.sh_degree, 0);
    let [lo, hi] = summary.bounds.unwrap();
    assert!((0..3).all(|c| lo[c] < hi[c]));
}

#[test]
fn convert_and_transform_files() {
    let Some(path) = data_path("splats/gaussiansplats3d-pr477/lod4_tile_0.ply") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let original = read_splats(&path).unwrap();
    // PLY -> SPZ -> PLY keeps the count and degree, positions to 1/4096 or better.
    let spz = dir.path().join("lod4.spz");
    let written = convert(&path, &spz).unwrap();
    assert_eq!((written.count, written.sh_degree), (489, 3));
    assert_eq!(written.format, SplatFormat::Spz);
    let back_ply = dir.path().join("back.ply");
    convert(&spz, &back_ply).unwrap();
    let back = read_splats(&back_ply).unwrap();
    for (a, b) in back.means.iter().zip(&original.means) {
        for c in 0..3 {
            assert!((a[c] - b[c]).abs() <= 0.5 / 4096.0 + 1e-6);
        }
    }
    // .splat keeps positions exactly and drops the SH bands.
    let dot_splat = dir.path().join("lod4.splat");
    convert(&path, &dot_splat).unwrap();
    let s = read_splats(&dot_splat).unwrap();
    assert_eq!((s.len(), s.sh_degree), (489, 0));
    assert_eq!(s.means, original.means);
    // transform(file) equals the in-memory transform, and moves the bounds.
    let similarity = Similarity::axis_angle([0.0, 0.0, 1.0], std::f64::consts::FRAC_PI_2)
        .then(&Similarity::translation([10.0, 0.0, 0.0]));
    let moved_path = dir.path().join("moved.ply");
    let moved_info = transform(&path, &moved_path, &similarity).unwrap();
    let moved = read_splats(&moved_path).unwrap();
    assert_eq!(moved, original.transformed(&similarity).unwrap());
    let [lo, hi] = original.bounds().unwrap();
    let [mlo, mhi] = moved_info.bounds.unwrap();
    // A quarter turn about z: x' = -y + 10, y' = x.
    assert!((mlo[0] - (10.0 - hi[1])).abs() < 1e-4 && (mhi[1] - hi[0]).abs() < 1e-4);
    assert!((mlo[2] - lo[2]).abs() < 1e-5);
    // Compressed PLY cannot be written; unknown extensions are named.
    assert!(convert(&path, &dir.path().join("x.compressed.ply")).is_err());
    let message = convert(&path, &dir.path().join("x.obj"))
        .unwrap_err()
        .to_string();
    assert!(message.contains("unknown splat format"), "{message}");
    assert!(!Path::new(&dir.path().join("x.obj")).exists());
}
