//! The order the binning fills the tiles in: the drawn Gaussians front to back, by an integer
//! key of their depth, ties by index.

use crate::real::Real;

/// An integer key that orders depths as [`f64::total_cmp`] does (`-NaN < -inf < ... < -0 < 0 <
/// ... < inf < NaN`).
fn depth_key(depth: f64) -> u64 {
    let bits = depth.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// [`depth_key`] for an `f32` depth, in 32 bits: orders `f32` depths as `depth_key` orders
/// them widened to `f64` (the widening is exact and keeps the order, NaNs included).
fn depth_key32(depth: f32) -> u32 {
    let bits = depth.to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    }
}

/// A drawn Gaussian as the binning sorts it: its sort key, whose low 32 bits are its index, and
/// the tiles it covers, `[x0, x1, y0, y1]` (half-open index ranges).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Drawn {
    /// `depth_key32(depth) << 32 | index` for `f32` depths; the index alone for `f64`.
    key: u64,
    pub(super) rect: [u32; 4],
}

impl Drawn {
    /// Gaussian `index`, at `depth`, over the tiles `rect`.
    #[inline(always)]
    pub(super) fn new<T: Real>(index: u32, depth: T, rect: [u32; 4]) -> Self {
        let key = if core::mem::size_of::<T>() == 4 {
            (u64::from(depth_key32(depth.to_f64() as f32)) << 32) | u64::from(index)
        } else {
            u64::from(index)
        };
        Drawn { key, rect }
    }

    /// The Gaussian's index.
    #[inline(always)]
    pub(super) fn index(&self) -> u32 {
        self.key as u32
    }
}

/// `items` sorted by the high 32 bits of their keys, stably: a least-significant-digit radix
/// sort with 11-bit digits that skips a digit every item shares. Items in index order come out
/// by depth key, ties by index (as a comparison sort of the whole keys orders them), in three
/// passes over the array at most.
fn sort_by_high_half(items: Vec<Drawn>) -> Vec<Drawn> {
    const DIGIT: u32 = 11;
    let mut src = items;
    let mut dst = vec![Drawn::default(); src.len()];
    let mut counts = vec![0usize; 1 << DIGIT];
    for shift in (32..64).step_by(DIGIT as usize) {
        let mask = (1u64 << DIGIT.min(64 - shift)) - 1;
        let digit = |v: &Drawn| ((v.key >> shift) & mask) as usize;
        counts.fill(0);
        for v in &src {
            counts[digit(v)] += 1;
        }
        if counts.contains(&src.len()) {
            // One digit for all: the pass would move nothing.
            continue;
        }
        let mut start = 0;
        for c in counts.iter_mut() {
            (*c, start) = (start, start + *c);
        }
        for v in &src {
            let d = digit(v);
            dst[counts[d]] = *v;
            counts[d] += 1;
        }
        core::mem::swap(&mut src, &mut dst);
    }
    src
}

/// `items` (each Gaussian once, in index order) front to back: by the depth key of
/// `depth[index]`, ties by index.
pub(super) fn front_to_back<T: Real>(items: Vec<Drawn>, depth: &[T]) -> Vec<Drawn> {
    if core::mem::size_of::<T>() == 4 {
        // `f32` depths: 32-bit keys, radix-sorted (a third of the comparison sort's time).
        return sort_by_high_half(items);
    }
    // The pairs are distinct, so the unstable sort is deterministic.
    let mut items = items;
    items.sort_unstable_by_key(|d| (depth_key(depth[d.index() as usize].to_f64()), d.index()));
    items
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    #[test]
    fn the_radix_sort_orders_as_a_comparison_sort() {
        let mut rng = StdRng::seed_from_u64(11);
        for n in [0, 1, 2, 5, 1000, 40_000] {
            // Few distinct depths (ties), a spread of exponents, signs and specials.
            let depths: Vec<f32> = (0..n)
                .map(|i| match i % 17 {
                    0 => f32::NAN,
                    1 => -0.0,
                    2 => f32::INFINITY,
                    3 => (i % 5) as f32,
                    _ => rng.random_range(-3.0f32..40.0) * 10f32.powi(rng.random_range(-3..4)),
                })
                .collect();
            let items = |depths: &[f32]| -> Vec<Drawn> {
                (0..n)
                    .map(|i| Drawn::new(i as u32, depths[i], [i as u32, 0, 0, 0]))
                    .collect()
            };
            let sorted = front_to_back(items(&depths), &depths);
            let mut want: Vec<(u32, u32)> = (0..n as u32)
                .map(|i| (depth_key32(depths[i as usize]), i))
                .collect();
            want.sort_unstable();
            let got: Vec<(u32, u32)> = sorted
                .iter()
                .map(|d| (depth_key32(depths[d.index() as usize]), d.index()))
                .collect();
            assert_eq!(got, want, "n = {n}");
            // Each item keeps its rectangle.
            assert!(sorted.iter().all(|d| d.rect[0] == d.index()), "n = {n}");
            // The 32-bit keys order the depths as the `f64` keys of their widened values.
            let wide: Vec<f64> = depths.iter().map(|&d| f64::from(d)).collect();
            let wide_items = (0..n)
                .map(|i| Drawn::new(i as u32, wide[i], [i as u32, 0, 0, 0]))
                .collect();
            let order = |items: &[Drawn]| items.iter().map(Drawn::index).collect::<Vec<_>>();
            assert_eq!(
                order(&front_to_back(wide_items, &wide)),
                order(&sorted),
                "n = {n}"
            );
        }
    }

    #[test]
    fn depth_key_orders_like_total_cmp() {
        let values = [
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            1e-310,
            -1e-310,
            f64::MIN_POSITIVE,
            1.0,
            -1.0,
            2.5,
            1e300,
            -1e300,
            0.01,
        ];
        for a in values {
            for b in values {
                assert_eq!(
                    depth_key(a).cmp(&depth_key(b)),
                    a.total_cmp(&b),
                    "{a:e} vs {b:e}"
                );
            }
        }
    }
}
