//! Per-photo appearance (`ember_train::appearance`): the transform's hand-written backward
//! against f64 central differences, the config keys, and a real capture whose training photos
//! were shot at different exposures and white balances, trained without a transform, with the
//! exposure one and with the bilateral grid. (The grid's op has its own f64 check in
//! `ember-kernels`.)

use std::path::Path;
use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use ember_field::to_host;
use ember_train::appearance::{PhotoAppearance, apply, apply_backward};
use ember_train::config::AppearanceInit;
use ember_train::{TrainConfig, TrainScene, Trainer};

use crate::common::{self, B};

type F64 = ember_kernels::backend::Cpu64;

/// A deterministic value in `[-1, 1)` for index `i` of stream `seed`.
fn value(seed: u64, i: usize) -> f64 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(i as u64 + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// An f64 tensor. The dtype is explicit: Burn's default float dtype is a per-device setting that
/// `NdArray<f32>` and `NdArray<f64>` share, and the other tests train in f32 on the same device.
fn tensor<const D: usize>(values: Vec<f64>, shape: [usize; D]) -> Tensor<F64, D> {
    let device = Default::default();
    Tensor::from_data(
        TensorData::new(values, shape),
        (&device, burn::tensor::DType::F64),
    )
}

/// `sum(apply(x, row) * weights)`: a loss whose gradient with respect to the output is
/// `weights`.
fn weighted_sum(x: &[f64], row: &[f64], weights: &[f64], shape: [usize; 3]) -> f64 {
    let out = apply(tensor(x.to_vec(), shape), tensor(row.to_vec(), [1, 6]));
    let w = tensor(weights.to_vec(), shape);
    (out * w).sum().into_scalar()
}

#[test]
fn the_transforms_backward_matches_central_differences_in_f64() {
    let shape = [5, 4, 3];
    let n = 60;
    let x: Vec<f64> = (0..n).map(|i| 0.5 + 0.5 * value(1, i)).collect();
    let row: Vec<f64> = (0..6).map(|i| 0.4 * value(2, i)).collect();
    let weights: Vec<f64> = (0..n).map(|i| value(3, i)).collect();
    let (grad_x, grad_row) = apply_backward(
        tensor(x.clone(), shape),
        tensor(row.clone(), [1, 6]),
        tensor(weights.clone(), shape),
    );
    let grad_x: Vec<f64> = grad_x.into_data().to_vec().unwrap();
    let grad_row: Vec<f64> = grad_row.into_data().to_vec().unwrap();
    let h = 1e-6;
    let mut worst: f64 = 0.0;
    for k in 0..6 {
        let (mut plus, mut minus) = (row.clone(), row.clone());
        plus[k] += h;
        minus[k] -= h;
        let numeric = (weighted_sum(&x, &plus, &weights, shape)
            - weighted_sum(&x, &minus, &weights, shape))
            / (2.0 * h);
        worst = worst.max((numeric - grad_row[k]).abs() / numeric.abs().max(1e-3));
    }
    for i in 0..n {
        let (mut plus, mut minus) = (x.clone(), x.clone());
        plus[i] += h;
        minus[i] -= h;
        let numeric = (weighted_sum(&plus, &row, &weights, shape)
            - weighted_sum(&minus, &row, &weights, shape))
            / (2.0 * h);
        worst = worst.max((numeric - grad_x[i]).abs() / numeric.abs().max(1e-3));
    }
    assert!(worst < 1e-7, "worst relative error {worst:e}");
}

#[test]
fn the_appearance_keys_work_as_documented_and_bad_values_are_named() {
    let config = TrainConfig::default()
        .with_overrides(&["appearance.kind=exposure", "appearance.lr=0.05"])
        .unwrap();
    assert_eq!(
        config.appearance.kind,
        ember_train::config::AppearanceKind::Exposure
    );
    // The kinds' own defaults, and a key that is set wins.
    assert!(config.appearance.saturation_bound());
    assert_eq!(config.appearance.offset_pull(), 10.0);
    let grid = TrainConfig::default()
        .with_overrides(&["appearance.kind=bilateral_grid"])
        .unwrap();
    assert!(!grid.appearance.saturation_bound());
    assert_eq!(grid.appearance.offset_pull(), 1e-3);
    let set = TrainConfig::default()
        .with_overrides(&[
            "appearance.kind=exposure",
            "appearance.saturation_bound=false",
            "appearance.offset_pull=0.5",
        ])
        .unwrap();
    assert!(!set.appearance.saturation_bound());
    assert_eq!(set.appearance.offset_pull(), 0.5);
    let written = TrainConfig::from_toml_str(&set.to_toml_string(), "written").unwrap();
    assert_eq!(written.appearance, set.appearance);
    for (set, named) in [
        ("appearance.kind=colour", "colour"),
        ("appearance.lr=-1", "appearance.lr"),
        ("appearance.identity_pull=nan", "appearance.identity_pull"),
        ("appearance.grid=[8, 1, 16]", "appearance.grid"),
        ("appearance.tv_weight=-1", "appearance.tv_weight"),
        ("appearance.saturation_bound=1", "saturation_bound"),
        ("appearance.offset_pull=-1", "appearance.offset_pull"),
    ] {
        let e = TrainConfig::default().with_overrides(&[set]).unwrap_err();
        assert!(e.to_string().contains(named), "{set}: {e}");
    }
    // Keypoints give an exposure, from a COLMAP capture.
    let keypoints = TrainConfig::default()
        .with_overrides(&["appearance.kind=exposure", "appearance.init=keypoints"])
        .unwrap();
    let written = TrainConfig::from_toml_str(&keypoints.to_toml_string(), "written").unwrap();
    assert_eq!(written.appearance, keypoints.appearance);
    let e = TrainConfig::default()
        .with_overrides(&[
            "appearance.kind=bilateral_grid",
            "appearance.init=keypoints",
        ])
        .unwrap_err();
    assert!(e.to_string().contains("appearance.init"), "{e}");
    let e = Trainer::<B>::new(
        keypoints.clone(),
        common::scene(&keypoints),
        &Default::default(),
    )
    .err()
    .expect("the procedural scene has no keypoints");
    assert!(e.to_string().contains("keypoints"), "{e}");
    let e = TrainConfig::default()
        .with_overrides(&[
            "appearance.kind=exposure",
            "distributed.devices=[0, 1]",
            "batch_size=2",
        ])
        .unwrap_err();
    assert!(e.to_string().contains("appearance.kind"), "{e}");
    let grid = TrainConfig::default()
        .with_overrides(&[
            "appearance.kind=bilateral_grid",
            "appearance.grid=[4, 8, 6]",
        ])
        .unwrap();
    assert_eq!(
        ember_train::appearance::Transform::from_config(&grid.appearance),
        Some(ember_train::appearance::Transform::BilateralGrid { cells: [4, 8, 6] })
    );
}

/// Each training photo's exposure and white balance: a log-gain shared by the channels and a
/// per-channel tilt, averaging zero over the photos (see `scripts/capture-variants.py`).
fn photo_gains(photos: usize) -> Vec<[f64; 3]> {
    let raw: Vec<[f64; 3]> = (0..photos)
        .map(|p| {
            let exposure = 0.55f64.ln() + (value(10, p) + 1.0) / 2.0 * (1.6f64 / 0.55).ln();
            [0, 1, 2].map(|c| exposure + 0.08 * value(11 + c as u64, p))
        })
        .collect();
    let mean = [0, 1, 2].map(|c| raw.iter().map(|g| g[c]).sum::<f64>() / photos as f64);
    raw.iter()
        .map(|g| [0, 1, 2].map(|c| g[c] - mean[c]))
        .collect()
}

/// `capture` with its training photos' colours scaled by [`photo_gains`] (written as PNG under
/// their own names: the loaders read a file by its content) into `out`; returns the log-gains
/// by training photo.
fn exposure_variant(capture: &Path, scene: &TrainScene, out: &Path) -> Vec<[f64; 3]> {
    copy_dir(&capture.join("sparse"), &out.join("sparse"));
    std::fs::create_dir_all(out.join("images")).unwrap();
    for entry in std::fs::read_dir(capture.join("images")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, out.join("images").join(path.file_name().unwrap())).unwrap();
    }
    let gains = photo_gains(scene.train.len());
    for (view, gain) in scene.train.iter().zip(&gains) {
        let file = Path::new(&view.name).file_name().unwrap();
        let source = capture.join("images").join(file);
        let bytes = std::fs::read(&source).unwrap();
        let mut rgb = ember_data::images::decode_rgb(&bytes, &source, [0.0; 3]).unwrap();
        for pixel in rgb.pixels_mut() {
            for (value, g) in pixel.0.iter_mut().zip(gain) {
                *value = (*value as f64 * g.exp()).round().clamp(0.0, 255.0) as u8;
            }
        }
        rgb.save_with_format(out.join("images").join(file), image::ImageFormat::Png)
            .unwrap();
    }
    gains
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
}

fn capture_config(path: &Path, kind: &str) -> TrainConfig {
    TrainConfig::default()
        .with_overrides(&[
            format!("data.path={:?}", path.display().to_string()),
            "data.downsample=8".to_string(),
            "data.max_images=24".to_string(),
            "steps=500".to_string(),
            "densify.start=100".to_string(),
            "densify.stop=400".to_string(),
            "densify.interval=100".to_string(),
            "densify.opacity_reset_interval=100000".to_string(),
            "optim.lr_means_steps=500".to_string(),
            "optim.sh_interval=200".to_string(),
            format!("appearance.kind={kind}"),
            // The exposure's six numbers a photo take the faster rate well at ~24 visits a
            // photo; the grid measured the same from 0.005 to 0.02 and keeps its default.
            format!(
                "appearance.lr={}",
                if kind == "exposure" { 0.1 } else { 0.02 }
            ),
            // At 100x75 pixels a grid coarser than the default (measured: 4x4x4 26.7 dB,
            // 8x8x8 26.2 dB, 8x16x16 25.8 dB at this scale).
            "appearance.grid=[4, 4, 4]".to_string(),
        ])
        .unwrap()
}

fn scene(config: &TrainConfig) -> Arc<TrainScene> {
    Arc::new(
        TrainScene::load::<ember_kernels::backend::Cpu>(
            &config.data,
            config.seed,
            &Default::default(),
        )
        .unwrap(),
    )
}

/// Every photo's log-gains `[V][3]`.
fn log_gains(appearance: &PhotoAppearance<ember_kernels::backend::Cpu>) -> Vec<[f64; 3]> {
    to_host(appearance.params(), "appearance")
        .unwrap()
        .chunks(ember_train::appearance::PARAMS_PER_PHOTO)
        .map(|row| [row[0] as f64, row[1] as f64, row[2] as f64])
        .collect()
}

/// The correlation and the least-squares slope of `fitted` against `applied` log-gains, over
/// every photo and channel.
fn line(applied: &[[f64; 3]], fitted: &[[f64; 3]]) -> (f64, f64) {
    let pairs: Vec<(f64, f64)> = applied
        .iter()
        .zip(fitted)
        .flat_map(|(a, l)| (0..3).map(move |c| (a[c], l[c])))
        .collect();
    let n = pairs.len() as f64;
    let (ma, ml) = (
        pairs.iter().map(|p| p.0).sum::<f64>() / n,
        pairs.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let cov: f64 = pairs.iter().map(|p| (p.0 - ma) * (p.1 - ml)).sum();
    let (va, vl): (f64, f64) = (
        pairs.iter().map(|p| (p.0 - ma).powi(2)).sum(),
        pairs.iter().map(|p| (p.1 - ml).powi(2)).sum(),
    );
    (cov / (va * vl).sqrt(), cov / va)
}

/// Trains `config` and returns the held-out PSNR and colour-corrected PSNR, and the learned
/// log-gains `[V][3]`.
fn train(config: &TrainConfig) -> ((f32, f32), Option<Vec<[f64; 3]>>) {
    let mut trainer =
        Trainer::<B>::new(config.clone(), scene(config), &Default::default()).unwrap();
    for _ in 0..config.steps {
        trainer.step().unwrap();
    }
    let report = trainer.evaluate().unwrap();
    let gains = trainer.appearance().map(log_gains);
    ((report.psnr, report.cc_psnr), gains)
}

#[test]
fn exposure_recovers_photos_shot_at_different_exposures() {
    let Some(capture) = common::data_path("cup_colmap") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let clean = capture_config(&capture, "none");
    let applied = exposure_variant(&capture, &scene(&clean), dir.path());
    // Before any step, the keypoints give each photo's gain: the applied one times the
    // capture's own exposure, which varies 6-9% (scripts/photo-exposures.py).
    let mut keypoints = capture_config(dir.path(), "exposure");
    keypoints.appearance.init = AppearanceInit::Keypoints;
    let fitted = Trainer::<B>::new(keypoints.clone(), scene(&keypoints), &Default::default())
        .unwrap()
        .appearance()
        .map(log_gains)
        .expect("an exposure");
    let (correlation, slope) = line(&applied, &fitted);
    eprintln!(
        "keypoint fit against the applied gains: correlation {correlation:.3}, slope {slope:.3}"
    );
    // Measured at this size (100x75 pixels): correlation 0.949, slope 0.975. The photos' own
    // exposures, which the fit includes and the applied gains do not, hold the correlation
    // under ~0.96.
    assert!(correlation > 0.9, "correlation {correlation}");
    assert!((0.9..1.1).contains(&slope), "slope {slope}");
    let (reference, _) = train(&clean);
    let (without, _) = train(&capture_config(dir.path(), "none"));
    let (with, learned) = train(&capture_config(dir.path(), "exposure"));
    let (grid, _) = train(&capture_config(dir.path(), "bilateral_grid"));
    let learned = learned.expect("the run learns an appearance");
    // The learned log-gains follow the applied ones (up to the one gain the field shares).
    let (correlation, slope) = line(&applied, &learned);
    eprintln!(
        "cup_colmap, held-out PSNR / colour-corrected: clean {:.2} / {:.2} dB; exposure variant \
         {:.2} / {:.2} dB without, {:.2} / {:.2} dB with exposure, {:.2} / {:.2} dB with the \
         bilateral grid; learned vs applied log-gains: correlation {correlation:.3}, slope \
         {slope:.3}",
        reference.0, reference.1, without.0, without.1, with.0, with.1, grid.0, grid.1
    );
    // 500 steps at 100x75 pixels (about 24 visits a photo); BENCHMARKS has the full-size runs.
    // With the offsets held near zero and the saturated channels as bounds (the defaults), the
    // gains come out as applied (measured: correlation 0.955, slope 1.02) and the geometry as
    // the clean capture's (colour-corrected 29.35 against 29.39 dB). The plain PSNR is not
    // asserted here: at this size the field's colours are still settling (24.1 dB against
    // 25.1 without a transform); at the preset's size they are not (29.1 against 17.4 dB).
    assert!(correlation > 0.9, "correlation {correlation}");
    assert!((0.85..1.15).contains(&slope), "slope {slope}");
    assert!(
        reference.0 > without.0 + 1.0,
        "the variant costs: {reference:?} vs {without:?}"
    );
    assert!(with.1 > without.1 + 2.0, "{with:?} vs {without:?}");
    assert!(grid.0 > without.0 + 0.3, "{grid:?} vs {without:?}");
    assert!(grid.1 > without.1 + 0.5, "{grid:?} vs {without:?}");
}
