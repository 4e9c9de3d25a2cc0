//! Host-side helpers for initialising a field from a point cloud.

use rayon::prelude::*;

/// For each point of `points` (`[M, 3]` row-major), the mean Euclidean distance to its `k`
/// nearest other points (the 3DGS scale initialisation uses `k = 3`).
///
/// Uses a uniform hash grid with cells sized for about two points each and searches outwards
/// ring by ring, so it runs in about `O(M k)` for ordinary clouds. With fewer than `k + 1`
/// points, the mean is over the points that exist; a lone point gets `1.0`. Non-finite points
/// get `f32::NAN` and are never anyone's neighbour.
pub fn knn_mean_distance(points: &[f32], k: usize) -> Vec<f32> {
    let m = points.len() / 3;
    let finite: Vec<bool> = points
        .chunks_exact(3)
        .map(|p| p.iter().all(|v| v.is_finite()))
        .collect();
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for (p, _) in points.chunks_exact(3).zip(&finite).filter(|(_, f)| **f) {
        for a in 0..3 {
            lo[a] = lo[a].min(p[a]);
            hi[a] = hi[a].max(p[a]);
        }
    }
    let count = finite.iter().filter(|f| **f).count();
    if count <= 1 || k == 0 {
        return finite
            .iter()
            .map(|f| if *f { 1.0 } else { f32::NAN })
            .collect();
    }
    let volume: f64 = (0..3).map(|a| f64::from(hi[a] - lo[a]).max(1e-9)).product();
    let cell = ((2.0 * volume / count as f64).cbrt()).max(1e-9) as f32;
    let dims: [usize; 3] =
        core::array::from_fn(|a| (((hi[a] - lo[a]) / cell) as usize + 1).min(1 << 20));
    let coord = |p: &[f32], a: usize| (((p[a] - lo[a]) / cell) as usize).min(dims[a] - 1);
    let key = |c: [usize; 3]| (c[2] * dims[1] + c[1]) * dims[0] + c[0];
    let mut order: Vec<(usize, u32)> = points
        .chunks_exact(3)
        .enumerate()
        .filter(|(i, _)| finite[*i])
        .map(|(i, p)| (key([coord(p, 0), coord(p, 1), coord(p, 2)]), i as u32))
        .collect();
    order.sort_unstable();
    let cell_range = |c: usize| {
        let start = order.partition_point(|(kk, _)| *kk < c);
        let end = order.partition_point(|(kk, _)| *kk <= c);
        &order[start..end]
    };
    let want = k.min(count - 1);
    (0..m)
        .into_par_iter()
        .map(|i| {
            if !finite[i] {
                return f32::NAN;
            }
            let p = &points[3 * i..3 * i + 3];
            let c: [usize; 3] = core::array::from_fn(|a| coord(p, a));
            let mut best: Vec<f32> = Vec::with_capacity(want + 1); // squared, ascending
            let mut ring = 0usize;
            loop {
                // Visit the shell of cells at Chebyshev distance `ring`.
                let lo_c: [usize; 3] = core::array::from_fn(|a| c[a].saturating_sub(ring));
                let hi_c: [usize; 3] = core::array::from_fn(|a| (c[a] + ring).min(dims[a] - 1));
                for z in lo_c[2]..=hi_c[2] {
                    for y in lo_c[1]..=hi_c[1] {
                        for x in lo_c[0]..=hi_c[0] {
                            let on_shell = [x, y, z]
                                .iter()
                                .zip(&c)
                                .any(|(v, cc)| v.abs_diff(*cc) == ring);
                            if !on_shell {
                                continue;
                            }
                            for &(_, j) in cell_range(key([x, y, z])) {
                                let j = j as usize;
                                if j == i {
                                    continue;
                                }
                                let q = &points[3 * j..3 * j + 3];
                                let d2 = (0..3).map(|a| (p[a] - q[a]) * (p[a] - q[a])).sum::<f32>();
                                let at = best.partition_point(|b| *b <= d2);
                                if at < want {
                                    best.insert(at, d2);
                                    best.truncate(want);
                                }
                            }
                        }
                    }
                }
                // Everything unvisited is at least `ring * cell` away.
                let bound = ring as f32 * cell;
                let covered = best.len() == want && best[want - 1] <= bound * bound;
                let exhausted = (0..3).all(|a| c[a] <= ring && c[a] + ring >= dims[a] - 1);
                if covered || exhausted {
                    break;
                }
                ring += 1;
            }
            best.iter().map(|d| d.sqrt()).sum::<f32>() / best.len() as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knn_matches_brute_force() {
        let mut state = 12345u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32) / (1u64 << 31) as f32
        };
        let pts: Vec<f32> = (0..3 * 500).map(|_| next() * 4.0 - 2.0).collect();
        let fast = knn_mean_distance(&pts, 3);
        for i in 0..500 {
            let mut d: Vec<f32> = (0..500)
                .filter(|j| *j != i)
                .map(|j| {
                    (0..3)
                        .map(|a| (pts[3 * i + a] - pts[3 * j + a]).powi(2))
                        .sum::<f32>()
                        .sqrt()
                })
                .collect();
            d.sort_by(f32::total_cmp);
            let want = (d[0] + d[1] + d[2]) / 3.0;
            assert!(
                (fast[i] - want).abs() < 1e-5,
                "point {i}: {} vs {want}",
                fast[i]
            );
        }
    }
}
