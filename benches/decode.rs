//! Decode and cache throughput of the image pipeline on real scenes: `lego_400` (train + test,
//! 300 RGBA PNGs at 400x400) and `figurine_colmap` (23 JPEGs at about 1000x660), read from
//! `EMBER_DATA_DIR` (default `../shared/data`; skipped with a message when missing).
//!
//! - `cold`: a fresh loader decodes every image in parallel ([`ImageLoader::preload`]); the files
//!   come from the OS page cache after the first sample, so this measures decoding, not the disk.
//! - `warm`: every image fetched again from the loader's `u8` cache.
//!
//! At the end criterion's medians go into `target/ember-bench/decode.json` (or
//! `$EMBER_BENCH_JSON`), the file `trainer compare` reads.
//!
//! Run: `cargo bench --bench decode`.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use criterion::{Criterion, Throughput};
use ember::data::{Dataset, DatasetOptions, ImageLoader, ImageSource, LoaderOptions};
use ember_bench::criterion::{ReportInfo, criterion_dir, finish};

fn data_dir() -> PathBuf {
    std::env::var_os("EMBER_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"))
}

/// The image sources of the train and test views of a scene (every view of a COLMAP scene).
fn sources(scene: &str) -> Option<Vec<ImageSource>> {
    let path = data_dir().join(scene);
    if !path.is_dir() {
        eprintln!("skipping {scene}: {} not found", path.display());
        return None;
    }
    let dataset = Dataset::load(&path, &DatasetOptions::default()).expect("the scene loads");
    let views = dataset.train.iter().chain(&dataset.test);
    Some(views.map(|v| v.source.clone()).collect())
}

fn bench_scene(c: &mut Criterion, label: &str, sources: Vec<ImageSource>) {
    let n = sources.len();
    let options = LoaderOptions::default();

    // One cold pass outside criterion, for the MB/s figures and the prefetch check.
    let loader = ImageLoader::new(sources.clone(), options.clone()).expect("loader");
    loader.preload().expect("decode");
    println!("{label}: cold pass: {}", loader.stats());
    loader.reset_stats();
    // A simulated training step of 20 ms per view, fed by the prefetcher from the warm cache.
    for sample in loader.iter(Some(1)) {
        sample.expect("image");
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("{label}: warm epoch with 20 ms steps: {}", loader.stats());

    let mut group = c.benchmark_group(format!("decode/{label}"));
    group.throughput(Throughput::Elements(n as u64));
    group.sample_size(10);
    group.bench_function("cold", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let fresh = ImageLoader::new(sources.clone(), options.clone()).expect("loader");
                let start = Instant::now();
                fresh.preload().expect("decode");
                total += start.elapsed();
            }
            total
        })
    });
    group.bench_function("warm", |b| {
        b.iter(|| {
            for i in 0..n {
                let image = loader.get(i).expect("in range").expect("cached");
                std::hint::black_box(image.byte_len());
            }
        })
    });
    group.finish();
}

fn main() {
    let started = SystemTime::now();
    let root = criterion_dir(env!("CARGO_TARGET_TMPDIR"));
    let mut c = Criterion::default()
        .output_directory(&root)
        .configure_from_args();
    for scene in ["lego_400", "figurine_colmap"] {
        if let Some(sources) = sources(scene) {
            bench_scene(&mut c, scene, sources);
        }
    }
    c.final_summary();
    let input = data_dir().display().to_string();
    let info = ReportInfo {
        bench: "decode",
        backend: "cpu (decode threads: one per core)",
        input: &input,
        gaussians: 0,
    };
    finish(&root, started, &info);
}
