//! Test-time alignment of held-out views (`eval.align_steps`, `ember_train::align`): a held-out
//! camera knocked off its pose and a photo under another exposure are measured as they were,
//! once aligned; what a mask hides changes nothing; the evaluation reports the aligned metrics.

use burn::tensor::{Tensor, TensorData};
use ember_field::{Camera, GaussianField, RenderOptions, render};
use ember_kernels::backend::Cpu;
use ember_train::align::align_view;
use ember_train::eval::{EvalRequest, Evaluator};
use ember_train::loss::psnr;
use ember_train::scene::procedural_field;
use ember_train::{TrainConfig, TrainScene};

/// The procedural scene at 96 px (3 held-out views) and its true field.
fn scene_and_field() -> (TrainConfig, TrainScene, GaussianField<Cpu>) {
    let config = TrainConfig::from_toml_str(
        r#"
seed = 5
[data.procedural]
resolution = 96
train_views = 4
test_views = 3
gaussians = 900
[init]
sh_degree = 0
[eval]
lpips = "never"
"#,
        "align",
    )
    .unwrap();
    let device = Default::default();
    let scene = TrainScene::load::<Cpu>(&config.data, config.seed, &device).unwrap();
    let field =
        procedural_field::<Cpu>(config.data.procedural.gaussians, config.seed, &device).unwrap();
    (config, scene, field)
}

/// `camera` turned by a degree about an axis and moved by 1% of its distance (2.6) from the
/// scene along another, both depending on `k`.
fn knocked(camera: &Camera, k: usize) -> Camera {
    let a = k as f64 * 2.1;
    let axis = [a.cos() * 0.6, a.sin() * 0.6, 0.8];
    let b = k as f64 * 1.3 + 0.5;
    let shift = [b.cos() * 0.026, 0.0, b.sin() * 0.026];
    camera.corrected(shift, axis.map(|x| x * 1f64.to_radians()))
}

/// `[H, W, C]` values from a fixed generator, in `[0, 1)`.
fn noise(dims: [usize; 3], seed: u64) -> Tensor<Cpu, 3> {
    let mut state = seed;
    let values: Vec<f32> = (0..dims.iter().product::<usize>())
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Tensor::from_data(TensorData::new(values, dims), &Default::default())
}

#[test]
fn alignment_recovers_a_knocked_camera_and_the_photos_exposure() {
    let (_, scene, field) = scene_and_field();
    let options = RenderOptions::default()
        .with_background(scene.background)
        .with_sh_degree(0);
    let truth = scene.eval[0].camera;
    // A darker photo with another white balance (no channel clipped).
    let gains = [0.8, 1.0, 0.9];
    let exposure = Tensor::<Cpu, 3>::from_data(
        TensorData::new(gains.to_vec(), [1, 1, 3]),
        &Default::default(),
    );
    let photo = (render(&field, &truth, &options).unwrap().rgb * exposure).clamp(0.0, 1.0);
    let given = knocked(&truth, 0);
    let plain = psnr(
        render(&field, &given, &options)
            .unwrap()
            .rgb
            .clamp(0.0, 1.0),
        photo.clone(),
    );
    let aligned = align_view(
        &field,
        &given,
        &photo,
        None,
        &options,
        150,
        scene.extent,
        "v",
    )
    .unwrap();
    let after = psnr(aligned.rgb, photo);
    println!(
        "plain {plain:.2} dB, aligned {after:.2} dB; gains {:?}, moved {:.3} deg, {:.4}",
        aligned.gains, aligned.degrees, aligned.shift
    );
    for (fitted, applied) in aligned.gains.iter().zip(gains) {
        assert!((fitted / applied - 1.0).abs() < 0.02, "{:?}", aligned.gains);
    }
    assert!(after > plain + 10.0 && after > 35.0, "{plain} -> {after}");
    assert!(
        (0.7..1.3).contains(&aligned.degrees),
        "the camera turned back about its degree: {}",
        aligned.degrees
    );
}

#[test]
fn what_the_mask_hides_changes_nothing_in_the_alignment() {
    let (_, scene, field) = scene_and_field();
    let options = RenderOptions::default()
        .with_background(scene.background)
        .with_sh_degree(0);
    let truth = scene.eval[1].camera;
    let photo = render(&field, &truth, &options)
        .unwrap()
        .rgb
        .clamp(0.0, 1.0);
    let [h, w, _] = photo.dims();
    // The mask keeps the left two thirds; the right third holds other noise in each photo.
    let keep: Vec<f32> = (0..h * w)
        .map(|i| if i % w < 2 * w / 3 { 1.0 } else { 0.0 })
        .collect();
    let mask = Tensor::<Cpu, 3>::from_data(TensorData::new(keep, [h, w, 1]), &Default::default());
    let hidden = mask.clone().neg() + 1.0;
    let with_noise = |seed| photo.clone() * mask.clone() + noise([h, w, 3], seed) * hidden.clone();
    let given = knocked(&truth, 1);
    let align = |photo: Tensor<Cpu, 3>| {
        align_view(
            &field,
            &given,
            &photo,
            Some(&mask),
            &options,
            20,
            scene.extent,
            "v",
        )
        .unwrap()
    };
    let (a, b) = (align(with_noise(1)), align(with_noise(2)));
    assert_eq!(a.gains, b.gains);
    assert_eq!((a.degrees, a.shift), (b.degrees, b.shift));
    assert_eq!(a.rgb.into_data(), b.rgb.into_data());
}

#[test]
fn the_evaluation_reports_the_aligned_metrics() {
    let (mut config, mut scene, field) = scene_and_field();
    for (k, view) in scene.eval.iter_mut().enumerate() {
        view.camera = knocked(&view.camera, k);
    }
    config.eval.align_steps = 100;
    let mut evaluator = Evaluator::<Cpu>::new(&config.eval);
    let request = EvalRequest {
        generation: 0,
        step: 0,
        sh_degree: 0,
        antialiased: false,
        lpips: false,
    };
    let report = evaluator.evaluate(&scene, &field, request).unwrap();
    let aligned = report.aligned.expect("aligned metrics with align_steps");
    println!(
        "plain {:.2} dB, aligned {:.2} dB, moved {:.3} deg",
        report.psnr, aligned.psnr, aligned.degrees
    );
    assert!(aligned.psnr > report.psnr + 5.0, "{report:?}");
    assert!((0.7..1.3).contains(&aligned.degrees), "{aligned:?}");
    assert!(report.views.iter().all(|v| v.aligned.is_some()));
    // Asked again of the same field, the views come from the cache with their aligned metrics.
    let again = evaluator.evaluate(&scene, &field, request).unwrap();
    assert_eq!(again.aligned, report.aligned);
    assert_eq!(evaluator.cache_stats().hits, 3);
}

#[test]
fn a_run_logs_the_aligned_metrics() {
    let mut config = crate::common::tiny_config();
    config.eval.align_steps = 3;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let summary = ember_train::run::<crate::common::B>(
        &config,
        crate::common::scene(&config),
        &out,
        None,
        &Default::default(),
        &mut ember_train::Quiet,
    )
    .unwrap();
    let last = summary.evals.last().expect("an evaluation");
    let aligned = last.aligned.expect("aligned metrics");
    // eval.csv: the aligned columns filled on every row, the means' as the report's.
    let csv = std::fs::read_to_string(out.join("eval.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let k = header.iter().position(|h| *h == "aligned_psnr").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(
        rows.iter()
            .all(|r| r.len() == header.len() && !r[k].is_empty()),
        "{csv}"
    );
    let mean: f32 = rows.last().unwrap()[k].parse().unwrap();
    assert_eq!(mean, aligned.psnr);
    let jsonl = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let logged = jsonl
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "eval")
        .unwrap();
    assert_eq!(
        logged["aligned"]["psnr"].as_f64(),
        Some(f64::from(aligned.psnr))
    );
}
