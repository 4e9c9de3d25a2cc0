//! The tile rasterizer as CubeCL kernels, generic over the CubeCL runtime and the float type.
//!
//! # Binning (no host sort, one read-back)
//! 1. `depth_keys_kernel`: every Gaussian's depth as a sortable `u32` key (the bits of a
//!    positive `f32` order like the value); [`sort_pairs`] sorts the Gaussian indices by it,
//!    stably, so equal depths stay in index order.
//! 2. `tile_counts_kernel` gathers the tile counts in that order; [`exclusive_sum`] gives each
//!    Gaussian its first slot, and the total `M` is read back (the one host synchronisation:
//!    the buffers below are sized by it).
//! 3. `emit_kernel` writes one `(tile, gaussian)` entry per tile each Gaussian covers, in depth
//!    order, leaving out the tiles of a box of at least 2x2 tiles that its ellipse does not
//!    reach (`cover`; their slots get a padding key past every tile); a radix sort on the tile
//!    key (only the bits the tile count needs) keeps the depth order inside each tile, which is
//!    the CPU's `(depth, index)` order less the Gaussians that draw nothing there. With `C` views
//!    the tiles are numbered `v tiles + local`, `v` the view of the row (`row / (rows / C)`), so
//!    one sort bins every view and a tile's list holds only its own view's rows.
//! 4. `tile_offsets_kernel` finds where each tile's run starts: the CSR offsets.
//!
//! # Compositing
//! One cube per 16x16 tile and view (the view is the cube's `z`), one unit per pixel. The tile's list is walked in batches of 256
//! Gaussians that the units load together into shared memory (the packed rows); each unit
//! composites its pixel front to back exactly as the CPU does. Before each batch the cube
//! counts its finished pixels and stops when all are done.
//!
//! # Backward
//! Same layout, back to front: each unit replays its pixel from its `last` entry with the
//! transmittance recovered by division, and adds its contributions to the per-Gaussian
//! gradient rows with atomic float additions: native where the runtime has them (CUDA), else
//! a compare-and-swap loop on the `f32` bits (WGSL). Where the runtime has plane (warp)
//! operations in divergent control flow (CUDA), the units of a plane sum their contributions
//! first and one of them adds the sums, so a Gaussian drawn on a whole tile costs 8 atomic
//! rows instead of 256. The sums are therefore not bit-reproducible run to run on the GPU (the
//! CPU's are). The batches start at the largest `last` of the tile's pixels.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::prelude::*;

use super::RasterOps;
use super::{
    IMAGE_ALPHA, IMAGE_CHANNELS, IMAGE_DEPTH, RasterGradPrimitives, RasterPrimitives, RasterSetup,
    RasterState,
};
use crate::cube_alloc::output;
use crate::project::cpu::TILE_SIZE;
use crate::project::{
    PACKED_COLOR, PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_WIDTH, PACKED_XY,
};
mod cover;

use self::cover::{cover_new, cover_row};
use crate::sort::cube::{BLOCK, block_dims, exclusive_sum, sort_pairs, u32_tensor};

/// Below this alpha a Gaussian is skipped at a pixel.
const MIN_ALPHA: f32 = 1.0 / 255.0;

/// Alpha is clamped to this.
const MAX_ALPHA: f32 = 0.999;

/// A pixel stops before the Gaussian that would take its transmittance to this or below.
const MIN_TRANSMITTANCE: f32 = 1e-4;

/// Gradient values accumulated per Gaussian: the packed row's, then `xy_abs`.
const GRAD_WIDTH: usize = PACKED_WIDTH + 1;

/// Pixels along a tile side (the cube is `TILE * TILE` units).
const TILE: u32 = TILE_SIZE;

/// Per Gaussian: its depth's bits as a sort key, and its index.
#[cube(launch)]
fn depth_keys_kernel<F: Float>(
    packed: &Tensor<F>,
    keys: &mut Tensor<u32>,
    ids: &mut Tensor<u32>,
    n: u32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    // Kept Gaussians lie beyond the near plane (positive depth); culled ones have zeros and
    // no tiles. `max` maps a negative zero to the smallest key.
    let depth = f32::max(f32::cast_from(packed[i * PACKED_WIDTH + PACKED_DEPTH]), 0.0);
    keys[i] = u32::reinterpret(depth);
    ids[i] = i as u32;
}

/// Per position `k` of the depth order: the tile count of the Gaussian there.
#[cube(launch)]
fn tile_counts_kernel<I: Int>(
    extents: &Tensor<I>,
    order: &Tensor<u32>,
    counts: &mut Tensor<u32>,
    n: u32,
    #[define(I)] _dtype: StorageType,
) {
    let k = ABSOLUTE_POS;
    if k >= n as usize {
        terminate!();
    }
    let g = order[k] as usize;
    counts[k] = u32::cast_from(extents[3 * g + 2]);
}

/// Per position `k < n` of the depth order: one `(tile, gaussian)` entry per tile of its screen
/// box that its ellipse reaches where the box is trimmed ([`cover`]), from slot `starts[k]` on,
/// tiles row-major, numbered from its view's first tile. The stored count is the box's: the
/// slots a trimmed box leaves, and any a recomputed box could leave or overrun (the count is
/// the projection's float rule), are capped at the count and padded with the key
/// `views tiles` (sorted past every tile and outside every range), so no slot is left
/// unwritten.
///
/// The lists hold `capacity` slots. A Gaussian whose slots do not all fit writes none: it and
/// every one behind it are left to the overflow walk, and the one whose slots straddle the end
/// pads them and records its position as `pairs[1]` (the rows the lists hold; `n` when all
/// fit, written by the last position). The last position also copies the total into
/// `pairs[0]`. The units `n + s` pad the slots `s` past the total, up to `capacity`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn emit_kernel<F: Float, I: Int>(
    packed: &Tensor<F>,
    extents: &Tensor<I>,
    order: &Tensor<u32>,
    starts: &Tensor<u32>,
    total: &Tensor<u32>,
    tile_keys: &mut Tensor<u32>,
    tile_ids: &mut Tensor<u32>,
    pairs: &mut Tensor<u32>,
    n: u32,
    rows_per_view: u32,
    tiles_x: u32,
    tiles_y: u32,
    capacity: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let k = ABSOLUTE_POS;
    let views = n / rows_per_view;
    let padding = views * tiles_x * tiles_y;
    if k >= n as usize {
        let slot = k - n as usize;
        if slot >= total[0] as usize && slot < capacity as usize {
            tile_keys[slot] = padding;
            tile_ids[slot] = 0;
        }
        terminate!();
    }
    let g = order[k];
    let row = g as usize;
    let view_base = (g / rows_per_view) * tiles_x * tiles_y;
    let count = u32::cast_from(extents[3 * row + 2]);
    let start = starts[k];
    let fits = start + count <= capacity;
    if k + 1 == n as usize {
        pairs[0] = total[0];
        if fits {
            pairs[1] = n;
        }
    }
    if !fits {
        if start <= capacity {
            pairs[1] = k as u32;
            for slot in start..capacity {
                tile_keys[slot as usize] = padding;
                tile_ids[slot as usize] = g;
            }
        }
        terminate!();
    }
    if count == 0 {
        terminate!();
    }
    let o = row * PACKED_WIDTH;
    let cover = cover_new::<F>(
        packed[o + PACKED_XY],
        packed[o + PACKED_XY + 1],
        packed[o + PACKED_CONIC],
        packed[o + PACKED_CONIC + 1],
        packed[o + PACKED_CONIC + 2],
        packed[o + PACKED_OPACITY],
        F::cast_from(extents[3 * row]),
        F::cast_from(extents[3 * row + 1]),
        tiles_x,
        tiles_y,
    );
    let start = start as usize;
    let mut written = 0u32.runtime();
    for ty in cover.y0..cover.y1 {
        let span = cover_row::<F>(&cover, ty);
        for tx in span.lo..span.hi {
            if written < count {
                tile_keys[start + written as usize] = view_base + ty * tiles_x + tx;
                tile_ids[start + written as usize] = g;
                written += 1;
            }
        }
    }
    while written < count {
        tile_keys[start + written as usize] = padding;
        tile_ids[start + written as usize] = g;
        written += 1;
    }
}

/// Whether [`emit_kernel`] lists row `g` in tile `(tx, ty)` of its view: the tile is one of
/// its trimmed box's, within the first `count` of them in row-major order.
#[cube]
#[allow(clippy::too_many_arguments)]
fn listed_in<F: Float, I: Int>(
    packed: &Tensor<F>,
    extents: &Tensor<I>,
    g: u32,
    tx: u32,
    ty: u32,
    tiles_x: u32,
    tiles_y: u32,
) -> bool {
    let row = g as usize;
    let count = u32::cast_from(extents[3 * row + 2]);
    let mut listed = false;
    if count > 0 {
        let o = row * PACKED_WIDTH;
        let cover = cover_new::<F>(
            packed[o + PACKED_XY],
            packed[o + PACKED_XY + 1],
            packed[o + PACKED_CONIC],
            packed[o + PACKED_CONIC + 1],
            packed[o + PACKED_CONIC + 2],
            packed[o + PACKED_OPACITY],
            F::cast_from(extents[3 * row]),
            F::cast_from(extents[3 * row + 1]),
            tiles_x,
            tiles_y,
        );
        if cover.y0 <= ty && ty < cover.y1 {
            let mut before = 0u32.runtime();
            for y in cover.y0..ty {
                let span = cover_row::<F>(&cover, y);
                before += span.hi - span.lo;
            }
            let span = cover_row::<F>(&cover, ty);
            listed = span.lo <= tx && tx < span.hi && before + (tx - span.lo) < count;
        }
    }
    listed
}

/// Per sorted entry `i <= m`: the offsets of the tiles whose runs start at `i` (for `i = m`,
/// of the tiles after the last run).
#[cube(launch)]
fn tile_offsets_kernel(tile_keys: &Tensor<u32>, offsets: &mut Tensor<u32>, m: u32, tiles: u32) {
    let i = ABSOLUTE_POS;
    if i > m as usize {
        terminate!();
    }
    let mut first = 0u32.runtime();
    if i > 0 {
        first = tile_keys[i - 1] + 1;
    }
    let mut key = tiles;
    if i < m as usize {
        key = u32::min(tile_keys[i], tiles);
    }
    for t in first..key + 1 {
        offsets[t as usize] = i as u32;
    }
}

/// Sum of `values[0..BLOCK]` (`max` = false) or their maximum into `values[0]`, for all units.
#[cube]
fn reduce_u32(values: &mut SharedMemory<u32>, #[comptime] max: bool) -> u32 {
    let u = UNIT_POS as usize;
    let mut stride = (BLOCK / 2).runtime();
    while stride > 0 {
        if u < stride {
            if max {
                values[u] = u32::max(values[u], values[u + stride]);
            } else {
                values[u] = values[u] + values[u + stride];
            }
        }
        sync_cube();
        stride /= 2;
    }
    values[0]
}

/// Where a tile's walk reads its entries: entry `e < listed` is its list's `ids[start + e]`,
/// entry `e >= listed` the depth rank `cut + e - listed` of the overflow walk (see
/// [`RasterState::pairs`]), drawn there when the tile would have listed it.
#[derive(CubeType, Clone, Copy)]
struct Walk {
    start: u32,
    listed: u32,
    cut: u32,
    /// `listed` plus the overflow walk's ranks: the walk's end.
    entries: u32,
    view: u32,
    rows_per_view: u32,
    tx: u32,
    ty: u32,
    tiles_x: u32,
    tiles_y: u32,
}

/// The walk of this cube's tile (see [`Walk`]).
#[cube]
fn tile_walk(offsets: &Tensor<u32>, pairs: &Tensor<u32>, rows: u32, views: u32) -> Walk {
    let view = CUBE_POS_Z;
    let tile = view * CUBE_COUNT_X * CUBE_COUNT_Y + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X;
    let start = offsets[tile as usize];
    let listed = offsets[tile as usize + 1] - start;
    let cut = pairs[1];
    Walk {
        start,
        listed,
        cut,
        entries: listed + (rows - cut),
        view,
        rows_per_view: rows / views,
        tx: CUBE_POS_X,
        ty: CUBE_POS_Y,
        tiles_x: CUBE_COUNT_X,
        tiles_y: CUBE_COUNT_Y,
    }
}

/// Loads the walk's entries `lo + u` (`u` the unit, below `hi`; a batch lies wholly in the
/// list or wholly past it) into the batch: the packed rows, their indices and whether the
/// tile draws them (`member`).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_batch<F: Float, I: Int>(
    packed: &Tensor<F>,
    extents: &Tensor<I>,
    ids: &Tensor<u32>,
    order: &Tensor<u32>,
    walk: &Walk,
    rows: &mut SharedMemory<F>,
    batch_ids: &mut SharedMemory<u32>,
    member: &mut SharedMemory<u32>,
    lo: u32,
    hi: u32,
) {
    let u = UNIT_POS;
    if lo + u < hi {
        let e = lo + u;
        let in_list = e < walk.listed;
        let g = if in_list {
            ids[(walk.start + e) as usize]
        } else {
            order[(walk.cut + e - walk.listed) as usize]
        };
        let mut drawn = true;
        if !in_list {
            drawn = g / walk.rows_per_view == walk.view
                && listed_in::<F, I>(
                    packed,
                    extents,
                    g,
                    walk.tx,
                    walk.ty,
                    walk.tiles_x,
                    walk.tiles_y,
                );
        }
        batch_ids[u as usize] = g;
        member[u as usize] = select(drawn, 1u32, 0u32);
        let src = g as usize * PACKED_WIDTH;
        #[unroll]
        for c in 0..PACKED_WIDTH {
            rows[u as usize * PACKED_WIDTH + c] = packed[src + c];
        }
    }
}

/// The end of the batch of the walk starting at entry `lo` (front to back): at most a block,
/// and not past the end of the list when it starts in it.
#[cube]
fn batch_end(walk: &Walk, lo: u32) -> u32 {
    let mut end = walk.entries;
    if lo < walk.listed {
        end = walk.listed;
    }
    u32::min(lo + BLOCK as u32, end)
}

/// The start of the batch of the walk ending before entry `hi` (back to front): at most a
/// block, and not before the end of the list when it ends past it.
#[cube]
fn batch_start(walk: &Walk, hi: u32) -> u32 {
    let mut first = 0u32.runtime();
    if hi > walk.listed {
        first = walk.listed;
    }
    let mut lo = first;
    if hi - first > BLOCK as u32 {
        lo = hi - BLOCK as u32;
    }
    lo
}

/// One Gaussian (a row of the batch) at a pixel centre: `(dx, dy, sigma)`.
#[cube]
fn offset_sigma<F: Float>(rows: &SharedMemory<F>, r: usize, cx: F, cy: F) -> (F, F, F) {
    let dx = cx - rows[r];
    let dy = cy - rows[r + 1];
    let a = rows[r + PACKED_CONIC];
    let b = rows[r + PACKED_CONIC + 1];
    let c = rows[r + PACKED_CONIC + 2];
    let sigma = F::new(0.5) * (a * dx * dx + c * dy * dy) + b * dx * dy;
    (dx, dy, sigma)
}

/// One cube per tile, one unit per pixel: the forward compositing (see the module docs).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rasterize_kernel<F: Float, I: Int>(
    packed: &Tensor<F>,
    extents: &Tensor<I>,
    offsets: &Tensor<u32>,
    ids: &Tensor<u32>,
    order: &Tensor<u32>,
    pairs: &Tensor<u32>,
    image: &mut Tensor<F>,
    last: &mut Tensor<u32>,
    transmittance: &mut Tensor<F>,
    background: Sequence<f32>,
    width: u32,
    height: u32,
    views: u32,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let walk = tile_walk(
        offsets,
        pairs,
        packed.len() as u32 / PACKED_WIDTH as u32,
        views,
    );
    let view = CUBE_POS_Z as usize;
    let u = UNIT_POS;
    let px = CUBE_POS_X * TILE + u % TILE;
    let py = CUBE_POS_Y * TILE + u / TILE;
    let inside = px < width && py < height;
    let cx = F::cast_from(px) + F::new(0.5);
    let cy = F::cast_from(py) + F::new(0.5);

    let one = F::new(1.0);
    let mut t = one;
    let mut r = F::new(0.0);
    let mut g = F::new(0.0);
    let mut b = F::new(0.0);
    let mut depth = F::new(0.0);
    let mut stop = walk.entries;
    let mut done = !inside;

    let mut rows = SharedMemory::<F>::new(BLOCK * PACKED_WIDTH);
    let mut batch_ids = SharedMemory::<u32>::new(BLOCK);
    let mut member = SharedMemory::<u32>::new(BLOCK);
    let mut flags = SharedMemory::<u32>::new(BLOCK);
    let mut lo = 0u32.runtime();
    let mut running = lo < walk.entries;
    while running {
        flags[u as usize] = select(done, 1u32, 0u32);
        sync_cube();
        let finished = reduce_u32(&mut flags, false);
        if finished == BLOCK as u32 {
            running = false;
        } else {
            let hi = batch_end(&walk, lo);
            load_batch::<F, I>(
                packed,
                extents,
                ids,
                order,
                &walk,
                &mut rows,
                &mut batch_ids,
                &mut member,
                lo,
                hi,
            );
            sync_cube();
            if !done {
                let count = hi - lo;
                let mut k = 0u32.runtime();
                while k < count {
                    if member[k as usize] == 1 {
                        let row = k as usize * PACKED_WIDTH;
                        let (_dx, _dy, sigma) = offset_sigma::<F>(&rows, row, cx, cy);
                        let alpha = F::min(
                            F::new(MAX_ALPHA),
                            rows[row + PACKED_OPACITY] * F::exp(-sigma),
                        );
                        // Comparisons with NaN are false: a NaN pair is skipped, as on the CPU.
                        if sigma >= F::new(0.0) && alpha >= F::new(MIN_ALPHA) {
                            let next = t * (one - alpha);
                            if next <= F::new(MIN_TRANSMITTANCE) {
                                stop = lo + k;
                                done = true;
                                k = count;
                            } else {
                                let w = alpha * t;
                                r += w * rows[row + PACKED_COLOR];
                                g += w * rows[row + PACKED_COLOR + 1];
                                b += w * rows[row + PACKED_COLOR + 2];
                                depth += w * rows[row + PACKED_DEPTH];
                                t = next;
                            }
                        }
                    }
                    k += 1;
                }
            }
            sync_cube();
            lo = hi;
            running = lo < walk.entries;
        }
    }
    if inside {
        let pixels = (width * height) as usize;
        let pixel = (py * width + px) as usize;
        let planes = view * IMAGE_CHANNELS * pixels;
        let o = planes + pixel * 3;
        image[o] = r + t * F::cast_from(background[0]);
        image[o + 1] = g + t * F::cast_from(background[1]);
        image[o + 2] = b + t * F::cast_from(background[2]);
        image[planes + IMAGE_ALPHA * pixels + pixel] = one - t;
        image[planes + IMAGE_DEPTH * pixels + pixel] = depth;
        last[view * pixels + pixel] = stop;
        transmittance[view * pixels + pixel] = t;
    }
}

/// How the backward adds an `f32` into a gradient buffer atomically: natively where the
/// runtime has float atomic addition (CUDA), else as a compare-and-swap loop on the bits
/// (WGSL has no float atomics).
#[cube]
trait AtomicAccumulator: Numeric {
    /// `buf[i] += value`, atomically.
    fn accumulate(buf: &mut Tensor<Atomic<Self>>, i: usize, value: f32);

    /// The accumulated value of `buf[i]` after the kernel (read as plain memory).
    fn read(buf: &Tensor<Self>, i: usize) -> f32;
}

#[cube]
impl AtomicAccumulator for f32 {
    fn accumulate(buf: &mut Tensor<Atomic<f32>>, i: usize, value: f32) {
        if value != 0.0 {
            buf[i].fetch_add(value);
        }
    }

    fn read(buf: &Tensor<f32>, i: usize) -> f32 {
        buf[i]
    }
}

#[cube]
impl AtomicAccumulator for u32 {
    fn accumulate(buf: &mut Tensor<Atomic<u32>>, i: usize, value: f32) {
        if value != 0.0 {
            let mut old = buf[i].load();
            let mut pending = true;
            while pending {
                let new = u32::reinterpret(f32::reinterpret(old) + value);
                let seen = buf[i].compare_exchange_weak(old, new);
                pending = seen != old;
                old = seen;
            }
        }
    }

    fn read(buf: &Tensor<u32>, i: usize) -> f32 {
        f32::reinterpret(buf[i])
    }
}

/// One cube per tile, one unit per pixel: the backward replay (see the module docs), adding
/// into `grads` `[N, GRAD_WIDTH]` (`f32` bits, zero-initialised). With `plane_sums` the units
/// of a plane (warp) first sum their contributions to the Gaussian they all replay, and one of
/// them adds the sums: one atomic per plane instead of one per pixel.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rasterize_backward_kernel<F: Float, I: Int, A: AtomicAccumulator>(
    packed: &Tensor<F>,
    extents: &Tensor<I>,
    offsets: &Tensor<u32>,
    ids: &Tensor<u32>,
    order: &Tensor<u32>,
    pairs: &Tensor<u32>,
    last: &Tensor<u32>,
    transmittance: &Tensor<F>,
    grad_image: &Tensor<F>,
    grads: &mut Tensor<Atomic<A>>,
    background: Sequence<f32>,
    width: u32,
    height: u32,
    views: u32,
    #[comptime] plane_sums: bool,
    #[comptime] rgb_only: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let walk = tile_walk(
        offsets,
        pairs,
        packed.len() as u32 / PACKED_WIDTH as u32,
        views,
    );
    let view = CUBE_POS_Z as usize;
    let u = UNIT_POS;
    let px = CUBE_POS_X * TILE + u % TILE;
    let py = CUBE_POS_Y * TILE + u / TILE;
    let inside = px < width && py < height;
    let cx = F::cast_from(px) + F::new(0.5);
    let cy = F::cast_from(py) + F::new(0.5);

    let zero = F::new(0.0);
    let one = F::new(1.0);
    let half = F::new(0.5);
    let mut stop = 0u32.runtime();
    let mut t = one;
    let mut v_r = zero;
    let mut v_g = zero;
    let mut v_b = zero;
    let mut v_depth = zero;
    let mut behind = zero;
    if inside {
        let pixels = (width * height) as usize;
        let pixel = (py * width + px) as usize;
        let mut v_alpha = zero;
        if comptime![rgb_only] {
            let o = (view * pixels + pixel) * 3;
            v_r = grad_image[o];
            v_g = grad_image[o + 1];
            v_b = grad_image[o + 2];
        } else {
            let planes = view * IMAGE_CHANNELS * pixels;
            let o = planes + pixel * 3;
            v_r = grad_image[o];
            v_g = grad_image[o + 1];
            v_b = grad_image[o + 2];
            v_alpha = grad_image[planes + IMAGE_ALPHA * pixels + pixel];
            v_depth = grad_image[planes + IMAGE_DEPTH * pixels + pixel];
        }
        t = transmittance[view * pixels + pixel];
        stop = last[view * pixels + pixel];
        // Everything behind the current Gaussian as its alpha sees it: the background and the
        // coverage through `T_final` first, the Gaussians behind it added as the walk goes.
        behind = t
            * (F::cast_from(background[0]) * v_r
                + F::cast_from(background[1]) * v_g
                + F::cast_from(background[2]) * v_b
                - v_alpha);
    }

    let mut rows = SharedMemory::<F>::new(BLOCK * PACKED_WIDTH);
    let mut batch_ids = SharedMemory::<u32>::new(BLOCK);
    let mut member = SharedMemory::<u32>::new(BLOCK);
    let mut flags = SharedMemory::<u32>::new(BLOCK);
    flags[u as usize] = stop;
    sync_cube();
    let longest = reduce_u32(&mut flags, true);

    // This pixel's contribution to one Gaussian's gradient row (zero where it adds nothing).
    let mut d = Array::<F>::new(GRAD_WIDTH);
    let mut hi = longest;
    while hi > 0 {
        let lo = batch_start(&walk, hi);
        load_batch::<F, I>(
            packed,
            extents,
            ids,
            order,
            &walk,
            &mut rows,
            &mut batch_ids,
            &mut member,
            lo,
            hi,
        );
        sync_cube();
        let count = hi - lo;
        // Every unit walks the same entries, so the plane operations below see all its units.
        for back in 0..count {
            let k = count - 1 - back;
            let entry = lo + k;
            #[unroll]
            for c in 0..GRAD_WIDTH {
                d[c] = zero;
            }
            let mut drawn = false;
            if entry < stop && member[k as usize] == 1 {
                let row = k as usize * PACKED_WIDTH;
                let (dx, dy, sigma) = offset_sigma::<F>(&rows, row, cx, cy);
                let vis = F::exp(-sigma);
                let raw = rows[row + PACKED_OPACITY] * vis;
                let clamped = raw > F::new(MAX_ALPHA);
                let alpha = F::min(F::new(MAX_ALPHA), raw);
                if sigma >= zero && alpha >= F::new(MIN_ALPHA) {
                    drawn = true;
                    let one_minus = one - alpha;
                    t /= one_minus;
                    let w = alpha * t;
                    let cr = rows[row + PACKED_COLOR];
                    let cg = rows[row + PACKED_COLOR + 1];
                    let cb = rows[row + PACKED_COLOR + 2];
                    let own = cr * v_r + cg * v_g + cb * v_b + rows[row + PACKED_DEPTH] * v_depth;
                    let v_alpha = t * own - behind / one_minus;
                    behind += w * own;
                    d[PACKED_COLOR] = w * v_r;
                    d[PACKED_COLOR + 1] = w * v_g;
                    d[PACKED_COLOR + 2] = w * v_b;
                    d[PACKED_DEPTH] = w * v_depth;
                    if !clamped {
                        let a = rows[row + PACKED_CONIC];
                        let b = rows[row + PACKED_CONIC + 1];
                        let c = rows[row + PACKED_CONIC + 2];
                        let v_sigma = -v_alpha * alpha;
                        let gx = -v_sigma * (a * dx + b * dy);
                        let gy = -v_sigma * (b * dx + c * dy);
                        d[PACKED_OPACITY] = vis * v_alpha;
                        d[PACKED_CONIC] = half * v_sigma * dx * dx;
                        d[PACKED_CONIC + 1] = v_sigma * dx * dy;
                        d[PACKED_CONIC + 2] = half * v_sigma * dy * dy;
                        d[PACKED_XY] = gx;
                        d[PACKED_XY + 1] = gy;
                        d[PACKED_WIDTH] = F::sqrt(gx * gx + gy * gy);
                    }
                }
            }
            let base = batch_ids[k as usize] as usize * GRAD_WIDTH;
            if comptime![plane_sums] {
                if plane_any(drawn) {
                    #[unroll]
                    for c in 0..GRAD_WIDTH {
                        d[c] = plane_sum(d[c]);
                    }
                    if plane_elect() {
                        #[unroll]
                        for c in 0..GRAD_WIDTH {
                            A::accumulate(grads, base + c, f32::cast_from(d[c]));
                        }
                    }
                }
            } else if drawn {
                #[unroll]
                for c in 0..GRAD_WIDTH {
                    A::accumulate(grads, base + c, f32::cast_from(d[c]));
                }
            }
        }
        sync_cube();
        hi = lo;
    }
}

/// Zeroes `buf[..len]`.
#[cube(launch)]
fn zero_kernel<A: AtomicAccumulator>(buf: &mut Tensor<A>, len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        buf[i] = A::from_int(0);
    }
}

/// Splits the accumulated `f32` bits `[N, GRAD_WIDTH]` into `grad_packed [N, PACKED_WIDTH]`
/// and `screen [N, 3]` (`dL/dxy`, `xy_abs`) in the float type `F`.
#[cube(launch)]
fn unpack_grads_kernel<F: Float, A: AtomicAccumulator>(
    acc: &Tensor<A>,
    grad_packed: &mut Tensor<F>,
    screen: &mut Tensor<F>,
    n: u32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i >= n as usize {
        terminate!();
    }
    #[unroll]
    for c in 0..PACKED_WIDTH {
        grad_packed[i * PACKED_WIDTH + c] = F::cast_from(A::read(acc, i * GRAD_WIDTH + c));
    }
    screen[3 * i] = grad_packed[i * PACKED_WIDTH];
    screen[3 * i + 1] = grad_packed[i * PACKED_WIDTH + 1];
    screen[3 * i + 2] = F::cast_from(A::read(acc, i * GRAD_WIDTH + PACKED_WIDTH));
}

/// The background as launch scalars.
fn background_arg<R: CubeRuntime>(setup: &RasterSetup) -> SequenceArg<R, f32> {
    let mut seq = SequenceArg::new();
    for c in setup.background {
        seq.push(c);
    }
    seq
}

/// The binning of the module docs.
struct Binned<R: CubeRuntime> {
    /// `[C tiles + 1]`
    offsets: CubeTensor<R>,
    /// `[capacity]`
    ids: CubeTensor<R>,
    /// `[C N]`: the rows in depth order.
    order: CubeTensor<R>,
    /// `[2]`: see [`RasterState::pairs`].
    pairs: CubeTensor<R>,
}

/// The binning of the module docs, into lists of `setup.tile_pairs` entries, or, without it,
/// of exactly as many as the views make (read back: the one wait for the device).
fn bin<R: CubeRuntime>(
    packed: &CubeTensor<R>,
    extents: &CubeTensor<R>,
    setup: &RasterSetup,
) -> Binned<R> {
    let client = packed.client.clone();
    let n = packed.shape()[0];
    let (tiles_x, tiles_y) = setup.tiles();
    let tiles = tiles_x as usize * tiles_y as usize * setup.views as usize;
    let (count, dim) = block_dims(&client, n.div_ceil(BLOCK));

    let keys = u32_tensor(packed, n);
    let ids = u32_tensor(packed, n);
    depth_keys_kernel::launch::<R>(
        &client,
        count.clone(),
        dim,
        packed.clone().into_tensor_arg(),
        keys.clone().into_tensor_arg(),
        ids.clone().into_tensor_arg(),
        n as u32,
        packed.dtype.into(),
    );
    let (_, order) = sort_pairs(keys, ids, n, 32);

    let counts = u32_tensor(packed, n);
    tile_counts_kernel::launch::<R>(
        &client,
        count,
        dim,
        extents.clone().into_tensor_arg(),
        order.clone().into_tensor_arg(),
        counts.clone().into_tensor_arg(),
        n as u32,
        extents.dtype.into(),
    );
    let (starts, total) = exclusive_sum(&counts, n);
    // Without a capacity, the lists are sized exactly and nothing needs padding.
    let (capacity, padded) = match setup.tile_pairs {
        Some(capacity) => (capacity as usize, capacity as usize),
        None => (read_u32(total.clone()), 0),
    };

    let tile_keys = u32_tensor(packed, capacity);
    let tile_ids = u32_tensor(packed, capacity);
    let pairs = u32_tensor(packed, 2);
    let (count, dim) = block_dims(&client, (n + padded).div_ceil(BLOCK));
    emit_kernel::launch::<R>(
        &client,
        count,
        dim,
        packed.clone().into_tensor_arg(),
        extents.clone().into_tensor_arg(),
        order.clone().into_tensor_arg(),
        starts.into_tensor_arg(),
        total.into_tensor_arg(),
        tile_keys.clone().into_tensor_arg(),
        tile_ids.clone().into_tensor_arg(),
        pairs.clone().into_tensor_arg(),
        n as u32,
        (n / setup.views as usize) as u32,
        tiles_x,
        tiles_y,
        capacity as u32,
        [packed.dtype.into(), extents.dtype.into()],
    );
    // The padding key `tiles` must fit in the sorted bits.
    let bits = u32::BITS - (tiles as u32).leading_zeros();
    let (tile_keys, tile_ids) = sort_pairs(tile_keys, tile_ids, capacity, bits);

    let offsets = u32_tensor(packed, tiles + 1);
    let (count, dim) = block_dims(&client, (capacity + 1).div_ceil(BLOCK));
    tile_offsets_kernel::launch::<R>(
        &client,
        count,
        dim,
        tile_keys.into_tensor_arg(),
        offsets.clone().into_tensor_arg(),
        capacity as u32,
        tiles as u32,
    );
    Binned {
        offsets,
        ids: tile_ids,
        order,
        pairs,
    }
}

/// Reads the first `u32` of `tensor` back to the host (a synchronisation point).
fn read_u32<R: CubeRuntime>(tensor: CubeTensor<R>) -> usize {
    let data = burn_cubecl::ops::into_data_sync::<R>(tensor);
    let values = data
        .as_slice::<u32>()
        .expect("the tensor was created as u32");
    values[0] as usize
}

/// The tile-grid launch: one cube of 16x16 units per tile and view.
fn tile_launch(setup: &RasterSetup) -> (CubeCount, CubeDim) {
    let (tiles_x, tiles_y) = setup.tiles();
    (
        CubeCount::Static(tiles_x, tiles_y, setup.views),
        CubeDim::new_1d(TILE * TILE),
    )
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> RasterOps
    for CubeBackend<R, F, I, BT>
{
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        _screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        let packed = into_contiguous(packed);
        let extents = into_contiguous(extents);
        let binned = bin(&packed, &extents, &setup);
        let (w, h) = (setup.width as usize, setup.height as usize);
        let views = setup.views as usize;
        let dtype = packed.dtype;
        let image = output(&packed, [views * IMAGE_CHANNELS * h * w], dtype);
        let transmittance = output(&packed, [views * h, w], dtype);
        let last = output(&packed, [views * h, w], DType::U32);
        let (count, dim) = tile_launch(&setup);
        rasterize_kernel::launch::<R>(
            &packed.client,
            count,
            dim,
            packed.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            binned.offsets.clone().into_tensor_arg(),
            binned.ids.clone().into_tensor_arg(),
            binned.order.clone().into_tensor_arg(),
            binned.pairs.clone().into_tensor_arg(),
            image.clone().into_tensor_arg(),
            last.clone().into_tensor_arg(),
            transmittance.clone().into_tensor_arg(),
            background_arg::<R>(&setup),
            setup.width,
            setup.height,
            setup.views,
            [dtype.into(), extents.dtype.into()],
        );
        RasterPrimitives {
            image,
            state: RasterState {
                tile_offsets: binned.offsets,
                ids: binned.ids,
                last,
                transmittance,
                order: binned.order,
                pairs: binned.pairs,
                extents,
            },
        }
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        let plane_sums = plane_operations(&packed.client);
        if native_float_atomics(&packed.client) {
            backward_with::<R, F, I, BT, f32>(
                packed,
                state,
                grad_image,
                setup,
                DType::F32,
                plane_sums,
            )
        } else {
            backward_with::<R, F, I, BT, u32>(
                packed,
                state,
                grad_image,
                setup,
                DType::U32,
                plane_sums,
            )
        }
    }
}

/// Whether the runtime adds `f32` atomically in hardware.
fn native_float_atomics<R: CubeRuntime>(client: &ComputeClient<R>) -> bool {
    use cubecl::features::AtomicUsage;
    use cubecl::ir::{ElemType, FloatKind, StorageType, Type};
    let f32_atomic = Type::new(StorageType::Atomic(ElemType::Float(FloatKind::F32)));
    client
        .properties()
        .atomic_type_usage(f32_atomic)
        .contains(AtomicUsage::Add)
}

/// Whether the backward can sum over planes (warps). Its plane operations sit in a loop whose
/// bounds come from shared memory: uniform across the cube, but not provably so to a compiler,
/// so the runtime must allow plane operations in divergent control flow. CUDA does; WGSL does
/// not (on an NVIDIA card through wgpu the backward then produced no gradients), and CubeCL
/// leaves plane operations off on CPU adapters such as lavapipe.
fn plane_operations<R: CubeRuntime>(client: &ComputeClient<R>) -> bool {
    use cubecl::features::Plane;
    let plane = client.properties().features.plane;
    plane.contains(Plane::Ops) && plane.contains(Plane::NonUniformControlFlow)
}

/// The backward with gradient sums accumulated as `A` (see [`AtomicAccumulator`]), a buffer
/// of `acc_dtype`, summed over each plane first with `plane_sums`.
fn backward_with<R, F, I, BT, A>(
    packed: CubeTensor<R>,
    state: RasterState<CubeBackend<R, F, I, BT>>,
    grad_image: CubeTensor<R>,
    setup: RasterSetup,
    acc_dtype: DType,
    plane_sums: bool,
) -> RasterGradPrimitives<CubeBackend<R, F, I, BT>>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
    A: AtomicAccumulator,
{
    let packed = into_contiguous(packed);
    let grad_image = into_contiguous(grad_image);
    let client = packed.client.clone();
    let n = packed.shape()[0];
    let dtype = packed.dtype;
    let pixels = setup.width as usize * setup.height as usize * setup.views as usize;
    let rgb_only = grad_image.shape().num_elements() == 3 * pixels;
    let acc = output(&packed, [n * GRAD_WIDTH], acc_dtype);
    let (count, dim) = block_dims(&client, (n * GRAD_WIDTH).div_ceil(BLOCK));
    zero_kernel::launch::<A, R>(
        &client,
        count,
        dim,
        acc.clone().into_tensor_arg(),
        (n * GRAD_WIDTH) as u32,
    );
    let extents_dtype = state.extents.dtype;
    let (count, dim) = tile_launch(&setup);
    rasterize_backward_kernel::launch::<A, R>(
        &client,
        count,
        dim,
        packed.clone().into_tensor_arg(),
        state.extents.into_tensor_arg(),
        state.tile_offsets.into_tensor_arg(),
        state.ids.into_tensor_arg(),
        state.order.into_tensor_arg(),
        state.pairs.into_tensor_arg(),
        state.last.into_tensor_arg(),
        into_contiguous(state.transmittance).into_tensor_arg(),
        grad_image.into_tensor_arg(),
        acc.clone().into_tensor_arg(),
        background_arg::<R>(&setup),
        setup.width,
        setup.height,
        setup.views,
        plane_sums,
        rgb_only,
        [dtype.into(), extents_dtype.into()],
    );
    let grad_packed = output(&packed, [n, PACKED_WIDTH], dtype);
    let screen = output(&packed, [n, 3], dtype);
    let (count, dim) = block_dims(&client, n.div_ceil(BLOCK));
    unpack_grads_kernel::launch::<A, R>(
        &client,
        count,
        dim,
        acc.into_tensor_arg(),
        grad_packed.clone().into_tensor_arg(),
        screen.clone().into_tensor_arg(),
        n as u32,
        dtype.into(),
    );
    RasterGradPrimitives {
        packed: grad_packed,
        screen_grads: screen,
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use burn::backend::wgpu::{CubeBackend, WgpuDevice, WgpuRuntime};
    use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::{backward_with, bin, native_float_atomics, plane_operations};
    use crate::project::{
        CameraParams, PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_WIDTH, PACKED_XY,
        ProjectOptions, project_gaussians,
    };
    use crate::raster::RasterOps;
    use crate::raster::RasterSetup;

    type B = CubeBackend<WgpuRuntime, f32, i32, u32>;

    /// The backward's ways of adding (native float atomics and plane sums where the runtime has
    /// them, per-unit compare-and-swap everywhere) give the same gradients.
    #[test]
    fn backward_accumulations_agree() {
        let device = WgpuDevice::default();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(5);
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let n = 300;
        let mut u = |len: usize, lo: f32, hi: f32| -> Vec<f32> {
            (0..len)
                .map(|_| lo + (hi - lo) * rng.random::<f32>())
                .collect()
        };
        let z = u(n, 2.0, 5.0);
        let xy = u(2 * n, -0.5, 0.5);
        let means: Vec<f32> = (0..n)
            .flat_map(|i| [xy[2 * i] * z[i], xy[2 * i + 1] * z[i], z[i]])
            .collect();
        let t = |v: Vec<f32>| {
            Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), (&device, DType::F32))
        };
        let camera = CameraParams {
            rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            translation: [0.0; 3],
            fx: 60.0,
            fy: 60.0,
            cx: 30.0,
            cy: 22.0,
            width: 61,
            height: 45,
        };
        let projected = project_gaussians::<B>(
            t(means).reshape([n, 3]),
            t(u(4 * n, -1.0, 1.0)).reshape([n, 4]),
            t(u(3 * n, -3.5, -1.5)).reshape([n, 3]),
            t(u(n, -1.0, 3.0)).reshape([n]),
            t(u(3 * n, -1.0, 1.0)).reshape([n, 1, 3]),
            t(u(9 * n, -0.3, 0.3)).reshape([n, 3, 3]),
            &camera,
            &ProjectOptions::default(),
        )
        .expect("a valid scene");
        let setup = RasterSetup::new(camera.width, camera.height).with_background([0.3; 3]);
        let packed = projected.packed.into_primitive().tensor();
        let out = B::rasterize_forward(
            packed.clone(),
            projected.extents.into_primitive(),
            Tensor::<B, 2>::zeros([n, 3], &device)
                .into_primitive()
                .tensor(),
            setup,
        );
        let grad_image = t(u(61 * 45 * 5, -1.0, 1.0)).into_primitive().tensor();
        let host = |p| {
            Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p))
                .into_data()
                .to_vec::<f32>()
                .expect("f32")
        };
        // The reference: per-unit compare-and-swap adds, which every runtime has.
        let swap = backward_with::<_, f32, i32, u32, u32>(
            packed.clone(),
            out.state.clone(),
            grad_image.clone(),
            setup,
            DType::U32,
            false,
        );
        let swap = host(swap.packed);
        assert!(swap.iter().any(|g| *g != 0.0), "the scene draws nothing");
        let scale = swap.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        let (native, plane) = (
            native_float_atomics(&packed.client),
            plane_operations(&packed.client),
        );
        let variants = [
            ("native", true, false),
            ("compare-and-swap, plane sums", false, true),
            ("native, plane sums", true, true),
        ];
        if !native && !plane {
            println!("no native f32 atomics and no plane sums here: only the reference ran");
        }
        for (name, native_adds, plane_sums) in variants {
            if (native_adds && !native) || (plane_sums && !plane) {
                continue;
            }
            let grads = if native_adds {
                backward_with::<_, f32, i32, u32, f32>(
                    packed.clone(),
                    out.state.clone(),
                    grad_image.clone(),
                    setup,
                    DType::F32,
                    plane_sums,
                )
            } else {
                backward_with::<_, f32, i32, u32, u32>(
                    packed.clone(),
                    out.state.clone(),
                    grad_image.clone(),
                    setup,
                    DType::U32,
                    plane_sums,
                )
            };
            let grads = host(grads.packed);
            let worst = swap
                .iter()
                .zip(&grads)
                .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= 1e-5 * scale,
                "{name} vs per-unit compare-and-swap: {worst} (scale {scale})"
            );
        }
    }

    /// The least `q(d) = a dx^2 + 2 b dx dy + c dy^2` over the rectangle `[lx, hx] x [ly, hy]`
    /// of offsets from a splat's centre: zero when it holds the centre, else the least over its
    /// four edges of the quadratic along the edge, minimised in closed form.
    fn least_over_rect([a, b, c]: [f64; 3], [lx, hx, ly, hy]: [f64; 4]) -> f64 {
        if lx <= 0.0 && 0.0 <= hx && ly <= 0.0 && 0.0 <= hy {
            return 0.0;
        }
        let q = |dx: f64, dy: f64| a * dx * dx + 2.0 * b * dx * dy + c * dy * dy;
        let edge = |(px, py): (f64, f64), (ex, ey): (f64, f64)| {
            let s = -(a * px * ex + b * (px * ey + py * ex) + c * py * ey) / q(ex, ey);
            let s = s.clamp(0.0, 1.0);
            q(px + s * ex, py + s * ey)
        };
        [
            edge((lx, ly), (hx - lx, 0.0)),
            edge((lx, hy), (hx - lx, 0.0)),
            edge((lx, ly), (0.0, hy - ly)),
            edge((hx, ly), (0.0, hy - ly)),
        ]
        .into_iter()
        .fold(f64::INFINITY, f64::min)
    }

    /// The GPU binning against an `f64` brute force on thin, tilted ellipses of all sizes: each
    /// tile lists, front to back, the Gaussians whose box covers it, less (for boxes of at least
    /// 2x2 tiles) those whose ellipse misses it; only tiles within rounding of the ellipse's
    /// bound may go either way.
    #[test]
    fn binning_trims_boxes_to_their_ellipses() {
        let device = WgpuDevice::default();
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(9);
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let (width, height, n) = (200u32, 150u32, 400usize);
        let setup = RasterSetup::new(width, height);
        let (tiles_x, tiles_y) = setup.tiles();
        let mut packed = vec![0.0f32; n * PACKED_WIDTH];
        let mut extents = vec![0i32; 3 * n];
        for i in 0..n {
            let long: f32 = rng.random_range(1.0..30.0);
            let short = long / rng.random_range(1.0..20.0f32);
            let (sin, cos) = rng.random_range(0.0..std::f32::consts::PI).sin_cos();
            let (l2, s2) = (long * long, short * short);
            let cov = [
                cos * cos * l2 + sin * sin * s2,
                sin * cos * (l2 - s2),
                sin * sin * l2 + cos * cos * s2,
            ];
            let det = cov[0] * cov[2] - cov[1] * cov[1];
            let opacity: f32 = rng.random_range(0.01..1.0);
            let k = (2.0 * (255.0 * opacity).ln()).sqrt();
            let row = &mut packed[i * PACKED_WIDTH..(i + 1) * PACKED_WIDTH];
            row[PACKED_XY] = rng.random_range(-20.0..220.0);
            row[PACKED_XY + 1] = rng.random_range(-20.0..170.0);
            row[PACKED_DEPTH] = rng.random_range(1.0..5.0);
            row[PACKED_CONIC..PACKED_CONIC + 3].copy_from_slice(&[
                cov[2] / det,
                -cov[1] / det,
                cov[0] / det,
            ]);
            row[PACKED_OPACITY] = opacity;
            let radius = [cov[0], cov[2]].map(|v| (k * v.sqrt()).ceil() as i32);
            let overlaps = (row[PACKED_XY] + radius[0] as f32) > 0.0
                && (row[PACKED_XY] - radius[0] as f32) < width as f32
                && (row[PACKED_XY + 1] + radius[1] as f32) > 0.0
                && (row[PACKED_XY + 1] - radius[1] as f32) < height as f32;
            if !overlaps {
                row.fill(0.0);
                continue;
            }
            let span = |c: f32, r: i32, tiles: u32| {
                let lo = ((c - r as f32) / 16.0).floor().max(0.0) as i32;
                let hi = ((c + r as f32) / 16.0).ceil().min(tiles as f32) as i32;
                hi - lo
            };
            let count = span(row[PACKED_XY], radius[0], tiles_x)
                * span(row[PACKED_XY + 1], radius[1], tiles_y);
            extents[3 * i..3 * i + 3].copy_from_slice(&[radius[0], radius[1], count]);
        }
        let boxed: i32 = (0..n).map(|i| extents[3 * i + 2]).sum();
        let packed_t = Tensor::<B, 2>::from_data(
            TensorData::new(packed.clone(), [n, PACKED_WIDTH]),
            (&device, DType::F32),
        )
        .into_primitive()
        .tensor();
        let extents_t = Tensor::<B, 2, burn::tensor::Int>::from_data(
            TensorData::new(extents.clone(), [n, 3]),
            (&device, DType::I32),
        )
        .into_primitive();
        let binned = bin(&packed_t, &extents_t, &setup);
        let read = |t| {
            let data = burn_cubecl::ops::into_data_sync::<WgpuRuntime>(t);
            data.as_slice::<u32>().expect("u32").to_vec()
        };
        let (offsets, ids) = (read(binned.offsets), read(binned.ids));
        let tiles = (tiles_x * tiles_y) as usize;
        let mut listed = 0;
        for t in 0..tiles {
            let (tx, ty) = ((t % tiles_x as usize) as f64, (t / tiles_x as usize) as f64);
            let list = &ids[offsets[t] as usize..offsets[t + 1] as usize];
            listed += list.len();
            let depth = |g: u32| packed[g as usize * PACKED_WIDTH + PACKED_DEPTH];
            assert!(
                list.windows(2).all(|w| depth(w[0]) <= depth(w[1])),
                "tile {t}: order"
            );
            for i in 0..n {
                let (rx, ry) = (extents[3 * i], extents[3 * i + 1]);
                if extents[3 * i + 2] == 0 {
                    assert!(!list.contains(&(i as u32)), "culled {i} in tile {t}");
                    continue;
                }
                let row = &packed[i * PACKED_WIDTH..(i + 1) * PACKED_WIDTH];
                let (x, y) = (f64::from(row[PACKED_XY]), f64::from(row[PACKED_XY + 1]));
                let (rx, ry) = (f64::from(rx), f64::from(ry));
                let axis = |c: f64, r: f64, tiles: u32| {
                    ((c - r) / 16.0).floor().max(0.0)..((c + r) / 16.0).ceil().min(f64::from(tiles))
                };
                let (columns, rows) = (axis(x, rx, tiles_x), axis(y, ry, tiles_y));
                let in_box = columns.contains(&tx) && rows.contains(&ty);
                let trims = columns.end - columns.start >= 2.0 && rows.end - rows.start >= 2.0;
                let conic = [0, 1, 2].map(|c| f64::from(row[PACKED_CONIC + c]));
                let rect = [
                    16.0 * tx - x,
                    16.0 * tx + 16.0 - x,
                    16.0 * ty - y,
                    16.0 * ty + 16.0 - y,
                ];
                let bound = 2.0 * (255.0 * f64::from(row[PACKED_OPACITY])).ln() + 2e-3;
                let least = if trims {
                    least_over_rect(conic, rect)
                } else {
                    0.0
                };
                let has = list.contains(&(i as u32));
                if in_box && least <= bound * (1.0 - 1e-4) {
                    assert!(
                        has,
                        "Gaussian {i} missing from tile {t} (least {least}, bound {bound})"
                    );
                }
                if !in_box || least >= bound * (1.0 + 1e-4) {
                    assert!(
                        !has,
                        "Gaussian {i} listed in tile {t} (least {least}, bound {bound})"
                    );
                }
            }
        }
        assert!(
            (listed as i32) * 10 < boxed * 9,
            "{listed} entries listed of {boxed} box tiles"
        );
    }
}
