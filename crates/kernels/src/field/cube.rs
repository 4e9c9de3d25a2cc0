//! The field query as CubeCL kernels, generic over the CubeCL runtime (one source for wgpu and
//! cuda) and over the float type (each launch takes the tensors' runtime dtype).
//!
//! # Exact mode
//! - `prepare`: one unit per Gaussian writes its whitening matrix `W` (row-major) and its mean
//!   into a `[N, 12]` buffer, so `W` is computed once per call, not once per pair.
//! - `point_tiles`: one unit per point sweeps all Gaussians, staged a cube-sized tile at a time
//!   in shared memory; it accumulates its own output row (the forward) or its own `dL/dx` (the
//!   backward, only when the points need a gradient) in registers.
//! - `gaussian_tiles`: one unit per Gaussian sweeps all points (tiled the same way), accumulates
//!   `dL/dmu`, `G = dL/dW` and `dL/df` in registers, then applies the chain rule from `W` to the
//!   quaternion and the log-scales.
//!
//! Every output element is owned by exactly one unit, so there are no atomics and the results are
//! bit-reproducible. No `[P, N, ..]` intermediate exists. Feature channels are processed in chunks
//! of at most [`MAX_CHUNK`] register accumulators; a sweep is repeated per chunk when `C` is
//! larger.
//!
//! # Cutoff mode: spatial hashing, built on the device
//! With a cutoff of `k` standard deviations, each Gaussian's `k`-sigma ellipsoid has an
//! axis-aligned box around its mean. The Gaussians are binned by their mean into a multi-level
//! grid: level `l` has cubic cells of edge `h_l = h_0 2^l` and holds the Gaussians whose box
//! half-extent fits in [`LEVEL_FILL`]` h_l` (the smallest such level), so a point meets every
//! Gaussian that can reach it in the 27 cells around its own cell at each level (`point_grid`,
//! for the values and for `dL/dx`). `h_0` is the geometric mean of the box half-extents (a device
//! reduction), raised when needed so that 16 levels cover the largest box and `|x| / h_0` stays
//! below [`MAX_CELL_COORD`]. Gaussians with a non-finite box (an overflowing scale) sit in one
//! extra bucket that every point visits. For the per-Gaussian backward (`gaussian_grid`) the
//! points are binned into the level-0 cells, and each Gaussian visits the cells its box overlaps
//! (or all points, when those cells outnumber a quarter of the points).
//!
//! The cells live in hash tables of a size fixed on the host (a power of two at least twice the
//! item count), so nothing is read back: entries are sorted by `(bucket, index)` with a bitonic
//! sort (`log2(n) (log2(n) + 1) / 2` launches) and each bucket's start is found by binary search.
//! Hash collisions only add candidates; every candidate's own cell is compared with the probed
//! one, so nothing is counted twice, and the sorted order fixes the summation order, so the
//! results stay bit-reproducible. Every visited pair is tested against `d^2 <= k^2` exactly as
//! without the grid, so the result equals the exact query with the far pairs zeroed; the boxes
//! carry a small slack so that rounding never drops a pair the test would keep.
//!
//! The cost then grows with the pairs inside the boxes, plus 27 bucket probes per point and
//! occupied level. It degrades (still correct) when the box sizes span more than 2^15, or when
//! the scene is more than about 2^16 typical boxes across: the cells are then coarser than the
//! boxes.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;
use cubecl::{calculate_cube_count_elemwise, client::ComputeClient};

use super::{Covariance, FieldGrads, FieldInputs, FieldOptions};

/// Units per cube, and the number of Gaussians (or points) staged per shared-memory tile.
const BLOCK: usize = 128;

/// Values per Gaussian in the prepared buffer: `W` row-major (9), then the mean (3).
const PARAMS: usize = 12;

/// Most feature channels a unit accumulates in registers at once.
const MAX_CHUNK: usize = 8;

/// Below this quaternion norm the rotation is the identity and gets no gradient.
const MIN_QUAT_NORM: f32 = 1e-12;

/// Levels of the Gaussian grid; level `LEVELS` is the bucket of Gaussians with a non-finite box.
const LEVELS: u32 = 16;

/// Largest box half-extent a level holds, as a fraction of its cell edge. Below 1 so that the
/// rounding of `x / h` (at most ~0.01 cells, see [`MAX_CELL_COORD`]) never puts a reachable
/// Gaussian two cells away.
const LEVEL_FILL: f32 = 0.95;

/// Bound on `|x| / h_0` for finite coordinates: f32 then resolves `x / h_0` to 2^-7 of a cell.
const MAX_CELL_COORD: f32 = 65536.0;

/// Relative slack on box half-extents: the float `d^2` of a kept pair may exceed the exact one
/// by a few ulps.
const EXTENT_SLACK: f32 = 1e-2;

/// Slack on box half-extents relative to the centre's magnitude: `x - mu` is rounded at the
/// scale of `|mu|`.
const POSITION_SLACK: f32 = 1e-5;

/// Floats at or below this magnitude count as finite (comparisons with NaN are false).
const FINITE_MAX: f32 = 3.0e38;

/// Smallest cell edge, for scenes where every position and box is zero.
const MIN_CELL: f32 = 1e-30;

/// The padding key of the bucket sort: after every real bucket.
const PAD_KEY: u32 = 0xFFFF_FFFF;

/// A 3-vector in registers.
#[derive(CubeType, Clone, Copy)]
struct Vec3<F: Float> {
    x: F,
    y: F,
    z: F,
}

/// A row-major 3x3 matrix in registers.
#[derive(CubeType, Clone, Copy)]
struct Mat3<F: Float> {
    m00: F,
    m01: F,
    m02: F,
    m10: F,
    m11: F,
    m12: F,
    m20: F,
    m21: F,
    m22: F,
}

/// Integer cell coordinates.
#[derive(CubeType, Clone, Copy)]
struct Cell {
    x: i32,
    y: i32,
    z: i32,
}

#[cube]
impl<F: Float> Mat3<F> {
    /// `M v`; with `diagonal` only the diagonal of `M` is read (the rest is zero).
    fn apply(&self, v: Vec3<F>, #[comptime] diagonal: bool) -> Vec3<F> {
        if diagonal {
            Vec3::<F> {
                x: self.m00 * v.x,
                y: self.m11 * v.y,
                z: self.m22 * v.z,
            }
        } else {
            Vec3::<F> {
                x: self.m00 * v.x + self.m01 * v.y + self.m02 * v.z,
                y: self.m10 * v.x + self.m11 * v.y + self.m12 * v.z,
                z: self.m20 * v.x + self.m21 * v.y + self.m22 * v.z,
            }
        }
    }

    /// `M^T v`; with `diagonal` only the diagonal of `M` is read.
    fn apply_transposed(&self, v: Vec3<F>, #[comptime] diagonal: bool) -> Vec3<F> {
        if diagonal {
            Vec3::<F> {
                x: self.m00 * v.x,
                y: self.m11 * v.y,
                z: self.m22 * v.z,
            }
        } else {
            Vec3::<F> {
                x: self.m00 * v.x + self.m10 * v.y + self.m20 * v.z,
                y: self.m01 * v.x + self.m11 * v.y + self.m21 * v.z,
                z: self.m02 * v.x + self.m12 * v.y + self.m22 * v.z,
            }
        }
    }
}

/// `W` and the mean of the Gaussian whose 12 prepared values start at `base` of a shared tile.
#[cube]
fn gaussian_from_tile<F: Float>(tile: &SharedMemory<F>, base: usize) -> (Mat3<F>, Vec3<F>) {
    (
        Mat3::<F> {
            m00: tile[base],
            m01: tile[base + 1],
            m02: tile[base + 2],
            m10: tile[base + 3],
            m11: tile[base + 4],
            m12: tile[base + 5],
            m20: tile[base + 6],
            m21: tile[base + 7],
            m22: tile[base + 8],
        },
        Vec3::<F> {
            x: tile[base + 9],
            y: tile[base + 10],
            z: tile[base + 11],
        },
    )
}

/// `W` and the mean of Gaussian `i` from the prepared `[N, 12]` buffer.
#[cube]
fn gaussian_from_params<F: Float>(params: &Tensor<F>, i: usize) -> (Mat3<F>, Vec3<F>) {
    let base = i * PARAMS;
    (
        Mat3::<F> {
            m00: params[base],
            m01: params[base + 1],
            m02: params[base + 2],
            m10: params[base + 3],
            m11: params[base + 4],
            m12: params[base + 5],
            m20: params[base + 6],
            m21: params[base + 7],
            m22: params[base + 8],
        },
        Vec3::<F> {
            x: params[base + 9],
            y: params[base + 10],
            z: params[base + 11],
        },
    )
}

/// Row `row` of a `[_, 3]` tensor.
#[cube]
fn load_vec3<F: Float>(t: &Tensor<F>, row: usize) -> Vec3<F> {
    Vec3::<F> {
        x: t[3 * row],
        y: t[3 * row + 1],
        z: t[3 * row + 2],
    }
}

/// The mean of Gaussian `i` from the prepared `[N, 12]` buffer.
#[cube]
fn gaussian_mean<F: Float>(params: &Tensor<F>, i: usize) -> Vec3<F> {
    let base = i * PARAMS + 9;
    Vec3::<F> {
        x: params[base],
        y: params[base + 1],
        z: params[base + 2],
    }
}

/// `a - b`.
#[cube]
fn sub3<F: Float>(a: Vec3<F>, b: Vec3<F>) -> Vec3<F> {
    Vec3::<F> {
        x: a.x - b.x,
        y: a.y - b.y,
        z: a.z - b.z,
    }
}

/// Copies `len` consecutive values of `src` from `offset` into the start of `tile`, spread over
/// the cube's units (coalesced reads).
#[cube]
fn stage<F: Float>(src: &Tensor<F>, tile: &mut SharedMemory<F>, offset: usize, len: usize) {
    let mut k = UNIT_POS as usize;
    while k < len {
        tile[k] = src[offset + k];
        k += CUBE_DIM as usize;
    }
}

/// The normalised quaternion of Gaussian `i` as `((x, y, z), w, |q|)`, or the identity and a zero
/// norm when `|q|` is below [`MIN_QUAT_NORM`] (a NaN norm propagates).
#[cube]
fn unit_quat<F: Float>(quats: &Tensor<F>, i: usize) -> (Vec3<F>, F, F) {
    let qw = quats[4 * i];
    let qx = quats[4 * i + 1];
    let qy = quats[4 * i + 2];
    let qz = quats[4 * i + 3];
    let norm = (qw * qw + qx * qx + qy * qy + qz * qz).sqrt();
    let degenerate = norm < F::new(MIN_QUAT_NORM);
    let inv = F::new(1.0) / norm;
    let zero = F::new(0.0);
    (
        Vec3::<F> {
            x: select(degenerate, zero, qx * inv),
            y: select(degenerate, zero, qy * inv),
            z: select(degenerate, zero, qz * inv),
        },
        select(degenerate, F::new(1.0), qw * inv),
        select(degenerate, zero, norm),
    )
}

/// The rotation matrix of Gaussian `i`'s normalised quaternion.
#[cube]
fn rotation<F: Float>(quats: &Tensor<F>, i: usize) -> Mat3<F> {
    let one = F::new(1.0);
    let two = F::new(2.0);
    let (v, w, _) = unit_quat::<F>(quats, i);
    let x = v.x;
    let y = v.y;
    let z = v.z;
    Mat3::<F> {
        m00: one - two * (y * y + z * z),
        m01: two * (x * y - w * z),
        m02: two * (x * z + w * y),
        m10: two * (x * y + w * z),
        m11: one - two * (x * x + z * z),
        m12: two * (y * z - w * x),
        m20: two * (x * z - w * y),
        m21: two * (y * z + w * x),
        m22: one - two * (x * x + y * y),
    }
}

/// Writes `W = S^-1 R^T` and the mean of every Gaussian into `params` `[N, 12]`.
#[cube(launch)]
fn prepare_kernel<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    params: &mut Tensor<F>,
    #[comptime] diagonal: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i < means.shape(0) {
        let one = F::new(1.0);
        let zero = F::new(0.0);
        // 1 / exp(log_scale), as the CPU computes it.
        let inv0 = one / log_scales[3 * i].exp();
        let inv1 = one / log_scales[3 * i + 1].exp();
        let inv2 = one / log_scales[3 * i + 2].exp();
        let o = i * PARAMS;
        if diagonal {
            params[o] = inv0;
            params[o + 1] = zero;
            params[o + 2] = zero;
            params[o + 3] = zero;
            params[o + 4] = inv1;
            params[o + 5] = zero;
            params[o + 6] = zero;
            params[o + 7] = zero;
            params[o + 8] = inv2;
        } else {
            // W[a][b] = R[b][a] / s_a.
            let r = rotation::<F>(quats, i);
            params[o] = r.m00 * inv0;
            params[o + 1] = r.m10 * inv0;
            params[o + 2] = r.m20 * inv0;
            params[o + 3] = r.m01 * inv1;
            params[o + 4] = r.m11 * inv1;
            params[o + 5] = r.m21 * inv1;
            params[o + 6] = r.m02 * inv2;
            params[o + 7] = r.m12 * inv2;
            params[o + 8] = r.m22 * inv2;
        }
        params[o + 9] = means[3 * i];
        params[o + 10] = means[3 * i + 1];
        params[o + 11] = means[3 * i + 2];
    }
}

/// What a point-major sweep adds for one pair with weight `e = exp(-d^2 / 2)`: the chunk
/// `c0..c0 + chunk` of `f[i] e` (the forward), or with `grad` the pair's `dL/dx = W^T gz` with
/// `gz = -s e z`, `s = g[p] . f[i]` (into `acc[0..3]`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn point_pair<F: Float>(
    acc: &mut Array<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    p: usize,
    i: usize,
    c0: usize,
    w: Mat3<F>,
    z: Vec3<F>,
    e: F,
    #[comptime] grad: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = features.shape(1);
    if grad {
        let mut s = F::new(0.0);
        for c in 0..channels {
            s += grad_values[p * channels + c] * features[i * channels + c];
        }
        let coef = -s * e;
        let gz = Vec3::<F> {
            x: coef * z.x,
            y: coef * z.y,
            z: coef * z.z,
        };
        let gv = w.apply_transposed(gz, diagonal);
        acc[0] += gv.x;
        acc[1] += gv.y;
        acc[2] += gv.z;
    } else {
        #[unroll]
        for j in 0..chunk {
            if c0 + j < channels {
                acc[j] += features[i * channels + c0 + j] * e;
            }
        }
    }
}

/// Writes a point-major sweep's accumulators: `acc[0..chunk]` into channels `c0..` of `out`
/// `[P, C]`, or with `grad` `acc[0..3]` into `out` `[P, 3]`.
#[cube]
fn write_point<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<F>,
    p: usize,
    c0: usize,
    #[comptime] chunk: usize,
) {
    let width = out.shape(1);
    #[unroll]
    for j in 0..chunk {
        if c0 + j < width {
            out[p * width + c0 + j] = acc[j];
        }
    }
}

/// Sweeps of a point-major kernel: the forward runs one per chunk of channels; the points'
/// gradient needs one (of three accumulators).
#[cube]
fn point_passes(channels: usize, #[comptime] grad: bool, #[comptime] chunk: usize) -> usize {
    if grad {
        1usize.runtime()
    } else {
        channels.div_ceil(chunk)
    }
}

/// Exact mode, one unit per point over all Gaussians: `out = values` `[P, C]`, or with `grad`
/// `out = dL/dpoints` `[P, 3]` (then `chunk` is 3). `grad_values` `[P, C]` is read only with
/// `grad` (the forward passes `features` in its place).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn point_tiles_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] grad: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let num_points = points.shape(0);
    let num_gaussians = params.shape(0);
    let p = ABSOLUTE_POS;
    let active = p < num_points;
    // Units past the last point still stage tiles and reach every barrier; they read point 0.
    let row = select(active, p, 0);
    let x = load_vec3::<F>(points, row);
    let mut tile = SharedMemory::<F>::new(BLOCK * PARAMS);
    let mut acc = Array::<F>::new(chunk);

    for pass in 0..point_passes(features.shape(1), grad, chunk) {
        let c0 = pass * chunk;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        let mut start = 0;
        while start < num_gaussians {
            let count = select(num_gaussians - start < BLOCK, num_gaussians - start, BLOCK);
            stage::<F>(params, &mut tile, start * PARAMS, count * PARAMS);
            sync_cube();
            for t in 0..count {
                let (w, mu) = gaussian_from_tile::<F>(&tile, t * PARAMS);
                let z = w.apply(sub3::<F>(x, mu), diagonal);
                let e = (F::new(-0.5) * (z.x * z.x + z.y * z.y + z.z * z.z)).exp();
                point_pair::<F>(
                    &mut acc,
                    features,
                    grad_values,
                    row,
                    start + t,
                    c0,
                    w,
                    z,
                    e,
                    grad,
                    diagonal,
                    chunk,
                );
            }
            // The next tile overwrites this one only once every unit is done with it.
            sync_cube();
            start += BLOCK;
        }
        if active {
            write_point::<F>(out, &acc, p, c0, chunk);
        }
    }
}

/// The cell of `x` at edge `h`.
#[cube]
fn cell_of<F: Float>(x: Vec3<F>, h: F) -> Cell {
    Cell {
        x: i32::cast_from((x.x / h).floor()),
        y: i32::cast_from((x.y / h).floor()),
        z: i32::cast_from((x.z / h).floor()),
    }
}

/// The hash-table bucket of `(level, cell)` in a table of `table_mask + 1` (a power of two)
/// buckets.
#[cube]
fn bucket(level: u32, c: Cell, table_mask: u32) -> usize {
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
fn span(lo: i32, hi: i32) -> u32 {
    let n = hi - lo + 1;
    u32::cast_from(select(n > 0i32, n, 1i32))
}

/// `true` when `a` and `b` are the same cell.
#[cube]
fn same_cell(a: Cell, b: Cell) -> bool {
    a.x == b.x && a.y == b.y && a.z == b.z
}

/// The edge of the level-`level` cells, `h_0 2^level` (exact in floating point).
#[cube]
fn level_edge<F: Float>(h0: F, level: u32) -> F {
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
fn point_grid_kernel<F: Float>(
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

/// What a Gaussian-major sweep adds for one pair `(p, i)` with `z = W (x_p - mu_i)` and weight
/// `e`: the chunk `c0..c0 + chunk` of `g[p] e` into `acc`, and on the first chunk (`geo`) the
/// whitened-frame sums `h z` into `geom[0..3]` and the symmetric `h z z^T` into `geom[3..9]`
/// (`[00, 01, 02, 11, 12, 22]`), with `h = 2 dL/d(d^2) = -s e`, `s = g[p] . f[i]`. The
/// parameter gradients follow from these sums in `write_gaussian` (the CPU implementation
/// explains why this frame keeps elongated Gaussians accurate).
#[cube]
#[allow(clippy::too_many_arguments)]
fn gaussian_pair<F: Float>(
    acc: &mut Array<F>,
    geom: &mut Array<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    p: usize,
    i: usize,
    c0: usize,
    geo: bool,
    z: Vec3<F>,
    e: F,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = features.shape(1);
    let g_row = p * channels;
    #[unroll]
    for j in 0..chunk {
        if c0 + j < channels {
            acc[j] += grad_values[g_row + c0 + j] * e;
        }
    }
    if geo {
        let mut s = F::new(0.0);
        for c in 0..channels {
            s += grad_values[g_row + c] * features[i * channels + c];
        }
        let h = -s * e;
        let hz = Vec3::<F> {
            x: h * z.x,
            y: h * z.y,
            z: h * z.z,
        };
        geom[0] += hz.x;
        geom[1] += hz.y;
        geom[2] += hz.z;
        geom[3] += hz.x * z.x;
        geom[6] += hz.y * z.y;
        geom[8] += hz.z * z.z;
        if !diagonal {
            geom[4] += hz.x * z.y;
            geom[5] += hz.x * z.z;
            geom[7] += hz.y * z.z;
        }
    }
}

/// Writes Gaussian `i`'s feature-gradient chunk and, on the first chunk (`geo`), its mean,
/// log-scale and quaternion gradients from the whitened sums of `gaussian_pair`:
/// `dL/dmu = -W^T sum(h z)`, `dlog_s_a = -sum(h z_a^2)`, `G = dL/dW = sum(h z z^T) S R^T`
/// (as `x - mu = R S z`), `dR[b][a] = G[a][b] / s_a`, then through `R(q)` and the normalisation
/// `q / |q|` (zero for a degenerate quaternion and in diagonal mode).
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_gaussian<F: Float>(
    acc: &Array<F>,
    geom: &Array<F>,
    w: Mat3<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    grad_means: &mut Tensor<F>,
    grad_quats: &mut Tensor<F>,
    grad_log_scales: &mut Tensor<F>,
    grad_features: &mut Tensor<F>,
    i: usize,
    c0: usize,
    geo: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = grad_features.shape(1);
    #[unroll]
    for j in 0..chunk {
        if c0 + j < channels {
            grad_features[i * channels + c0 + j] = acc[j];
        }
    }
    if geo {
        let zero = F::new(0.0);
        let d_mean = w.apply_transposed(
            Vec3::<F> {
                x: geom[0],
                y: geom[1],
                z: geom[2],
            },
            diagonal,
        );
        grad_means[3 * i] = -d_mean.x;
        grad_means[3 * i + 1] = -d_mean.y;
        grad_means[3 * i + 2] = -d_mean.z;
        grad_log_scales[3 * i] = -geom[3];
        grad_log_scales[3 * i + 1] = -geom[6];
        grad_log_scales[3 * i + 2] = -geom[8];
        if diagonal {
            grad_quats[4 * i] = zero;
            grad_quats[4 * i + 1] = zero;
            grad_quats[4 * i + 2] = zero;
            grad_quats[4 * i + 3] = zero;
        } else {
            // dL/dR[b][a] = G[a][b] / s_a = sum_c K[a][c] (s_c / s_a) R[b][c], with
            // K = sum(h z z^T) and the ratio as exp(log_s_c - log_s_a), finite even when a
            // scale overflows. `kr` is K with those ratios, `d` = kr R^T: d[a][b] = dL/dR[b][a].
            let l0 = log_scales[3 * i];
            let l1 = log_scales[3 * i + 1];
            let l2 = log_scales[3 * i + 2];
            let kr = Mat3::<F> {
                m00: geom[3],
                m01: geom[4] * (l1 - l0).exp(),
                m02: geom[5] * (l2 - l0).exp(),
                m10: geom[4] * (l0 - l1).exp(),
                m11: geom[6],
                m12: geom[7] * (l2 - l1).exp(),
                m20: geom[5] * (l0 - l2).exp(),
                m21: geom[7] * (l1 - l2).exp(),
                m22: geom[8],
            };
            let r = rotation::<F>(quats, i);
            let d = Mat3::<F> {
                m00: kr.m00 * r.m00 + kr.m01 * r.m01 + kr.m02 * r.m02,
                m01: kr.m00 * r.m10 + kr.m01 * r.m11 + kr.m02 * r.m12,
                m02: kr.m00 * r.m20 + kr.m01 * r.m21 + kr.m02 * r.m22,
                m10: kr.m10 * r.m00 + kr.m11 * r.m01 + kr.m12 * r.m02,
                m11: kr.m10 * r.m10 + kr.m11 * r.m11 + kr.m12 * r.m12,
                m12: kr.m10 * r.m20 + kr.m11 * r.m21 + kr.m12 * r.m22,
                m20: kr.m20 * r.m00 + kr.m21 * r.m01 + kr.m22 * r.m02,
                m21: kr.m20 * r.m10 + kr.m21 * r.m11 + kr.m22 * r.m12,
                m22: kr.m20 * r.m20 + kr.m21 * r.m21 + kr.m22 * r.m22,
            };
            let one = F::new(1.0);
            let two = F::new(2.0);
            let (q, qw, norm) = unit_quat::<F>(quats, i);
            let x = q.x;
            let y = q.y;
            let z = q.z;
            // r_ba = dL/dR[b][a] = d[a][b].
            let r00 = d.m00;
            let r01 = d.m10;
            let r02 = d.m20;
            let r10 = d.m01;
            let r11 = d.m11;
            let r12 = d.m21;
            let r20 = d.m02;
            let r21 = d.m12;
            let r22 = d.m22;
            let gw = two * (-z * r01 + y * r02 + z * r10 - x * r12 - y * r20 + x * r21);
            let gx = two
                * (y * r01 + z * r02 + y * r10 - two * x * r11 - qw * r12 + z * r20 + qw * r21
                    - two * x * r22);
            let gy = two
                * (-two * y * r00 + x * r01 + qw * r02 + x * r10 + z * r12 - qw * r20 + z * r21
                    - two * y * r22);
            let gz = two
                * (-two * z * r00 - qw * r01 + x * r02 + qw * r10 - two * z * r11
                    + y * r12
                    + x * r20
                    + y * r21);
            let dot = gw * qw + gx * x + gy * y + gz * z;
            // The norm is zero only for a degenerate quaternion, whose gradient is zero.
            let degenerate = norm == zero;
            let inv = one / select(degenerate, one, norm);
            grad_quats[4 * i] = select(degenerate, zero, (gw - qw * dot) * inv);
            grad_quats[4 * i + 1] = select(degenerate, zero, (gx - x * dot) * inv);
            grad_quats[4 * i + 2] = select(degenerate, zero, (gy - y * dot) * inv);
            grad_quats[4 * i + 3] = select(degenerate, zero, (gz - z * dot) * inv);
        }
    }
}

/// Exact mode, one unit per Gaussian over all points: `dL/dmu`, `dL/dquat`, `dL/dlog_scale`
/// and `dL/df` of its own Gaussian.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn gaussian_tiles_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    grad_means: &mut Tensor<F>,
    grad_quats: &mut Tensor<F>,
    grad_log_scales: &mut Tensor<F>,
    grad_features: &mut Tensor<F>,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let num_points = points.shape(0);
    let num_gaussians = params.shape(0);
    let i = ABSOLUTE_POS;
    let active = i < num_gaussians;
    // Units past the last Gaussian still stage tiles and reach every barrier.
    let gi = select(active, i, 0);
    let (w, mu) = gaussian_from_params::<F>(params, gi);
    let mut tile = SharedMemory::<F>::new(BLOCK * 3);
    let mut acc = Array::<F>::new(chunk);
    let mut geom = Array::<F>::new(12usize);

    for pass in 0..features.shape(1).div_ceil(chunk) {
        let c0 = pass * chunk;
        // The geometric gradients need every channel of s: the first chunk's sweep accumulates
        // them, later chunks only their feature gradients.
        let geo = pass == 0;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        #[unroll]
        for j in 0..12usize {
            geom[j] = F::new(0.0);
        }
        let mut start = 0;
        while start < num_points {
            let count = select(num_points - start < BLOCK, num_points - start, BLOCK);
            stage::<F>(points, &mut tile, start * 3, count * 3);
            sync_cube();
            for t in 0..count {
                let x = Vec3::<F> {
                    x: tile[3 * t],
                    y: tile[3 * t + 1],
                    z: tile[3 * t + 2],
                };
                let z = w.apply(sub3::<F>(x, mu), diagonal);
                let e = (F::new(-0.5) * (z.x * z.x + z.y * z.y + z.z * z.z)).exp();
                gaussian_pair::<F>(
                    &mut acc,
                    &mut geom,
                    features,
                    grad_values,
                    start + t,
                    gi,
                    c0,
                    geo,
                    z,
                    e,
                    diagonal,
                    chunk,
                );
            }
            sync_cube();
            start += BLOCK;
        }
        if active {
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
fn gaussian_grid_kernel<F: Float>(
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
fn extent_kernel<F: Float>(
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
fn box_radius<F: Float>(extents: &Tensor<F>, i: usize) -> (F, bool) {
    let e = load_vec3::<F>(extents, i);
    let max = F::new(FINITE_MAX);
    (
        e.x.max(e.y).max(e.z),
        e.x <= max && e.y <= max && e.z <= max,
    )
}

/// `|x|` when finite, else 0.
#[cube]
fn finite_abs<F: Float>(x: F) -> F {
    let a = x.abs();
    select(a <= F::new(FINITE_MAX), a, F::new(0.0))
}

/// Tree reduction of `values[0..BLOCK]` into `values[0]`, with `max` or a sum.
#[cube]
fn reduce_shared<F: Float>(values: &mut SharedMemory<F>, #[comptime] max: bool) {
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
fn cell_edge_kernel<F: Float>(
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

/// Per Gaussian (over the padded sort length): its level and cell into `gaussian_cells`
/// `[N, 4]`, and its `(bucket, index)` sort entry; padding entries get [`PAD_KEY`].
#[cube(launch)]
fn gaussian_keys_kernel<F: Float>(
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
fn level_mask_kernel(gaussian_cells: &Tensor<i32>, levels: &mut Tensor<u32>) {
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

/// Per point (over the padded sort length): its level-0 cell into `point_cells` `[P, 3]`, and
/// its `(bucket, index)` sort entry; padding entries get [`PAD_KEY`].
#[cube(launch)]
fn point_keys_kernel<F: Float>(
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

/// One compare-exchange step `(k, j)` of a bitonic sort of `(keys, values)` pairs (length a
/// power of two), ascending by key then value.
#[cube(launch)]
fn bitonic_step_kernel(keys: &mut Tensor<u32>, values: &mut Tensor<u32>, k: u32, j: u32) {
    let i = ABSOLUTE_POS;
    if i < keys.shape(0) {
        let a = i as u32;
        let partner = (a ^ j) as usize;
        if partner > i {
            let ka = keys[i];
            let kb = keys[partner];
            let va = values[i];
            let vb = values[partner];
            let greater = ka > kb || (ka == kb && va > vb);
            let ascending = (a & k) == 0u32;
            if greater == ascending {
                keys[i] = kb;
                keys[partner] = ka;
                values[i] = vb;
                values[partner] = va;
            }
        }
    }
}

/// `starts[b]` = the first position of `keys` (sorted) holding a key `>= b`.
#[cube(launch)]
fn bucket_starts_kernel(keys: &Tensor<u32>, starts: &mut Tensor<u32>) {
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

/// One launch configuration: a unit per item, [`BLOCK`] units per cube.
fn launch_dims<R: CubeRuntime>(client: &ComputeClient<R>, items: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(BLOCK as u32);
    (calculate_cube_count_elemwise(client, items, dim), dim)
}

/// The launch configuration of the single-cube reductions.
fn one_cube() -> (CubeCount, CubeDim) {
    (CubeCount::Static(1, 1, 1), CubeDim::new_1d(BLOCK as u32))
}

/// Register accumulators per unit for `channels` feature channels.
fn chunk_for(channels: usize) -> usize {
    channels.clamp(1, MAX_CHUNK)
}

/// A contiguous tensor of the given shape, written entirely by a kernel.
fn output<R: CubeRuntime, const D: usize>(
    like: &CubeTensor<R>,
    shape: [usize; D],
    dtype: DType,
) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::new(shape),
        dtype,
    )
}

/// Sorts `(keys, values)` (length a power of two) ascending by key then value, on the device.
fn sort_pairs<R: CubeRuntime>(keys: &CubeTensor<R>, values: &CubeTensor<R>) {
    let len = keys.shape().num_elements();
    let (count, dim) = launch_dims(&keys.client, len);
    let mut k = 2;
    while k <= len {
        let mut j = k / 2;
        while j > 0 {
            bitonic_step_kernel::launch::<R>(
                &keys.client,
                count.clone(),
                dim,
                keys.clone().into_tensor_arg(),
                values.clone().into_tensor_arg(),
                k as u32,
                j as u32,
            );
            j /= 2;
        }
        k *= 2;
    }
}

/// Entries sorted by hash bucket: bucket `b` holds `order[starts[b]..starts[b + 1]]`.
struct Buckets<R: CubeRuntime> {
    /// Item indices sorted by `(bucket, index)`, padded to a power of two.
    order: CubeTensor<R>,
    /// `[T + 1]`
    starts: CubeTensor<R>,
    /// `T - 1` (`T` a power of two).
    table_mask: u32,
}

impl<R: CubeRuntime> Buckets<R> {
    /// The hash-table size for `items` entries: a power of two, at least twice the count.
    fn table_size(items: usize) -> usize {
        (2 * items).next_power_of_two()
    }

    /// Sorts the `(keys, order)` entries the caller's key kernel wrote and finds the buckets.
    fn build(keys: CubeTensor<R>, order: CubeTensor<R>, table: usize) -> Self {
        sort_pairs(&keys, &order);
        let starts = output(&keys, [table + 1], DType::U32);
        let (count, dim) = launch_dims(&keys.client, table + 1);
        bucket_starts_kernel::launch::<R>(
            &keys.client,
            count,
            dim,
            keys.clone().into_tensor_arg(),
            starts.clone().into_tensor_arg(),
        );
        Buckets {
            order,
            starts,
            table_mask: (table - 1) as u32,
        }
    }
}

/// The Gaussians of one call binned on the device (see the module docs).
struct GaussianGrid<R: CubeRuntime> {
    /// `[1]`: the level-0 cell edge `h_0`.
    edge: CubeTensor<R>,
    /// `[N, 3]`: box half-extents.
    extents: CubeTensor<R>,
    /// `[N, 4]` i32: level, then cell.
    cells: CubeTensor<R>,
    /// `[1]` u32: the occupied levels as bits.
    levels: CubeTensor<R>,
    buckets: Buckets<R>,
    /// `k^2`
    cutoff_sq: f32,
}

impl<R: CubeRuntime> GaussianGrid<R> {
    /// Bins the Gaussians of `prep` for a cutoff of `k` standard deviations.
    fn new(prep: &Prepared<R>, k: f32) -> Self {
        let client = &prep.params.client;
        let n = prep.num_gaussians;
        let extents = output(&prep.params, [n, 3], prep.dtype);
        let (count, dim) = launch_dims(client, n);
        extent_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.params.clone().into_tensor_arg(),
            prep.quats.clone().into_tensor_arg(),
            prep.log_scales.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            k,
            prep.diagonal,
            prep.dtype.into(),
        );

        let edge = output(&prep.params, [1], prep.dtype);
        let (count, dim) = one_cube();
        cell_edge_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.points.clone().into_tensor_arg(),
            prep.params.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            edge.clone().into_tensor_arg(),
            prep.dtype.into(),
        );

        let padded = n.next_power_of_two();
        let table = Buckets::<R>::table_size(n);
        let cells = output(&prep.params, [n, 4], DType::I32);
        let keys = output(&prep.params, [padded], DType::U32);
        let order = output(&prep.params, [padded], DType::U32);
        let (count, dim) = launch_dims(client, padded);
        gaussian_keys_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.params.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            edge.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            keys.clone().into_tensor_arg(),
            order.clone().into_tensor_arg(),
            (table - 1) as u32,
            prep.dtype.into(),
        );

        let levels = output(&prep.params, [1], DType::U32);
        let (count, dim) = one_cube();
        level_mask_kernel::launch::<R>(
            client,
            count,
            dim,
            cells.clone().into_tensor_arg(),
            levels.clone().into_tensor_arg(),
        );

        GaussianGrid {
            edge,
            extents,
            cells,
            levels,
            buckets: Buckets::build(keys, order, table),
            cutoff_sq: k * k,
        }
    }
}

/// The points binned into the level-0 cells of a [`GaussianGrid`].
struct PointGrid<R: CubeRuntime> {
    /// `[P, 3]` i32
    cells: CubeTensor<R>,
    buckets: Buckets<R>,
}

impl<R: CubeRuntime> PointGrid<R> {
    fn new(prep: &Prepared<R>, grid: &GaussianGrid<R>) -> Self {
        let client = &prep.points.client;
        let p = prep.num_points;
        let padded = p.next_power_of_two();
        let table = Buckets::<R>::table_size(p);
        let cells = output(&prep.points, [p, 3], DType::I32);
        let keys = output(&prep.points, [padded], DType::U32);
        let order = output(&prep.points, [padded], DType::U32);
        let (count, dim) = launch_dims(client, padded);
        point_keys_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.points.clone().into_tensor_arg(),
            grid.edge.clone().into_tensor_arg(),
            cells.clone().into_tensor_arg(),
            keys.clone().into_tensor_arg(),
            order.clone().into_tensor_arg(),
            (table - 1) as u32,
            prep.dtype.into(),
        );
        PointGrid {
            cells,
            buckets: Buckets::build(keys, order, table),
        }
    }
}

/// The inputs made contiguous (the kernels index rows directly) and the prepared `[N, 12]`
/// per-Gaussian buffer.
struct Prepared<R: CubeRuntime> {
    points: CubeTensor<R>,
    quats: CubeTensor<R>,
    log_scales: CubeTensor<R>,
    features: CubeTensor<R>,
    params: CubeTensor<R>,
    num_points: usize,
    num_gaussians: usize,
    channels: usize,
    dtype: DType,
    diagonal: bool,
}

impl<R: CubeRuntime> Prepared<R> {
    fn new<F: FloatElement, I: IntElement, BT: BoolElement>(
        inputs: FieldInputs<CubeBackend<R, F, I, BT>>,
        options: &FieldOptions,
    ) -> Self {
        let points = into_contiguous(inputs.points);
        let means = into_contiguous(inputs.means);
        let quats = into_contiguous(inputs.quats);
        let log_scales = into_contiguous(inputs.log_scales);
        let features = into_contiguous(inputs.features);
        let [num_points, _] = points.shape().dims::<2>();
        let [num_gaussians, channels] = features.shape().dims::<2>();
        let dtype = points.dtype;
        let diagonal = options.covariance == Covariance::Diagonal;
        let params = output(&means, [num_gaussians, PARAMS], dtype);
        let (count, dim) = launch_dims(&means.client, num_gaussians);
        prepare_kernel::launch::<R>(
            &means.client,
            count,
            dim,
            means.clone().into_tensor_arg(),
            quats.clone().into_tensor_arg(),
            log_scales.clone().into_tensor_arg(),
            params.clone().into_tensor_arg(),
            diagonal,
            dtype.into(),
        );
        Prepared {
            points,
            quats,
            log_scales,
            features,
            params,
            num_points,
            num_gaussians,
            channels,
            dtype,
            diagonal,
        }
    }

    /// A point-major sweep into `out`: the values (`grad_values = None`) or the points' gradient;
    /// over all Gaussians, or with a `grid` over those within reach.
    fn point_sweep(
        &self,
        grid: Option<&GaussianGrid<R>>,
        grad_values: Option<&CubeTensor<R>>,
        out: &CubeTensor<R>,
    ) {
        let client = &self.points.client;
        let (count, dim) = launch_dims(client, self.num_points);
        let grad = grad_values.is_some();
        // The forward never reads `grad_values`; any tensor fills the slot.
        let grad_values = grad_values.unwrap_or(&self.features);
        let chunk = if grad { 3 } else { chunk_for(self.channels) };
        match grid {
            None => point_tiles_kernel::launch::<R>(
                client,
                count,
                dim,
                self.points.clone().into_tensor_arg(),
                self.params.clone().into_tensor_arg(),
                self.features.clone().into_tensor_arg(),
                grad_values.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                grad,
                self.diagonal,
                chunk,
                self.dtype.into(),
            ),
            Some(grid) => point_grid_kernel::launch::<R>(
                client,
                count,
                dim,
                self.points.clone().into_tensor_arg(),
                self.params.clone().into_tensor_arg(),
                self.features.clone().into_tensor_arg(),
                grad_values.clone().into_tensor_arg(),
                grid.edge.clone().into_tensor_arg(),
                grid.levels.clone().into_tensor_arg(),
                grid.cells.clone().into_tensor_arg(),
                grid.buckets.order.clone().into_tensor_arg(),
                grid.buckets.starts.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                grid.cutoff_sq,
                grid.buckets.table_mask,
                grad,
                self.diagonal,
                chunk,
                self.dtype.into(),
            ),
        }
    }
}

/// [`SplatBackend::field_forward`](crate::SplatBackend::field_forward) for `CubeBackend<R, F, I, BT>`.
pub(crate) fn forward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    inputs: FieldInputs<CubeBackend<R, F, I, BT>>,
    options: FieldOptions,
) -> FloatTensor<CubeBackend<R, F, I, BT>> {
    let prep = Prepared::new(inputs, &options);
    let values = output(&prep.points, [prep.num_points, prep.channels], prep.dtype);
    let grid = options.cutoff.map(|k| GaussianGrid::new(&prep, k));
    prep.point_sweep(grid.as_ref(), None, &values);
    values
}

/// [`SplatBackend::field_backward`](crate::SplatBackend::field_backward) for `CubeBackend<R, F, I, BT>`.
pub(crate) fn backward<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    inputs: FieldInputs<CubeBackend<R, F, I, BT>>,
    grad_values: FloatTensor<CubeBackend<R, F, I, BT>>,
    options: FieldOptions,
    points_grad: bool,
) -> FieldGrads<CubeBackend<R, F, I, BT>> {
    let prep = Prepared::new(inputs, &options);
    let grad_values = into_contiguous(grad_values);
    let client = &prep.points.client;
    let grid = options.cutoff.map(|k| GaussianGrid::new(&prep, k));

    let grad_points = points_grad.then(|| {
        let grad_points = output(&prep.points, [prep.num_points, 3], prep.dtype);
        prep.point_sweep(grid.as_ref(), Some(&grad_values), &grad_points);
        grad_points
    });

    let n = prep.num_gaussians;
    let grad_means = output(&prep.points, [n, 3], prep.dtype);
    let grad_quats = output(&prep.points, [n, 4], prep.dtype);
    let grad_log_scales = output(&prep.points, [n, 3], prep.dtype);
    let grad_features = output(&prep.points, [n, prep.channels], prep.dtype);
    let (count, dim) = launch_dims(client, n);
    let chunk = chunk_for(prep.channels);
    match &grid {
        None => gaussian_tiles_kernel::launch::<R>(
            client,
            count,
            dim,
            prep.points.clone().into_tensor_arg(),
            prep.params.clone().into_tensor_arg(),
            prep.quats.clone().into_tensor_arg(),
            prep.log_scales.clone().into_tensor_arg(),
            prep.features.clone().into_tensor_arg(),
            grad_values.into_tensor_arg(),
            grad_means.clone().into_tensor_arg(),
            grad_quats.clone().into_tensor_arg(),
            grad_log_scales.clone().into_tensor_arg(),
            grad_features.clone().into_tensor_arg(),
            prep.diagonal,
            chunk,
            prep.dtype.into(),
        ),
        Some(grid) => {
            let points = PointGrid::new(&prep, grid);
            gaussian_grid_kernel::launch::<R>(
                client,
                count,
                dim,
                prep.points.clone().into_tensor_arg(),
                prep.params.clone().into_tensor_arg(),
                prep.quats.clone().into_tensor_arg(),
                prep.log_scales.clone().into_tensor_arg(),
                prep.features.clone().into_tensor_arg(),
                grad_values.into_tensor_arg(),
                grid.edge.clone().into_tensor_arg(),
                grid.extents.clone().into_tensor_arg(),
                grid.cells.clone().into_tensor_arg(),
                points.cells.clone().into_tensor_arg(),
                points.buckets.order.clone().into_tensor_arg(),
                points.buckets.starts.clone().into_tensor_arg(),
                grad_means.clone().into_tensor_arg(),
                grad_quats.clone().into_tensor_arg(),
                grad_log_scales.clone().into_tensor_arg(),
                grad_features.clone().into_tensor_arg(),
                grid.cutoff_sq,
                points.buckets.table_mask,
                prep.diagonal,
                chunk,
                prep.dtype.into(),
            )
        }
    }

    FieldGrads {
        points: grad_points,
        means: grad_means,
        quats: grad_quats,
        log_scales: grad_log_scales,
        features: grad_features,
    }
}
