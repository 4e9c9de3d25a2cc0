//! Masks: a masked-out region takes no part in training or in the metrics. Two copies of a
//! scene that differ only inside their masks (noise of two seeds there) train to the same bits
//! and measure the same; without the masks they do not. Both training paths agree on a masked
//! scene (`step_paths`).

use std::path::Path;

use ember_field::to_host;
use ember_train::params::ParamGroup;
use ember_train::scene::look_at_origin;
use ember_train::{TrainConfig, Trainer};
use image::{GrayImage, Luma, Rgb, RgbImage};

use crate::common::B;

const SIZE: u32 = 32;
/// Columns on the left of every photo that its mask leaves out.
const HIDDEN: u32 = 10;
const VIEWS: usize = 6;

/// A camera-to-world matrix (OpenGL axes, nerfstudio's convention) at `eye` looking at the
/// origin with +z up: [`look_at_origin`]'s camera, inverted, its y and z axes flipped.
fn look_at(eye: [f64; 3]) -> [[f64; 4]; 4] {
    let r = look_at_origin(eye, SIZE).rotation;
    let mut m = [[0.0, 0.0, 0.0, 1.0]; 4];
    for (i, row) in m.iter_mut().take(3).enumerate() {
        *row = [r[i], -r[3 + i], -r[6 + i], eye[i]];
    }
    m
}

/// A nerfstudio scene of `VIEWS` photos around the origin, masks leaving out each photo's
/// `HIDDEN` left columns (or none with `masks = false`), and noise of `seed` in those columns.
fn write_scene(root: &Path, seed: u32, masks: bool) {
    std::fs::create_dir_all(root.join("images")).unwrap();
    std::fs::create_dir_all(root.join("masks")).unwrap();
    let mut frames = Vec::new();
    for v in 0..VIEWS {
        let name = format!("{v:02}.png");
        let noise = |x: u32, y: u32, c: u32| -> u8 {
            let h = x.wrapping_mul(73_856_093)
                ^ y.wrapping_mul(19_349_663)
                ^ c.wrapping_mul(83_492_791)
                ^ seed.wrapping_mul(2_654_435_761);
            (h.wrapping_mul(0x9e37_79b9) >> 24) as u8
        };
        RgbImage::from_fn(SIZE, SIZE, |x, y| {
            if x < HIDDEN {
                Rgb([noise(x, y, 0), noise(x, y, 1), noise(x, y, 2)])
            } else {
                Rgb([(x * 6) as u8, (y * 7) as u8, (40 + 20 * v) as u8])
            }
        })
        .save(root.join("images").join(&name))
        .unwrap();
        GrayImage::from_fn(SIZE, SIZE, |x, _| Luma([if x < HIDDEN { 0 } else { 255 }]))
            .save(root.join("masks").join(&name))
            .unwrap();
        let a = std::f64::consts::TAU * v as f64 / VIEWS as f64;
        let matrix = look_at([3.0 * a.cos(), 3.0 * a.sin(), 1.0]);
        let mask = match masks {
            true => format!(r#""mask_path": "masks/{name}","#),
            false => String::new(),
        };
        frames.push(format!(
            r#"{{"file_path": "images/{name}", {mask} "transform_matrix": {matrix:?}}}"#
        ));
    }
    let half = SIZE / 2;
    std::fs::write(
        root.join("transforms.json"),
        format!(
            r#"{{"fl_x": 40, "fl_y": 40, "cx": {half}, "cy": {half}, "w": {SIZE}, "h": {SIZE},
            "ply_file_path": "points.ply", "frames": [{}]}}"#,
            frames.join(",\n")
        ),
    )
    .unwrap();
    let points: String = (0..300)
        .map(|i| {
            let f = |k: u32| ((i * 7 + k * 13) % 97) as f64 / 97.0 - 0.5;
            format!("{} {} {}\n", f(1), f(2), f(3))
        })
        .collect();
    std::fs::write(
        root.join("points.ply"),
        format!(
            "ply\nformat ascii 1.0\nelement vertex 300\nproperty float x\nproperty float y\n\
             property float z\nend_header\n{points}"
        ),
    )
    .unwrap();
}

/// The parameters after training the scene at `root`, and the held-out PSNR, SSIM and
/// colour-corrected PSNR (and whether they were masked).
fn train(root: &Path) -> (Vec<Vec<f32>>, [f32; 3], bool) {
    let config = TrainConfig::from_toml_str(
        &format!(
            r#"
steps = 8
seed = 3
[data]
path = "{}"
test_every = 3
background = [0.0, 0.0, 0.0]
[init]
sh_degree = 1
[densify]
start = 4
stop = 100
interval = 2
grad_threshold = 1e-6
[eval]
every = 0
lpips = "never"
"#,
            root.display()
        ),
        "masks",
    )
    .unwrap();
    let scene = std::sync::Arc::new(
        ember_train::TrainScene::load::<B>(&config.data, config.seed, &Default::default()).unwrap(),
    );
    let mut trainer = Trainer::<B>::new(config.clone(), scene, &Default::default()).unwrap();
    for _ in 0..config.steps {
        trainer.step().unwrap();
    }
    let params = ParamGroup::ALL
        .iter()
        .map(|g| to_host(g.columns(trainer.field()), "parameters").unwrap())
        .collect();
    let report = trainer.evaluate().unwrap();
    (
        params,
        [report.psnr, report.ssim, report.cc_psnr],
        report.masked,
    )
}

#[test]
fn noise_under_a_mask_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |seed: u32, masks: bool| {
        let root = tmp.path().join(format!("seed{seed}-{masks}"));
        write_scene(&root, seed, masks);
        train(&root)
    };
    let (a, metrics_a, masked) = run(1, true);
    let (b, metrics_b, _) = run(2, true);
    assert!(masked, "the evaluation says its metrics are masked");
    assert_eq!(a, b, "masked: the same parameters");
    assert_eq!(metrics_a, metrics_b, "masked: the same held-out metrics");

    let (a, metrics_a, masked) = run(1, false);
    let (b, metrics_b, _) = run(2, false);
    assert!(!masked);
    assert_ne!(a, b, "unmasked, the noise reaches the parameters");
    assert_ne!(
        metrics_a, metrics_b,
        "unmasked, the noise reaches the metrics"
    );
}
