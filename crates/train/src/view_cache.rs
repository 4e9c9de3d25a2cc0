//! [`ViewCache`]: a least-recently-used cache of rendered views, for repeated evaluation and
//! viewers.
//!
//! An entry is keyed by the view's index and the field's *generation*, a counter that changes
//! whenever the parameters do ([`crate::Trainer::generation`]: every optimizer step,
//! densification, checkpoint load, parameter replacement). Asking for another generation than
//! the one cached drops every entry (they can never be asked for again), so a render is reused
//! exactly while the field it was drawn from is unchanged. The capacity is in bytes; inserting
//! past it evicts the least recently used entries first.
//!
//! In a training run the field changes between any two periodic evaluations, so their hit rate
//! is zero; hits come from evaluating again at the same step (a library caller, a viewer asking
//! for the same view twice).

use std::collections::VecDeque;

/// Counters of a [`ViewCache`] since it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Requests that had to render.
    pub misses: u64,
    /// Entries dropped to make room (least recently used first).
    pub evictions: u64,
    /// Entries dropped because the field changed.
    pub invalidations: u64,
    /// Entries held now.
    pub entries: usize,
    /// Bytes held now.
    pub bytes: usize,
}

impl CacheStats {
    /// `hits / (hits + misses)`, 0 when nothing was asked.
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

impl std::fmt::Display for CacheStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} hits, {} misses (hit rate {:.1}%), {} evicted, {} invalidated; holds {} views ({:.1} MB)",
            self.hits,
            self.misses,
            100.0 * self.hit_rate(),
            self.evictions,
            self.invalidations,
            self.entries,
            self.bytes as f64 / 1e6
        )
    }
}

struct Entry<V> {
    view: usize,
    value: V,
    bytes: usize,
}

/// Rendered views of one field generation, least recently used evicted first (see the module
/// docs). Operations cost `O(entries)`: the cache holds at most a few hundred evaluation views.
pub struct ViewCache<V> {
    capacity_bytes: usize,
    generation: Option<u64>,
    /// Least recently used first.
    entries: VecDeque<Entry<V>>,
    stats: CacheStats,
}

impl<V> std::fmt::Debug for ViewCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewCache")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("generation", &self.generation)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<V: Clone> ViewCache<V> {
    /// An empty cache holding at most `capacity_bytes` (0: nothing is kept).
    pub fn new(capacity_bytes: usize) -> Self {
        ViewCache {
            capacity_bytes,
            generation: None,
            entries: VecDeque::new(),
            stats: CacheStats::default(),
        }
    }

    /// The capacity, bytes.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// Drops every entry when `generation` is not the cached one.
    fn follow(&mut self, generation: u64) {
        if self.generation != Some(generation) {
            self.stats.invalidations += self.entries.len() as u64;
            self.entries.clear();
            self.stats.entries = 0;
            self.stats.bytes = 0;
            self.generation = Some(generation);
        }
    }

    /// The render of `view` for the field at `generation`, counted as a hit (and made the most
    /// recently used) or a miss.
    pub fn get(&mut self, view: usize, generation: u64) -> Option<V> {
        self.follow(generation);
        match self.entries.iter().position(|e| e.view == view) {
            Some(at) => {
                self.stats.hits += 1;
                let entry = self.entries.remove(at)?;
                let value = entry.value.clone();
                self.entries.push_back(entry);
                Some(value)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Stores the render of `view` for the field at `generation` (`bytes` its size), evicting
    /// the least recently used entries until it fits; a value larger than the whole capacity is
    /// not stored.
    pub fn insert(&mut self, view: usize, generation: u64, value: V, bytes: usize) {
        self.follow(generation);
        if let Some(old) = self
            .entries
            .iter()
            .position(|e| e.view == view)
            .and_then(|at| self.entries.remove(at))
        {
            self.stats.bytes -= old.bytes;
        }
        if bytes > self.capacity_bytes {
            self.stats.entries = self.entries.len();
            return;
        }
        while self.stats.bytes + bytes > self.capacity_bytes {
            let Some(oldest) = self.entries.pop_front() else {
                break;
            };
            self.stats.bytes -= oldest.bytes;
            self.stats.evictions += 1;
        }
        self.entries.push_back(Entry { view, value, bytes });
        self.stats.bytes += bytes;
        self.stats.entries = self.entries.len();
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_request_hits() {
        let mut cache = ViewCache::new(100);
        assert_eq!(cache.get(3, 0), None);
        cache.insert(3, 0, "view 3", 10);
        assert_eq!(cache.get(3, 0), Some("view 3"));
        assert_eq!(cache.get(4, 0), None);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (1, 2));
        assert!((stats.hit_rate() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!((stats.entries, stats.bytes), (1, 10));
    }

    #[test]
    fn a_field_change_invalidates_every_entry() {
        let mut cache = ViewCache::new(100);
        cache.insert(0, 7, 'a', 10);
        cache.insert(1, 7, 'b', 10);
        assert_eq!(cache.get(0, 8), None);
        let stats = cache.stats();
        assert_eq!((stats.invalidations, stats.entries, stats.bytes), (2, 0, 0));
        cache.insert(0, 8, 'c', 10);
        assert_eq!(cache.get(0, 8), Some('c'));
        // An insert for a newer field also drops the older entries.
        cache.insert(1, 9, 'd', 10);
        assert_eq!(cache.get(0, 9), None);
        assert_eq!(cache.get(1, 9), Some('d'));
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let mut cache = ViewCache::new(30);
        cache.insert(0, 0, 0, 10);
        cache.insert(1, 0, 1, 10);
        cache.insert(2, 0, 2, 10);
        // Using 0 makes 1 the least recently used.
        assert_eq!(cache.get(0, 0), Some(0));
        cache.insert(3, 0, 3, 10);
        assert_eq!(cache.get(1, 0), None);
        assert_eq!(cache.get(2, 0), Some(2));
        // A 20-byte entry evicts the two least recent: 0, then 3.
        cache.insert(4, 0, 4, 20);
        assert_eq!(cache.get(0, 0), None);
        assert_eq!(cache.get(3, 0), None);
        assert_eq!(cache.get(2, 0), Some(2));
        assert_eq!(cache.get(4, 0), Some(4));
        let stats = cache.stats();
        assert_eq!((stats.evictions, stats.entries, stats.bytes), (3, 2, 30));
    }

    #[test]
    fn replacing_and_oversized_entries_keep_the_byte_count() {
        let mut cache = ViewCache::new(25);
        cache.insert(0, 0, 'a', 10);
        cache.insert(0, 0, 'b', 15);
        assert_eq!(cache.get(0, 0), Some('b'));
        assert_eq!(cache.stats().bytes, 15);
        cache.insert(1, 0, 'c', 26);
        assert_eq!(cache.get(1, 0), None);
        assert_eq!((cache.stats().entries, cache.stats().bytes), (1, 15));
        let mut off = ViewCache::new(0);
        off.insert(0, 0, 'x', 1);
        assert_eq!(off.get(0, 0), None);
    }
}
