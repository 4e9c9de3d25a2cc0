//! Training time as an axis: `elapsed` in the logs (growing, carried over a resume through the
//! checkpoint), and `max_seconds` ending a run as its last step would.

use ember_field::to_host;
use ember_train::checkpoint::CheckpointFile;
use ember_train::params::ParamGroup;
use ember_train::{Quiet, Trainer, run};

use crate::common::{self, B};

/// The `column` of a CSV file's rows, by the header's name; empty cells as `None`.
fn column(csv: &str, column: &str) -> Vec<Option<f64>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let k = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no `{column}` in {header:?}"));
    lines
        .map(|l| l.split(',').nth(k).and_then(|v| v.parse().ok()))
        .collect()
}

#[test]
fn elapsed_training_time_is_logged_and_survives_a_resume() {
    let config = common::tiny_config();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let summary = run::<B>(
        &config,
        common::scene(&config),
        &out,
        None,
        &Default::default(),
        &mut Quiet,
    )
    .unwrap();
    assert!(!summary.out_of_time);
    assert!(
        summary.training_seconds > 0.0 && summary.training_seconds < summary.seconds,
        "{} s of training in {} s",
        summary.training_seconds,
        summary.seconds
    );

    // train.csv: a row every 2 steps, `elapsed` growing and ending at the run's training time.
    let train = std::fs::read_to_string(out.join("train.csv")).unwrap();
    let elapsed: Vec<f64> = column(&train, "elapsed").into_iter().flatten().collect();
    assert_eq!(elapsed.len(), 6, "{train}");
    assert!(elapsed.windows(2).all(|w| w[0] < w[1]), "{elapsed:?}");
    assert!(elapsed[5] <= summary.training_seconds);
    // eval.csv: `elapsed` on the means' rows only (steps 6 and 12), as in metrics.jsonl.
    let eval = std::fs::read_to_string(out.join("eval.csv")).unwrap();
    let means: Vec<f64> = column(&eval, "elapsed").into_iter().flatten().collect();
    let reported: Vec<f64> = summary.evals.iter().map(|e| e.elapsed).collect();
    assert_eq!(means, reported, "{eval}");
    assert_eq!(means[1], summary.training_seconds);
    let jsonl = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let logged: Vec<f64> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "eval")
        .map(|v| v["elapsed"].as_f64().expect("elapsed"))
        .collect();
    // serde_json's default parser may round the last bit.
    assert_eq!(logged.len(), reported.len());
    for (l, r) in logged.iter().zip(&reported) {
        assert!(
            (l - r).abs() <= 1e-12 * r,
            "{logged:?} against {reported:?}"
        );
    }

    // The checkpoint carries the time on, and the resumed run's rows continue from it.
    let checkpoint = out.join("checkpoint.safetensors");
    let saved = CheckpointFile::parse(&std::fs::read(&checkpoint).unwrap(), &checkpoint).unwrap();
    assert_eq!(saved.training_seconds, summary.training_seconds);
    let copy = dir.path().join("ckpt.safetensors");
    std::fs::copy(&checkpoint, &copy).unwrap();
    let more = config.with_overrides(&["steps=16"]).unwrap();
    let resumed = run::<B>(
        &more,
        common::scene(&config),
        &out,
        Some(&copy),
        &Default::default(),
        &mut Quiet,
    )
    .unwrap();
    assert!(resumed.training_seconds > summary.training_seconds);
    let train = std::fs::read_to_string(out.join("train.csv")).unwrap();
    let elapsed: Vec<f64> = column(&train, "elapsed").into_iter().flatten().collect();
    assert_eq!(elapsed.len(), 8, "{train}");
    assert!(elapsed.windows(2).all(|w| w[0] < w[1]), "{elapsed:?}");
}

#[test]
fn a_time_budget_ends_the_run_as_its_last_step_would() {
    // A budget the first step spends: the run ends after it, logged, evaluated and exported.
    let config = common::tiny_config()
        .with_overrides(&["max_seconds=1e-9"])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let summary = run::<B>(
        &config,
        common::scene(&config),
        &out,
        None,
        &Default::default(),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!((summary.steps, summary.out_of_time), (1, true));
    assert_eq!(summary.evals.len(), 1);
    assert_eq!(summary.final_eval.as_ref().map(|e| e.step), Some(1));
    assert!(out.join("splats.ply").is_file());
    let train = std::fs::read_to_string(out.join("train.csv")).unwrap();
    assert_eq!(column(&train, "step"), [Some(1.0)], "{train}");

    // Schedules stay keyed to `steps`: the cut run is the uninterrupted one's first step.
    let mut uncut = Trainer::<B>::new(
        common::tiny_config(),
        common::scene(&config),
        &Default::default(),
    )
    .unwrap();
    uncut.step().unwrap();
    let checkpoint = out.join("checkpoint.safetensors");
    let saved = CheckpointFile::parse(&std::fs::read(&checkpoint).unwrap(), &checkpoint).unwrap();
    assert_eq!(saved.step, 1);
    for (group, saved) in ParamGroup::ALL.iter().zip(&saved.groups) {
        let values = to_host(group.columns(uncut.field()), "param").unwrap();
        assert_eq!(saved.param.values, values, "{}", group.name());
    }
}
