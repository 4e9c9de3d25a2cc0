//! Criterion's results as a [`BenchFile`]: after the benchmarks of a `cargo bench` binary ran,
//! [`write_report`] reads what criterion wrote during this run
//! (`<criterion dir>/<group>/<id>/new/{benchmark,estimates,sample}.json`) and writes one result
//! per benchmark into `$EMBER_BENCH_JSON`, else `<target>/ember-bench/<bench>.json`.
//!
//! A result's `name` is criterion's id (`group/function/parameter`), `median_ms` its median
//! estimate, `min_ms`/`max_ms` the fastest and slowest sample (time per iteration), `frames` the
//! iterations measured; a throughput declared on the group becomes `elements_per_s` or
//! `mb_per_s` (10^6 bytes) at the median.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use crate::{BenchError, BenchFile, BenchResult, fps, peak_host_mib};

/// The environment variable naming the report's path, overriding the default.
pub const JSON_ENV: &str = "EMBER_BENCH_JSON";

/// Where the benches point criterion: `$CARGO_TARGET_DIR/criterion`, else the target folder the
/// bench was built in (`built_tmpdir` is the bench's `env!("CARGO_TARGET_TMPDIR")`,
/// `<target>/tmp`), else `target/criterion` (a binary carried to another machine).
pub fn criterion_dir(built_tmpdir: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("criterion");
    }
    let built = Path::new(built_tmpdir).join("..");
    if built.is_dir() {
        built.join("criterion")
    } else {
        PathBuf::from("target/criterion")
    }
}

/// The default report path of bench `bench`: `ember-bench/<bench>.json` beside the criterion
/// folder, or `$EMBER_BENCH_JSON`.
pub fn report_path(criterion_dir: &Path, bench: &str) -> PathBuf {
    match std::env::var_os(JSON_ENV) {
        Some(path) => PathBuf::from(path),
        None => criterion_dir
            .parent()
            .unwrap_or(Path::new("."))
            .join("ember-bench")
            .join(format!("{bench}.json")),
    }
}

/// Criterion's median of the benchmark stored in `<criterion_dir>/<directory>`, ms (the
/// latest run, whenever it was).
pub fn median_ms(criterion_dir: &Path, directory: &str) -> Option<f64> {
    let text =
        std::fs::read_to_string(criterion_dir.join(directory).join("new/estimates.json")).ok()?;
    serde_json::from_str::<Estimates>(&text)
        .ok()
        .map(|e| e.median.point_estimate / 1e6)
}

#[derive(Deserialize)]
struct Benchmark {
    full_id: String,
    throughput: Option<Throughput>,
}

#[derive(Deserialize)]
enum Throughput {
    Bytes(u64),
    BytesDecimal(u64),
    Elements(u64),
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
}

#[derive(Deserialize)]
struct Estimates {
    median: Estimate,
}

#[derive(Deserialize)]
struct Sample {
    iters: Vec<f64>,
    times: Vec<f64>,
}

/// The result stored in the folder `new` (criterion's latest run of one benchmark), or `None`
/// when a file is missing or unreadable.
fn read_result(new: &Path) -> Option<BenchResult> {
    let read = |name: &str| std::fs::read_to_string(new.join(name)).ok();
    let benchmark: Benchmark = serde_json::from_str(&read("benchmark.json")?).ok()?;
    let estimates: Estimates = serde_json::from_str(&read("estimates.json")?).ok()?;
    let sample: Sample = serde_json::from_str(&read("sample.json")?).ok()?;
    let per_iteration_ms: Vec<f64> = sample
        .iters
        .iter()
        .zip(&sample.times)
        .filter(|(iters, _)| **iters > 0.0)
        .map(|(iters, ns)| ns / iters / 1e6)
        .collect();
    let median_ms = estimates.median.point_estimate / 1e6;
    let mut result = BenchResult::from_samples(benchmark.full_id, &per_iteration_ms)?;
    result.frames = sample.iters.iter().sum::<f64>() as usize;
    result.median_ms = median_ms;
    result.fps = fps(median_ms);
    Some(match benchmark.throughput {
        Some(Throughput::Elements(n)) => {
            result.with_metric("elements_per_s", n as f64 / (median_ms / 1e3))
        }
        Some(Throughput::Bytes(n) | Throughput::BytesDecimal(n)) => {
            result.with_metric("mb_per_s", n as f64 / 1e6 / (median_ms / 1e3))
        }
        None => result,
    })
}

/// Every benchmark under `criterion_dir` whose estimates were written at or after `since`
/// (this run's: criterion keeps the results of earlier runs beside them), sorted by name.
pub fn collect(criterion_dir: &Path, since: SystemTime) -> Vec<BenchResult> {
    let mut results = Vec::new();
    let mut pending = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            if path.file_name().is_some_and(|n| n == "new") {
                let fresh = std::fs::metadata(path.join("estimates.json"))
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= since);
                if let Some(result) = fresh.then(|| read_result(&path)).flatten() {
                    results.push(result);
                }
            } else {
                pending.push(path);
            }
        }
    }
    results.sort_by(|a, b| a.name.cmp(&b.name));
    results
}

/// What a bench binary says about itself in its report.
#[derive(Debug, Clone)]
pub struct ReportInfo<'a> {
    /// The bench's name (`raster`): the default file is `ember-bench/<bench>.json`.
    pub bench: &'a str,
    /// The backend(s) it ran.
    pub backend: &'a str,
    /// What it ran on (a data file, `random Gaussians`).
    pub input: &'a str,
    /// Gaussians involved (0 where none are).
    pub gaussians: usize,
}

/// Collects this run's results ([`collect`] since `started`, taken before the first
/// benchmark) and writes them as a [`BenchFile`] (see the module docs). Returns the path, or
/// `None` when this run measured nothing (e.g. a filter matched no benchmark, or `--list`).
pub fn write_report(
    criterion_dir: &Path,
    started: SystemTime,
    info: &ReportInfo<'_>,
) -> Result<Option<PathBuf>, BenchError> {
    let results = collect(criterion_dir, started);
    if results.is_empty() {
        return Ok(None);
    }
    let path = report_path(criterion_dir, info.bench);
    BenchFile {
        tool: format!("cargo bench --bench {}", info.bench),
        backend: info.backend.to_string(),
        input: info.input.to_string(),
        gaussians: info.gaussians,
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    }
    .write(&path)?;
    Ok(Some(path))
}

/// [`write_report`] for the end of a bench's `main`: prints the path written; on an error
/// prints it and exits with status 1.
pub fn finish(criterion_dir: &Path, started: SystemTime, info: &ReportInfo<'_>) {
    match write_report(criterion_dir, started, info) {
        Ok(Some(path)) => println!("\nwrote {}", path.display()),
        Ok(None) => println!("\nno benchmark ran: no {}.json written", info.bench),
        Err(e) => {
            eprintln!("{} bench: {e}", info.bench);
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fake_benchmark(root: &Path, dir: &str, full_id: &str, throughput: &str) {
        let new = root.join(dir).join("new");
        std::fs::create_dir_all(&new).expect("dirs");
        std::fs::write(
            new.join("benchmark.json"),
            format!(r#"{{"group_id":"g","function_id":"f","value_str":null,"throughput":{throughput},"full_id":"{full_id}","directory_name":"{dir}","title":"{full_id}"}}"#),
        )
        .expect("write");
        std::fs::write(
            new.join("estimates.json"),
            r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":3.0},"point_estimate":2.5e6,"standard_error":1.0},"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":3.0},"point_estimate":2.0e6,"standard_error":1.0}}"#,
        )
        .expect("write");
        std::fs::write(
            new.join("sample.json"),
            r#"{"sampling_mode":"Flat","iters":[2.0,2.0,2.0],"times":[2.0e6,4.0e6,8.0e6]}"#,
        )
        .expect("write");
    }

    #[test]
    fn collects_this_runs_benchmarks_with_throughput() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("criterion");
        fake_benchmark(
            &root,
            "decode_a/cold",
            "decode/a/cold",
            r#"{"Elements":300}"#,
        );
        fake_benchmark(&root, "raster_x/forward", "raster_x/forward", "null");
        // The same folder layout also has `base` copies: not read.
        std::fs::create_dir_all(root.join("raster_x/forward/base")).expect("dirs");

        let results = collect(&root, SystemTime::now() - Duration::from_secs(60));
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["decode/a/cold", "raster_x/forward"]);
        let cold = &results[0];
        assert_eq!(cold.frames, 6);
        assert_eq!(cold.median_ms, 2.0);
        assert_eq!((cold.min_ms, cold.max_ms), (1.0, 4.0));
        assert!((cold.fps - 500.0).abs() < 1e-9);
        assert!((cold.metrics["elements_per_s"] - 150_000.0).abs() < 1e-6);
        assert!(results[1].metrics.is_empty());
        assert_eq!(median_ms(&root, "raster_x/forward"), Some(2.0));

        // Results older than the run are left out.
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(collect(&root, later).is_empty());
    }

    #[test]
    fn writes_the_report_where_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("criterion");
        let info = ReportInfo {
            bench: "decode",
            backend: "cpu",
            input: "data",
            gaussians: 0,
        };
        let since = SystemTime::now() - Duration::from_secs(60);
        assert_eq!(write_report(&root, since, &info).expect("no error"), None);
        fake_benchmark(&root, "decode_a/warm", "decode/a/warm", "null");
        let path = write_report(&root, since, &info)
            .expect("written")
            .expect("a result");
        let file = BenchFile::read(&path).expect("read back");
        assert_eq!(file.tool, "cargo bench --bench decode");
        assert_eq!(file.results.len(), 1);
        if std::env::var_os(JSON_ENV).is_none() {
            assert_eq!(path, dir.path().join("ember-bench/decode.json"));
        }
    }
}
