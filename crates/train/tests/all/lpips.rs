//! LPIPS against the reference implementation (the `lpips` package 0.1.4 with the same weights,
//! `scripts/lpips-fixtures.py`) on pairs of real images, on the CPU and (with the `wgpu`
//! feature, the smallest pair) on wgpu; and its refusals of bad weights and bad images.

use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_train::lpips::{Lpips, LpipsError};

use crate::common::data_path;

use ember_kernels::backend::Cpu;

/// A pair of lego views as `scripts/lpips-fixtures.py` makes it, and the reference's LPIPS:
/// first and second image, the rows and columns of the first's crop, the rows of the second's
/// (`[start, end)`), the distance.
struct Fixture {
    a: &'static str,
    b: &'static str,
    rows: (u32, u32),
    columns: (u32, u32),
    b_rows: (u32, u32),
    lpips: f32,
}

const FIXTURES: [Fixture; 4] = [
    Fixture {
        a: "test/r_0.png",
        b: "test/r_1.png",
        rows: (0, 400),
        columns: (0, 400),
        b_rows: (0, 400),
        lpips: 0.126_393_87,
    },
    Fixture {
        a: "test/r_100.png",
        b: "test/r_101.png",
        rows: (40, 340),
        columns: (0, 400),
        b_rows: (40, 340),
        lpips: 0.130_219_28,
    },
    Fixture {
        a: "val/r_0.png",
        b: "val/r_0.png",
        rows: (0, 398),
        columns: (0, 400),
        b_rows: (2, 400),
        lpips: 0.026_735_688,
    },
    Fixture {
        a: "test/r_50.png",
        b: "test/r_51.png",
        rows: (136, 264),
        columns: (136, 264),
        b_rows: (136, 264),
        lpips: 0.158_079_27,
    },
];

/// An RGBA PNG composited over white in `f32` and cropped: `[1, 3, H, W]`.
fn image<B: Backend>(
    path: &Path,
    rows: (u32, u32),
    columns: (u32, u32),
    device: &B::Device,
) -> Tensor<B, 4> {
    let rgba = image::open(path).expect("a lego PNG").to_rgba8();
    let (h, w) = ((rows.1 - rows.0) as usize, (columns.1 - columns.0) as usize);
    let mut planes = vec![0.0f32; 3 * h * w];
    for (y, row) in (rows.0..rows.1).enumerate() {
        for (x, column) in (columns.0..columns.1).enumerate() {
            let p = rgba.get_pixel(column, row).0;
            let alpha = f32::from(p[3]) / 255.0;
            for c in 0..3 {
                let value = f32::from(p[c]) / 255.0;
                planes[c * h * w + y * w + x] = value * alpha + (1.0 - alpha);
            }
        }
    }
    Tensor::from_data(TensorData::new(planes, [1, 3, h, w]), device)
}

/// The reference's distances and Ember's (with the weights it ships) on `device`, for
/// `fixtures`.
fn distances<B: Backend>(fixtures: &[Fixture], device: &B::Device) -> Option<Vec<(f32, f32)>> {
    let lego = data_path("lego_400")?;
    let lpips = Lpips::<B>::bundled(device);
    Some(
        fixtures
            .iter()
            .map(|f| {
                let a = image::<B>(&lego.join(f.a), f.rows, f.columns, device);
                let b = image::<B>(&lego.join(f.b), f.b_rows, f.columns, device);
                let got: Vec<f32> = lpips.distance(a, b).unwrap().into_data().to_vec().unwrap();
                (f.lpips, got[0])
            })
            .collect(),
    )
}

#[test]
fn the_shipped_weights_are_the_shared_file_and_load_without_configuration() {
    let Some(shared) = data_path("lpips/alex.safetensors") else {
        return;
    };
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/lpips/alex.safetensors");
    assert_eq!(
        std::fs::read(shipped).expect("the shipped weights"),
        std::fs::read(shared).expect("the shared weights"),
        "the shipped file is the one scripts/lpips-weights.py makes"
    );
    if std::env::var_os(ember_train::lpips::WEIGHTS_ENV).is_none() {
        let net = ember_train::lpips::load_configured::<Cpu>(None, &Default::default());
        assert!(net.is_ok(), "no file named: the shipped weights");
    }
}

#[test]
fn lpips_matches_the_reference_on_real_images() {
    let Some(pairs) = distances::<Cpu>(&FIXTURES, &Default::default()) else {
        return;
    };
    for (want, got) in pairs {
        println!(
            "LPIPS {got}, the reference {want}: {:.1e} apart",
            (want - got).abs()
        );
        assert!(
            (want - got).abs() < 1e-4,
            "LPIPS {got}, the reference {want}"
        );
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn lpips_on_wgpu_matches_the_reference() {
    // The 128x128 pair: AlexNet on 400x400 images takes minutes on a software GPU (lavapipe).
    let small = &FIXTURES[3..];
    let Some(pairs) = distances::<ember_kernels::backend::Wgpu>(small, &Default::default()) else {
        return;
    };
    for (want, got) in pairs {
        println!(
            "LPIPS on wgpu {got}, the reference {want}: {:.1e} apart",
            (want - got).abs()
        );
        assert!(
            (want - got).abs() < 1e-4,
            "LPIPS on wgpu {got}, the reference {want}"
        );
    }
}

#[test]
fn identical_images_are_zero_and_bad_images_are_refused() {
    let Some(weights) = data_path("lpips/alex.safetensors") else {
        return;
    };
    let device = Default::default();
    let lpips = Lpips::<Cpu>::load(&weights, &device).unwrap();
    let values: Vec<f32> = (0..2 * 3 * 40 * 48)
        .map(|i| (i % 97) as f32 / 97.0)
        .collect();
    let batch = Tensor::<Cpu, 4>::from_data(TensorData::new(values, [2, 3, 40, 48]), &device);
    let zero: Vec<f32> = lpips
        .distance(batch.clone(), batch.clone())
        .unwrap()
        .into_data()
        .to_vec()
        .unwrap();
    assert_eq!(zero, [0.0, 0.0]);
    let narrow = batch.clone().slice([0..2, 0..3, 0..40, 0..31]);
    assert!(matches!(
        lpips.distance(narrow.clone(), narrow),
        Err(LpipsError::TooSmall {
            height: 40,
            width: 31
        })
    ));
    let other = batch.clone().slice([0..1, 0..3, 0..40, 0..48]);
    let error = lpips.distance(batch.clone(), other).unwrap_err();
    assert!(error.to_string().contains("[2, 3, 40, 48]"), "{error}");
    let grey = batch.slice([0..2, 0..1, 0..40, 0..48]);
    assert!(matches!(
        lpips.distance(grey.clone(), grey),
        Err(LpipsError::Shapes { .. })
    ));
}

#[test]
fn bad_weights_files_name_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let device = Default::default();
    let load = |bytes: &[u8]| {
        let path = dir.path().join("weights.safetensors");
        std::fs::write(&path, bytes).unwrap();
        Lpips::<Cpu>::load(&path, &device)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let missing = dir.path().join("absent.safetensors");
    let error = Lpips::<Cpu>::load(&missing, &device)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("absent.safetensors") && error.contains("cannot be read"),
        "{error}"
    );
    assert!(load(b"not a safetensors file").contains("not a safetensors file"));
    // Every tensor but the last calibration layer, then that one with the wrong shape.
    let shapes: Vec<(String, Vec<usize>)> = [
        ("features.0", 3, 64, 11),
        ("features.3", 64, 192, 5),
        ("features.6", 192, 384, 3),
        ("features.8", 384, 256, 3),
        ("features.10", 256, 256, 3),
    ]
    .iter()
    .enumerate()
    .flat_map(|(k, &(name, inputs, outputs, kernel))| {
        [
            (
                format!("{name}.weight"),
                vec![outputs, inputs, kernel, kernel],
            ),
            (format!("{name}.bias"), vec![outputs]),
            (format!("lin{k}.model.1.weight"), vec![1, outputs, 1, 1]),
        ]
    })
    .collect();
    let file = |shapes: &[(String, Vec<usize>)]| {
        let buffers: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
            .iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                (name.clone(), shape.clone(), vec![0u8; 4 * n])
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView)> = buffers
            .iter()
            .map(|(name, shape, bytes)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::tensor::Dtype::F32,
                    shape.clone(),
                    bytes,
                )
                .unwrap();
                (name.clone(), view)
            })
            .collect();
        safetensors::serialize(views, None).unwrap()
    };
    let (last, _) = shapes.last().unwrap().clone();
    let error = load(&file(&shapes[..shapes.len() - 1]));
    assert!(error.contains(&format!("no tensor `{last}`")), "{error}");
    let mut wrong = shapes.clone();
    wrong.last_mut().unwrap().1 = vec![1, 255, 1, 1];
    let error = load(&file(&wrong));
    assert!(
        error.contains(&last) && error.contains("[1, 255, 1, 1]"),
        "{error}"
    );
    // The complete file loads.
    let path = dir.path().join("zeros.safetensors");
    std::fs::write(&path, file(&shapes)).unwrap();
    assert!(Lpips::<Cpu>::load(&path, &device).is_ok());
}
