//! `trainer lod build` and `trainer bench lod` as a user runs them: the hierarchy file is a
//! plain 3DGS PLY of the leaves that the other commands read, the benchmark's JSON has a row per
//! distance, and bad arguments are errors that name the problem.

use serde_json::Value;

use crate::common::{arg, data_path, scratch, stdout, trainer};

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
            for key in ["full_ms", "lod_ms", "speedup", "drawn", "psnr_vs_full"] {
                assert!(row[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {row}");
            }
            assert!(
                row["drawn"].as_f64().expect("drawn") <= value["nodes"].as_f64().expect("nodes")
            );
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
