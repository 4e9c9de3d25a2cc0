//! `trainer bench data`: throughput of `ember-data`'s image pipeline on a dataset, as a
//! `BenchFile` (`trainer compare` reads it).
//!
//! Every view of every split goes through an [`ImageLoader`] with the default options (a `u8`
//! cache of 4 GiB, 4 views prefetched, one decoding thread per core):
//! - `cold`: `--epochs` passes, each with a fresh loader (empty cache) decoding every image in
//!   parallel ([`ImageLoader::preload`]: read, decode, composite, downsample, copy into the
//!   cache). After the first pass the files come from the OS page cache: decode throughput, not
//!   disk throughput.
//! - `warm`: `--epochs` passes of the last loader's prefetching device iterator
//!   ([`ImageLoader::iter_device`]: cache, hand-over thread, upload as `[H, W, 3]` `f32`), each
//!   image followed by `--step-ms` of simulated training (a sleep); the wait fraction is the
//!   share of the consumer's time spent blocked on the next image ([`IoStats`]).
//!
//! A result's repetitions are passes; its times are milliseconds per image (pass time / images),
//! so `fps` is images per second.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use clap::Args;
use ember_bench::{BenchFile, BenchResult, peak_host_mib};
use ember_data::{Dataset, DatasetOptions, ImageLoader, IoStats, LoaderOptions};

use super::write_bench_file;

/// `trainer bench data --data PATH [--downsample N] [--epochs K] [--step-ms MS]`.
#[derive(Args, Debug)]
pub struct DataBenchArgs {
    /// The dataset (COLMAP, NeRF-Synthetic or nerfstudio folder).
    #[arg(long, value_name = "PATH")]
    data: PathBuf,
    /// Integer factor the images are shrunk by when decoded.
    #[arg(long, default_value_t = 1)]
    downsample: u32,
    /// Cold passes and warm passes, each.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Simulated training time per image in the warm passes, ms.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    step_ms: f64,
    /// Where the JSON results go.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "target/ember-bench/bench-data.json"
    )]
    json: PathBuf,
}

/// One timed pass: its wall time, the `u8` pixel bytes it produced (decoded, or handed over
/// from the cache) and the loader's counters over it.
struct Pass {
    seconds: f64,
    pixel_bytes: u64,
    stats: IoStats,
}

/// A figure computed from the passes' totals, by name.
type Metric = (&'static str, fn(&[Pass]) -> f64);

/// The result of `passes` over `images` images: ms per image per pass, and `metrics` computed
/// from the passes' totals.
fn summarise(
    name: &str,
    images: usize,
    passes: &[Pass],
    metrics: &[Metric],
) -> Result<BenchResult> {
    let per_image_ms: Vec<f64> = passes
        .iter()
        .map(|p| p.seconds * 1e3 / images as f64)
        .collect();
    let mut result = BenchResult::from_samples(name, &per_image_ms)
        .with_context(|| format!("{name}: no pass"))?;
    result.frames = images * passes.len();
    for (metric, value) in metrics {
        result = result.with_metric(metric, value(passes));
    }
    Ok(result)
}

fn seconds(passes: &[Pass]) -> f64 {
    passes
        .iter()
        .map(|p| p.seconds)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE)
}

fn file_mb_per_s(passes: &[Pass]) -> f64 {
    passes
        .iter()
        .map(|p| p.stats.file_bytes as f64)
        .sum::<f64>()
        / 1e6
        / seconds(passes)
}

fn pixel_mb_per_s(passes: &[Pass]) -> f64 {
    passes.iter().map(|p| p.pixel_bytes as f64).sum::<f64>() / 1e6 / seconds(passes)
}

fn wait_fraction(passes: &[Pass]) -> f64 {
    let wait: f64 = passes.iter().map(|p| p.stats.wait_seconds).sum();
    let consume: f64 = passes.iter().map(|p| p.stats.consume_seconds).sum();
    if consume > 0.0 { wait / consume } else { 0.0 }
}

fn cache_hit_rate(passes: &[Pass]) -> f64 {
    let hits: u64 = passes.iter().map(|p| p.stats.cache_hits).sum();
    let misses: u64 = passes.iter().map(|p| p.stats.cache_misses).sum();
    hits as f64 / (hits + misses).max(1) as f64
}

/// `trainer bench data` on backend `B` (the warm passes upload to its device).
pub fn bench_data<B: Backend>(args: &DataBenchArgs, device: &B::Device) -> Result<()> {
    if args.epochs == 0 {
        bail!("--epochs must be at least 1");
    }
    crate::guard::not_an_input("--json", &args.json, &[&args.data])?;
    if !(args.step_ms >= 0.0 && args.step_ms.is_finite()) {
        bail!("--step-ms must be a finite number of milliseconds >= 0");
    }
    let options = DatasetOptions {
        downsample: args.downsample,
        ..DatasetOptions::default()
    };
    let dataset = Dataset::load(&args.data, &options)
        .with_context(|| format!("loading {}", args.data.display()))?;
    let sources: Vec<_> = dataset
        .train
        .iter()
        .chain(&dataset.val)
        .chain(&dataset.test)
        .map(|v| v.source.clone())
        .collect();
    let images = sources.len();
    if images == 0 {
        bail!("{} has no images", args.data.display());
    }
    println!(
        "{}: {images} images (train, val and test), downsample {}",
        args.data.display(),
        args.downsample
    );

    let mut cold = Vec::with_capacity(args.epochs);
    let mut loader = None;
    for _ in 0..args.epochs {
        let fresh = ImageLoader::new(sources.clone(), LoaderOptions::default())?;
        let t = Instant::now();
        fresh.preload()?;
        let stats = fresh.stats();
        cold.push(Pass {
            seconds: t.elapsed().as_secs_f64(),
            pixel_bytes: stats.pixel_bytes,
            stats,
        });
        loader = Some(fresh);
    }
    let loader = loader.context("no cold pass")?;
    println!("cold pass: {}", cold[cold.len() - 1].stats);

    let step = Duration::from_secs_f64(args.step_ms / 1e3);
    let mut warm = Vec::with_capacity(args.epochs);
    for _ in 0..args.epochs {
        loader.reset_stats();
        let t = Instant::now();
        let (mut delivered, mut pixel_bytes) = (0, 0);
        for item in loader.iter_device::<B>(Some(1), device) {
            let (_, image) = item?;
            pixel_bytes += image.shape().num_elements() as u64;
            std::hint::black_box(image);
            delivered += 1;
            if !step.is_zero() {
                std::thread::sleep(step);
            }
        }
        if delivered != images {
            bail!("a warm pass delivered {delivered} of {images} images");
        }
        warm.push(Pass {
            seconds: t.elapsed().as_secs_f64(),
            pixel_bytes,
            stats: loader.stats(),
        });
    }
    println!("warm pass: {}", warm[warm.len() - 1].stats);

    let results = vec![
        summarise(
            "cold",
            images,
            &cold,
            &[
                ("file_mb_per_s", file_mb_per_s),
                ("pixel_mb_per_s", pixel_mb_per_s),
            ],
        )?,
        summarise(
            "warm",
            images,
            &warm,
            &[
                ("pixel_mb_per_s", pixel_mb_per_s),
                ("wait_fraction", wait_fraction),
                ("cache_hit_rate", cache_hit_rate),
            ],
        )?,
    ];
    println!(
        "| set | passes | images/s | ms per image (median, min, max) | MB/s (u8 pixels) | other |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &results {
        let other: Vec<String> = r
            .metrics
            .iter()
            .filter(|(k, _)| k.as_str() != "pixel_mb_per_s")
            .map(|(k, v)| format!("{k} {v:.4}"))
            .collect();
        println!(
            "| {} | {} | {:.1} | {:.3}, {:.3}, {:.3} | {:.1} | {} |",
            r.name,
            args.epochs,
            r.fps,
            r.median_ms,
            r.min_ms,
            r.max_ms,
            r.metrics.get("pixel_mb_per_s").copied().unwrap_or(0.0),
            other.join(", ")
        );
    }
    let file = BenchFile {
        tool: "trainer bench data".into(),
        backend: format!("{} (upload), decode on the CPU", B::name(device)),
        input: format!("{} (downsample {})", args.data.display(), args.downsample),
        gaussians: 0,
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    write_bench_file(&file, &args.json)
}
