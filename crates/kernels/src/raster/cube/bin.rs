//! The binning of [the module docs](super): the rows sorted by depth, each `(tile, row)` pair
//! they make emitted in that order into lists of a given capacity, the lists sorted by tile.
//!
//! 1. `depth_keys_kernel`: every Gaussian's depth as a sortable `u32` key (the bits of a
//!    positive `f32` order like the value); [`sort_pairs`] sorts the Gaussian indices by it,
//!    stably, so equal depths stay in index order.
//! 2. `tile_counts_kernel` gathers the tile counts in that order; [`exclusive_sum`] gives each
//!    Gaussian its first slot and the total `M`. Without a capacity
//!    ([`RasterSetup::tile_pairs`] `None`) `M` is read back and sizes the lists (a wait for the
//!    device); with one, nothing is read.
//! 3. `emit_kernel` writes one `(tile, gaussian)` entry per tile each Gaussian covers, in depth
//!    order, leaving out the tiles of a box of at least 2x2 tiles that its ellipse does not
//!    reach (`cover`; their slots get a padding key past every tile), and stops at the capacity:
//!    the lists hold the rows whose pairs all fit (`listed`, written with `M` to `pairs`), the
//!    rest are walked from the depth order by the compositing (`listed_in` decides, for a row
//!    past the lists, whether the tile would have listed it). A radix sort on the tile key (only
//!    the bits the tile count needs) keeps the depth order inside each tile, which is the CPU's
//!    `(depth, index)` order less the Gaussians that draw nothing there. With `C` views the
//!    tiles are numbered `v tiles + local`, `v` the view of the row (`row / (rows / C)`), so one
//!    sort bins every view and a tile's list holds only its own view's rows.
//! 4. `tile_offsets_kernel` finds where each tile's run starts: the CSR offsets.

use burn::tensor::TensorMetadata;
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::super::RasterSetup;
use super::cover::{cover_new, cover_row};
use crate::project::{PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_WIDTH, PACKED_XY};
use crate::sort::cube::{BLOCK, block_dims, exclusive_sum, sort_pairs, u32_tensor};

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
pub(super) fn listed_in<F: Float, I: Int>(
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

/// The binning of the module docs.
pub(super) struct Binned<R: CubeRuntime> {
    /// `[C tiles + 1]`
    pub(super) offsets: CubeTensor<R>,
    /// `[capacity]`
    pub(super) ids: CubeTensor<R>,
    /// `[C N]`: the rows in depth order.
    pub(super) order: CubeTensor<R>,
    /// `[2]`: see [`RasterState::pairs`].
    pub(super) pairs: CubeTensor<R>,
}

/// The binning of the module docs, into lists of `setup.tile_pairs` entries, or, without it,
/// of exactly as many as the views make (read back: the one wait for the device).
pub(super) fn bin<R: CubeRuntime>(
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
