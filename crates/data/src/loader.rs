//! Feeding training: parallel decode, an in-memory `u8` cache with a byte budget, a prefetching
//! iterator on a worker thread, upload to the device one step ahead, and I/O statistics.
//!
//! Views cut from one 360° panorama are decoded together: a request for one of them decodes the
//! panorama once and cuts every view of it that is not cached yet, so a rig of views costs one
//! decode whatever order they are asked for in.
//!
//! The cache keeps every image it decodes until the budget is full and then keeps what it has:
//! training visits the views in a fresh random order each epoch, and under that access pattern
//! least-recently-used eviction with a budget smaller than the dataset evicts exactly the images
//! that come back soonest (its hit rate falls towards zero), while "keep the first ones" hits a
//! `budget / dataset` fraction of requests, which is the best any cache can do without knowing
//! the order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

use crate::equirect::CutPlan;
use crate::error::{DataError, Result};
use crate::images::{DecodedImage, DecodedPanorama, ImageSource};

/// Options of an [`ImageLoader`].
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderOptions {
    /// Bytes of decoded `u8` images kept in memory; images beyond it are decoded again each
    /// time. Default 4 GiB.
    pub cache_bytes: usize,
    /// Views decoded ahead of the one being consumed (and the depth of the hand-over queue).
    pub prefetch: usize,
    /// Decoding threads; `0` uses one per core.
    pub threads: usize,
    /// Visit the views in a new random order each epoch (else in index order).
    pub shuffle: bool,
    /// Seed of the shuffle.
    pub seed: u64,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            cache_bytes: 4 << 30,
            prefetch: 4,
            threads: 0,
            shuffle: true,
            seed: 0,
        }
    }
}

/// Counters of the image pipeline, since the loader was made (or [`ImageLoader::reset_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct IoStats {
    /// Images decoded (cache misses and preloads).
    pub images_decoded: u64,
    /// Bytes of image files read for those decodes.
    pub file_bytes: u64,
    /// Bytes of `u8` pixels they produced: RGB, plus the transparency of files with alpha.
    pub pixel_bytes: u64,
    /// Wall-clock seconds spent decoding (batches decode in parallel, so this is elapsed time,
    /// not the sum over threads).
    pub decode_seconds: f64,
    /// Requests answered from the cache.
    pub cache_hits: u64,
    /// Requests that had to decode.
    pub cache_misses: u64,
    /// Bytes held by the cache.
    pub cached_bytes: u64,
    /// Images held by the cache.
    pub cached_images: u64,
    /// Seconds the consumer of a [`Prefetcher`] spent blocked waiting for the next image.
    pub wait_seconds: f64,
    /// Seconds from the first request to a [`Prefetcher`] to the latest one returning.
    pub consume_seconds: f64,
    /// Images handed out by [`Prefetcher`]s.
    pub images_delivered: u64,
    /// 360° panoramas decoded (each gives several of `images_decoded`, its views).
    pub panoramas_decoded: u64,
    /// Seconds spent reading and decoding panoramas, up to their filtering pyramids (summed
    /// over the panoramas, which decode in parallel).
    pub panorama_decode_seconds: f64,
    /// Seconds spent cutting views from panoramas (summed over the panoramas).
    pub panorama_cut_seconds: f64,
}

impl IoStats {
    /// Decoded images per second of decoding.
    pub fn decode_images_per_second(&self) -> f64 {
        self.images_decoded as f64 / self.decode_seconds.max(f64::MIN_POSITIVE)
    }

    /// Megabytes (10^6 bytes) of image files decoded per second of decoding.
    pub fn decode_file_mb_per_second(&self) -> f64 {
        self.file_bytes as f64 / 1e6 / self.decode_seconds.max(f64::MIN_POSITIVE)
    }

    /// Megabytes of `u8` pixels produced per second of decoding.
    pub fn decode_pixel_mb_per_second(&self) -> f64 {
        self.pixel_bytes as f64 / 1e6 / self.decode_seconds.max(f64::MIN_POSITIVE)
    }

    /// The share of the panoramas' time spent cutting their views (the rest read and decoded
    /// them); 0 when none was decoded.
    pub fn cut_share(&self) -> f64 {
        let total = self.panorama_decode_seconds + self.panorama_cut_seconds;
        if total <= 0.0 {
            0.0
        } else {
            self.panorama_cut_seconds / total
        }
    }

    /// Fraction of requests answered from the cache (0 when there were none).
    pub fn cache_hit_rate(&self) -> f64 {
        let total = self.cache_hits + self.cache_misses;
        if total == 0 {
            0.0
        } else {
            self.cache_hits as f64 / total as f64
        }
    }

    /// Fraction of the consumer's time spent waiting for data: `wait_seconds / consume_seconds`
    /// (the rest is the training step itself).
    pub fn wait_fraction(&self) -> f64 {
        if self.consume_seconds <= 0.0 {
            0.0
        } else {
            self.wait_seconds / self.consume_seconds
        }
    }
}

impl std::fmt::Display for IoStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "decoded {} images ({:.1} MB files, {:.1} MB pixels) in {:.3} s: {:.1} images/s, {:.1} MB/s files, {:.1} MB/s pixels; cache {} images ({:.1} MB), hit rate {:.1}%; waited {:.3} s of {:.3} s ({:.2}%)",
            self.images_decoded,
            self.file_bytes as f64 / 1e6,
            self.pixel_bytes as f64 / 1e6,
            self.decode_seconds,
            self.decode_images_per_second(),
            self.decode_file_mb_per_second(),
            self.decode_pixel_mb_per_second(),
            self.cached_images,
            self.cached_bytes as f64 / 1e6,
            100.0 * self.cache_hit_rate(),
            self.wait_seconds,
            self.consume_seconds,
            100.0 * self.wait_fraction(),
        )?;
        if self.panoramas_decoded > 0 {
            write!(
                f,
                "; {} views cut from {} panoramas, decode {:.0}% and cut {:.0}% of their time",
                self.images_decoded,
                self.panoramas_decoded,
                100.0 * (1.0 - self.cut_share()),
                100.0 * self.cut_share(),
            )?;
        }
        Ok(())
    }
}

/// Locks a mutex, carrying on with the data if another thread panicked while holding it (the
/// data here are counters and a cache, which stay consistent at every instant).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Cache {
    budget: usize,
    used: usize,
    slots: Vec<Option<Arc<DecodedImage>>>,
}

struct Shared {
    sources: Vec<ImageSource>,
    /// The views of each panorama file, in index order.
    panorama_views: HashMap<PathBuf, Vec<usize>>,
    /// The cut plans made so far, one per rig view and panorama size (a walk's frames share
    /// them).
    plans: Mutex<Vec<Arc<CutPlan>>>,
    cache: Mutex<Cache>,
    stats: Mutex<IoStats>,
    pool: rayon::ThreadPool,
}

/// What one decoding job produced: the images of its indices and what it cost.
struct Decoded {
    images: Vec<(usize, Result<Arc<DecodedImage>>)>,
    file_bytes: u64,
    panoramas: u64,
    decode_seconds: f64,
    cut_seconds: f64,
}

impl Shared {
    fn cached(&self, index: usize) -> Option<Arc<DecodedImage>> {
        lock(&self.cache).slots[index].clone()
    }

    /// Returns the images at `indices` (cache or parallel decode), counting hits and misses.
    fn fetch(&self, indices: &[usize]) -> Vec<Result<Arc<DecodedImage>>> {
        let found: Vec<Option<Arc<DecodedImage>>> =
            indices.iter().map(|&i| self.cached(i)).collect();
        let misses: Vec<usize> = indices
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(&i, _)| i)
            .collect();
        {
            let mut stats = lock(&self.stats);
            stats.cache_hits += (indices.len() - misses.len()) as u64;
            stats.cache_misses += misses.len() as u64;
        }
        let mut decoded = self.decode(&misses).into_iter();
        found
            .into_iter()
            .map(|f| match f {
                Some(image) => Ok(image),
                None => decoded.next().unwrap_or(Err(DataError::LoaderStopped)),
            })
            .collect()
    }

    /// Decodes `indices` in parallel on the pool and caches what fits. The views of one
    /// panorama are one job, joined by every other view of it not cached yet.
    fn decode(&self, indices: &[usize]) -> Vec<Result<Arc<DecodedImage>>> {
        if indices.is_empty() {
            return Vec::new();
        }
        let mut jobs: Vec<Vec<usize>> = Vec::new();
        let mut job_of_panorama: HashMap<&PathBuf, usize> = HashMap::new();
        for &i in indices {
            let source = &self.sources[i];
            if source.panorama_view.is_none() {
                jobs.push(vec![i]);
                continue;
            }
            match job_of_panorama.get(&source.path) {
                Some(&job) if jobs[job].contains(&i) => {}
                Some(&job) => jobs[job].push(i),
                None => {
                    job_of_panorama.insert(&source.path, jobs.len());
                    jobs.push(vec![i]);
                }
            }
        }
        for (path, &job) in &job_of_panorama {
            for &sibling in &self.panorama_views[*path] {
                if !jobs[job].contains(&sibling) && self.cached(sibling).is_none() {
                    jobs[job].push(sibling);
                }
            }
        }
        let start = Instant::now();
        let done: Vec<Decoded> = self
            .pool
            .install(|| jobs.par_iter().map(|job| self.decode_job(job)).collect());
        let elapsed = start.elapsed().as_secs_f64();
        let mut cache = lock(&self.cache);
        let mut stats = lock(&self.stats);
        stats.decode_seconds += elapsed;
        let mut results: HashMap<usize, Result<Arc<DecodedImage>>> = HashMap::new();
        for job in done {
            stats.file_bytes += job.file_bytes;
            stats.panoramas_decoded += job.panoramas;
            stats.panorama_decode_seconds += job.decode_seconds;
            stats.panorama_cut_seconds += job.cut_seconds;
            for (i, result) in job.images {
                if let Ok(image) = &result {
                    stats.images_decoded += 1;
                    stats.pixel_bytes += image.byte_len() as u64;
                    let size = image.byte_len();
                    if cache.slots[i].is_none() && cache.used + size <= cache.budget {
                        cache.used += size;
                        cache.slots[i] = Some(image.clone());
                        stats.cached_bytes = cache.used as u64;
                        stats.cached_images += 1;
                    }
                }
                results.insert(i, result);
            }
        }
        // An index asked for twice gets the image of its first answer.
        let mut answered: HashMap<usize, Arc<DecodedImage>> = HashMap::new();
        indices
            .iter()
            .map(|&i| match results.remove(&i) {
                Some(result) => {
                    if let Ok(image) = &result {
                        answered.insert(i, image.clone());
                    }
                    result
                }
                None => answered.get(&i).cloned().ok_or(DataError::LoaderStopped),
            })
            .collect()
    }

    /// Reads and decodes one job: an image, or a panorama and the views `job` cuts from it
    /// (timed, phase by phase). When a panorama cannot be decoded, its first view gets the
    /// error and the others say so.
    fn decode_job(&self, job: &[usize]) -> Decoded {
        let first = &self.sources[job[0]];
        let started = Instant::now();
        let mut decoded = Decoded {
            images: Vec::with_capacity(job.len()),
            file_bytes: 0,
            panoramas: 0,
            decode_seconds: 0.0,
            cut_seconds: 0.0,
        };
        let bytes = match std::fs::read(&first.path) {
            Ok(bytes) => bytes,
            Err(e) => {
                decoded.images = failed(job, &first.path, DataError::io(&first.path, e));
                return decoded;
            }
        };
        decoded.file_bytes = bytes.len() as u64;
        if first.panorama_view.is_none() {
            let image = first.decode_bytes(&bytes).map(Arc::new);
            decoded.images.push((job[0], image));
            return decoded;
        }
        let panorama = first.decode_panorama(&bytes);
        drop(bytes);
        decoded.decode_seconds = started.elapsed().as_secs_f64();
        let panorama = match panorama {
            Ok(panorama) => panorama,
            Err(error) => {
                decoded.images = failed(job, &first.path, error);
                return decoded;
            }
        };
        decoded.panoramas = 1;
        let cutting = Instant::now();
        decoded.images = job
            .par_iter()
            .map(|&i| {
                let source = &self.sources[i];
                let cut = self
                    .plan(&panorama, source)
                    .and_then(|plan| panorama.cut_with(source, &plan));
                (i, cut.map(Arc::new))
            })
            .collect();
        decoded.cut_seconds = cutting.elapsed().as_secs_f64();
        decoded
    }
}

impl Shared {
    /// The cut plan of `source`'s view on `panorama`'s size: made once, then shared.
    fn plan(&self, panorama: &DecodedPanorama, source: &ImageSource) -> Result<Arc<CutPlan>> {
        let size = (source.file_size.0 as usize, source.file_size.1 as usize);
        let found = source.panorama_view.and_then(|camera| {
            lock(&self.plans)
                .iter()
                .find(|p| p.fits(&camera, size))
                .cloned()
        });
        if let Some(plan) = found {
            return Ok(plan);
        }
        let plan = Arc::new(panorama.plan(source)?);
        lock(&self.plans).push(plan.clone());
        Ok(plan)
    }
}

/// `error` for the first index of `job`, and for the others an error that points to it.
fn failed(job: &[usize], path: &Path, error: DataError) -> Vec<(usize, Result<Arc<DecodedImage>>)> {
    let others = |i: usize| {
        let cause = error.to_string();
        let path = path.to_path_buf();
        (i, Err(DataError::PanoramaFailed { path, cause }))
    };
    let rest: Vec<_> = job[1..].iter().map(|&i| others(i)).collect();
    std::iter::once((job[0], Err(error))).chain(rest).collect()
}

/// Decodes, caches and prefetches the images of a list of views.
///
/// Cloning is cheap and shares the cache and the statistics.
#[derive(Clone)]
pub struct ImageLoader {
    shared: Arc<Shared>,
    options: LoaderOptions,
}

impl std::fmt::Debug for ImageLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageLoader")
            .field("images", &self.shared.sources.len())
            .field("options", &self.options)
            .finish()
    }
}

/// One image handed out by a [`Prefetcher`].
#[derive(Debug, Clone)]
pub struct Sample {
    /// Index of the view in the list given to [`ImageLoader::new`].
    pub index: usize,
    /// Its pixels.
    pub image: Arc<DecodedImage>,
}

impl ImageLoader {
    /// A loader for the images of `sources` (index `i` is `sources[i]`, e.g. the
    /// [`View::source`](crate::View::source)s of a split).
    pub fn new(sources: Vec<ImageSource>, options: LoaderOptions) -> Result<ImageLoader> {
        let mut panorama_views: HashMap<PathBuf, Vec<usize>> = HashMap::new();
        for (i, source) in sources.iter().enumerate() {
            if source.panorama_view.is_some() {
                panorama_views
                    .entry(source.path.clone())
                    .or_default()
                    .push(i);
            }
        }
        if options.prefetch == 0 {
            return Err(DataError::InvalidOption(
                "LoaderOptions::prefetch must be at least 1".to_string(),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .thread_name(|i| format!("ember-decode-{i}"))
            .build()
            .map_err(|e| DataError::InvalidOption(format!("cannot start decode threads: {e}")))?;
        let slots = vec![None; sources.len()];
        Ok(ImageLoader {
            shared: Arc::new(Shared {
                sources,
                panorama_views,
                plans: Mutex::new(Vec::new()),
                cache: Mutex::new(Cache {
                    budget: options.cache_bytes,
                    used: 0,
                    slots,
                }),
                stats: Mutex::new(IoStats::default()),
                pool,
            }),
            options,
        })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.shared.sources.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.shared.sources.is_empty()
    }

    /// The image of view `index` (from the cache, or decoded now). `None` when out of range.
    pub fn get(&self, index: usize) -> Option<Result<Arc<DecodedImage>>> {
        if index >= self.len() {
            return None;
        }
        self.shared.fetch(&[index]).pop()
    }

    /// Decodes, in parallel, every image not cached yet while the cache has room (in index
    /// order), so that the first epoch does not wait for decoding. Returns the first error.
    pub fn preload(&self) -> Result<()> {
        // Several images (or panoramas, each a job of its views) per thread and call.
        let per_job = self
            .shared
            .panorama_views
            .values()
            .map(Vec::len)
            .max()
            .unwrap_or(1);
        let chunk = 4 * self.shared.pool.current_num_threads().max(1) * per_job;
        let pending: Vec<usize> = (0..self.len())
            .filter(|&i| self.shared.cached(i).is_none())
            .collect();
        for indices in pending.chunks(chunk) {
            {
                let cache = lock(&self.shared.cache);
                if cache.used >= cache.budget {
                    break;
                }
            }
            // The views of a panorama decoded for an earlier chunk came with it.
            let indices: Vec<usize> = indices
                .iter()
                .copied()
                .filter(|&i| self.shared.cached(i).is_none())
                .collect();
            for result in self.shared.decode(&indices) {
                result?;
            }
        }
        Ok(())
    }

    /// The statistics so far.
    pub fn stats(&self) -> IoStats {
        *lock(&self.shared.stats)
    }

    /// Zeroes the counters (the cache keeps its images; its size is kept in the stats).
    pub fn reset_stats(&self) {
        let mut stats = lock(&self.shared.stats);
        *stats = IoStats {
            cached_bytes: stats.cached_bytes,
            cached_images: stats.cached_images,
            ..IoStats::default()
        };
    }

    /// A prefetching iterator over `epochs` passes of every view (`None`: forever), each pass
    /// in a new random order when [`LoaderOptions::shuffle`] is set. A worker thread decodes
    /// [`LoaderOptions::prefetch`] images ahead of the consumer.
    pub fn iter(&self, epochs: Option<usize>) -> Prefetcher {
        let (sender, receiver) = sync_channel(self.options.prefetch);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let shared = self.shared.clone();
            let options = self.options.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("ember-prefetch".to_string())
                .spawn(move || prefetch_worker(&shared, &options, epochs, &sender, &stop))
                .ok()
        };
        Prefetcher {
            receiver,
            worker,
            stop,
            shared: self.shared.clone(),
            started: None,
        }
    }
}

fn prefetch_worker(
    shared: &Shared,
    options: &LoaderOptions,
    epochs: Option<usize>,
    sender: &SyncSender<Result<Sample>>,
    stop: &AtomicBool,
) {
    let n = shared.sources.len();
    if n == 0 {
        return;
    }
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut order: Vec<usize> = (0..n).collect();
    let mut epoch = 0;
    while epochs.is_none_or(|e| epoch < e) {
        if options.shuffle {
            order.shuffle(&mut rng);
        }
        for batch in order.chunks(options.prefetch) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            for (result, &index) in shared.fetch(batch).into_iter().zip(batch) {
                let sample = result.map(|image| Sample { index, image });
                if sender.send(sample).is_err() {
                    // The consumer is gone.
                    return;
                }
            }
        }
        epoch += 1;
    }
}

/// The iterator of [`ImageLoader::iter`]: yields [`Sample`]s, measuring how long the consumer
/// waits. Dropping it stops the worker.
pub struct Prefetcher {
    receiver: Receiver<Result<Sample>>,
    worker: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    started: Option<Instant>,
}

impl Iterator for Prefetcher {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Result<Sample>> {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let (item, waited) = match self.receiver.try_recv() {
            Ok(item) => (Some(item), Duration::ZERO),
            Err(TryRecvError::Disconnected) => (None, Duration::ZERO),
            Err(TryRecvError::Empty) => {
                let item = self.receiver.recv().ok();
                (item, now.elapsed())
            }
        };
        let item = match (item, &self.worker) {
            (Some(item), _) => Some(item),
            // The worker thread could not be started at all.
            (None, None) => Some(Err(DataError::LoaderStopped)),
            (None, Some(_)) => None,
        };
        let mut stats = lock(&self.shared.stats);
        stats.wait_seconds += waited.as_secs_f64();
        stats.consume_seconds = started.elapsed().as_secs_f64();
        if matches!(item, Some(Ok(_))) {
            stats.images_delivered += 1;
        }
        item
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(worker) = self.worker.take() {
            // Keep draining so a worker blocked on the full queue (or finishing a batch) can see
            // the stop flag; it checks it between batches.
            while !worker.is_finished() {
                let _ = self.receiver.recv_timeout(Duration::from_millis(1));
            }
            let _ = worker.join();
        }
    }
}

/// A [`Prefetcher`] that also uploads each image to a device one step before it is consumed,
/// so that the copy overlaps the previous training step on backends that upload
/// asynchronously.
pub struct DevicePrefetcher<B: Backend> {
    inner: Prefetcher,
    device: B::Device,
    ahead: Option<Result<(usize, Tensor<B, 3>)>>,
}

impl<B: Backend> DevicePrefetcher<B> {
    /// Wraps `inner`, uploading to `device`.
    pub fn new(inner: Prefetcher, device: B::Device) -> Self {
        DevicePrefetcher {
            inner,
            device,
            ahead: None,
        }
    }

    /// The I/O statistics of the underlying loader.
    pub fn stats(&self) -> IoStats {
        *lock(&self.inner.shared.stats)
    }

    fn upload(&mut self) -> Option<Result<(usize, Tensor<B, 3>)>> {
        self.inner
            .next()
            .map(|sample| sample.map(|s| (s.index, s.image.to_tensor::<B>(&self.device))))
    }
}

impl<B: Backend> Iterator for DevicePrefetcher<B> {
    /// The view's index and its image, `[height, width, 3]` in `[0, 1]`.
    type Item = Result<(usize, Tensor<B, 3>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let current = match self.ahead.take() {
            Some(item) => Some(item),
            None => self.upload(),
        };
        if current.is_some() {
            self.ahead = self.upload();
        }
        current
    }
}

impl ImageLoader {
    /// [`ImageLoader::iter`] with each image uploaded to `device` one step ahead.
    pub fn iter_device<B: Backend>(
        &self,
        epochs: Option<usize>,
        device: &B::Device,
    ) -> DevicePrefetcher<B> {
        DevicePrefetcher::new(self.iter(epochs), device.clone())
    }
}
