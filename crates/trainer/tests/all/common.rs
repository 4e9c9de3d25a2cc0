//! Shared helpers: the data folder, running the binary, scratch files.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `relative` under `EMBER_DATA_DIR` (default `<workspace>/../shared/data`), or `None` after
/// saying it was skipped; with `EMBER_REQUIRE_DATA=1` a missing file or folder fails the test.
pub fn data_path(relative: &str) -> Option<PathBuf> {
    let dir = std::env::var("EMBER_DATA_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data").into());
    let path = Path::new(&dir).join(relative);
    if path.exists() {
        Some(path)
    } else if std::env::var("EMBER_REQUIRE_DATA").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_DATA=1 but {} is missing", path.display());
    } else {
        println!("skipped: {} not found", path.display());
        None
    }
}

/// The `trainer` binary, on the ndarray backend unless its arguments say `--backend`: the
/// commands under test are the same on every backend, and under `--features wgpu` the compiled
/// default (wgpu on lavapipe in CI) would spend minutes per test on shader compilation.
pub fn trainer_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trainer"));
    command.env("EMBER_BACKEND", "ndarray");
    command
}

/// Runs the `trainer` binary with `args`.
pub fn trainer(args: &[&str]) -> Output {
    match trainer_command().args(args).output() {
        Ok(out) => out,
        Err(e) => panic!("running trainer {args:?}: {e}"),
    }
}

/// Runs `trainer SUBCOMMAND args...` without LPIPS weights in the environment (a user's
/// `EMBER_LPIPS_WEIGHTS` does not change what the tests see: the shipped weights measure it).
pub fn without_lpips(subcommand: &str, args: &[&str]) -> Output {
    match trainer_command()
        .arg(subcommand)
        .args(args)
        .env_remove("EMBER_LPIPS_WEIGHTS")
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("running trainer {subcommand} {args:?}: {e}"),
    }
}

/// `path` as a command-line argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Its standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

static SCRATCH_DIR: OnceLock<PathBuf> = OnceLock::new();

/// This test process's scratch folder, made on first use. It is removed when the process exits,
/// whether its tests passed or failed (each run left ~110 MB in the temp dir before), unless
/// `EMBER_KEEP_TEST_FILES=1` asks to keep it for a look.
fn scratch_dir() -> &'static Path {
    SCRATCH_DIR
        .get_or_init(|| {
            let dir =
                std::env::temp_dir().join(format!("ember-trainer-cli-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            if std::env::var("EMBER_KEEP_TEST_FILES").as_deref() != Ok("1") {
                // SAFETY: `atexit` only records the handler, which reads `SCRATCH_DIR` (set by the
                // time any handler runs) and the file system, and does not unwind.
                unsafe { atexit(remove_scratch_dir) };
            }
            dir
        })
        .as_path()
}

unsafe extern "C" {
    fn atexit(handler: extern "C" fn()) -> c_int;
}

/// Runs at the test process's exit (the harness's threads are done by then).
extern "C" fn remove_scratch_dir() {
    if let Some(dir) = SCRATCH_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A path in this test process's scratch folder.
pub fn scratch(name: &str) -> PathBuf {
    scratch_dir().join(name)
}

/// A fresh, empty folder `name` in this test process's scratch folder, for one test.
pub fn fresh_folder(name: &str) -> PathBuf {
    let dir = scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}
