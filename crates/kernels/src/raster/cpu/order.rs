//! The order the binning fills the tiles in: the drawn Gaussians front to back, by an integer
//! key of their depth, ties by index.

use rayon::prelude::*;

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

/// `items` sorted by their high 32 bits, stably: a least-significant-digit radix sort with
/// 11-bit digits that skips a digit every item shares. Items `key << 32 | index` in index
/// order come out as a comparison sort of the whole `u64`s would order them (by key, ties by
/// index), in three passes over the array at most.
fn sort_by_high_half(items: Vec<u64>) -> Vec<u64> {
    const DIGIT: u32 = 11;
    let mut src = items;
    let mut dst = vec![0u64; src.len()];
    let mut counts = vec![0usize; 1 << DIGIT];
    for shift in (32..64).step_by(DIGIT as usize) {
        let mask = (1u64 << DIGIT.min(64 - shift)) - 1;
        let digit = |v: u64| ((v >> shift) & mask) as usize;
        counts.fill(0);
        for &v in &src {
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
        for &v in &src {
            let d = digit(v);
            dst[counts[d]] = v;
            counts[d] += 1;
        }
        core::mem::swap(&mut src, &mut dst);
    }
    src
}

/// The indices `i` with `drawn(i)`, front to back: by depth key, ties by index.
pub(super) fn depth_order<T: Real>(depth: &[T], drawn: impl Fn(usize) -> bool + Sync) -> Vec<u32> {
    // `depth.len()` fits in `u32` (checked by `bin`).
    let n = depth.len();
    if core::mem::size_of::<T>() == 4 {
        // `f32` depths: 32-bit keys, radix-sorted (a third of the comparison sort's time).
        let items: Vec<u64> = (0..n)
            .into_par_iter()
            .filter(|&i| drawn(i))
            .map(|i| (u64::from(depth_key32(depth[i].to_f64() as f32)) << 32) | i as u64)
            .collect();
        return sort_by_high_half(items)
            .into_iter()
            .map(|v| v as u32)
            .collect();
    }
    // The pairs are distinct, so the unstable sort is deterministic.
    let mut order: Vec<(u64, u32)> = (0..n)
        .into_par_iter()
        .filter(|&i| drawn(i))
        .map(|i| (depth_key(depth[i].to_f64()), i as u32))
        .collect();
    order.par_sort_unstable();
    order.into_iter().map(|(_, i)| i).collect()
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
            let items: Vec<u64> = (0..n)
                .map(|i| (u64::from(depth_key32(depths[i])) << 32) | i as u64)
                .collect();
            let mut want = items.clone();
            want.sort_unstable();
            assert_eq!(sort_by_high_half(items), want, "n = {n}");
            // The 32-bit keys order the depths as the `f64` keys of their widened values.
            let wide: Vec<u32> = depth_order(
                &depths.iter().map(|&d| f64::from(d)).collect::<Vec<_>>(),
                |_| true,
            );
            assert_eq!(depth_order(&depths, |_| true), wide, "n = {n}");
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
