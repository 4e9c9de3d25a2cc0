//! `colmap::keypoint_exposures`: photos of the same points shot at known exposures, read back.

use std::collections::BTreeMap;

use ember_data::DecodedImage;
use ember_data::colmap::{
    CameraModel, ColmapCamera, ColmapImage, ColmapModel, Point2D, keypoint_exposures,
};

/// A deterministic value in `[0, 1)` for index `i` of stream `seed`.
fn unit(seed: u64, i: u64) -> f64 {
    let mut z = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn the_exposures_come_back_from_the_keypoints() {
    // 60 points seen by 4 photos (decoded at half COLMAP's size) on a 10 x 6 grid of 3x3
    // patches, each photo at its own gain per channel; a fifth photo the model does not know.
    let (points, photos) = (60u64, 4usize);
    let gains = [
        [1.3, 1.25, 1.2],
        [0.8, 0.85, 0.75],
        [1.0, 1.05, 1.1],
        [0.7, 0.7, 0.72],
    ];
    let colour = |k: u64, c: usize| 40.0 + 140.0 * unit(c as u64, k);
    let (w, h) = (32u32, 24u32);
    let at = |k: u64| (2 + 3 * (k % 10) as u32, 2 + 3 * (k / 10) as u32);
    let mut decoded = Vec::new();
    let mut images = Vec::new();
    for (p, gain) in gains.iter().enumerate() {
        let mut data = vec![128u8; (w * h * 3) as usize];
        for k in 0..points {
            let (x, y) = at(k);
            let mut rgb = [0u8; 3];
            for (c, value) in rgb.iter_mut().enumerate() {
                *value = (colour(k, c) * gain[c]).round() as u8;
            }
            // One keypoint of photo 0 on something else (an edge, a highlight): left out.
            if p == 0 && k == 5 {
                rgb = [230, 20, 230];
            }
            for py in y - 1..=y + 1 {
                for px in x - 1..=x + 1 {
                    let i = ((py * w + px) * 3) as usize;
                    data[i..i + 3].copy_from_slice(&rgb);
                }
            }
        }
        decoded.push(DecodedImage {
            width: w,
            height: h,
            data,
            transparency: None,
            mask: None,
        });
        images.push(ColmapImage {
            id: p as u32 + 1,
            qvec: [1.0, 0.0, 0.0, 0.0],
            tvec: [0.0; 3],
            camera_id: 1,
            name: format!("{p}.jpg"),
            // COLMAP's coordinates at twice the decoded size, the pixel's centre at +0.5.
            points2d: (0..points)
                .map(|k| {
                    let (x, y) = at(k);
                    Point2D {
                        xy: [2.0 * (f64::from(x) + 0.5), 2.0 * (f64::from(y) + 0.5)],
                        point3d_id: Some(k),
                    }
                })
                .collect(),
        });
    }
    decoded.push(decoded[0].clone());
    let model = ColmapModel {
        cameras: BTreeMap::from([(
            1,
            ColmapCamera {
                id: 1,
                model: CameraModel::Pinhole,
                width: 2 * u64::from(w),
                height: 2 * u64::from(h),
                params: vec![40.0, 40.0, 32.0, 24.0],
            },
        )]),
        images,
        points3d: Vec::new(),
    };
    let names = ["0.jpg", "1.jpg", "2.jpg", "3.jpg", "unknown.jpg"];
    let named: Vec<(&str, &DecodedImage)> = names.iter().copied().zip(&decoded).collect();
    let fitted = keypoint_exposures(&model, &named);
    // Centred over the five photos, the fifth at a gain of 1 before centring.
    for c in 0..3 {
        let sum: f64 = fitted.log_gains.iter().map(|g| g[c]).sum();
        assert!(sum.abs() < 1e-9, "channel {c}: the gains average {sum}");
        for p in 1..photos {
            let fitted_ratio = fitted.log_gains[p][c] - fitted.log_gains[0][c];
            let applied = (gains[p][c] / gains[0][c]).ln();
            // 8-bit rounding of colours between 28 and 234, averaged over 59-60 points.
            assert!(
                (fitted_ratio - applied).abs() < 3e-3,
                "photo {p} channel {c}: {fitted_ratio} vs {applied}"
            );
        }
    }
    // The odd keypoint of photo 0 (green at 20 where ~60-225 belongs) would move its green gain
    // by ~1.5% through the first fit alone: the bound above holds because the refit left it out.
    assert_eq!(fitted.observations[4], 0);
    assert!(
        fitted.observations[..photos]
            .iter()
            .all(|&n| n > 2 * points as usize)
    );
}
