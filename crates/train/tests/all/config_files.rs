//! Config files: every preset in `configs/` parses; bad files give errors naming the problem.

use std::path::PathBuf;

use ember_train::{TrainConfig, TrainError};

fn configs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

#[test]
fn every_preset_parses() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(configs_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config =
                TrainConfig::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(config.steps > 0);
            names.push(path.file_stem().unwrap().to_string_lossy().to_string());
        }
    }
    names.sort();
    for wanted in [
        "quick",
        "micro",
        "lego-100-smoke",
        "lego-100-fixed",
        "lego-100-1k",
        "lego-100-3k",
        "lego",
        "h100",
        "equirect-cpu",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "configs/{wanted}.toml is missing"
        );
    }
}

#[test]
fn bad_files_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown.toml",
            "steps = 10\nlearning_rate = 0.1\n",
            "learning_rate",
        ),
        (
            "nested.toml",
            "[densify]\ninterval = 100\nthreshold = 2\n",
            "threshold",
        ),
        ("section.toml", "[optimiser]\nlr_means = 1.0\n", "optimiser"),
        ("syntax.toml", "steps = = 3\n", "syntax.toml"),
        (
            "type.toml",
            "[data]\nbackground = \"white\"\n",
            "background",
        ),
        (
            "range.toml",
            "[densify]\ninterval = 0\n",
            "densify.interval",
        ),
        ("batch.toml", "batch_size = 0\n", "batch_size"),
        (
            "rig.toml",
            "[data.equirect]\nviews = 0\npoles = false\n",
            "data.equirect",
        ),
        (
            "rig_key.toml",
            "[data.equirect]\nviews_per_ring = 4\n",
            "views_per_ring",
        ),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = TrainConfig::from_file(&path).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(needle), "{name}: {message}");
    }
    let missing = TrainConfig::from_file(&dir.path().join("absent.toml")).unwrap_err();
    assert!(matches!(missing, TrainError::Io { .. }), "{missing}");
}
