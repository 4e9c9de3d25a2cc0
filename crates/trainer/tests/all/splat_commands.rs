//! `trainer info / convert / transform / render` on a real trained splat file
//! (`splats/gaussiansplats3d-pr477/lod5_tile_0.ply` under `EMBER_DATA_DIR`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data_file(relative: &str) -> Option<PathBuf> {
    let dir = std::env::var("EMBER_DATA_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data").into());
    let path = Path::new(&dir).join(relative);
    if path.is_file() {
        Some(path)
    } else if std::env::var("EMBER_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_DATA=1 but {} is missing", path.display());
    } else {
        println!("skipped: {} not found", path.display());
        None
    }
}

fn trainer(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("running trainer {args:?}: {e}"),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ember-trainer-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

#[test]
fn info_convert_transform_and_render_a_splat_file() {
    let Some(ply) = data_file("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let ply = ply.to_string_lossy().into_owned();

    let info = trainer(&["info", &ply]);
    assert!(info.status.success(), "info failed: {info:?}");
    assert!(
        stdout(&info).contains("111 Gaussians, SH degree 3"),
        "{}",
        stdout(&info)
    );

    // To .splat (no SH bands), and the file says so.
    let splat = scratch("tile.splat");
    let converted = trainer(&["convert", &ply, splat.to_str().expect("utf-8 path")]);
    assert!(converted.status.success(), "convert failed: {converted:?}");
    assert!(stdout(&converted).contains("Splat, 111 Gaussians, SH degree 0"));

    // A translation by (10, 0, 0) moves the bounds by exactly that (within f32).
    let moved = scratch("moved.ply");
    let transformed = trainer(&[
        "transform",
        &ply,
        moved.to_str().expect("utf-8 path"),
        "--translate",
        "10,0,0",
    ]);
    assert!(
        transformed.status.success(),
        "transform failed: {transformed:?}"
    );
    let before = stdout(&info);
    let after = stdout(&transformed);
    let lower_x = |text: &str| -> f64 {
        let bounds = text.split("bounds [").nth(1).expect("bounds printed");
        bounds
            .split(',')
            .next()
            .and_then(|v| v.trim().parse().ok())
            .expect("a number")
    };
    assert!(
        (lower_x(&after) - lower_x(&before) - 10.0).abs() < 2e-3,
        "{before} / {after}"
    );

    // Render through a camera file into a PNG of the camera's size.
    let camera = scratch("camera.json");
    std::fs::write(
        &camera,
        r#"{"rotation":[1,0,0,0,1,0,0,0,1],"translation":[-2,-2,1],"fx":60,"fy":60,"cx":32,"cy":24,"width":64,"height":48}"#,
    )
    .expect("camera file");
    let png = scratch("render.png");
    let rendered = trainer(&[
        "render",
        &ply,
        "--camera",
        camera.to_str().expect("utf-8 path"),
        "--out",
        png.to_str().expect("utf-8 path"),
    ]);
    assert!(rendered.status.success(), "render failed: {rendered:?}");
    let image = std::fs::read(&png).expect("the PNG was written");
    assert_eq!(&image[1..4], b"PNG");
    // PNG IHDR: width and height, big-endian, at bytes 16..24.
    assert_eq!(&image[16..24], &[0, 0, 0, 64, 0, 0, 0, 48]);
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let missing = trainer(&["info", "/nonexistent/file.ply"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("/nonexistent/file.ply"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let bad_flag = trainer(&["transform", "a.ply", "b.ply", "--translate", "1,2"]);
    assert!(!bad_flag.status.success());
    assert!(String::from_utf8_lossy(&bad_flag.stderr).contains("expected 3"));
}

#[test]
fn bench_render_writes_json_that_compare_reads() {
    let Some(ply) = data_file("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let ply = ply.to_string_lossy().into_owned();
    let json = scratch("bench.json");
    let json = json.to_str().expect("utf-8 path");
    let bench = trainer(&[
        "bench",
        "render",
        "--ply",
        &ply,
        "--resolution",
        "64x48",
        "--repeats",
        "1",
        "--json",
        json,
    ]);
    assert!(bench.status.success(), "bench failed: {bench:?}");
    let text = std::fs::read_to_string(json).expect("the JSON was written");
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let result = &value["results"][0];
    assert_eq!(result["name"], "orbit_64x48");
    assert_eq!(result["frames"], 8);
    assert!(result["median_ms"].as_f64().is_some_and(|ms| ms > 0.0));

    let compared = trainer(&["compare", json, json]);
    assert!(compared.status.success(), "compare failed: {compared:?}");
    assert!(
        stdout(&compared).contains("| orbit_64x48 |"),
        "{}",
        stdout(&compared)
    );
    assert!(stdout(&compared).contains("1.00x"), "{}", stdout(&compared));

    // Malformed input: a non-zero exit naming the file, no panic.
    let garbage = scratch("garbage.json");
    std::fs::write(&garbage, "{\"results\": 3}").expect("write");
    let bad = trainer(&["compare", json, garbage.to_str().expect("utf-8 path")]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("garbage.json") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
