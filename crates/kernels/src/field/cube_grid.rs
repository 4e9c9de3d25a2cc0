//! The field query's cutoff mode on the device: the multi-level hash grid the Gaussians and the
//! points are binned into (box extents, cell edge, bucket keys, bucket starts) and the sweeps
//! that visit only the cells within reach. See [`cube`](super::cube) for the design.

use cubecl::prelude::*;

use super::cube_exact::*;

/// Levels of the Gaussian grid; level `LEVELS` is the bucket of Gaussians with a non-finite box.
pub(super) const LEVELS: u32 = 16;

/// Largest box half-extent a level holds, as a fraction of its cell edge. Below 1 so that the
/// rounding of `x / h` (at most ~0.01 cells, see [`MAX_CELL_COORD`]) never puts a reachable
/// Gaussian two cells away.
pub(super) const LEVEL_FILL: f32 = 0.95;

/// Bound on `|x| / h_0` for finite coordinates: f32 then resolves `x / h_0` to 2^-7 of a cell.
pub(super) const MAX_CELL_COORD: f32 = 65536.0;

/// Relative slack on box half-extents: the float `d^2` of a kept pair may exceed the exact one
/// by a few ulps.
pub(super) const EXTENT_SLACK: f32 = 1e-2;

/// Slack on box half-extents relative to the centre's magnitude: `x - mu` is rounded at the
/// scale of `|mu|`.
pub(super) const POSITION_SLACK: f32 = 1e-5;

/// Floats at or below this magnitude count as finite (comparisons with NaN are false).
pub(super) const FINITE_MAX: f32 = 3.0e38;

/// Smallest cell edge, for scenes where every position and box is zero.
pub(super) const MIN_CELL: f32 = 1e-30;

/// The padding key of the bucket sort: after every real bucket.
pub(super) const PAD_KEY: u32 = 0xFFFF_FFFF;

/// Integer cell coordinates.
#[derive(CubeType, Clone, Copy)]
pub(super) struct Cell {
    pub(super) x: i32,
    pub(super) y: i32,
    pub(super) z: i32,
}

/// The cell of `x` at edge `h`.
#[cube]
pub(super) fn cell_of<F: Float>(x: Vec3<F>, h: F) -> Cell {
    Cell {
        x: i32::cast_from((x.x / h).floor()),
        y: i32::cast_from((x.y / h).floor()),
        z: i32::cast_from((x.z / h).floor()),
    }
}

/// The hash-table bucket of `(level, cell)` in a table of `table_mask + 1` (a power of two)
/// buckets.
#[cube]
pub(super) fn bucket(level: u32, c: Cell, table_mask: u32) -> usize {
    // Multiply-xor mixing of the three coordinates (as raw bits) and the level, then a final
    // avalanche so neighbouring cells spread over the table.
    let mut h = u32::reinterpret(c.x) * 0x9E37_79B1u32;
    h = (h ^ u32::reinterpret(c.y)) * 0x85EB_CA77u32;
    h = (h ^ u32::reinterpret(c.z)) * 0xC2B2_AE3Du32;
    h = (h ^ level) * 0x27D4_EB2Fu32;
    h = h ^ (h >> 15u32);
    (h & table_mask) as usize
}

/// The number of cells in `lo..=hi`, at least 1.
#[cube]
pub(super) fn span(lo: i32, hi: i32) -> u32 {
    let n = hi - lo + 1;
    u32::cast_from(select(n > 0i32, n, 1i32))
}

/// `true` when `a` and `b` are the same cell.
#[cube]
pub(super) fn same_cell(a: Cell, b: Cell) -> bool {
    a.x == b.x && a.y == b.y && a.z == b.z
}

/// The edge of the level-`level` cells, `h_0 2^level` (exact in floating point).
#[cube]
pub(super) fn level_edge<F: Float>(h0: F, level: u32) -> F {
    h0 * F::cast_from(1u32 << level)
}

/// Cutoff mode, one unit per point over the Gaussians in the 27 cells around it at each occupied
/// level, and the non-finite bucket. Outputs as [`point_tiles_kernel`].
///
/// Grid inputs: `edge` `[1]` (`h_0`), `levels` `[1]` (bit `l` set when level `l` holds a
/// Gaussian), `gaussian_cells` `[N, 4]` (level and cell of each Gaussian), `order` (Gaussian
/// indices sorted by bucket) and `starts` `[T + 1]` (where each bucket begins in `order`).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn point_grid_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    edge: &Tensor<F>,
    levels: &Tensor<u32>,
    gaussian_cells: &Tensor<i32>,
    order: &Tensor<u32>,
    starts: &Tensor<u32>,
    out: &mut Tensor<F>,
    cutoff_sq: f32,
    table_mask: u32,
    #[comptime] grad: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    if p >= points.shape(0) {
        terminate!();
    }
    let x = load_vec3::<F>(points, p);
    let h0 = edge[0];
    let occupied = levels[0];
    let k2 = F::cast_from(cutoff_sq);
    let mut acc = Array::<F>::new(chunk);

    for pass in 0..point_passes(features.shape(1), grad, chunk) {
        let c0 = pass * chunk;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        for level in 0..LEVELS + 1 {
            if (occupied >> level) & 1u32 == 1u32 {
                // The non-finite bucket is the single cell (0, 0, 0) of level LEVELS.
                let finite = level < LEVELS;
                let c = cell_of::<F>(x, level_edge::<F>(h0, level));
                let centre = Cell {
                    x: select(finite, c.x, 0i32),
                    y: select(finite, c.y, 0i32),
                    z: select(finite, c.z, 0i32),
                };
                let probes = select(finite, 27u32, 1u32);
                for n in 0..probes {
                    let off = select(finite, 1i32, 0i32);
                    let probe = Cell {
                        x: centre.x + i32::cast_from(n % 3) - off,
                        y: centre.y + i32::cast_from((n / 3) % 3) - off,
                        z: centre.z + i32::cast_from(n / 9) - off,
                    };
                    let b = bucket(level, probe, table_mask);
                    let begin = starts[b] as usize;
                    let end = starts[b + 1] as usize;
                    for j in begin..end {
                        let i = order[j] as usize;
                        let own = Cell {
                            x: gaussian_cells[4 * i + 1],
                            y: gaussian_cells[4 * i + 2],
                            z: gaussian_cells[4 * i + 3],
                        };
                        // Only the Gaussians of this cell: others merely share its bucket.
                        if u32::cast_from(gaussian_cells[4 * i]) == level && same_cell(own, probe) {
                            let (w, mu) = gaussian_from_params::<F>(params, i);
                            let z = w.apply(sub3::<F>(x, mu), diagonal);
                            let d2 = z.x * z.x + z.y * z.y + z.z * z.z;
                            if d2 <= k2 {
                                let e = (F::new(-0.5) * d2).exp();
                                point_pair::<F>(
                                    &mut acc,
                                    features,
                                    grad_values,
                                    p,
                                    i,
                                    c0,
                                    w,
                                    z,
                                    e,
                                    grad,
                                    diagonal,
                                    chunk,
                                );
                            }
                        }
                    }
                }
            }
        }
        write_point::<F>(out, &acc, p, c0, chunk);
    }
}

/// Cutoff mode, one unit per Gaussian over the points in the level-0 cells its box overlaps (or
/// over all points when those cells outnumber a quarter of the points, or its box is not
/// finite). Outputs as [`gaussian_tiles_kernel`].
///
/// Grid inputs: `edge` `[1]` (`h_0`), `extents` `[N, 3]` (box half-extents),
/// `gaussian_cells` `[N, 4]` (level first), `point_cells` `[P, 3]`, `order` (point indices
/// sorted by bucket) and `starts` `[T + 1]`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn gaussian_grid_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    edge: &Tensor<F>,
    extents: &Tensor<F>,
    gaussian_cells: &Tensor<i32>,
    point_cells: &Tensor<i32>,
    order: &Tensor<u32>,
    starts: &Tensor<u32>,
    grad_means: &mut Tensor<F>,
    grad_quats: &mut Tensor<F>,
    grad_log_scales: &mut Tensor<F>,
    grad_features: &mut Tensor<F>,
    cutoff_sq: f32,
    table_mask: u32,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let num_points = points.shape(0);
    let i = ABSOLUTE_POS;
    if i >= params.shape(0) {
        terminate!();
    }
    let (w, mu) = gaussian_from_params::<F>(params, i);
    let h0 = edge[0];
    let k2 = F::cast_from(cutoff_sq);
    let ext = load_vec3::<F>(extents, i);
    let lo = cell_of::<F>(sub3::<F>(mu, ext), h0);
    let hi = cell_of::<F>(
        Vec3::<F> {
            x: mu.x + ext.x,
            y: mu.y + ext.y,
            z: mu.z + ext.z,
        },
        h0,
    );
    // Spans of at least one cell (a non-finite box gives garbage cells; it visits all points).
    let nx = span(lo.x, hi.x);
    let ny = span(lo.y, hi.y);
    let nz = span(lo.z, hi.z);
    // Counted in floating point: the product of three spans can overflow 32 bits.
    let cells = F::cast_from(nx) * F::cast_from(ny) * F::cast_from(nz);
    let all = gaussian_cells[4 * i] == i32::cast_from(LEVELS)
        || cells * F::new(4.0) > F::cast_from(num_points);
    let segments = select(all, 1usize, (nx * ny * nz) as usize);
    let mut acc = Array::<F>::new(chunk);
    let mut geom = Array::<F>::new(12usize);

    for pass in 0..features.shape(1).div_ceil(chunk) {
        let c0 = pass * chunk;
        let geo = pass == 0;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        #[unroll]
        for j in 0..12usize {
            geom[j] = F::new(0.0);
        }
        for seg in 0..segments {
            let s = seg as u32;
            let probe = Cell {
                x: lo.x + i32::cast_from(s % nx),
                y: lo.y + i32::cast_from((s / nx) % ny),
                z: lo.z + i32::cast_from(s / (nx * ny)),
            };
            let b = bucket(0u32, probe, table_mask);
            let begin = select(all, 0usize, starts[b] as usize);
            let end = select(all, num_points, starts[b + 1] as usize);
            for j in begin..end {
                let p = select(all, j, order[j] as usize);
                let own = Cell {
                    x: point_cells[3 * p],
                    y: point_cells[3 * p + 1],
                    z: point_cells[3 * p + 2],
                };
                // Only the points of this cell: others merely share its bucket.
                if all || same_cell(own, probe) {
                    let z = w.apply(sub3::<F>(load_vec3::<F>(points, p), mu), diagonal);
                    let d2 = z.x * z.x + z.y * z.y + z.z * z.z;
                    if d2 <= k2 {
                        let e = (F::new(-0.5) * d2).exp();
                        gaussian_pair::<F>(
                            &mut acc,
                            &mut geom,
                            features,
                            grad_values,
                            p,
                            i,
                            c0,
                            geo,
                            z,
                            e,
                            diagonal,
                            chunk,
                        );
                    }
                }
            }
        }
        write_gaussian::<F>(
            &acc,
            &geom,
            w,
            quats,
            log_scales,
            grad_means,
            grad_quats,
            grad_log_scales,
            grad_features,
            i,
            c0,
            geo,
            diagonal,
            chunk,
        );
    }
}

/// The half-extents `[N, 3]` of each Gaussian's `k`-sigma box, `k sqrt(Sigma_bb)` with
/// `Sigma = R S^2 R^T`, widened by [`EXTENT_SLACK`] and [`POSITION_SLACK`].
#[cube(launch)]
pub(super) fn extent_kernel<F: Float>(
    params: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    extents: &mut Tensor<F>,
    cutoff: f32,
    #[comptime] diagonal: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i < params.shape(0) {
        let k = F::cast_from(cutoff);
        let s0 = log_scales[3 * i].exp();
        let s1 = log_scales[3 * i + 1].exp();
        let s2 = log_scales[3 * i + 2].exp();
        let r = if diagonal {
            Vec3::<F> {
                x: k * s0,
                y: k * s1,
                z: k * s2,
            }
        } else {
            let m = rotation::<F>(quats, i);
            // Row b of R S has length sqrt(Sigma_bb).
            Vec3::<F> {
                x: k * (m.m00 * m.m00 * s0 * s0
                    + m.m01 * m.m01 * s1 * s1
                    + m.m02 * m.m02 * s2 * s2)
                    .sqrt(),
                y: k * (m.m10 * m.m10 * s0 * s0
                    + m.m11 * m.m11 * s1 * s1
                    + m.m12 * m.m12 * s2 * s2)
                    .sqrt(),
                z: k * (m.m20 * m.m20 * s0 * s0
                    + m.m21 * m.m21 * s1 * s1
                    + m.m22 * m.m22 * s2 * s2)
                    .sqrt(),
            }
        };
        let rel = F::new(1.0 + EXTENT_SLACK);
        let abs = F::new(POSITION_SLACK);
        let mu = gaussian_mean::<F>(params, i);
        extents[3 * i] = r.x * rel + abs * (mu.x.abs() + r.x);
        extents[3 * i + 1] = r.y * rel + abs * (mu.y.abs() + r.y);
        extents[3 * i + 2] = r.z * rel + abs * (mu.z.abs() + r.z);
    }
}

/// The largest half-extent of Gaussian `i`'s box, and whether all three are finite.
#[cube]
pub(super) fn box_radius<F: Float>(extents: &Tensor<F>, i: usize) -> (F, bool) {
    let e = load_vec3::<F>(extents, i);
    let max = F::new(FINITE_MAX);
    (
        e.x.max(e.y).max(e.z),
        e.x <= max && e.y <= max && e.z <= max,
    )
}

/// `|x|` when finite, else 0.
#[cube]
pub(super) fn finite_abs<F: Float>(x: F) -> F {
    let a = x.abs();
    select(a <= F::new(FINITE_MAX), a, F::new(0.0))
}

/// Tree reduction of `values[0..BLOCK]` into `values[0]`, with `max` or a sum.
#[cube]
pub(super) fn reduce_shared<F: Float>(values: &mut SharedMemory<F>, #[comptime] max: bool) {
    let u = UNIT_POS as usize;
    let mut stride = (BLOCK / 2).runtime();
    while stride > 0 {
        if u < stride {
            if max {
                let other = values[u + stride];
                values[u] = values[u].max(other);
            } else {
                let other = values[u + stride];
                values[u] = values[u] + other;
            }
        }
        sync_cube();
        stride /= 2;
    }
}

/// One cube: the level-0 cell edge `h_0` into `edge[0]` (see the module docs), from the
/// geometric mean of the finite box half-extents, the largest one and the largest finite
/// coordinate. The reduction order is fixed, so the result is deterministic.
#[cube(launch)]
pub(super) fn cell_edge_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    extents: &Tensor<F>,
    edge: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let u = UNIT_POS as usize;
    let zero = F::new(0.0);
    let mut coord = zero;
    let mut k = u;
    while k < points.shape(0) * 3 {
        coord = coord.max(finite_abs::<F>(points[k]));
        k += BLOCK;
    }
    let mut log_sum = zero;
    let mut count = zero;
    let mut largest = zero;
    let mut i = u;
    while i < params.shape(0) {
        let mu = gaussian_mean::<F>(params, i);
        coord = coord.max(finite_abs::<F>(mu.x));
        coord = coord.max(finite_abs::<F>(mu.y));
        coord = coord.max(finite_abs::<F>(mu.z));
        let (r, finite) = box_radius::<F>(extents, i);
        if finite && r > zero {
            log_sum += r.ln();
            count += F::new(1.0);
            largest = largest.max(r);
        }
        i += BLOCK;
    }

    let mut s_coord = SharedMemory::<F>::new(BLOCK);
    let mut s_log = SharedMemory::<F>::new(BLOCK);
    let mut s_count = SharedMemory::<F>::new(BLOCK);
    let mut s_largest = SharedMemory::<F>::new(BLOCK);
    s_coord[u] = coord;
    s_log[u] = log_sum;
    s_count[u] = count;
    s_largest[u] = largest;
    sync_cube();
    reduce_shared::<F>(&mut s_coord, true);
    reduce_shared::<F>(&mut s_log, false);
    reduce_shared::<F>(&mut s_count, false);
    reduce_shared::<F>(&mut s_largest, true);

    if u == 0 {
        let n = s_count[0];
        let typical = select(n > zero, (s_log[0] / n).exp(), zero);
        // The top level must hold the largest finite box.
        let top = s_largest[0] / (F::new(LEVEL_FILL) * F::cast_from(1u32 << (LEVELS - 1)));
        edge[0] = typical
            .max(top)
            .max(s_coord[0] / F::new(MAX_CELL_COORD))
            .max(F::new(MIN_CELL));
    }
}

/// Per sort entry: a Gaussian's level and cell into `gaussian_cells` `[N, 4]` and its
/// `(bucket, index)` entry; an entry past the Gaussians (the one entry of an empty set) gets
/// [`PAD_KEY`].
#[cube(launch)]
pub(super) fn gaussian_keys_kernel<F: Float>(
    params: &Tensor<F>,
    extents: &Tensor<F>,
    edge: &Tensor<F>,
    gaussian_cells: &mut Tensor<i32>,
    keys: &mut Tensor<u32>,
    order: &mut Tensor<u32>,
    table_mask: u32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i < keys.shape(0) {
        if i < params.shape(0) {
            let h0 = edge[0];
            let (r, finite) = box_radius::<F>(extents, i);
            // The smallest level whose cells hold the box; none for a non-finite box.
            let mut level = LEVELS.runtime();
            for l in 0..LEVELS {
                if finite && level == LEVELS && r <= F::new(LEVEL_FILL) * level_edge::<F>(h0, l) {
                    level = l;
                }
            }
            let on_level = level < LEVELS;
            let c = cell_of::<F>(gaussian_mean::<F>(params, i), level_edge::<F>(h0, level));
            // The non-finite bucket is the single cell (0, 0, 0) of level LEVELS.
            let cell = Cell {
                x: select(on_level, c.x, 0i32),
                y: select(on_level, c.y, 0i32),
                z: select(on_level, c.z, 0i32),
            };
            gaussian_cells[4 * i] = i32::cast_from(level);
            gaussian_cells[4 * i + 1] = cell.x;
            gaussian_cells[4 * i + 2] = cell.y;
            gaussian_cells[4 * i + 3] = cell.z;
            keys[i] = bucket(level, cell, table_mask) as u32;
            order[i] = i as u32;
        } else {
            keys[i] = PAD_KEY;
            order[i] = PAD_KEY;
        }
    }
}

/// One cube: bit `l` of `levels[0]` set when some Gaussian is on level `l` (`l = LEVELS` for the
/// non-finite bucket).
#[cube(launch)]
pub(super) fn level_mask_kernel(gaussian_cells: &Tensor<i32>, levels: &mut Tensor<u32>) {
    let u = UNIT_POS as usize;
    let mut mask = 0u32.runtime();
    let mut i = u;
    while i < gaussian_cells.shape(0) {
        mask |= 1u32 << u32::cast_from(gaussian_cells[4 * i]);
        i += BLOCK;
    }
    let mut shared = SharedMemory::<u32>::new(BLOCK);
    shared[u] = mask;
    sync_cube();
    let mut stride = (BLOCK / 2).runtime();
    while stride > 0 {
        if u < stride {
            shared[u] = shared[u] | shared[u + stride];
        }
        sync_cube();
        stride /= 2;
    }
    if u == 0 {
        levels[0] = shared[0];
    }
}

/// Per sort entry: a point's level-0 cell into `point_cells` `[P, 3]` and its
/// `(bucket, index)` entry; an entry past the points (the one entry of an empty set) gets
/// [`PAD_KEY`].
#[cube(launch)]
pub(super) fn point_keys_kernel<F: Float>(
    points: &Tensor<F>,
    edge: &Tensor<F>,
    point_cells: &mut Tensor<i32>,
    keys: &mut Tensor<u32>,
    order: &mut Tensor<u32>,
    table_mask: u32,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    if p < keys.shape(0) {
        if p < points.shape(0) {
            let cell = cell_of::<F>(load_vec3::<F>(points, p), edge[0]);
            point_cells[3 * p] = cell.x;
            point_cells[3 * p + 1] = cell.y;
            point_cells[3 * p + 2] = cell.z;
            keys[p] = bucket(0u32, cell, table_mask) as u32;
            order[p] = p as u32;
        } else {
            keys[p] = PAD_KEY;
            order[p] = PAD_KEY;
        }
    }
}

/// `starts[b]` = the first position of `keys` (sorted) holding a key `>= b`.
#[cube(launch)]
pub(super) fn bucket_starts_kernel(keys: &Tensor<u32>, starts: &mut Tensor<u32>) {
    let b = ABSOLUTE_POS;
    if b < starts.shape(0) {
        let target = b as u32;
        let mut lo = 0usize.runtime();
        let mut hi = keys.shape(0);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if keys[mid] < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        starts[b] = lo as u32;
    }
}
