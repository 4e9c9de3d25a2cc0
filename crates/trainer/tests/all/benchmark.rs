//! `trainer benchmark SUITE.toml`: a suite of two short lego runs gives a table row each and
//! their mean; a suite that names a missing scene stops before training anything.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::{arg as path, data_path, scratch, stdout};

/// `trainer --backend ndarray benchmark args...` (the CPU whatever the features' default backend)
/// with no LPIPS weights in the environment (the shipped ones measure it).
fn benchmark(args: &[&str]) -> Output {
    crate::common::trainer_command()
        .args(["--backend", "ndarray", "benchmark"])
        .args(args)
        .env_remove("EMBER_LPIPS_WEIGHTS")
        .output()
        .expect("trainer runs")
}

/// A suite of `scenes` (`(name, data, overrides)`) with the 100x100 lego smoke config.
fn suite(file: &Path, scenes: &[(&str, &str, &str)]) {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/lego-100-smoke.toml"
    );
    let mut text = "name = \"test\"\n".to_string();
    for (name, data, set) in scenes {
        text.push_str(&format!(
            "[[scene]]\nname = \"{name}\"\ndata = \"{data}\"\nconfig = \"{config}\"\nset = [{set}]\n"
        ));
    }
    std::fs::write(file, text).expect("suite written");
}

#[test]
fn a_suite_trains_each_scene_into_one_table() {
    let Some(lego) = data_path("lego_400") else {
        return;
    };
    let data_dir = lego.parent().expect("the data folder");
    let dir = scratch("benchmark");
    std::fs::create_dir_all(&dir).expect("folder");
    let file = dir.join("suite.toml");
    suite(
        &file,
        &[
            ("lego_a", "lego_400", r#""data.max_images=2""#),
            (
                "lego_b",
                "lego_400",
                r#""data.max_images=3", "data.downsample=8""#,
            ),
        ],
    );
    let out = dir.join("out");
    let ran = benchmark(&[
        path(&file),
        "--out",
        path(&out),
        "--steps",
        "5",
        "--data-dir",
        path(data_dir),
        "--machine",
        "the test machine",
    ]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let json: Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    assert_eq!(json["suite"], "test");
    assert_eq!(json["backend"], "ndarray");
    assert_eq!(json["machine"], "the test machine");
    assert_eq!(json["steps_override"], 5);
    let scenes = json["scenes"].as_array().expect("scenes");
    assert_eq!(scenes.len(), 2);
    for (scene, views) in scenes.iter().zip([2, 3]) {
        assert_eq!(scene["steps"], 5);
        assert_eq!(scene["eval_views"], views, "{scene}");
        let psnr = scene["psnr"].as_f64().expect("psnr");
        assert!(psnr > 5.0 && psnr < 60.0, "{scene}");
        let (train, wall) = (
            scene["train_seconds"].as_f64().expect("time"),
            scene["wall_seconds"].as_f64().expect("time"),
        );
        assert!(train > 0.0 && train <= wall, "{scene}");
        assert!(scene["gaussians"].as_u64().is_some_and(|n| n > 0));
        assert!(scene["lpips"].as_f64().is_some(), "{scene}");
        assert!(scene["cc_psnr"].as_f64().is_some(), "{scene}");
        // Each scene is a run folder like any other.
        let run = out.join(scene["scene"].as_str().expect("name"));
        assert!(run.join("eval.csv").is_file() && run.join("splats.ply").is_file());
    }
    let mean = (scenes[0]["psnr"].as_f64().expect("psnr")
        + scenes[1]["psnr"].as_f64().expect("psnr"))
        / 2.0;
    assert!((json["mean"]["psnr"].as_f64().expect("mean") - mean).abs() < 1e-3);
    let table = std::fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(
        table.contains("| lego_a | 5 |") && table.contains("| lego_b | 5 |"),
        "{table}"
    );
    assert!(
        table.contains(&format!("| **mean** | | **{mean:.2}**")),
        "{table}"
    );
    assert!(table.contains("the test machine") && table.contains("cut to 5 steps"));
    assert!(
        stdout(&ran).contains(&table),
        "the table is printed at the end"
    );

    // --only, and a scene folder that is not there: refused before anything trains.
    suite(
        &file,
        &[("lego", "lego_400", ""), ("missing", "no_such_scene", "")],
    );
    let out = dir.join("refused");
    let refused = benchmark(&[
        path(&file),
        "--out",
        path(&out),
        "--steps",
        "1",
        "--data-dir",
        path(data_dir),
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("no_such_scene") && stderr.contains("missing"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing trained");
    let unknown = benchmark(&[
        path(&file),
        "--only",
        "lego,nope",
        "--data-dir",
        path(data_dir),
    ]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("--only nope") && stderr.contains("lego, missing"),
        "{stderr}"
    );
}

#[test]
fn the_shipped_suites_name_configs_and_scenes_that_load() {
    let Some(lego) = data_path("lego_400") else {
        return;
    };
    let data_dir = lego.parent().expect("the data folder");
    for suite in ["cpu", "gpu"] {
        let file = format!(
            "{}/../../configs/suites/{suite}.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        let checked = benchmark(&[&file, "--check", "--data-dir", path(data_dir)]);
        assert!(
            checked.status.success(),
            "{suite}: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let listed = stdout(&checked);
        for scene in ["lego_400", "cup_colmap", "mouse_colmap", "figurine_colmap"] {
            assert!(listed.contains(&format!("{scene}: ")), "{suite}: {listed}");
        }
        assert!(listed.contains("4 runs, ready"), "{listed}");
    }
}
