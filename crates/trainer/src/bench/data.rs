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
//!
//! 360° input: a dataset of `EQUIRECTANGULAR` frames is cut into the rig of `--views`,
//! `--fov`, `--size`, `--pitch`, `--no-poles` (its images are the views; each panorama is decoded
//! once per pass), and the cold pass reports the shares of decoding and cutting. With
//! `--panoramas N` the dataset is made first (not timed): `N` synthetic JPEG panoramas of
//! `--panorama-size` (multi-scale value noise, each frame turned and lit differently) and their
//! `transforms.json`, in `--frames-dir`, reused by later runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use clap::Args;
use ember_bench::{BenchFile, BenchResult, peak_host_mib};
use ember_data::transforms_json::{FrameOut, TransformsOut, write_transforms};
use ember_data::{Dataset, DatasetOptions, ImageLoader, IoStats, LoaderOptions, Pose};
use ember_train::write_atomically;
use image::ImageEncoder;
use rayon::prelude::*;

use super::write_bench_file;

/// `trainer bench data (--data PATH | --panoramas N) [--downsample N] [--epochs K] [--step-ms MS]`.
#[derive(Args, Debug)]
pub struct DataBenchArgs {
    /// The dataset (COLMAP, NeRF-Synthetic or nerfstudio folder).
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "panoramas",
        conflicts_with = "panoramas"
    )]
    data: Option<PathBuf>,
    /// Bench N synthetic 360° JPEG frames instead (made first in `--frames-dir`, not timed).
    #[arg(long, value_name = "N")]
    panoramas: Option<usize>,
    /// The synthetic panoramas' size, pixels.
    #[arg(long, value_name = "WxH", default_value = "7680x3840", value_parser = super::parse_resolution)]
    panorama_size: (u32, u32),
    /// Where the synthetic panoramas go (default `target/ember-bench/panoramas-WxH-N`); a
    /// folder that already holds them all is reused.
    #[arg(long, value_name = "DIR")]
    frames_dir: Option<PathBuf>,
    /// The rig 360° frames are cut into.
    #[command(flatten)]
    rig: crate::data::RigArgs,
    /// The decoded-image cache, MB (a cold pass decodes until it is full).
    #[arg(long, value_name = "MB", default_value_t = 4096)]
    cache_mb: usize,
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

fn cut_share(passes: &[Pass]) -> f64 {
    let decode: f64 = passes.iter().map(|p| p.stats.panorama_decode_seconds).sum();
    let cut: f64 = passes.iter().map(|p| p.stats.panorama_cut_seconds).sum();
    if decode + cut > 0.0 {
        cut / (decode + cut)
    } else {
        0.0
    }
}

fn panoramas_per_s(passes: &[Pass]) -> f64 {
    passes
        .iter()
        .map(|p| p.stats.panoramas_decoded as f64)
        .sum::<f64>()
        / seconds(passes)
}

/// The dataset `--panoramas` names, made when its folder does not hold it yet: `count` JPEG
/// panoramas of `size` and an `EQUIRECTANGULAR` transforms.json (frames one unit apart on a
/// line). Returns its folder.
fn synthetic_panoramas(args: &DataBenchArgs, count: usize) -> Result<PathBuf> {
    let (w, h) = args.panorama_size;
    if w != 2 * h {
        bail!("--panorama-size {w}x{h}: a panorama is twice as wide as it is high");
    }
    if count == 0 {
        bail!("--panoramas must be at least 1");
    }
    let dir = args
        .frames_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/ember-bench/panoramas-{w}x{h}-{count}")));
    let transforms = dir.join("transforms.json");
    if transforms.is_file() {
        return Ok(dir);
    }
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).with_context(|| format!("creating {}", frames.display()))?;
    let started = Instant::now();
    let base = value_noise(w as usize, h as usize);
    let entries: Vec<FrameOut> = (0..count)
        .into_par_iter()
        .map(|k| -> Result<FrameOut> {
            // Each frame turned by its share of a turn (a shift of its columns) and lit a little
            // differently, so that no two files are the same.
            let shift = k * w as usize / count;
            let gain = 0.85 + 0.3 * (k as f32 / count as f32);
            let mut rgb = vec![0u8; base.len()];
            for (row, out) in base
                .chunks_exact(3 * w as usize)
                .zip(rgb.chunks_exact_mut(3 * w as usize))
            {
                let (left, right) = row.split_at(3 * shift);
                for (o, &v) in out.iter_mut().zip(right.iter().chain(left)) {
                    *o = (f32::from(v) * gain).min(255.0) as u8;
                }
            }
            let file_path = format!("frames/{k:05}.jpg");
            let mut bytes = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90)
                .write_image(&rgb, w, h, image::ExtendedColorType::Rgb8)
                .context("encoding a synthetic panorama")?;
            let path = dir.join(&file_path);
            write_atomically(&path, &bytes)
                .with_context(|| format!("writing {}", path.display()))?;
            let pose = Pose {
                rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
                translation: [-(k as f64), 0.0, 0.0],
            };
            Ok(FrameOut::new(file_path, &pose))
        })
        .collect::<Result<_>>()?;
    write_transforms(
        &transforms,
        &TransformsOut {
            camera_model: "EQUIRECTANGULAR".to_string(),
            pinhole: None,
            frames: entries,
            ply_file_path: None,
            train_filenames: None,
            test_filenames: None,
        },
    )?;
    println!(
        "{}: made {count} synthetic {w}x{h} JPEG panoramas in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(dir)
}

/// A `w x h` RGB image of value noise at four scales (256, 64, 16 and 4 pixels a cell, halving
/// in amplitude), independent per channel and wrapping around horizontally: texture at every
/// scale, as a photo has, for the JPEG coder and decoder to work on.
fn value_noise(w: usize, h: usize) -> Vec<u8> {
    let octaves = [(256usize, 96.0f32), (64, 48.0), (16, 24.0), (4, 12.0)];
    let lattices: Vec<(usize, usize, usize, f32, Vec<f32>)> = octaves
        .iter()
        .enumerate()
        .map(|(o, &(cell, amplitude))| {
            let (cw, ch) = (w.div_ceil(cell).max(1), h.div_ceil(cell) + 1);
            let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ o as u64;
            let values = (0..cw * ch * 3)
                .map(|_| {
                    // xorshift64*: a fixed, fast stream of values in [-1, 1).
                    state ^= state >> 12;
                    state ^= state << 25;
                    state ^= state >> 27;
                    let bits = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
                    bits as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            (cell, cw, ch, amplitude, values)
        })
        .collect();
    let mut image = vec![0u8; w * h * 3];
    image
        .par_chunks_mut(3 * w)
        .enumerate()
        .for_each(|(y, row)| {
            for x in 0..w {
                for c in 0..3 {
                    let mut value = 128.0f32;
                    for (cell, cw, _, amplitude, values) in &lattices {
                        let (fx, fy) = (x as f32 / *cell as f32, y as f32 / *cell as f32);
                        let (x0, y0) = (fx.floor() as usize, fy.floor() as usize);
                        let (tx, ty) = (fx - x0 as f32, fy - y0 as f32);
                        let at = |i: usize, j: usize| values[3 * (j * cw + i % cw) + c];
                        let top = at(x0, y0) + (at(x0 + 1, y0) - at(x0, y0)) * tx;
                        let bottom = at(x0, y0 + 1) + (at(x0 + 1, y0 + 1) - at(x0, y0 + 1)) * tx;
                        value += amplitude * (top + (bottom - top) * ty);
                    }
                    row[3 * x + c] = value.clamp(0.0, 255.0) as u8;
                }
            }
        });
    image
}

/// `trainer bench data` on backend `B` (the warm passes upload to its device).
pub fn bench_data<B: Backend>(args: &DataBenchArgs, device: &B::Device) -> Result<()> {
    if args.epochs == 0 {
        bail!("--epochs must be at least 1");
    }
    if !(args.step_ms >= 0.0 && args.step_ms.is_finite()) {
        bail!("--step-ms must be a finite number of milliseconds >= 0");
    }
    let data = match (&args.data, args.panoramas) {
        (Some(data), _) => data.clone(),
        (None, Some(count)) => synthetic_panoramas(args, count)?,
        (None, None) => bail!("give --data PATH or --panoramas N"),
    };
    crate::guard::not_an_input("--json", &args.json, &[&data])?;
    let options = DatasetOptions {
        downsample: args.downsample,
        equirect: args.rig.rig(),
        ..DatasetOptions::default()
    };
    let dataset =
        Dataset::load(&data, &options).with_context(|| format!("loading {}", data.display()))?;
    let sources: Vec<_> = dataset
        .train
        .iter()
        .chain(&dataset.val)
        .chain(&dataset.test)
        .map(|v| v.source.clone())
        .collect();
    let images = sources.len();
    if images == 0 {
        bail!("{} has no images", data.display());
    }
    println!(
        "{}: {images} images (train, val and test), downsample {}",
        data.display(),
        args.downsample
    );
    let loader_options = LoaderOptions {
        cache_bytes: args.cache_mb << 20,
        ..LoaderOptions::default()
    };

    let mut cold = Vec::with_capacity(args.epochs);
    let mut loader = None;
    for _ in 0..args.epochs {
        // One loader at a time: the peak memory is one cache's, not two.
        drop(loader.take());
        let fresh = ImageLoader::new(sources.clone(), loader_options.clone())?;
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
    // The images one cold pass decoded: all of them unless the cache filled first.
    let decoded = cold[cold.len() - 1].stats.images_decoded as usize;
    if decoded < images {
        println!(
            "the cache ({} MB) held {decoded} of {images} images: the cold passes are timed over \
             those, the warm passes decode the rest each time (--cache-mb)",
            args.cache_mb
        );
    }
    let decoded = decoded.max(1);

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
            decoded,
            &cold,
            &[
                ("file_mb_per_s", file_mb_per_s),
                ("pixel_mb_per_s", pixel_mb_per_s),
                ("panoramas_per_s", panoramas_per_s),
                ("cut_share", cut_share),
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
        input: format!("{} (downsample {})", data.display(), args.downsample),
        gaussians: 0,
        peak_host_mib: peak_host_mib(),
        results,
        device_activity: None,
    };
    write_bench_file(&file, &args.json)
}
