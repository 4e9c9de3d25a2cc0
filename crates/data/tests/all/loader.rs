//! The image pipeline: cache budget, prefetch order, error delivery, device upload, and the
//! fraction of step time spent waiting once the cache is warm.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ember_data::{Dataset, DatasetOptions, ImageLoader, ImageSource, LoaderOptions};
use image::{Rgb, RgbImage};

use crate::common::data_path;

/// `n` distinct 16x12 PNGs in `dir` and their sources.
fn synthetic_sources(dir: &Path, n: usize) -> Vec<ImageSource> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("img_{i:02}.png"));
            RgbImage::from_fn(16, 12, |x, y| Rgb([i as u8 * 10, x as u8, y as u8]))
                .save(&path)
                .unwrap();
            ImageSource {
                path,
                file_size: (16, 12),
                size: (16, 12),
                background: [1.0; 3],
                undistort: None,
                mask: None,
                panorama_view: None,
            }
        })
        .collect()
}

const IMAGE_BYTES: usize = 16 * 12 * 3;

#[test]
fn cache_keeps_what_fits_and_counts_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let sources = synthetic_sources(tmp.path(), 10);
    let options = LoaderOptions {
        cache_bytes: 5 * IMAGE_BYTES,
        ..LoaderOptions::default()
    };
    let loader = ImageLoader::new(sources, options).unwrap();
    loader.preload().unwrap();
    let stats = loader.stats();
    assert_eq!(
        (stats.cached_images, stats.cached_bytes),
        (5, 5 * IMAGE_BYTES as u64)
    );
    loader.reset_stats();
    for i in 0..10 {
        let image = loader.get(i).unwrap().unwrap();
        assert_eq!(image.pixel(3, 2), Some([i as u8 * 10, 3, 2]));
    }
    assert!(loader.get(10).is_none());
    let stats = loader.stats();
    assert_eq!((stats.cache_hits, stats.cache_misses), (5, 5));
    assert_eq!(stats.cache_hit_rate(), 0.5);
    // Past the budget, images are decoded again every time.
    assert_eq!(stats.images_decoded, 5);
    assert_eq!(stats.pixel_bytes, 5 * IMAGE_BYTES as u64);
    assert!(stats.decode_images_per_second() > 0.0 && stats.decode_file_mb_per_second() > 0.0);
    let pixel_rate = stats.pixel_bytes as f64 / 1e6 / stats.decode_seconds;
    assert!((stats.decode_pixel_mb_per_second() - pixel_rate).abs() <= 1e-9 * pixel_rate);
}

#[test]
fn prefetcher_visits_every_view_once_per_epoch_in_seeded_order() {
    let tmp = tempfile::tempdir().unwrap();
    let sources = synthetic_sources(tmp.path(), 10);
    let options = LoaderOptions {
        prefetch: 3,
        seed: 7,
        ..LoaderOptions::default()
    };
    let loader = ImageLoader::new(sources.clone(), options.clone()).unwrap();
    let order: Vec<usize> = loader.iter(Some(2)).map(|s| s.unwrap().index).collect();
    assert_eq!(order.len(), 20);
    for epoch in order.chunks(10) {
        let mut sorted = epoch.to_vec();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    }
    assert_ne!(order[..10], order[10..], "a new order each epoch");
    // The same seed gives the same order; images match their index.
    let again = ImageLoader::new(sources.clone(), options).unwrap();
    for (sample, &expected) in again.iter(Some(2)).zip(&order) {
        let sample = sample.unwrap();
        assert_eq!(sample.index, expected);
        assert_eq!(sample.image.data[0], expected as u8 * 10);
    }
    // Without shuffling, index order.
    let ordered = ImageLoader::new(
        sources,
        LoaderOptions {
            shuffle: false,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let order: Vec<usize> = ordered.iter(Some(1)).map(|s| s.unwrap().index).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
    // Dropping an endless prefetcher part-way stops its worker.
    let mut endless = ordered.iter(None);
    assert!(endless.nth(25).is_some());
    drop(endless);
}

#[test]
fn a_bad_image_is_an_error_for_that_view_only() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sources = synthetic_sources(tmp.path(), 4);
    std::fs::write(&sources[2].path, b"\x89PNG\r\n\x1a\ngarbage").unwrap();
    sources[3].path = tmp.path().join("gone.png");
    let loader = ImageLoader::new(
        sources,
        LoaderOptions {
            shuffle: false,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let results: Vec<_> = loader.iter(Some(1)).collect();
    assert_eq!(results.len(), 4);
    assert!(results[0].is_ok() && results[1].is_ok());
    let corrupt = results[2].as_ref().unwrap_err().to_string();
    assert!(
        corrupt.contains("img_02.png: cannot decode image"),
        "{corrupt}"
    );
    let missing = results[3].as_ref().unwrap_err().to_string();
    assert!(missing.contains("gone.png"), "{missing}");
}

#[test]
fn device_prefetcher_uploads_every_image() {
    let tmp = tempfile::tempdir().unwrap();
    let sources = synthetic_sources(tmp.path(), 5);
    let loader = ImageLoader::new(sources, LoaderOptions::default()).unwrap();
    let device = Default::default();
    let mut seen: HashMap<usize, usize> = HashMap::new();
    for item in loader.iter_device::<ember_kernels::backend::Cpu>(Some(2), &device) {
        let (index, tensor) = item.unwrap();
        assert_eq!(tensor.dims(), [12, 16, 3]);
        let values = tensor.into_data().to_vec::<f32>().unwrap();
        assert_eq!(values[0], (index as u8 * 10) as f32 / 255.0);
        *seen.entry(index).or_default() += 1;
    }
    assert_eq!(seen.len(), 5);
    assert!(seen.values().all(|&count| count == 2));
}

/// Once the cache is warm the consumer should practically never wait: the target is
/// under 1% of step time. The bound asserted is looser because this machine is shared.
#[test]
fn lego_warm_cache_wait_fraction() {
    let Some(root) = data_path("lego_400") else {
        return;
    };
    let dataset = Dataset::load(&root, &DatasetOptions::default()).unwrap();
    let sources = dataset.train.iter().map(|v| v.source.clone()).collect();
    let loader = ImageLoader::new(sources, LoaderOptions::default()).unwrap();
    loader.preload().unwrap();
    let cold = loader.stats();
    println!("lego train, cold preload: {cold}");
    assert_eq!(cold.images_decoded, 100);
    // RGB plus the transparency of the RGBA files.
    assert_eq!(cold.pixel_bytes, 100 * 400 * 400 * 4);
    loader.reset_stats();
    for sample in loader.iter(Some(1)) {
        sample.unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let warm = loader.stats();
    println!("lego train, warm epoch with 5 ms steps: {warm}");
    assert_eq!(warm.cache_hit_rate(), 1.0);
    assert_eq!(warm.images_delivered, 100);
    assert!(warm.wait_fraction() < 0.05, "{warm}");
}
