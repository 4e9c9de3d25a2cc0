//! The field query on the CPU: rayon, fused, deterministic, generic over `f32` / `f64`.
//!
//! This is the ndarray backend's implementation and the oracle the GPU kernels are tested
//! against (in `f64` it is also what the finite-difference gradient checks run on).
//!
//! # Layout
//! Tensors arrive row-major (`points [P,3]`, `features [N,C]`, ...). Each call converts them once
//! into padded structure-of-arrays columns so that the inner loops run over [`LANES`] contiguous
//! values and vectorise: the Gaussians as 12 columns (the whitening matrix `W` row-major, then the
//! mean), the features and output gradients channel-major.
//!
//! # Exact mode
//! - forward: parallel over points; each point sweeps all Gaussians in blocks of [`LANES`].
//! - backward: parallel over fixed chunks of Gaussians; each Gaussian sweeps all points in blocks
//!   of [`LANES`], keeping its own gradient in lane accumulators (no atomics, no sharing) and
//!   adding its point-gradient contributions to its chunk's private `[P, 3]` buffer. The chunk
//!   buffers are summed in chunk order, so the result does not depend on the thread count.
//!
//! # Cutoff mode
//! A uniform grid over the points' bounding box. The forward lists, per cell, the Gaussians
//! whose `k`-sigma bounding box overlaps it; a point visits only its cell's list. The backward
//! sorts the points by cell; a Gaussian visits only the cells its box overlaps. Both skip pairs
//! with `d^2 > k^2` exactly, so results equal the exact mode with those pairs zeroed.

// `!(a <= b)` is used on purpose throughout: it is true when either side is NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use rayon::prelude::*;

use super::{Covariance, FieldOptions};
use crate::quat::UnitQuat;
use crate::real::Real;
use crate::simd::{self, lane_sum};

/// Width of the blocks the inner loops process at once (a multiple of every SIMD width).
pub const LANES: usize = 16;

pub use crate::quat::MIN_QUAT_NORM;

/// Row-major inputs of the field query (shapes as in the [op contract](super)).
#[derive(Clone, Copy, Debug)]
pub struct FieldArrays<'a, T> {
    /// `[P, 3]`
    pub points: &'a [T],
    /// `[N, 3]`
    pub means: &'a [T],
    /// `[N, 4]`
    pub quats: &'a [T],
    /// `[N, 3]`
    pub log_scales: &'a [T],
    /// `[N, C]`
    pub features: &'a [T],
    /// Feature channels `C`.
    pub channels: usize,
}

impl<T: Real> FieldArrays<'_, T> {
    /// Number of query points `P`.
    pub fn num_points(&self) -> usize {
        self.points.len() / 3
    }

    /// Number of Gaussians `N`.
    pub fn num_gaussians(&self) -> usize {
        self.means.len() / 3
    }
}

/// Row-major gradients of the field query.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldGradArrays<T> {
    /// `[P, 3]`, empty when not requested.
    pub points: Vec<T>,
    /// `[N, 3]`
    pub means: Vec<T>,
    /// `[N, 4]`
    pub quats: Vec<T>,
    /// `[N, 3]`
    pub log_scales: Vec<T>,
    /// `[N, C]`
    pub features: Vec<T>,
}

/// A Gaussian's rotation and scale, and what the backward needs of them.
#[derive(Clone, Copy, Debug)]
struct Frame<T> {
    /// `W = S^-1 R^T`, row-major.
    w: [T; 9],
    /// The normalised quaternion (the identity in diagonal mode).
    quat: UnitQuat<T>,
    /// `exp(log_scale)`.
    scale: [T; 3],
    /// `log_scale`.
    log_scale: [T; 3],
}

impl<T: Real> Frame<T> {
    fn new(quat: &[T], log_scale: &[T], covariance: Covariance) -> Self {
        let scale = [log_scale[0].exp(), log_scale[1].exp(), log_scale[2].exp()];
        // Diagonal mode ignores the quaternion entirely (even a NaN one).
        let unit = if covariance == Covariance::Diagonal {
            UnitQuat::identity()
        } else {
            UnitQuat::new(quat)
        };
        let r = unit.rotation();
        let mut w = [T::ZERO; 9];
        for a in 0..3 {
            let inv_s = T::ONE / scale[a];
            for b in 0..3 {
                w[3 * a + b] = r[3 * b + a] * inv_s;
            }
        }
        Frame {
            w,
            quat: unit,
            scale,
            log_scale: [log_scale[0], log_scale[1], log_scale[2]],
        }
    }

    /// Chain rule from `dR = dL/dR` (row-major) to the raw quaternion. Zero in diagonal mode
    /// (where the identity stands in) and for a degenerate quaternion.
    fn rotation_backward(&self, dr: &[T; 9]) -> [T; 4] {
        self.quat.backward(dr)
    }
}

/// Rounds up to a multiple of [`LANES`].
fn padded(n: usize) -> usize {
    n.div_ceil(LANES) * LANES
}

/// The Gaussians of one call in padded structure-of-arrays form.
struct Gaussians<T> {
    n: usize,
    n_pad: usize,
    channels: usize,
    frames: Vec<Frame<T>>,
    /// 12 columns of `n_pad`: `W` (row-major) then the mean. Padding is zero.
    cols: Vec<T>,
    /// `C` columns of `n_pad`: channel-major features. Padding is zero, so padded Gaussians
    /// contribute nothing.
    feats: Vec<T>,
}

impl<T: Real> Gaussians<T> {
    fn new(a: &FieldArrays<'_, T>, covariance: Covariance) -> Self {
        let n = a.num_gaussians();
        let n_pad = padded(n);
        let c = a.channels;
        let frames: Vec<Frame<T>> = (0..n)
            .into_par_iter()
            .map(|i| {
                Frame::new(
                    &a.quats[4 * i..4 * i + 4],
                    &a.log_scales[3 * i..3 * i + 3],
                    covariance,
                )
            })
            .collect();
        let mut cols = vec![T::ZERO; 12 * n_pad];
        let mut feats = vec![T::ZERO; c * n_pad];
        for (i, f) in frames.iter().enumerate() {
            for k in 0..9 {
                cols[k * n_pad + i] = f.w[k];
            }
            for k in 0..3 {
                cols[(9 + k) * n_pad + i] = a.means[3 * i + k];
            }
            for ch in 0..c {
                feats[ch * n_pad + i] = a.features[c * i + ch];
            }
        }
        Gaussians {
            n,
            n_pad,
            channels: c,
            frames,
            cols,
            feats,
        }
    }

    fn col(&self, k: usize) -> &[T] {
        &self.cols[k * self.n_pad..(k + 1) * self.n_pad]
    }

    fn mean(&self, i: usize) -> [T; 3] {
        [
            self.cols[9 * self.n_pad + i],
            self.cols[10 * self.n_pad + i],
            self.cols[11 * self.n_pad + i],
        ]
    }

    /// Half-extents of the axis-aligned box around the `k`-sigma ellipsoid of Gaussian `i`.
    fn box_half_extent(&self, i: usize, k: T) -> [T; 3] {
        let f = &self.frames[i];
        let r = f.quat.rotation();
        let mut e = [T::ZERO; 3];
        for (a, e) in e.iter_mut().enumerate() {
            let mut sum = T::ZERO;
            for b in 0..3 {
                let m = r[3 * a + b] * f.scale[b];
                sum += m * m;
            }
            *e = k * sum.sqrt();
        }
        e
    }
}

/// `d^2 = |W (x - mu)|^2` for one pair, with `z = W (x - mu)` and `v = x - mu`.
#[inline(always)]
fn whiten<T: Real, const DIAG: bool>(w: &[T; 9], v: [T; 3]) -> ([T; 3], T) {
    let z = if DIAG {
        [w[0] * v[0], w[4] * v[1], w[8] * v[2]]
    } else {
        [
            w[0] * v[0] + w[1] * v[1] + w[2] * v[2],
            w[3] * v[0] + w[4] * v[1] + w[5] * v[2],
            w[6] * v[0] + w[7] * v[1] + w[8] * v[2],
        ]
    };
    (z, z[0] * z[0] + z[1] * z[1] + z[2] * z[2])
}

/// `exp(-d^2 / 2)`, zero beyond the cutoff (`k2 = k^2`, infinite when exact).
#[inline(always)]
fn kernel_weight<T: Real>(d2: T, k2: T) -> T {
    T::select(d2 <= k2, (T::from_f64(-0.5) * d2).exp())
}

fn cutoff_sq<T: Real>(options: &FieldOptions) -> T {
    match options.cutoff {
        Some(k) => T::from_f64(f64::from(k) * f64::from(k)),
        None => T::from_f64(f64::INFINITY),
    }
}

/// Forward: `values [P, C]`, row-major.
pub fn forward<T: Real>(a: &FieldArrays<'_, T>, options: &FieldOptions) -> Vec<T> {
    let g = Gaussians::new(a, options.covariance);
    match (options.cutoff, options.covariance) {
        (None, Covariance::Full) => forward_exact::<T, false>(a, &g),
        (None, Covariance::Diagonal) => forward_exact::<T, true>(a, &g),
        (Some(k), Covariance::Full) => forward_cutoff::<T, false>(a, &g, T::from_f64(k.into())),
        (Some(k), Covariance::Diagonal) => forward_cutoff::<T, true>(a, &g, T::from_f64(k.into())),
    }
}

/// Points per rayon task in the point-major loops.
const POINTS_PER_TASK: usize = 8;

fn forward_exact<T: Real, const DIAG: bool>(a: &FieldArrays<'_, T>, g: &Gaussians<T>) -> Vec<T> {
    let c = g.channels;
    let mut out = vec![T::ZERO; a.num_points() * c];
    let row_fn = point_row_exact::<T, DIAG>();
    out.par_chunks_mut(POINTS_PER_TASK * c)
        .enumerate()
        .for_each(|(task, rows)| {
            let mut lanes = vec![[T::ZERO; LANES]; c];
            for (r, row) in rows.chunks_mut(c).enumerate() {
                let p = task * POINTS_PER_TASK + r;
                let x = [a.points[3 * p], a.points[3 * p + 1], a.points[3 * p + 2]];
                // SAFETY: `simd::variants!` returns the AVX2 build only on CPUs with AVX2+FMA.
                unsafe { row_fn(g, x, &mut lanes, row) };
            }
        });
    out
}

/// The `LANES` values of a padded column starting at `j0`.
#[inline(always)]
fn block<T>(column: &[T], j0: usize) -> &[T; LANES] {
    column[j0..j0 + LANES]
        .try_into()
        .expect("columns are padded to LANES")
}

/// The `L` values of a padded column starting at `j0`, mutably.
#[inline(always)]
fn lanes_mut<T, const L: usize>(column: &mut [T], j0: usize) -> &mut [T; L] {
    (&mut column[j0..j0 + L])
        .try_into()
        .expect("columns are padded")
}

/// One point against every Gaussian: `row[c] = sum_i f[i, c] exp(-d^2 / 2)`.
#[inline(always)]
fn point_row_exact_body<T: Real, const DIAG: bool>(
    g: &Gaussians<T>,
    x: [T; 3],
    lanes: &mut [[T; LANES]],
    row: &mut [T],
) {
    lanes.iter_mut().for_each(|l| *l = [T::ZERO; LANES]);
    let half = T::from_f64(-0.5);
    for j0 in (0..g.n_pad).step_by(LANES) {
        let w: [&[T; LANES]; 9] = core::array::from_fn(|k| block(g.col(k), j0));
        let m: [&[T; LANES]; 3] = core::array::from_fn(|k| block(g.col(9 + k), j0));
        let mut e = [T::ZERO; LANES];
        for j in 0..LANES {
            let wj: [T; 9] = core::array::from_fn(|k| w[k][j]);
            let v = [x[0] - m[0][j], x[1] - m[1][j], x[2] - m[2][j]];
            let (_, d2) = whiten::<T, DIAG>(&wj, v);
            e[j] = (half * d2).exp();
        }
        for (ch, lane) in lanes.iter_mut().enumerate() {
            let f = block(&g.feats[ch * g.n_pad..(ch + 1) * g.n_pad], j0);
            for j in 0..LANES {
                lane[j] += f[j] * e[j];
            }
        }
    }
    for (o, lane) in row.iter_mut().zip(lanes.iter()) {
        *o = lane_sum(lane);
    }
}

simd::variants!(
    point_row_exact<DIAG>,
    point_row_exact_body,
    (g: &Gaussians<T>, x: [T; 3], lanes: &mut [[T; LANES]], row: &mut [T])
);

/// A uniform grid over a bounding box, `dims` cells of edge `cell`.
#[derive(Clone, Debug)]
struct Grid<T> {
    origin: [T; 3],
    cell: T,
    dims: [usize; 3],
}

/// The most cells a grid may have, relative to the number of points (bounds memory).
const MAX_CELLS_PER_POINT: usize = 2;

impl<T: Real> Grid<T> {
    /// A grid over the points whose cell edge is about the typical Gaussian box size.
    fn new(points: &[T], g: &Gaussians<T>, k: T) -> Self {
        let mut lo = [T::from_f64(f64::INFINITY); 3];
        let mut hi = [T::from_f64(f64::NEG_INFINITY); 3];
        for p in points.chunks_exact(3) {
            for a in 0..3 {
                if p[a] < lo[a] {
                    lo[a] = p[a];
                }
                if p[a] > hi[a] {
                    hi[a] = p[a];
                }
            }
        }
        for a in 0..3 {
            if !(lo[a] <= hi[a]) {
                // Only non-finite points: any finite box works, they never match.
                lo[a] = T::ZERO;
                hi[a] = T::ZERO;
            }
        }
        // The mean box edge over the Gaussians (finite ones) sets the cell size.
        let mut sum = 0.0f64;
        let mut count = 0usize;
        for i in 0..g.n {
            let e = g.box_half_extent(i, k);
            let edge = 2.0 * (e[0].to_f64() + e[1].to_f64() + e[2].to_f64()) / 3.0;
            if edge.is_finite() && edge > 0.0 {
                sum += edge;
                count += 1;
            }
        }
        let extent: [f64; 3] = core::array::from_fn(|a| (hi[a] - lo[a]).to_f64());
        let largest = extent.iter().cloned().fold(0.0, f64::max);
        let mut cell = if count > 0 {
            sum / count as f64
        } else {
            largest
        };
        let max_cells = (MAX_CELLS_PER_POINT * points.len() / 3).max(1) as f64;
        if !(cell > 0.0) {
            cell = largest.max(1.0);
        }
        // Coarsen until the cell count fits the budget.
        let cells = |cell: f64| {
            extent
                .iter()
                .map(|e| (e / cell).floor() + 1.0)
                .product::<f64>()
        };
        while cells(cell) > max_cells {
            cell *= 1.25;
        }
        let dims = core::array::from_fn(|a| (extent[a] / cell).floor() as usize + 1);
        Grid {
            origin: lo,
            cell: T::from_f64(cell),
            dims,
        }
    }

    fn num_cells(&self) -> usize {
        self.dims[0] * self.dims[1] * self.dims[2]
    }

    /// The cell coordinate of a position along axis `a`, clamped to the grid (NaN maps to 0).
    fn coord(&self, a: usize, x: T) -> usize {
        let c = ((x - self.origin[a]) / self.cell).to_f64();
        if c >= 0.0 {
            (c as usize).min(self.dims[a] - 1)
        } else {
            0
        }
    }

    /// The cell of a point; points are always inside the grid's box.
    fn cell_of(&self, x: &[T]) -> usize {
        let c: [usize; 3] = core::array::from_fn(|a| self.coord(a, x[a]));
        (c[2] * self.dims[1] + c[1]) * self.dims[0] + c[0]
    }

    /// The inclusive cell ranges a box `centre +- half` overlaps, or `None` when it misses the
    /// grid (or is not finite).
    ///
    /// A box whose extent is not finite around a finite centre (a scale that overflows `exp`,
    /// which makes `W = 0` and the Gaussian contribute everywhere) covers the whole grid.
    fn cell_range(&self, centre: [T; 3], half: [T; 3]) -> Option<[(usize, usize); 3]> {
        let finite = |v: [T; 3]| v.iter().all(|x| x.to_f64().is_finite());
        if finite(centre) && !finite(half) {
            return Some(core::array::from_fn(|a| (0, self.dims[a] - 1)));
        }
        let mut r = [(0, 0); 3];
        for a in 0..3 {
            let lo = ((centre[a] - half[a] - self.origin[a]) / self.cell).to_f64();
            let hi = ((centre[a] + half[a] - self.origin[a]) / self.cell).to_f64();
            if !(lo <= hi) || hi < 0.0 || lo >= self.dims[a] as f64 {
                return None;
            }
            r[a] = (lo.max(0.0) as usize, (hi as usize).min(self.dims[a] - 1));
        }
        Some(r)
    }
}

/// Visits every cell index in inclusive ranges.
fn for_each_cell(grid_dims: [usize; 3], r: [(usize, usize); 3], mut f: impl FnMut(usize)) {
    for cz in r[2].0..=r[2].1 {
        for cy in r[1].0..=r[1].1 {
            let row = (cz * grid_dims[1] + cy) * grid_dims[0];
            for cx in r[0].0..=r[0].1 {
                f(row + cx);
            }
        }
    }
}

/// Compressed lists: the entries of bucket `b` are `items[starts[b]..starts[b + 1]]`.
struct Buckets {
    starts: Vec<usize>,
    items: Vec<u32>,
}

impl Buckets {
    /// Buckets filled in the order `pairs` yields them (deterministic).
    fn build(num_buckets: usize, pairs: impl Fn(&mut dyn FnMut(usize, u32))) -> Self {
        let mut counts = vec![0usize; num_buckets + 1];
        pairs(&mut |b, _| counts[b + 1] += 1);
        for b in 0..num_buckets {
            counts[b + 1] += counts[b];
        }
        let mut cursor = counts.clone();
        let mut items = vec![0u32; counts[num_buckets]];
        pairs(&mut |b, item| {
            items[cursor[b]] = item;
            cursor[b] += 1;
        });
        Buckets {
            starts: counts,
            items,
        }
    }

    fn get(&self, b: usize) -> &[u32] {
        &self.items[self.starts[b]..self.starts[b + 1]]
    }
}

/// The `k`-sigma boxes of all Gaussians (cell ranges on `grid`), `None` for those that miss it.
fn gaussian_ranges<T: Real>(
    g: &Gaussians<T>,
    grid: &Grid<T>,
    k: T,
) -> Vec<Option<[(usize, usize); 3]>> {
    (0..g.n)
        .into_par_iter()
        .map(|i| grid.cell_range(g.mean(i), g.box_half_extent(i, k)))
        .collect()
}

fn forward_cutoff<T: Real, const DIAG: bool>(
    a: &FieldArrays<'_, T>,
    g: &Gaussians<T>,
    k: T,
) -> Vec<T> {
    let c = g.channels;
    let k2 = k * k;
    let grid = Grid::new(a.points, g, k);
    let ranges = gaussian_ranges(g, &grid, k);
    let lists = Buckets::build(grid.num_cells(), |emit| {
        for (i, r) in ranges.iter().enumerate() {
            if let Some(r) = r {
                for_each_cell(grid.dims, *r, |cell| emit(cell, i as u32));
            }
        }
    });
    let mut out = vec![T::ZERO; a.num_points() * c];
    out.par_chunks_mut(POINTS_PER_TASK * c)
        .enumerate()
        .for_each(|(task, rows)| {
            for (r, row) in rows.chunks_mut(c).enumerate() {
                let p = task * POINTS_PER_TASK + r;
                let x = &a.points[3 * p..3 * p + 3];
                for &i in lists.get(grid.cell_of(x)) {
                    let i = i as usize;
                    let mu = g.mean(i);
                    let (_, d2) = whiten::<T, DIAG>(
                        &g.frames[i].w,
                        [x[0] - mu[0], x[1] - mu[1], x[2] - mu[2]],
                    );
                    if d2 <= k2 {
                        let e = (T::from_f64(-0.5) * d2).exp();
                        for (ch, o) in row.iter_mut().enumerate() {
                            *o += g.feats[ch * g.n_pad + i] * e;
                        }
                    }
                }
            }
        });
    out
}

/// What a Gaussian's backward sweep sums over its points, in its whitened frame: with
/// `z = W (x - mu)` and `h = 2 dL/d(d^2)`, `hz = sum(h z)` and the symmetric
/// `zz = sum(h z z^T)` (`[00, 01, 02, 11, 12, 22]`).
///
/// Everything else follows exactly: `dL/dmu = -W^T hz`, `dL/dW = zz S R^T` (as
/// `x - mu = R S z`), and `dL/dlog_scale_a = -zz_aa`. Summing in the whitened frame keeps the
/// result accurate for very elongated Gaussians, where `W^T W` and `sum(h v v^T)` lose digits
/// to cancellation.
#[derive(Clone, Copy, Debug, Default)]
struct WhitenedSums<T> {
    hz: [T; 3],
    zz: [T; 6],
}

impl<T: Real> WhitenedSums<T> {
    /// `(dL/dmu, dL/dlog_scale, dL/dR)` of Gaussian `frame`, `dL/dR` row-major.
    ///
    /// `dL/dR[b][a] = G[a][b] / s_a = sum_c K[a][c] (s_c / s_a) R[b][c]`, with the scale ratio
    /// taken as `exp(log_s_c - log_s_a)` so that it stays finite when a scale overflows.
    fn finish(&self, frame: &Frame<T>) -> ([T; 3], [T; 3], [T; 9]) {
        let w = &frame.w;
        let mean = core::array::from_fn(|r| {
            -(w[r] * self.hz[0] + w[3 + r] * self.hz[1] + w[6 + r] * self.hz[2])
        });
        let k = [
            self.zz[0], self.zz[1], self.zz[2], self.zz[1], self.zz[3], self.zz[4], self.zz[2],
            self.zz[4], self.zz[5],
        ];
        let log_scale = [-k[0], -k[4], -k[8]];
        let r = frame.quat.rotation();
        let ls = &frame.log_scale;
        let mut dr = [T::ZERO; 9];
        for a in 0..3 {
            for c in 0..3 {
                let kc = k[3 * a + c] * (ls[c] - ls[a]).exp();
                for b in 0..3 {
                    dr[3 * b + a] += kc * r[3 * b + c];
                }
            }
        }
        (mean, log_scale, dr)
    }
}

/// Backward: gradients of `sum(values * grad_values)`, row-major, `grad_values [P, C]`.
pub fn backward<T: Real>(
    a: &FieldArrays<'_, T>,
    grad_values: &[T],
    options: &FieldOptions,
    points_grad: bool,
) -> FieldGradArrays<T> {
    let g = Gaussians::new(a, options.covariance);
    let p = a.num_points();
    let p_pad = padded(p);
    let c = g.channels;
    // Points and output gradients as padded columns: padded points have zero gradient, so they
    // add nothing.
    let mut pts = vec![T::ZERO; 3 * p_pad];
    let mut gv = vec![T::ZERO; c * p_pad];
    for q in 0..p {
        for k in 0..3 {
            pts[k * p_pad + q] = a.points[3 * q + k];
        }
        for ch in 0..c {
            gv[ch * p_pad + q] = grad_values[c * q + ch];
        }
    }
    let columns = PointColumns {
        p_pad,
        pts: &pts,
        gv: &gv,
    };
    let k2 = cutoff_sq::<T>(options);
    let (per_gaussian, point_grad) = match options.cutoff {
        None => match options.covariance {
            Covariance::Full => backward_sweep::<T, false>(&g, &columns, k2, points_grad, None),
            Covariance::Diagonal => backward_sweep::<T, true>(&g, &columns, k2, points_grad, None),
        },
        Some(k) => {
            let k = T::from_f64(k.into());
            let grid = Grid::new(a.points, &g, k);
            // Points sorted by cell (stable, so ties keep index order): each cell is a range.
            let by_cell = Buckets::build(grid.num_cells(), |emit| {
                for q in 0..p {
                    emit(grid.cell_of(&a.points[3 * q..3 * q + 3]), q as u32);
                }
            });
            let ranges = gaussian_ranges(&g, &grid, k);
            let cells = CellIndex {
                grid: &grid,
                by_cell: &by_cell,
                ranges: &ranges,
            };
            match options.covariance {
                Covariance::Full => {
                    backward_sweep::<T, false>(&g, &columns, k2, points_grad, Some(&cells))
                }
                Covariance::Diagonal => {
                    backward_sweep::<T, true>(&g, &columns, k2, points_grad, Some(&cells))
                }
            }
        }
    };

    let n = g.n;
    let mut out = FieldGradArrays {
        points: Vec::new(),
        means: vec![T::ZERO; 3 * n],
        quats: vec![T::ZERO; 4 * n],
        log_scales: vec![T::ZERO; 3 * n],
        features: vec![T::ZERO; c * n],
    };
    for (i, (grad, feats)) in per_gaussian.into_iter().enumerate() {
        let (d_mean, dls, d_rot) = grad.finish(&g.frames[i]);
        let dq = g.frames[i].rotation_backward(&d_rot);
        out.means[3 * i..3 * i + 3].copy_from_slice(&d_mean);
        out.quats[4 * i..4 * i + 4].copy_from_slice(&dq);
        out.log_scales[3 * i..3 * i + 3].copy_from_slice(&dls);
        out.features[c * i..c * i + c].copy_from_slice(&feats);
    }
    if let Some(cols) = point_grad {
        out.points = (0..p)
            .flat_map(|q| [cols[q], cols[p_pad + q], cols[2 * p_pad + q]])
            .collect();
    }
    out
}

struct PointColumns<'a, T> {
    p_pad: usize,
    /// 3 columns of `p_pad`.
    pts: &'a [T],
    /// `C` columns of `p_pad`.
    gv: &'a [T],
}

struct CellIndex<'a, T> {
    grid: &'a Grid<T>,
    by_cell: &'a Buckets,
    ranges: &'a [Option<[(usize, usize); 3]>],
}

/// Gaussians per backward task. Fixed, so that the reduction order of the point gradients does
/// not depend on the number of threads; sized so that small problems still split.
fn gaussians_per_task(n: usize) -> usize {
    n.div_ceil(64).max(16)
}

/// One backward task's per-Gaussian gradients (with feature gradients) and point-gradient partial.
type TaskResult<T> = (Vec<(WhitenedSums<T>, Vec<T>)>, Vec<T>);

type SweepResult<T> = (Vec<(WhitenedSums<T>, Vec<T>)>, Option<Vec<T>>);

/// The Gaussian-major backward sweep, over all points (`cells = None`) or over the points in the
/// cells each Gaussian's box overlaps.
fn backward_sweep<T: Real, const DIAG: bool>(
    g: &Gaussians<T>,
    pts: &PointColumns<'_, T>,
    k2: T,
    points_grad: bool,
    cells: Option<&CellIndex<'_, T>>,
) -> SweepResult<T> {
    let per_task = gaussians_per_task(g.n);
    let tasks: Vec<TaskResult<T>> = (0..g.n.div_ceil(per_task))
        .into_par_iter()
        .map(|task| {
            let mut dx = if points_grad {
                vec![T::ZERO; 3 * pts.p_pad]
            } else {
                Vec::new()
            };
            let sweep = sweep_all_points::<T, DIAG>();
            let grads = (task * per_task..((task + 1) * per_task).min(g.n))
                .map(|i| match cells {
                    // SAFETY: `simd::variants!` returns the AVX2 build only on CPUs with AVX2+FMA.
                    None => unsafe { sweep(g, i, pts, k2, &mut dx) },
                    Some(cells) => sweep_cells::<T, DIAG>(g, i, pts, k2, cells, &mut dx),
                })
                .collect();
            (grads, dx)
        })
        .collect();
    let mut per_gaussian = Vec::with_capacity(g.n);
    let mut partials = Vec::with_capacity(tasks.len());
    for (grads, dx) in tasks {
        per_gaussian.extend(grads);
        partials.push(dx);
    }
    let point_grad = points_grad.then(|| {
        let mut total = vec![T::ZERO; 3 * pts.p_pad];
        total
            .par_chunks_mut(LANES * 64)
            .enumerate()
            .for_each(|(b, out)| {
                let range = b * LANES * 64..b * LANES * 64 + out.len();
                for part in &partials {
                    for (o, v) in out.iter_mut().zip(&part[range.clone()]) {
                        *o += *v;
                    }
                }
            });
        total
    });
    (per_gaussian, point_grad)
}

/// The geometric part of one [`SWEEP_LANES`]-wide block of the backward sweep, as one loop
/// over the lanes (so that it stays in registers); `DX` adds the point gradients.
struct GeometryBlock<'a, T> {
    w: &'a [T; 9],
    mu: [T; 3],
    k2: T,
    x: &'a [[T; SWEEP_LANES]; 3],
    /// `g[p] . f[i]` per lane.
    s: &'a [T; SWEEP_LANES],
}

impl<T: Real> GeometryBlock<'_, T> {
    #[inline(always)]
    fn run<const DIAG: bool, const DX: bool>(
        &self,
        e: &mut [T; SWEEP_LANES],
        acc_hz: &mut [[T; SWEEP_LANES]; 3],
        acc_zz: &mut [[T; SWEEP_LANES]; 6],
        out: Option<[&mut [T; SWEEP_LANES]; 3]>,
    ) {
        let (w, mu, x) = (self.w, self.mu, self.x);
        // Without DX nothing is written; the placeholders keep one code shape for both.
        let mut unused = [[T::ZERO; SWEEP_LANES]; 3];
        let [ox, oy, oz] = match out {
            Some(o) => o,
            None => {
                let [a, b, c] = &mut unused;
                [a, b, c]
            }
        };
        for j in 0..SWEEP_LANES {
            let vj = [x[0][j] - mu[0], x[1][j] - mu[1], x[2][j] - mu[2]];
            let (z, d2) = whiten::<T, DIAG>(w, vj);
            e[j] = kernel_weight(d2, self.k2);
            // h = 2 dL/d(d^2) = -s e
            let h = -(self.s[j] * e[j]);
            let (a, b, c) = (h * z[0], h * z[1], h * z[2]);
            acc_hz[0][j] += a;
            acc_hz[1][j] += b;
            acc_hz[2][j] += c;
            acc_zz[0][j] += a * z[0];
            acc_zz[3][j] += b * z[1];
            acc_zz[5][j] += c * z[2];
            if !DIAG {
                acc_zz[1][j] += a * z[1];
                acc_zz[2][j] += a * z[2];
                acc_zz[4][j] += b * z[2];
            }
            if DX {
                // dL/dx = W^T (h z)
                if DIAG {
                    ox[j] += w[0] * a;
                    oy[j] += w[4] * b;
                    oz[j] += w[8] * c;
                } else {
                    ox[j] += w[0] * a + w[3] * b + w[6] * c;
                    oy[j] += w[1] * a + w[4] * b + w[7] * c;
                    oz[j] += w[2] * a + w[5] * b + w[8] * c;
                }
            }
        }
    }
}

/// Lanes of the backward sweep: narrower than [`LANES`] so that its nine accumulators stay in
/// vector registers.
const SWEEP_LANES: usize = 16;

/// One Gaussian against every point, [`SWEEP_LANES`] points at a time, summing
/// [`WhitenedSums`] (9 accumulators) and adding `W^T (h z)` to the point gradients.
#[inline(always)]
fn sweep_all_points_body<T: Real, const DIAG: bool>(
    g: &Gaussians<T>,
    i: usize,
    pts: &PointColumns<'_, T>,
    k2: T,
    dx: &mut [T],
) -> (WhitenedSums<T>, Vec<T>) {
    const L: usize = SWEEP_LANES;
    let c = g.channels;
    let w = g.frames[i].w;
    let mu = g.mean(i);
    let f: Vec<T> = (0..c).map(|ch| g.feats[ch * g.n_pad + i]).collect();
    let pp = pts.p_pad;
    let mut acc_hz = [[T::ZERO; L]; 3];
    let mut acc_zz = [[T::ZERO; L]; 6];
    let mut acc_f = vec![[T::ZERO; L]; c];
    let (dx_x, rest) = dx.split_at_mut(pp.min(dx.len()));
    let (dx_y, dx_z) = rest.split_at_mut(pp.min(rest.len()));
    let lanes = |col: &[T], j0: usize| -> [T; L] { col[j0..j0 + L].try_into().expect("padded") };
    for j0 in (0..pp).step_by(L) {
        let x: [[T; L]; 3] = core::array::from_fn(|ax| lanes(&pts.pts[ax * pp..(ax + 1) * pp], j0));
        // s = g[p] . f[i] first: it does not depend on the geometry, and computing it apart
        // keeps the channel loop out of the geometry loop below, which then stays in registers.
        let mut s = [T::ZERO; L];
        for (ch, fc) in f.iter().enumerate() {
            let gcol = lanes(&pts.gv[ch * pp..(ch + 1) * pp], j0);
            for j in 0..L {
                s[j] += gcol[j] * *fc;
            }
        }
        let mut e = [T::ZERO; L];
        let block = GeometryBlock {
            w: &w,
            mu,
            k2,
            x: &x,
            s: &s,
        };
        if dx_z.is_empty() {
            block.run::<DIAG, false>(&mut e, &mut acc_hz, &mut acc_zz, None);
        } else {
            let out = [
                lanes_mut::<T, L>(dx_x, j0),
                lanes_mut::<T, L>(dx_y, j0),
                lanes_mut::<T, L>(dx_z, j0),
            ];
            block.run::<DIAG, true>(&mut e, &mut acc_hz, &mut acc_zz, Some(out));
        }
        for (ch, acc) in acc_f.iter_mut().enumerate() {
            let gcol = lanes(&pts.gv[ch * pp..(ch + 1) * pp], j0);
            for j in 0..L {
                acc[j] += gcol[j] * e[j];
            }
        }
    }
    let sums = WhitenedSums {
        hz: core::array::from_fn(|ax| lane_sum(&acc_hz[ax])),
        zz: core::array::from_fn(|k| lane_sum(&acc_zz[k])),
    };
    (sums, acc_f.iter().map(lane_sum).collect())
}

simd::variants!(
    sweep_all_points<DIAG>,
    sweep_all_points_body,
    (g: &Gaussians<T>, i: usize, pts: &PointColumns<'_, T>, k2: T, dx: &mut [T]) -> (WhitenedSums<T>, Vec<T>)
);

/// One Gaussian against the points in the cells its box overlaps (cutoff mode), in cell order.
fn sweep_cells<T: Real, const DIAG: bool>(
    g: &Gaussians<T>,
    i: usize,
    pts: &PointColumns<'_, T>,
    k2: T,
    cells: &CellIndex<'_, T>,
    dx: &mut [T],
) -> (WhitenedSums<T>, Vec<T>) {
    let c = g.channels;
    let mut sums = WhitenedSums::default();
    let mut d_feat = vec![T::ZERO; c];
    let Some(range) = cells.ranges[i] else {
        return (sums, d_feat);
    };
    let w = g.frames[i].w;
    let mu = g.mean(i);
    let pp = pts.p_pad;
    let half = T::from_f64(-0.5);
    for_each_cell(cells.grid.dims, range, |cell| {
        for &q in cells.by_cell.get(cell) {
            let q = q as usize;
            let v = [
                pts.pts[q] - mu[0],
                pts.pts[pp + q] - mu[1],
                pts.pts[2 * pp + q] - mu[2],
            ];
            let (z, d2) = whiten::<T, DIAG>(&w, v);
            if !(d2 <= k2) {
                continue;
            }
            let e = (half * d2).exp();
            let mut s = T::ZERO;
            for (ch, df) in d_feat.iter_mut().enumerate() {
                let gq = pts.gv[ch * pp + q];
                s += gq * g.feats[ch * g.n_pad + i];
                *df += gq * e;
            }
            // h = 2 dL/d(d^2) = -s e
            let h = -(s * e);
            let hz = [h * z[0], h * z[1], h * z[2]];
            for (acc, v) in sums.hz.iter_mut().zip(hz) {
                *acc += v;
            }
            sums.zz[0] += hz[0] * z[0];
            sums.zz[1] += hz[0] * z[1];
            sums.zz[2] += hz[0] * z[2];
            sums.zz[3] += hz[1] * z[1];
            sums.zz[4] += hz[1] * z[2];
            sums.zz[5] += hz[2] * z[2];
            if !dx.is_empty() {
                for a in 0..3 {
                    dx[a * pp + q] += w[a] * hz[0] + w[3 + a] * hz[1] + w[6 + a] * hz[2];
                }
            }
        }
    });
    (sums, d_feat)
}
