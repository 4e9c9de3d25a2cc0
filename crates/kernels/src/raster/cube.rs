//! The tile rasterizer as CubeCL kernels, generic over the CubeCL runtime and the float type.
//!
//! # Binning
//! In [`bin`]: the rows sorted by depth, their `(tile, row)` pairs emitted in that order and
//! sorted by tile into CSR lists, on the device; the host waits only when the lists are sized
//! exactly ([`RasterSetup::tile_pairs`] `None`). Lists of a fixed capacity that the pairs
//! overflow are continued by the compositing walks over the depth order (`Walk`).
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
mod bin;
mod cover;

use self::bin::{bin, listed_in};
use crate::sort::cube::{BLOCK, block_dims};

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
mod tests;
