//! Ember's benchmark result files: one JSON schema ([`BenchFile`]) written by `trainer bench
//! render|train|data` and by the criterion benches (`cargo bench`), read by `trainer compare`.
//!
//! ```json
//! {"tool": "trainer bench train", "backend": "ndarray", "input": "configs/micro.toml",
//!  "gaussians": 4000, "peak_host_mib": 310.5,
//!  "results": [{"name": "step", "frames": 100, "median_ms": 41.2, "min_ms": 39.8,
//!               "max_ms": 57.0, "fps": 24.3, "metrics": {"steps_per_s": 23.9}}]}
//! ```
//!
//! Each result is one named set of timed repetitions ("frames": renders, training steps, images,
//! criterion iterations) summarised as median / min / max milliseconds per repetition, with
//! `fps = 1000 / median_ms`; `metrics` holds further figures of the set (throughputs, fractions)
//! by name and may be absent. [`criterion`] turns criterion's own output
//! (`target/criterion/<group>/<id>/new/*.json`) into such a file after a `cargo bench` run.

#![warn(missing_docs)]

pub mod criterion;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A problem reading or writing a result file; names the file.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The file could not be read or written.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// The file is not a result file.
    #[error(
        "{}: not a benchmark result file (expected tool, backend, input, gaussians, results): {cause}",
        path.display()
    )]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        cause: serde_json::Error,
    },
}

/// One named set of timed repetitions.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// The set (`orbit_800x800`, `step`, `forward`, `cold`, `decode/lego_400/cold`, ...).
    pub name: String,
    /// Repetitions timed (frames, steps, images, criterion iterations).
    pub frames: usize,
    /// Median time per repetition, ms.
    pub median_ms: f64,
    /// Fastest repetition, ms.
    pub min_ms: f64,
    /// Slowest repetition, ms.
    pub max_ms: f64,
    /// Repetitions per second at the median: `1000 / median_ms` (0 for a zero median).
    pub fps: f64,
    /// Further figures of the set by name, with their unit in the name (`steps_per_s`,
    /// `file_mb_per_s`, `wait_fraction`, ...); absent when there are none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

impl BenchResult {
    /// Summarises the times of the repetitions, ms each (in any order): median (the mean of the
    /// two middle values for an even count), min, max. `None` when `samples_ms` is empty.
    pub fn from_samples(name: impl Into<String>, samples_ms: &[f64]) -> Option<BenchResult> {
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
        };
        Some(BenchResult {
            name: name.into(),
            frames: n,
            median_ms: median,
            min_ms: sorted[0],
            max_ms: sorted[n - 1],
            fps: fps(median),
            metrics: BTreeMap::new(),
        })
    }

    /// The result with the figure `name` set to `value`.
    pub fn with_metric(mut self, name: &str, value: f64) -> BenchResult {
        self.metrics.insert(name.to_string(), value);
        self
    }
}

/// `1000 / median_ms`, 0 when the median is not positive (JSON has no infinity).
pub fn fps(median_ms: f64) -> f64 {
    if median_ms > 0.0 {
        1000.0 / median_ms
    } else {
        0.0
    }
}

/// A result file: what ran, where, and its results.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BenchFile {
    /// The command that wrote it (`trainer bench render`, `cargo bench --bench raster`).
    pub tool: String,
    /// The backend(s) it ran on.
    pub backend: String,
    /// What it ran on (a splat file, a config, a dataset folder).
    pub input: String,
    /// Gaussians involved (0 where none are, e.g. the image pipeline).
    pub gaussians: usize,
    /// Peak resident host memory of the process, MiB (`VmHWM`; `null` where unknown).
    pub peak_host_mib: Option<f64>,
    /// One entry per set.
    pub results: Vec<BenchResult>,
    /// What the host asked of the device per step (`trainer bench train`); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_activity: Option<DeviceActivity>,
}

/// Kernel launches and blocking device reads of the timed steps, as `ember_kernels::activity`
/// counts them; `null` where the backend cannot count, with the reason in `not_counted`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeviceActivity {
    /// Kernel launches per step, over all the timed steps (all of them: Burn's fused kernels
    /// and Ember's own). A launch counts when it runs, which may be in a later step than the
    /// one that recorded it, so only the mean over many steps is meaningful.
    pub launches_per_step: Option<f64>,
    /// Host reads of device memory (and other blocking waits on the device) per step, over the
    /// timed steps that read nothing back (no loss, no PSNR): what a step costs between two
    /// reads of the loss.
    pub device_reads_per_step: Option<f64>,
    /// The reads per step of the timed steps that read the loss back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads_per_loss_step: Option<f64>,
    /// Why the counts are `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_counted: Option<String>,
}

impl BenchFile {
    /// Reads a result file.
    pub fn read(path: &Path) -> Result<BenchFile, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|cause| BenchError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        serde_json::from_str(&text).map_err(|cause| BenchError::Format {
            path: path.to_path_buf(),
            cause,
        })
    }

    /// Writes the file as pretty JSON, atomically (a temporary file renamed over `path`),
    /// creating its folder.
    pub fn write(&self, path: &Path) -> Result<(), BenchError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |cause| BenchError::Io { path, cause }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let json = serde_json::to_string_pretty(self).map_err(|cause| BenchError::Format {
            path: path.to_path_buf(),
            cause,
        })?;
        ember_data::write_atomically(path, json.as_bytes()).map_err(io(path))
    }

    /// The result named `name`.
    pub fn result(&self, name: &str) -> Option<&BenchResult> {
        self.results.iter().find(|r| r.name == name)
    }
}

/// `ms` with 4 significant digits (`340.6`, `70.29`, `0.001440`).
pub fn format_ms(ms: f64) -> String {
    if !(ms.is_finite() && ms > 0.0) {
        return format!("{ms}");
    }
    let digits = (3 - ms.log10().floor() as i32).max(0) as usize;
    format!("{ms:.digits$}")
}

/// A markdown table of the sets of `a` and `b` side by side: both medians and B's speed-up
/// (`A median / B median`); sets only one file has are listed with a dash.
pub fn comparison_table(a: &BenchFile, b: &BenchFile) -> String {
    let mut out = String::from(
        "| set | A median (ms) | B median (ms) | speed-up (A / B) |\n|---|---|---|---|\n",
    );
    for ra in &a.results {
        out += &match b.result(&ra.name) {
            Some(rb) => format!(
                "| {} | {} | {} | {:.2}x |\n",
                ra.name,
                format_ms(ra.median_ms),
                format_ms(rb.median_ms),
                ra.median_ms / rb.median_ms
            ),
            None => format!(
                "| {} | {} | - | only in A |\n",
                ra.name,
                format_ms(ra.median_ms)
            ),
        };
    }
    for rb in b.results.iter().filter(|rb| a.result(&rb.name).is_none()) {
        out += &format!(
            "| {} | - | {} | only in B |\n",
            rb.name,
            format_ms(rb.median_ms)
        );
    }
    out
}

/// The process's peak resident memory, MiB, from `/proc/self/status` (`VmHWM`; Linux only).
pub fn peak_host_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Resets the process's peak resident memory to its current size (Linux: `5` into
/// `/proc/self/clear_refs`), so that [`peak_host_mib`] measures from here; `false` where the
/// system does not allow it (then the peak is the process's so far).
pub fn reset_peak_host() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// This machine in words: the CPU's model name (Linux: `/proc/cpuinfo`) and the cores the
/// process may use, e.g. `AMD EPYC 9B45 (2 cores)`.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model} ({cores} cores)")
}

/// Today's date in UTC, `YYYY-MM-DD`, from the system clock.
pub fn utc_date() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The proleptic Gregorian date `days` after 1970-01-01: the count split into 400-year eras
/// of 146 097 days, each era's years counted from March so that the leap day ends the year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(results: Vec<BenchResult>) -> BenchFile {
        BenchFile {
            tool: "test".into(),
            backend: "ndarray".into(),
            input: "none".into(),
            gaussians: 3,
            peak_host_mib: Some(12.5),
            results,
            device_activity: None,
        }
    }

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        // 2000 is a leap year (divisible by 400), 2100 is not.
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(utc_date().len(), 10);
    }

    #[test]
    fn samples_summarise_to_median_min_max() {
        let odd = BenchResult::from_samples("odd", &[3.0, 1.0, 2.0]).expect("non-empty");
        assert_eq!(
            (odd.frames, odd.median_ms, odd.min_ms, odd.max_ms),
            (3, 2.0, 1.0, 3.0)
        );
        assert!((odd.fps - 500.0).abs() < 1e-9);
        let even = BenchResult::from_samples("even", &[4.0, 1.0, 2.0, 10.0]).expect("non-empty");
        assert_eq!(even.median_ms, 3.0);
        assert!(BenchResult::from_samples("none", &[]).is_none());
    }

    #[test]
    fn files_round_trip_and_older_files_without_metrics_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nested/run.json");
        let written = file(vec![
            BenchResult::from_samples("step", &[10.0, 20.0, 30.0])
                .expect("non-empty")
                .with_metric("steps_per_s", 50.0),
        ]);
        written.write(&path).expect("written");
        assert_eq!(BenchFile::read(&path).expect("read back"), written);
        assert!(!dir.path().join("nested/run.json.tmp").exists());

        let old = dir.path().join("old.json");
        std::fs::write(
            &old,
            r#"{"tool":"trainer bench render","backend":"ndarray","input":"a.ply","gaussians":1,
                "peak_host_mib":null,"results":[{"name":"orbit_64x48","frames":8,"median_ms":2.0,
                "min_ms":1.0,"max_ms":3.0,"fps":500.0}]}"#,
        )
        .expect("write");
        let read = BenchFile::read(&old).expect("an older file reads");
        assert!(read.results[0].metrics.is_empty());
    }

    #[test]
    fn malformed_files_name_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("garbage.json");
        std::fs::write(&path, "{\"results\": 3}").expect("write");
        let message = BenchFile::read(&path).expect_err("refused").to_string();
        assert!(message.contains("garbage.json"), "{message}");
        let missing = BenchFile::read(&dir.path().join("missing.json")).expect_err("refused");
        assert!(missing.to_string().contains("missing.json"));
    }

    #[test]
    fn comparison_pairs_sets_by_name() {
        let sample = |name: &str, ms: f64| BenchResult::from_samples(name, &[ms]).expect("one");
        let a = file(vec![sample("step", 40.0), sample("forward", 10.0)]);
        let b = file(vec![sample("step", 20.0), sample("cold", 5.0)]);
        let table = comparison_table(&a, &b);
        assert!(
            table.contains("| step | 40.00 | 20.00 | 2.00x |"),
            "{table}"
        );
        assert!(
            table.contains("| forward | 10.00 | - | only in A |"),
            "{table}"
        );
        assert!(
            table.contains("| cold | - | 5.000 | only in B |"),
            "{table}"
        );
    }

    #[test]
    fn times_keep_four_significant_digits() {
        assert_eq!(format_ms(340.64), "340.6");
        assert_eq!(format_ms(70.289), "70.29");
        assert_eq!(format_ms(0.00143968), "0.001440");
        assert_eq!(format_ms(12345.6), "12346");
        assert_eq!(format_ms(0.0), "0");
    }
}
