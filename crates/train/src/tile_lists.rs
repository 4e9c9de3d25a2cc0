//! How long the GPU's tile lists are, chosen without waiting for the device.
//!
//! The rasterizer bins each view's (tile, Gaussian) pairs into lists whose length only the
//! device knows; sized exactly, every render waits for that count
//! (`ember_kernels::RasterSetup::tile_pairs`). Training sizes them instead from the counts of
//! earlier steps: each render leaves its count on the device, and the trainer reads the largest
//! of them when it reads anything else (the loss every `output.loss_every` steps), then holds
//! lists a quarter longer than it. A view that makes more pairs than that still draws the same
//! image (the rasterizer walks the depth order past its lists, more slowly), and the next read
//! lengthens the lists. Only the first step waits, to learn the count; a refinement that
//! changes the number of Gaussians scales the length with it.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// Lists this much longer than the largest count seen.
const MARGIN: f64 = 1.25;

/// At least this many entries, so that a tiny count does not overflow at every step.
const MIN_PAIRS: u64 = 4096;

/// Renders whose counts are kept before they are folded into their maximum on the device.
const KEPT: usize = 256;

/// The tile-list length of a run (see the module docs).
#[derive(Debug, Clone)]
pub struct TileLists<B: Backend> {
    /// The lists' length; `None` until a count was read.
    capacity: Option<u32>,
    /// `[2]` per render since the last read (see `ember_kernels::RasterState::pairs`).
    counts: Vec<Tensor<B, 1, Int>>,
    stats: TileListStats,
}

/// What the tile lists did over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TileListStats {
    /// The lists' current length (0 before the first count).
    pub capacity: u32,
    /// The largest count read.
    pub largest: u64,
    /// Reads that found a render whose pairs overflowed the lists of the time.
    pub overflows: usize,
}

impl<B: Backend> Default for TileLists<B> {
    fn default() -> Self {
        TileLists {
            capacity: None,
            counts: Vec::new(),
            stats: TileListStats::default(),
        }
    }
}

impl<B: Backend> TileLists<B> {
    /// The length to render with (`None`: exactly, waiting for the count).
    pub fn capacity(&self) -> Option<u32> {
        self.capacity
    }

    /// The counters so far.
    pub fn stats(&self) -> TileListStats {
        self.stats
    }

    /// Keeps a render's `[2]` pairs tensor for the next read.
    pub fn record(&mut self, pairs: Tensor<B, 1, Int>) {
        self.counts.push(pairs);
        if self.counts.len() > KEPT {
            self.counts = vec![self.largest_pending().expect("counts were kept")];
        }
    }

    /// Whether the next read must include the counts: always before the first length is known.
    pub fn must_read(&self) -> bool {
        self.capacity.is_none() && !self.counts.is_empty()
    }

    /// The largest count since the last read, `[1]`, to read with the step's other values.
    pub fn largest_pending(&self) -> Option<Tensor<B, 1, Int>> {
        match self.counts.len() {
            0 => None,
            1 => Some(self.counts[0].clone().narrow(0, 0, 1)),
            _ => Some(
                Tensor::stack::<2>(self.counts.clone(), 0)
                    .narrow(1, 0, 1)
                    .max(),
            ),
        }
    }

    /// Sets the length from the largest count read (see [`TileLists::largest_pending`]).
    pub fn update(&mut self, largest: u64) {
        self.counts.clear();
        if self.capacity.is_some_and(|c| largest > u64::from(c)) {
            self.stats.overflows += 1;
        }
        self.stats.largest = self.stats.largest.max(largest);
        let capacity = ((largest as f64 * MARGIN).ceil() as u64).max(MIN_PAIRS);
        self.set(capacity);
    }

    /// Scales the length by `ratio` (the Gaussians after a refinement over those before).
    pub fn scale(&mut self, ratio: f64) {
        if let Some(capacity) = self.capacity
            && ratio > 1.0
        {
            self.set((f64::from(capacity) * ratio).ceil() as u64);
        }
    }

    fn set(&mut self, capacity: u64) {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        self.capacity = Some(capacity);
        self.stats.capacity = capacity;
    }
}
