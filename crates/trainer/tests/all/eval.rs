//! `trainer eval`: a run re-measured on its own views gives the run's numbers; a splat file on
//! a dataset, other splits and resolutions; renders written beside nothing of the inputs; the
//! refusals.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::{arg as path, data_path, scratch, stdout, without_lpips};

/// `trainer eval args...` with no LPIPS weights in the environment.
fn eval(args: &[&str]) -> Output {
    without_lpips("eval", args)
}

/// `trainer eval args... --json JSON`, which must succeed: the JSON it wrote.
fn measured(args: &[&str], json: &Path) -> Value {
    let out = eval(&[args, &["--json", path(json)]].concat());
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(json).expect("JSON")).expect("JSON")
}

/// The `(name, psnr)` of every view of an evaluation's JSON.
fn views(value: &Value) -> Vec<(String, f64)> {
    value["views"]
        .as_array()
        .expect("views")
        .iter()
        .map(|v| {
            (
                v["name"].as_str().expect("name").to_string(),
                v["psnr"].as_f64().expect("psnr"),
            )
        })
        .collect()
}

#[test]
fn a_run_and_its_splat_file_measure_as_the_run_did() {
    let Some(lego) = data_path("lego_400") else {
        return;
    };
    let dir = scratch("eval");
    let run = dir.join("run");
    // 100x100 views, 4 per split (evenly spaced), a short run evaluated at its end.
    let trained = crate::common::trainer_command()
        .args([
            "--config",
            "configs/lego-100-smoke.toml",
            "--data",
            path(&lego),
        ])
        .args(["--steps", "30", "--out", path(&run)])
        .args(["--set", "data.max_images=4", "--set", "eval.every=0"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env_remove("EMBER_LPIPS_WEIGHTS")
        .output()
        .expect("trainer runs");
    assert!(
        trained.status.success(),
        "{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    let csv = std::fs::read_to_string(run.join("eval.csv")).expect("eval.csv");
    // eval.csv: a row per view, then the mean (one evaluation, at the end).
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 5, "{csv}");
    assert_eq!(rows[4][1], "mean");
    let run_psnr: f64 = rows[4][2].parse().expect("number");

    // The run folder: its checkpoint on its dataset at its resolution.
    let images = dir.join("images");
    let json = dir.join("run.json");
    let from_run = measured(&[path(&run), "--save-images", path(&images)], &json);
    assert_eq!(from_run["split"], "test");
    let test_views = views(&from_run);
    assert_eq!(test_views.len(), 4, "{from_run}");
    let mean = test_views.iter().map(|v| v.1).sum::<f64>() / 4.0;
    assert!((from_run["psnr"].as_f64().expect("psnr") - mean).abs() < 1e-3);
    assert!(
        (mean - run_psnr).abs() < 1e-3,
        "eval {mean} dB, the run's own {run_psnr} dB"
    );
    assert!(
        from_run["lpips"].as_f64().is_some(),
        "LPIPS with the shipped weights"
    );
    let (psnr, cc_psnr) = (
        from_run["psnr"].as_f64().expect("psnr"),
        from_run["cc_psnr"].as_f64().expect("cc_psnr"),
    );
    assert!(
        cc_psnr >= psnr - 1e-3,
        "the colour correction fits by least squares: {cc_psnr} vs {psnr}"
    );
    for (row, (name, psnr)) in rows.iter().zip(&test_views) {
        assert_eq!(row[1], name);
        let logged: f64 = row[2].parse().expect("number");
        assert!((logged - psnr).abs() < 1e-3, "{name}: {logged} vs {psnr}");
    }
    for (name, _) in &test_views {
        let stem = name.trim_start_matches("./").replace('/', "_");
        let render = image::open(images.join("renders").join(format!("{stem}.png")))
            .expect("render written");
        assert_eq!((render.width(), render.height()), (100, 100));
        let pair = image::open(images.join("pairs").join(format!("{stem}.png"))).expect("pair");
        assert_eq!((pair.width(), pair.height()), (200, 100));
    }

    // Its splat file on the same dataset and resolution, given on the command line: the same
    // field, the same numbers (4 of the 200 test views, evenly spaced, are the run's 4).
    let ply = run.join("splats.ply");
    let from_ply = measured(
        &[
            path(&ply),
            "--data",
            path(&lego),
            "--downsample",
            "4",
            "--max-views",
            "4",
        ],
        &dir.join("ply.json"),
    );
    assert_eq!(views(&from_ply).len(), 4);
    for (a, b) in views(&from_ply).iter().zip(&test_views) {
        assert_eq!(a.0, b.0);
        assert!((a.1 - b.1).abs() < 1e-3, "{a:?} vs {b:?}");
    }

    // Other splits and resolutions.
    let train = measured(&[path(&run), "--split", "train"], &dir.join("train.json"));
    assert_eq!(train["split"], "train");
    assert!(
        views(&train).iter().all(|v| v.0.contains("train")),
        "{train}"
    );
    let val = measured(
        &[path(&run), "--split", "val", "--max-views", "2"],
        &dir.join("val.json"),
    );
    assert_eq!(views(&val).len(), 2);
    assert!(views(&val).iter().all(|v| v.0.contains("val")), "{val}");
    // Aligned: each view's camera and exposure fitted first, reported beside the plain numbers,
    // which stay the run's.
    let aligned = measured(
        &[path(&run), "--align-steps", "10", "--max-views", "2"],
        &dir.join("aligned.json"),
    );
    for (view, plain) in aligned["views"]
        .as_array()
        .expect("views")
        .iter()
        .zip([&test_views[0], &test_views[2]])
    {
        assert_eq!(view["name"], plain.0.as_str());
        assert!((view["psnr"].as_f64().expect("psnr") - plain.1).abs() < 1e-3);
        let fitted = &view["aligned"];
        assert!(fitted["psnr"].as_f64().is_some(), "{aligned}");
        assert!(
            fitted["degrees"].as_f64().is_some_and(|d| d > 0.0),
            "{aligned}"
        );
    }
    assert!(aligned["aligned"]["psnr"].as_f64().is_some(), "{aligned}");
    assert!(views(&val).iter().all(|v| v.0.contains("val")), "{val}");
    let half = eval(&[path(&run), "--downsample", "8", "--max-views", "1"]);
    assert!(half.status.success());
    assert!(
        stdout(&half).contains("(the first 50x50)"),
        "{}",
        stdout(&half)
    );

    // Nothing goes into the inputs.
    for (flag, output) in [
        ("--json", run.join("again.json")),
        ("--save-images", run.join("eval/renders")),
        ("--save-images", lego.join("renders")),
    ] {
        let refused = eval(&[path(&run), flag, path(&output)]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains("inside the input"),
            "{flag} {}: {stderr}",
            output.display()
        );
        assert!(!output.exists());
    }
    let refused = eval(&[path(&ply), "--data", path(&lego), "--json", path(&ply)]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("refusing to overwrite"));
    assert!(ply.is_file());
}

#[test]
fn eval_says_what_is_missing() {
    let dir = scratch("eval-refusals");
    std::fs::create_dir_all(&dir).expect("folder");
    let missing = eval(&[path(&dir.join("nothing.ply"))]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("nothing.ply"),
        "{stderr}"
    );
    let Some(file) = data_path("splats/splat-transform-fixtures/minimal.splat") else {
        return;
    };
    let no_data = eval(&[path(&file)]);
    let stderr = String::from_utf8_lossy(&no_data.stderr);
    assert!(
        !no_data.status.success() && stderr.contains("--data"),
        "{stderr}"
    );
    let Some(smoke) = data_path("smoke_dataset") else {
        return;
    };
    // A nerfstudio scene split by test_every has no val split.
    let no_val = eval(&[path(&file), "--data", path(&smoke), "--split", "val"]);
    let stderr = String::from_utf8_lossy(&no_val.stderr);
    assert!(
        !no_val.status.success() && stderr.contains("no val split"),
        "{stderr}"
    );
}
