//! `trainer info / convert / transform / edit / render` (with and without the antialiasing filter) on
//! a real trained splat file (`splats/gaussiansplats3d-pr477/lod5_tile_0.ply` under
//! `EMBER_DATA_DIR`).

use crate::common::{data_path, scratch, stdout, trainer};

#[test]
fn info_convert_transform_and_render_a_splat_file() {
    let Some(ply) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
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
    assert!(stdout(&converted).contains(".splat, 111 Gaussians, SH degree 0"));

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

    // With the antialiasing filter the image differs; a splat file in the folder of a run
    // trained with it is drawn with it unasked.
    let render = |input: &str, out: &str, extra: &[&str]| {
        let out = scratch(out);
        let mut args = vec![
            "render",
            input,
            "--camera",
            camera.to_str().expect("utf-8 path"),
            "--out",
            out.to_str().expect("utf-8 path"),
        ];
        args.extend_from_slice(extra);
        let rendered = trainer(&args);
        assert!(rendered.status.success(), "render failed: {rendered:?}");
        std::fs::read(&out).expect("the PNG was written")
    };
    let filtered = render(&ply, "filtered.png", &["--antialiased"]);
    assert_ne!(filtered, image, "the filter changes the image");
    let run = scratch("antialiased-run");
    std::fs::create_dir_all(&run).expect("run folder");
    std::fs::write(run.join("config.toml"), "[raster]\nantialiased = true\n").expect("config");
    let run_ply = run.join("splats.ply");
    std::fs::copy(&ply, &run_ply).expect("copy");
    let from_run = render(run_ply.to_str().expect("utf-8 path"), "from-run.png", &[]);
    assert_eq!(
        from_run, filtered,
        "the run's raster.antialiased is followed"
    );
    // The run folder itself renders its splats.ply, with its config.
    let run_folder = render(run.to_str().expect("utf-8 path"), "run-folder.png", &[]);
    assert_eq!(run_folder, filtered, "a run folder renders as its splats");
    // A folder that holds neither a checkpoint nor splats.ply is named in a clear error.
    let empty = scratch("not-a-run");
    std::fs::create_dir_all(&empty).expect("folder");
    let out = scratch("never.png");
    let refused = trainer(&[
        "render",
        empty.to_str().expect("utf-8 path"),
        "--camera",
        camera.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(
        stderr.contains("without checkpoint.safetensors or splats.ply"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing written");
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

/// `trainer edit` keeps exactly the Gaussians `ember_data`'s filter keeps (the page's edits
/// use the same filter), prints what it removed, and refuses a bad region, an output over its
/// input and an edit that keeps nothing, writing nothing.
#[test]
fn edit_keeps_what_the_filter_keeps_and_refuses_the_rest() {
    let Some(ply) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
        return;
    };
    let splats = ember_data::read_splats(&ply).expect("the tile");
    let [lo, hi] = splats.bounds().expect("bounds");
    let mid = |a: usize| f64::from(lo[a] + hi[a]) / 2.0;
    let ply = ply.to_string_lossy().into_owned();
    // Printed from f64, so that the command parses the very corners the filter below uses
    // (the box's faces are inside, and the tile's extreme centres lie on them).
    let half = format!(
        "{},{},{},{},{},{}",
        f64::from(lo[0]),
        f64::from(lo[1]),
        f64::from(lo[2]),
        mid(0),
        f64::from(hi[1]),
        f64::from(hi[2])
    );
    let out = scratch("edited.ply");
    let out_text = out.to_str().expect("utf-8 path");
    let edited = trainer(&[
        "edit",
        &ply,
        out_text,
        "--crop-box",
        &half,
        "--outside",
        "--min-opacity",
        "0.2",
    ]);
    assert!(edited.status.success(), "edit failed: {edited:?}");
    let filter = ember_data::SplatFilter {
        region: Some(ember_data::Region::Box {
            min: lo.map(f64::from),
            max: [mid(0), f64::from(hi[1]), f64::from(hi[2])],
        }),
        outside: true,
        min_opacity: Some(0.2),
        max_scale: None,
    };
    let expected = splats.filtered(&filter);
    assert!(!expected.is_empty() && expected.len() < splats.len());
    let written = ember_data::read_splats(&out).expect("written");
    assert!(
        written == expected,
        "{} Gaussians written, {} expected",
        written.len(),
        expected.len()
    );
    assert!(
        stdout(&edited).contains(&format!(
            "kept {} of 111 Gaussians ({} removed)",
            expected.len(),
            111 - expected.len()
        )),
        "{}",
        stdout(&edited)
    );

    let refused = |args: &[&str], expected: &str| {
        let target = scratch("refused.ply");
        let mut all = vec!["edit", &ply];
        let target_text = target.to_string_lossy().into_owned();
        if !args.contains(&"--over-input") {
            all.push(&target_text);
        }
        all.extend(args.iter().filter(|a| **a != "--over-input"));
        let run = trainer(&all);
        let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!run.status.success(), "{all:?} succeeded");
        assert!(stderr.contains(expected), "{all:?}: {stderr}");
        assert!(!target.exists(), "{all:?} wrote {}", target.display());
    };
    refused(&["--crop-box", "1,0,0,0,1,1"], "crop box");
    refused(&["--crop-sphere", "0,0,0,-1"], "crop sphere");
    refused(&["--min-opacity", "1"], "keeps none of the 111");
    refused(&[], "nothing to edit");
    refused(
        &["--over-input", &ply, "--min-opacity", "0.5"],
        "the output",
    );
}

/// Coordinates below zero are values, not flags, without `=`: `--crop-box -1,...`,
/// `--translate -1,...` (the viewer's edit list prints them so).
#[test]
fn negative_coordinates_are_read_as_values() {
    let dir = scratch("negative-values");
    let (ply, _) = crate::viewer::write_scene(&dir);
    let ply = ply.to_str().expect("utf-8 path").to_string();
    for args in [
        vec!["edit", "--crop-box", "-1,-0.2,-1,1,1,1"],
        vec!["edit", "--crop-sphere", "-0.8,0,0,0.5", "--outside"],
        vec!["transform", "--translate", "-1,-2,-3", "--center", "-1,0,0"],
        vec!["transform", "--rotate-euler", "-90,0,0"],
        vec!["transform", "--rotate-quat", "-1,0,0,0"],
    ] {
        let out = dir.join("out.ply");
        let mut all = vec![args[0], &ply, out.to_str().expect("utf-8 path")];
        all.extend(&args[1..]);
        let run = trainer(&all);
        assert!(
            run.status.success(),
            "{all:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

/// A wgpu build choosing its own backend on a machine without a display session (no
/// `XDG_RUNTIME_DIR`, as on a server or in CI) prints no driver noise: Mesa's Vulkan driver
/// asked libwayland for a display and it complained on stderr twice.
#[cfg(feature = "wgpu")]
#[test]
fn the_default_backend_starts_without_driver_noise() {
    let out_dir = scratch("quiet-start");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainer"))
        .env_remove("EMBER_BACKEND")
        .env_remove("XDG_RUNTIME_DIR")
        .args([
            "--steps",
            "1",
            "--set",
            "data.procedural.resolution=16",
            "--set",
            "eval.every=0",
            "--out",
            out_dir.to_str().expect("utf-8 path"),
        ])
        .output()
        .expect("trainer runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("XDG_RUNTIME_DIR"), "{stderr}");
}
