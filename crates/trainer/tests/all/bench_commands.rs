//! `trainer bench render|train|data` and `trainer compare`: each writes its JSON, the numbers
//! in it are sane, and `compare` reads it.

use serde_json::Value;

use crate::common::{data_path, scratch, stdout, trainer};

/// The JSON file at `path`.
fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(path).expect("the JSON was written");
    serde_json::from_str(&text).expect("valid JSON")
}

/// The result named `name` of a bench file.
fn result<'a>(file: &'a Value, name: &str) -> &'a Value {
    file["results"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no result `{name}` in {file}"))
}

/// Median, min and max of a result, checked to be ordered and finite.
fn times(result: &Value) -> (f64, f64, f64) {
    let get = |k: &str| {
        result[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {result}"))
    };
    let (median, min, max) = (get("median_ms"), get("min_ms"), get("max_ms"));
    assert!(
        min.is_finite() && max.is_finite() && 0.0 <= min && min <= median && median <= max,
        "{result}"
    );
    (median, min, max)
}

/// `trainer compare FILE FILE` succeeds and lists every set with a 1.00x speed-up.
fn compare_reads(json: &str, sets: &[&str]) {
    let compared = trainer(&["compare", json, json]);
    assert!(compared.status.success(), "compare failed: {compared:?}");
    let out = stdout(&compared);
    for set in sets {
        assert!(out.contains(&format!("| {set} |")), "{set} missing: {out}");
    }
    assert!(out.contains("1.00x"), "{out}");
}

#[test]
fn bench_train_reports_every_phase_per_step() {
    let json = scratch("bench-train.json");
    let json = json.to_str().expect("utf-8 path");
    // The built-in scene, shrunk: 3 timed steps (waiting for the device after each phase) after
    // 1 warm-up step, then two evaluations.
    let bench = trainer(&[
        "bench",
        "train",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--set",
        "data.procedural.resolution=32",
        "--set",
        "data.procedural.train_views=4",
        "--set",
        "data.procedural.test_views=1",
        "--set",
        "data.procedural.gaussians=300",
        "--set",
        "data.procedural.points=200",
        "--eval",
        "--sync-phases",
        "--json",
        json,
    ]);
    assert!(bench.status.success(), "bench train failed: {bench:?}");
    let file = read_json(json);
    assert_eq!(file["tool"], "trainer bench train");
    let input = file["input"].as_str().expect("input");
    assert!(input.ends_with(", phases synchronised"), "{input}");
    assert_eq!(file["gaussians"], 200);
    assert!(file["peak_host_mib"].as_f64().is_some_and(|m| m > 0.0));

    let step = result(&file, "step");
    assert_eq!(step["frames"], 3);
    let (step_median, _, step_max) = times(step);
    assert!(step_median > 0.0);
    let steps_per_s = step["metrics"]["steps_per_s"].as_f64().expect("steps/s");
    assert!(
        steps_per_s > 0.0 && steps_per_s <= 1000.0 / step_median * 1.5,
        "{step}"
    );

    // The compositing work of the field through the training views.
    let metric = |name: &str| step["metrics"][name].as_f64().expect(name);
    assert!(metric("pairs_per_pixel") > 0.0, "{step}");
    assert!(
        metric("gaussians_per_tile") >= metric("pairs_per_pixel"),
        "{step}"
    );
    assert!((0.0..=1.0).contains(&metric("visible_fraction")) && metric("visible_fraction") > 0.0);

    let phases = ["data wait", "forward", "backward", "optimizer", "densify"];
    let mut phase_minima = 0.0;
    let mut shares = 0.0;
    for phase in phases {
        let r = result(&file, phase);
        assert_eq!(r["frames"], 3, "{r}");
        let (_, min, _) = times(r);
        phase_minima += min;
        shares += r["metrics"]["share"].as_f64().expect("share");
    }
    for busy in ["forward", "backward", "optimizer"] {
        assert!(times(result(&file, busy)).0 > 0.0, "{busy} took no time");
    }
    // The phases are parts of each step, so the sum of their minima is at most any step's time
    // (a sum of medians is not: the medians of different phases can come from different steps).
    assert!(phase_minima <= step_max * 1.01, "{file}");
    assert!((shares - 1.0).abs() < 1e-6, "shares add to {shares}");

    // The second evaluation at the same step renders nothing.
    let (eval, cached) = (result(&file, "eval"), result(&file, "eval cached"));
    assert_eq!(eval["metrics"]["cache_hit_rate"], 0.0);
    assert_eq!(cached["metrics"]["cache_hit_rate"], 1.0);
    assert!(times(eval).0 > 0.0 && times(cached).0 < times(eval).0);

    let mut sets = vec!["step", "eval", "eval cached"];
    sets.extend(phases);
    compare_reads(json, &sets);

    // From a checkpoint: the steps continue the run's.
    let run = scratch("bench-train-run");
    let shrink = [
        "--set",
        "data.procedural.resolution=32",
        "--set",
        "data.procedural.train_views=4",
        "--set",
        "data.procedural.test_views=1",
        "--set",
        "data.procedural.gaussians=300",
        "--set",
        "data.procedural.points=200",
    ];
    let mut args = vec!["--steps", "4", "--out", run.to_str().expect("utf-8 path")];
    args.extend(shrink);
    assert!(trainer(&args).status.success());
    let checkpoint = run.join("checkpoint.safetensors");
    let mut args = vec![
        "bench",
        "train",
        "--steps",
        "2",
        "--resume",
        checkpoint.to_str().expect("utf-8 path"),
        "--json",
        json,
    ];
    args.extend(shrink);
    let resumed = trainer(&args);
    assert!(resumed.status.success(), "{resumed:?}");
    let file = read_json(json);
    let input = file["input"].as_str().expect("input");
    assert!(input.contains("(step 4)"), "{input}");
}

#[test]
fn bench_data_times_cold_and_warm_passes() {
    let Some(smoke) = data_path("smoke_dataset") else {
        return;
    };
    let json = scratch("bench-data-smoke.json");
    let json = json.to_str().expect("utf-8 path");
    let bench = trainer(&[
        "bench",
        "data",
        "--data",
        smoke.to_str().expect("utf-8 path"),
        "--epochs",
        "2",
        "--json",
        json,
    ]);
    assert!(bench.status.success(), "bench data failed: {bench:?}");
    let file = read_json(json);
    assert_eq!(file["tool"], "trainer bench data");
    for set in ["cold", "warm"] {
        let r = result(&file, set);
        // One 50x50 image, two passes.
        assert_eq!(r["frames"], 2, "{r}");
        assert!(times(r).0 > 0.0 && r["fps"].as_f64().is_some_and(|f| f > 0.0));
        assert!(
            r["metrics"]["pixel_mb_per_s"]
                .as_f64()
                .is_some_and(|v| v > 0.0)
        );
    }
    let cold = result(&file, "cold");
    assert!(
        cold["metrics"]["file_mb_per_s"]
            .as_f64()
            .is_some_and(|v| v > 0.0)
    );
    let warm = result(&file, "warm");
    assert_eq!(warm["metrics"]["cache_hit_rate"], 1.0);
    let wait = warm["metrics"]["wait_fraction"].as_f64().expect("wait");
    assert!((0.0..=1.0).contains(&wait), "{wait}");
    compare_reads(json, &["cold", "warm"]);

    let Some(lego) = data_path("lego_400") else {
        return;
    };
    let json = scratch("bench-data-lego.json");
    let json = json.to_str().expect("utf-8 path");
    let bench = trainer(&[
        "bench",
        "data",
        "--data",
        lego.to_str().expect("utf-8 path"),
        "--downsample",
        "4",
        "--epochs",
        "1",
        "--json",
        json,
    ]);
    assert!(bench.status.success(), "bench data failed: {bench:?}");
    let file = read_json(json);
    let cold = result(&file, "cold");
    // 100 train + 100 val + 200 test views.
    assert_eq!(cold["frames"], 400);
    // 400 images of 100x100 pixels in one pass, 3 bytes of RGB and 1 of transparency each.
    let pixel_mb = cold["metrics"]["pixel_mb_per_s"].as_f64().expect("MB/s")
        * cold["median_ms"].as_f64().expect("ms")
        * 400.0
        / 1e3;
    assert!((pixel_mb - 16.0).abs() < 0.01, "{pixel_mb} MB of pixels");
}

#[test]
fn bad_bench_arguments_are_errors_not_panics() {
    let zero = trainer(&["bench", "train", "--steps", "0"]);
    assert!(!zero.status.success());
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(
        stderr.contains("--steps") && !stderr.contains("panicked"),
        "{stderr}"
    );

    let missing = trainer(&["bench", "data", "--data", "/nonexistent/scene"]);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("/nonexistent/scene") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

#[test]
fn bench_render_writes_json_that_compare_reads() {
    let Some(ply) = data_path("splats/gaussiansplats3d-pr477/lod5_tile_0.ply") else {
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
