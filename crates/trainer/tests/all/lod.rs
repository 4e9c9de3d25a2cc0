//! `trainer lod build` and `trainer bench lod` as a user runs them: the hierarchy file is a
//! plain 3DGS PLY of the leaves that the other commands read, the benchmark's JSON has a row per
//! distance, and bad arguments are errors that name the problem; and the view a scene opens at
//! in the viewer, drawn through its hierarchy, shows what the full render shows.

use burn::tensor::Tensor;
use ember_data::{HierarchyConfig, read_splats};
use ember_field::splats::field_from_splats;
use ember_field::{DEFAULT_LOD_THRESHOLD, RenderOptions, render, render_lod};
use ember_kernels::CameraParams;
use serde_json::Value;

use crate::browser::{browser, browser_installed, eval, trainer_with_viewer, wait_for};
use crate::common::{arg, data_path, scratch, stdout, trainer};

type B = ember_kernels::backend::Cpu;

/// PSNR of `a` against `b` (`[H, W, 3]` in [0, 1], row-major) over the pixels `inside` keeps.
fn psnr_where(a: &[f32], b: &[f32], width: usize, inside: impl Fn(usize, usize) -> bool) -> f64 {
    let (mut squared, mut count) = (0.0f64, 0usize);
    for (i, (x, y)) in a.chunks_exact(3).zip(b.chunks_exact(3)).enumerate() {
        if inside(i % width, i / width) {
            squared += x
                .iter()
                .zip(y)
                .map(|(p, q)| f64::from(p - q).powi(2))
                .sum::<f64>();
            count += 3;
        }
    }
    -10.0 * (squared / count.max(1) as f64).max(1e-20).log10()
}

fn host<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .into_vec()
        .expect("f32 values")
}

/// Biker, a 153k-Gaussian scene the viewer draws through a hierarchy, opens in the page at the
/// default threshold; rendered through that camera, its head (the top eighth of the figure,
/// where a face's fine detail is) is within 40 dB of the full render: level of detail does not
/// show where a scene is first seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scene_opens_in_the_viewer_with_its_detail_intact() {
    let Some(scene) = data_path("splats/playcanvas-engine/biker.spz") else {
        return;
    };
    if !browser_installed() {
        return;
    }
    let (_server, url) = trainer_with_viewer(&["view", arg(&scene), "--port", "0"]);
    let (_driver, client, _port) = browser().await;
    client
        .set_window_size(1280, 800)
        .await
        .expect("a laptop's window");
    client.goto(&url).await.expect("the page loads");
    wait_for(&client, "return window.ember.framesReceived > 0").await;
    let lod = eval(&client, "return window.ember.hello.lod").await;
    assert_eq!(
        lod["threshold"].as_f64(),
        Some(f64::from(DEFAULT_LOD_THRESHOLD)),
        "drawn through a hierarchy at the default: {lod}"
    );
    let camera: CameraParams =
        serde_json::from_value(eval(&client, "return window.ember.viewCamera()").await)
            .expect("the opening camera");

    let device = Default::default();
    let field =
        field_from_splats::<B>(&read_splats(&scene).expect("biker"), &device).expect("a field");
    let hierarchy = field
        .hierarchy(&HierarchyConfig::default())
        .expect("its hierarchy");
    let full = render(&field, &camera, &RenderOptions::default()).expect("the full render");
    let options = RenderOptions::default().with_lod_threshold(DEFAULT_LOD_THRESHOLD);
    let drawn = host(
        render_lod(&hierarchy, &camera, &options)
            .expect("the LOD render")
            .rgb,
    );
    let (width, height) = (camera.width as usize, camera.height as usize);
    let coverage = host(full.alpha);
    let covered = |x: usize, y: usize| coverage[y * width + x] > 0.5;
    let rows: Vec<usize> = (0..height)
        .filter(|&y| (0..width).any(|x| covered(x, y)))
        .collect();
    let (top, bottom) = (rows[0], rows[rows.len() - 1]);
    assert!(
        bottom - top > height / 2,
        "the figure should fill the opening view: rows {top}..{bottom} of {height}"
    );
    let head = top + (bottom - top) / 8;
    let wanted = host(full.rgb);
    let psnr = psnr_where(&drawn, &wanted, width, |x, y| {
        (top..=head).contains(&y) && covered(x, y)
    });
    let frame = psnr_where(&drawn, &wanted, width, |_, _| true);
    println!(
        "opening view {width}x{height}: the head (rows {top}..{head}) {psnr:.1} dB, the frame \
         {frame:.1} dB against the full render"
    );
    assert!(psnr >= 40.0, "the head is drawn at {psnr:.1} dB");
}

#[test]
fn lod_build_writes_a_hierarchy_that_bench_lod_and_info_read() {
    let Some(ply) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let out = scratch("tile.lod.ply");
    let built = trainer(&["lod", "build", arg(&ply), "--out", arg(&out)]);
    assert!(built.status.success(), "lod build failed: {built:?}");
    let text = stdout(&built);
    assert!(text.contains("nodes") && text.contains("levels"), "{text}");

    // Any 3DGS reader sees the leaves: the same count and bounds as the input.
    let info_in = stdout(&trainer(&["info", arg(&ply)]));
    let info_out = stdout(&trainer(&["info", arg(&out)]));
    let count = |s: &str| s.split(", ").nth(1).map(str::to_string);
    assert_eq!(count(&info_in), count(&info_out), "{info_in} / {info_out}");
    assert!(info_out.contains("3DGS PLY"), "{info_out}");

    for input in [&out, &ply] {
        let json = scratch("bench-lod.json");
        let bench = trainer(&[
            "bench",
            "lod",
            "--ply",
            arg(input),
            "--resolution",
            "64x48",
            // A threshold that merges at this small size, every cut drawn.
            "--threshold",
            "4",
            "--min-saving",
            "0",
            "--views",
            "2",
            "--repeats",
            "1",
            "--json",
            arg(&json),
        ]);
        assert!(bench.status.success(), "bench lod failed: {bench:?}");
        let value: Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).expect("JSON");
        let rows = value["rows"].as_array().expect("rows");
        let distances: Vec<f64> = rows.iter().filter_map(|r| r["distance"].as_f64()).collect();
        assert_eq!(distances, [1.0, 2.0, 4.0, 8.0], "{value}");
        let leaves = value["leaves"].as_f64().expect("leaves");
        for row in rows {
            for key in [
                "full_ms",
                "lod_ms",
                "speedup",
                "cut_ms",
                "drawn",
                "psnr_vs_full",
            ] {
                assert!(row[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {row}");
            }
            assert!(
                row["drawn"].as_f64().expect("drawn") <= value["nodes"].as_f64().expect("nodes")
            );
            let bound = row["left_out_at_most"].as_f64().expect("left_out_at_most");
            assert!((0.0..=leaves).contains(&bound), "{row}");
        }
        // Farther views draw fewer Gaussians.
        let drawn = |i: usize| rows[i]["drawn"].as_f64().expect("drawn");
        assert!(drawn(3) < drawn(0) && drawn(3) < leaves, "{value}");
        // Built on the fly from a splat file, read from a hierarchy: `build_ms` says which.
        assert_eq!(value["build_ms"].is_null(), input == &out, "{value}");
    }
}

#[test]
fn bad_lod_arguments_are_errors_not_panics() {
    let dir = scratch("");
    let check = |args: &[&str], wanted: &str| {
        let out = trainer(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains(wanted) && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    };
    let missing = dir.join("missing.ply");
    let written = dir.join("x.lod.ply");
    check(
        &["lod", "build", arg(&missing), "--out", arg(&written)],
        "missing.ply",
    );
    check(
        &[
            "lod",
            "build",
            arg(&missing),
            "--out",
            arg(&dir.join("x.spz")),
        ],
        "PLY",
    );
    if let Some(tile) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") {
        check(
            &[
                "lod",
                "build",
                arg(&tile),
                "--out",
                arg(&written),
                "--branching",
                "1",
            ],
            "at least 2",
        );
        check(
            &["bench", "lod", "--ply", arg(&tile), "--threshold=-1"],
            "--threshold",
        );
        check(
            &["bench", "lod", "--ply", arg(&tile), "--views", "0"],
            "--views",
        );
        check(
            &["bench", "lod", "--ply", arg(&tile), "--min-saving", "1"],
            "--min-saving",
        );
    }
    if let Some(tile) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") {
        let copy = dir.join("tile-copy.ply");
        std::fs::copy(&tile, &copy).expect("copy");
        check(&["lod", "build", arg(&copy), "--out", arg(&copy)], "--out");
        assert_eq!(
            std::fs::read(&copy).expect("kept"),
            std::fs::read(&tile).expect("tile")
        );
    }
    assert!(!written.exists());
}
