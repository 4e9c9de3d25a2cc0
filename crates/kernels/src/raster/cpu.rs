//! The tile rasterizer on the CPU: rayon, generic over `f32` / `f64` (`f64` is what the
//! finite-difference gradient checks run on).
//!
//! Each tile is cut into 16 segments of 8x2 pixels; an `f64` test per (Gaussian, segment) keeps
//! the segments a Gaussian may reach, and each segment walks only its own list with its 16
//! pixels as vector lanes (for `f32`, explicit AVX-512 or AVX2 intrinsics from one source,
//! `cpu/explicit.rs`). The forward writes each row of tiles into its band of the image; the backward
//! accumulates each tile's per-Gaussian partial sums in a buffer of its own and adds the
//! buffers up in tile order, so every result is bit-identical whatever the thread count.

// `!(a >= b)` is used on purpose: it is true when either side is NaN, so NaN is skipped.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use rayon::prelude::*;

use super::RasterError;
use crate::project::cpu::TILE_SIZE;
use crate::real::Real;
use crate::simd::{self, lane_sum};

mod bins;
#[cfg(target_arch = "x86_64")]
mod explicit;
mod order;

pub use self::bins::{Bins, bin};

/// Below this alpha a Gaussian is skipped at a pixel.
const MIN_ALPHA: f64 = 1.0 / 255.0;

/// Alpha is clamped to this, so that the transmittance never reaches zero.
const MAX_ALPHA: f64 = 0.999;

/// A pixel stops before the Gaussian that would take its transmittance to this or below.
const MIN_TRANSMITTANCE: f64 = 1e-4;

/// Row-major splats to rasterize (shapes as in the [op contract](super)).
#[derive(Clone, Copy, Debug)]
pub struct RasterArrays<'a, T> {
    /// `[N, 2]`, pixels.
    pub xy: &'a [T],
    /// `[N]`
    pub depth: &'a [T],
    /// `[N, 3]`, `(a, b, c)`.
    pub conic: &'a [T],
    /// `[N, 3]`
    pub color: &'a [T],
    /// `[N]`
    pub opacity: &'a [T],
}

/// Row-major rasterization outputs (`H = height`, `W = width`).
#[derive(Clone, Debug, PartialEq)]
pub struct RasterOutputs<T> {
    /// `[H, W, 3]`
    pub rgb: Vec<T>,
    /// `[H, W]`, `1 - T_final`.
    pub alpha: Vec<T>,
    /// `[H, W]`, alpha-weighted depth (not normalised).
    pub depth: Vec<T>,
    /// `[H, W]`, entries of the tile's list the pixel went through.
    pub last: Vec<u32>,
    /// `[H, W]`, `T_final`.
    pub transmittance: Vec<T>,
}

impl<T> RasterOutputs<T> {
    /// What the backward replays from.
    pub fn replay(&self) -> ReplayState<'_, T> {
        ReplayState {
            last: &self.last,
            transmittance: &self.transmittance,
        }
    }
}

/// The part of the forward's outputs the backward replays from.
#[derive(Clone, Copy, Debug)]
pub struct ReplayState<'a, T> {
    /// `[H, W]`, entries of the tile's list each pixel went through.
    pub last: &'a [u32],
    /// `[H, W]`, `T_final`.
    pub transmittance: &'a [T],
}

/// Gradients of a scalar loss with respect to the images (same shapes).
#[derive(Clone, Copy, Debug)]
pub struct RasterOutputGrads<'a, T> {
    /// `[H, W, 3]`
    pub rgb: &'a [T],
    /// `[H, W]`
    pub alpha: &'a [T],
    /// `[H, W]`
    pub depth: &'a [T],
}

/// Gradients of a scalar loss with respect to the splats (same shapes as the inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct RasterGrads<T> {
    /// `[N, 2]`
    pub xy: Vec<T>,
    /// `[N, 3]`
    pub conic: Vec<T>,
    /// `[N, 3]`
    pub color: Vec<T>,
    /// `[N]`
    pub opacity: Vec<T>,
    /// `[N]`
    pub depth: Vec<T>,
    /// `[N]`: `sum` over pixels of `|dL_pixel / dxy|`, the Euclidean norm of each pixel's
    /// contribution to the `xy` gradient (a densification statistic, not a gradient).
    pub xy_abs: Vec<T>,
}

fn check_len(
    name: &'static str,
    got: usize,
    expected: usize,
    shape: &'static str,
) -> Result<(), RasterError> {
    if got == expected {
        Ok(())
    } else {
        Err(RasterError::Length {
            name,
            got,
            expected,
            shape,
        })
    }
}

fn validate<T>(a: &RasterArrays<'_, T>, bins: &Bins) -> Result<usize, RasterError> {
    let n = a.opacity.len();
    check_len("xy", a.xy.len(), 2 * n, "[N, 2]")?;
    check_len("depth", a.depth.len(), n, "[N]")?;
    check_len("conic", a.conic.len(), 3 * n, "[N, 3]")?;
    check_len("color", a.color.len(), 3 * n, "[N, 3]")?;
    if bins.gaussians != n {
        return Err(RasterError::BinsMismatch {
            bins: bins.gaussians,
            arrays: n,
        });
    }
    Ok(n)
}

/// One Gaussian as the compositing reads it, in one record (a tile's list visits Gaussians in
/// depth order, scattered in memory: one cache line each instead of one per array).
///
/// `reach` bounds `sigma` beyond which its alpha is certainly below `1/255`: `ln(255 opacity)`,
/// as `alpha <= opacity exp(-sigma)`, plus a margin far above rounding.
#[derive(Clone, Copy, Debug)]
struct Footprint<T> {
    x: T,
    y: T,
    a: T,
    b: T,
    c: T,
    opacity: T,
    reach: f64,
    color: [T; 3],
    depth: T,
}

impl<T: Real> Footprint<T> {
    fn new(a: &RasterArrays<'_, T>, g: usize) -> Self {
        const MARGIN: f64 = 1e-3;
        Footprint {
            x: a.xy[2 * g],
            y: a.xy[2 * g + 1],
            a: a.conic[3 * g],
            b: a.conic[3 * g + 1],
            c: a.conic[3 * g + 2],
            opacity: a.opacity[g],
            reach: (a.opacity[g].to_f64() / MIN_ALPHA).ln() + MARGIN,
            color: [a.color[3 * g], a.color[3 * g + 1], a.color[3 * g + 2]],
            depth: a.depth[g],
        }
    }

    /// Every Gaussian's footprint, in index order.
    fn all(a: &RasterArrays<'_, T>) -> Vec<Self> {
        (0..a.opacity.len())
            .into_par_iter()
            .map(|g| Footprint::new(a, g))
            .collect()
    }
}

/// Pixels per tile row.
const ROW: usize = TILE_SIZE as usize;

/// Pixel columns per segment.
const SEGMENT_W: usize = 8;

/// Pixel rows per segment.
const SEGMENT_H: usize = 2;

/// Lanes per segment, one pixel each: lane `l` is column `l % 8`, row `l / 8` of the segment.
///
/// A segment is the unit a Gaussian is skipped at and evaluated on as one vector: 8x2 pixels,
/// one 512-bit vector of `f32` (two 256-bit ones with AVX2). Counted on the garden scene
/// (camera 0 at 648x420, each block kept where some pixel centre has `sigma <= reach`): 8x2
/// blocks take 2.53 M (Gaussian, block) steps and 40.5 M lanes, against 4.81 M steps and
/// 38.5 M lanes for 8x1 and 3.16 M steps and 50.5 M lanes for 16x1.
const LANES: usize = SEGMENT_W * SEGMENT_H;

/// Segments per tile row of segments.
const SEGMENTS_PER_ROW: usize = ROW / SEGMENT_W;

/// Segments per tile, numbered row-major (`band * SEGMENTS_PER_ROW + half`, `band` the pair of
/// pixel rows); one bit each in a `u32`.
const SEGMENTS: usize = (ROW / SEGMENT_H) * SEGMENTS_PER_ROW;

/// The centre of every segment's first pixel in one tile, in pixels (what
/// [`reached_segments`] offsets).
struct SegmentGrid {
    cx: [f64; SEGMENTS],
    cy: [f64; SEGMENTS],
}

impl SegmentGrid {
    /// The grid of the tile whose pixels start at `(x0, y0)`.
    fn new(x0: usize, y0: usize) -> Self {
        SegmentGrid {
            cx: core::array::from_fn(|s| (x0 + (s % SEGMENTS_PER_ROW) * SEGMENT_W) as f64 + 0.5),
            cy: core::array::from_fn(|s| (y0 + (s / SEGMENTS_PER_ROW) * SEGMENT_H) as f64 + 0.5),
        }
    }
}

/// The segments (bit `s`, numbered as in [`SEGMENTS`]) of the tile of `grid` where Gaussian `f`
/// may reach `alpha >= 1/255`: those where `min sigma > reach` cannot be ruled out. On a row
/// `dy` away from the centre, `sigma` is a parabola in `dx` with its minimum at `-b dy / a`
/// (when `a > 0`), so its minimum over a row's pixel centres is at least its value at that
/// point clamped to the row; a segment is kept when either of its rows is. In `f64`, far from
/// the `f32` rounding the lanes make. NaN, or `a <= 0`, rules nothing out.
///
/// The AVX-512 build (`cpu/explicit.rs`) computes the same values in the same order.
#[inline(always)]
fn reached_segments<T: Real>(f: &Footprint<T>, grid: &SegmentGrid) -> u32 {
    if f.reach < 0.0 {
        // `alpha <= opacity < 1/255` everywhere.
        return 0;
    }
    let (x, y) = (f.x.to_f64(), f.y.to_f64());
    let (a, b, c) = (f.a.to_f64(), f.b.to_f64(), f.c.to_f64());
    if !(a > 0.0) || x.is_nan() {
        return u32::MAX;
    }
    let slope = -b / a;
    let row_reached = |first: f64, dy: f64| {
        // `max` drops a NaN `slope * dy` (`first` is not NaN); a NaN `sigma` is kept.
        let d = (slope * dy).max(first).min(first + (SEGMENT_W - 1) as f64);
        let sigma = (0.5 * a * d + b * dy) * d + 0.5 * c * dy * dy;
        !(sigma > f.reach)
    };
    let mut keep = [false; SEGMENTS];
    for ((k, &cx), &cy) in keep.iter_mut().zip(&grid.cx).zip(&grid.cy) {
        let (first, dy) = (cx - x, cy - y);
        *k = row_reached(first, dy) | row_reached(first, dy + 1.0);
    }
    let mut mask = 0;
    for (s, &k) in keep.iter().enumerate() {
        mask |= u32::from(k) << s;
    }
    mask
}

/// `masks[j] = reached_segments(entries[j], grid) & present`.
#[inline(always)]
fn segment_masks_body<T: Real>(
    entries: &[Footprint<T>],
    grid: &SegmentGrid,
    present: u32,
    masks: &mut [u32],
) {
    for (f, m) in entries.iter().zip(masks) {
        *m = reached_segments(f, grid) & present;
    }
}

simd::variants!(
    segment_masks,
    segment_masks_body,
    (
        entries: &[Footprint<T>],
        grid: &SegmentGrid,
        present: u32,
        masks: &mut [u32],
    )
);

/// Segment `s`'s list (`lists[s * stride..][..lens[s]]`): the indices `j` with bit `s` of
/// `masks[j]`, ascending, for every `s` (`stride >= masks.len()`).
fn segment_lists(masks: &[u32], lists: &mut [u32], stride: usize, lens: &mut [usize; SEGMENTS]) {
    *lens = [0; SEGMENTS];
    for (j, &m) in masks.iter().enumerate() {
        let mut mask = m;
        while mask != 0 {
            let s = mask.trailing_zeros() as usize;
            // A tile list is at most `N <= u32::MAX` long.
            lists[s * stride + lens[s]] = j as u32;
            lens[s] += 1;
            mask &= mask - 1;
        }
    }
}

/// The segments of a tile of `width x height` pixels that hold any pixel.
fn present_segments(width: usize, height: usize) -> u32 {
    (0..SEGMENTS)
        .filter(|s| {
            (s / SEGMENTS_PER_ROW) * SEGMENT_H < height
                && (s % SEGMENTS_PER_ROW) * SEGMENT_W < width
        })
        .fold(0, |mask, s| mask | (1 << s))
}

/// Where a segment lies in the image: its first pixel, and how many of its columns and rows
/// hold pixels (the others' lanes are evaluated but never drawn).
#[derive(Clone, Copy, Debug)]
struct SegmentPlace {
    px: usize,
    py: usize,
    width: usize,
    rows: usize,
}

impl SegmentPlace {
    /// Whether lane `l` is a pixel of the image.
    #[inline(always)]
    fn holds(&self, l: usize) -> bool {
        l % SEGMENT_W < self.width && l / SEGMENT_W < self.rows
    }

    /// Lane `l`'s pixel index in a row-major buffer `width` wide whose first pixel is the
    /// image's `(x0, y0)` (the image itself from `(0, 0)`, or one tile).
    #[inline(always)]
    fn pixel(&self, l: usize, (x0, y0): (usize, usize), width: usize) -> usize {
        (self.py - y0 + l / SEGMENT_W) * width + self.px - x0 + l % SEGMENT_W
    }

    /// Every lane's pixel centre, `(x, y)`.
    #[inline(always)]
    fn centres<T: Real>(&self) -> ([T; LANES], [T; LANES]) {
        (
            core::array::from_fn(|l| T::from_f64((self.px + l % SEGMENT_W) as f64 + 0.5)),
            core::array::from_fn(|l| T::from_f64((self.py + l / SEGMENT_W) as f64 + 0.5)),
        )
    }
}

/// A tile's list gathered into contiguous records, and for each of its segments the entries
/// (indices into the list, ascending) that may reach it.
#[derive(Default)]
struct TileSegments<T> {
    entries: Vec<Footprint<T>>,
    masks: Vec<u32>,
    /// Segment `s`'s entries are `lists[s * stride..][..lens[s]]`; each list has room for
    /// the whole tile list and 16 more (the AVX-512 build stores 16 at a time).
    lists: Vec<u32>,
    stride: usize,
    lens: [usize; SEGMENTS],
    /// The backward's per-entry lane sums.
    partial: Vec<LanePartial<T>>,
}

impl<T: Real> TileSegments<T> {
    /// Fills `self` with tile `(x0, x1, y0, y1)`'s `list`, reusing the buffers.
    fn gather(
        &mut self,
        footprints: &[Footprint<T>],
        list: &[u32],
        (x0, x1, y0, y1): (usize, usize, usize, usize),
    ) {
        self.entries.clear();
        self.entries
            .extend(list.iter().map(|&g| footprints[g as usize]));
        self.masks.clear();
        self.masks.resize(list.len(), 0);
        let grid = SegmentGrid::new(x0, y0);
        let present = present_segments(x1 - x0, y1 - y0);
        self.stride = list.len() + 16;
        if self.lists.len() < SEGMENTS * self.stride {
            self.lists.resize(SEGMENTS * self.stride, 0);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(entries) = explicit::as_f32(&self.entries)
            && explicit::avx512_available()
        {
            // SAFETY: the CPU has AVX-512F (checked); `lists` holds `SEGMENTS * stride`.
            unsafe {
                explicit::segment_masks_avx512(entries, &grid, present, &mut self.masks);
                explicit::segment_lists_avx512(
                    &self.masks,
                    &mut self.lists,
                    self.stride,
                    &mut self.lens,
                );
            }
            return;
        }
        // SAFETY: `simd::variants!` returns a build only on CPUs with its features.
        unsafe { segment_masks::<T>()(&self.entries, &grid, present, &mut self.masks) };
        segment_lists(&self.masks, &mut self.lists, self.stride, &mut self.lens);
    }

    /// Segment `s` of the tile `(x0, x1, y0, y1)`.
    fn place(s: usize, (x0, x1, y0, y1): (usize, usize, usize, usize)) -> SegmentPlace {
        let px = x0 + (s % SEGMENTS_PER_ROW) * SEGMENT_W;
        let py = y0 + (s / SEGMENTS_PER_ROW) * SEGMENT_H;
        SegmentPlace {
            px,
            py,
            width: x1.saturating_sub(px).min(SEGMENT_W),
            rows: y1.saturating_sub(py).min(SEGMENT_H),
        }
    }
}

/// One lane's view of a [`Footprint`] at the pixel centre `(cx, cy)`: the offsets `dx`, `dy`,
/// `exp(-sigma)`, the clamped alpha, whether the clamp is active, and whether the pair is
/// drawn at all (`sigma >= 0` and `alpha >= 1/255`; false for NaN). `sigma = dx (a/2 dx + b
/// dy) + c dy^2 / 2`: two fused multiply-adds (the lanes run in `simd::variants!`), the
/// explicit walks of `cpu/explicit.rs` round the same way.
#[inline(always)]
fn lane_hit<T: Real>(f: &Footprint<T>, cx: T, cy: T) -> (T, T, T, T, bool, bool) {
    let half = T::from_f64(0.5);
    let dx = cx - f.x;
    let dy = cy - f.y;
    let half_c_dy2 = half * f.c * dy * dy;
    let sigma = dx.mul_add((half * f.a).mul_add(dx, f.b * dy), half_c_dy2);
    let vis = (-sigma).exp_fused();
    let raw = f.opacity * vis;
    let max_alpha = T::from_f64(MAX_ALPHA);
    let clamped = raw > max_alpha;
    let alpha = if clamped { max_alpha } else { raw };
    let drawn = sigma >= T::ZERO && alpha >= T::from_f64(MIN_ALPHA);
    (dx, dy, vis, alpha, clamped, drawn)
}

/// One segment's forward state, lane per pixel. A lane is live while its `last` is the list
/// length (lanes outside the image start at 0, stopped).
struct SegmentForward<T> {
    t: [T; LANES],
    rgb: [[T; LANES]; 3],
    depth: [T; LANES],
    last: [u32; LANES],
}

impl<T: Real> SegmentForward<T> {
    /// The state before the first Gaussian of a list `open` long.
    fn start(place: &SegmentPlace, open: u32) -> Self {
        SegmentForward {
            t: [T::ONE; LANES],
            rgb: [[T::ZERO; LANES]; 3],
            depth: [T::ZERO; LANES],
            last: core::array::from_fn(|l| if place.holds(l) { open } else { 0 }),
        }
    }
}

/// Composites the entries `list` of `entries` front to back over the segment `place`, from the
/// state `s` (see [`SegmentForward::start`]). Each entry is evaluated on all lanes at once
/// (branch-free, so that it vectorises); the walk ends when every pixel has stopped. Each pixel
/// sees the Gaussians in list order with the per-pixel arithmetic, so results do not depend on
/// the vector width.
// The lane index addresses the state's per-lane arrays at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn forward_segment_body<T: Real>(
    entries: &[Footprint<T>],
    list: &[u32],
    place: SegmentPlace,
    s: &mut SegmentForward<T>,
) {
    let min_t = T::from_f64(MIN_TRANSMITTANCE);
    let (cx, cy) = place.centres::<T>();
    // A tile list is at most `N <= u32::MAX` long.
    let open = entries.len() as u32;
    for &j in list {
        let f = &entries[j as usize];
        // Counted in the lane loop: reading `last` back after its masked vector store would
        // stall on store forwarding.
        let mut running = 0u32;
        for l in 0..LANES {
            let (_, _, _, alpha, _, drawn) = lane_hit(f, cx[l], cy[l]);
            let live = s.last[l] == open;
            let ok = drawn && live;
            let next = s.t[l] * (T::ONE - alpha);
            let stop = ok && next <= min_t;
            let draw = ok && !stop;
            let w = T::select(draw, alpha * s.t[l]);
            // Channel by channel: a loop over the channels here compiles to a gather and a
            // scatter per step.
            s.rgb[0][l] += w * f.color[0];
            s.rgb[1][l] += w * f.color[1];
            s.rgb[2][l] += w * f.color[2];
            s.depth[l] += w * f.depth;
            s.t[l] = if draw { next } else { s.t[l] };
            s.last[l] = if stop { j } else { s.last[l] };
            running += u32::from(live && !stop);
        }
        if running == 0 {
            break;
        }
    }
}

simd::variants!(
    forward_segment,
    forward_segment_body,
    (
        entries: &[Footprint<T>],
        list: &[u32],
        place: SegmentPlace,
        s: &mut SegmentForward<T>,
    )
);

/// The explicit walks of `cpu/explicit.rs` that serve `T` on this CPU: for `f32` with AVX-512 the
/// 16-lane ones, with AVX2 and FMA the 8-lane ones; `None` otherwise (and for `f64`).
#[cfg(target_arch = "x86_64")]
fn explicit_walks<T: Real>() -> Option<(SegmentWalk<T>, SegmentReplay<T>)> {
    if core::any::TypeId::of::<T>() != core::any::TypeId::of::<f32>() {
        return None;
    }
    let walks: (SegmentWalk<f32>, SegmentReplay<f32>) = if explicit::avx512_available() {
        (explicit::forward_avx512, explicit::backward_avx512)
    } else if explicit::avx2_available() {
        (explicit::forward_avx2, explicit::backward_avx2)
    } else {
        return None;
    };
    // SAFETY: `T` is `f32` (same `TypeId`), so both are the same function pointer types.
    Some(unsafe {
        core::mem::transmute_copy::<
            (SegmentWalk<f32>, SegmentReplay<f32>),
            (SegmentWalk<T>, SegmentReplay<T>),
        >(&walks)
    })
}

/// A forward segment walk (the signature of `forward_segment_body`).
type SegmentWalk<T> = unsafe fn(&[Footprint<T>], &[u32], SegmentPlace, &mut SegmentForward<T>);

/// The fastest forward segment walk for `T` on this CPU: for `f32` with AVX-512 or AVX2 and
/// FMA the one in explicit intrinsics (state in registers, bit-identical results), else the
/// widest build of the portable body.
fn forward_segment_fn<T: Real>() -> SegmentWalk<T> {
    #[cfg(target_arch = "x86_64")]
    if let Some((walk, _)) = explicit_walks::<T>() {
        return walk;
    }
    forward_segment::<T>()
}

/// Forward: the images of the splats over `background` (RGB), and the state the backward
/// replays from.
pub fn forward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
) -> Result<RasterOutputs<T>, RasterError> {
    forward_with(a, bins, background, forward_segment_fn::<T>(), true)
}

/// The images of [`forward`] alone, for a render nobody differentiates.
#[derive(Clone, Debug, PartialEq)]
pub struct RasterImageOutputs<T> {
    /// `[H, W, 3]`
    pub rgb: Vec<T>,
    /// `[H, W]`, `1 - T_final`.
    pub alpha: Vec<T>,
    /// `[H, W]`, alpha-weighted depth (not normalised).
    pub depth: Vec<T>,
}

/// [`forward`]'s images, bit for bit, without building the replay state (two fewer
/// image-sized buffers to fill: the frame's output is bound by memory bandwidth).
pub fn forward_images<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
) -> Result<RasterImageOutputs<T>, RasterError> {
    let out = forward_with(a, bins, background, forward_segment_fn::<T>(), false)?;
    Ok(RasterImageOutputs {
        rgb: out.rgb,
        alpha: out.alpha,
        depth: out.depth,
    })
}

/// [`forward`] with the segment walk `segment_fn`; `last` and `transmittance` stay empty
/// unless `replay`.
fn forward_with<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
    segment_fn: SegmentWalk<T>,
    replay: bool,
) -> Result<RasterOutputs<T>, RasterError> {
    validate(a, bins)?;
    let footprints = Footprint::all(a);
    let count = bins.pixels();
    let width = bins.width as usize;
    let state_count = if replay { count } else { 0 };
    let mut out = RasterOutputs {
        rgb: vec![T::ZERO; 3 * count],
        alpha: vec![T::ZERO; count],
        depth: vec![T::ZERO; count],
        last: vec![0; state_count],
        transmittance: vec![T::ZERO; state_count],
    };
    // One task per row of tiles, writing its band of image rows in place (no serial copy of
    // the tiles into the image afterwards); rayon balances the rows between threads.
    let band = TILE_SIZE as usize * width;
    let state_bands: Vec<(&mut [u32], &mut [T])> = if replay {
        out.last
            .chunks_mut(band)
            .zip(out.transmittance.chunks_mut(band))
            .collect()
    } else {
        (0..count.div_ceil(band))
            .map(|_| Default::default())
            .collect()
    };
    (
        out.rgb.par_chunks_mut(3 * band),
        out.alpha.par_chunks_mut(band),
        out.depth.par_chunks_mut(band),
        state_bands,
    )
        .into_par_iter()
        .enumerate()
        .for_each_init(
            TileSegments::default,
            |tile, (ty, (rgb, alpha, depth, (last, transmittance)))| {
                let tiles_x = bins.tiles_x as usize;
                // The band's first pixel is the image's `(0, ty * TILE_SIZE)`.
                let band_origin = (0, ty * TILE_SIZE as usize);
                for t in ty * tiles_x..(ty + 1) * tiles_x {
                    let rect = bins.tile_pixels(t);
                    let open = bins.tile(t).len() as u32;
                    tile.gather(&footprints, bins.tile(t), rect);
                    for s in 0..SEGMENTS {
                        let list = &tile.lists[s * tile.stride..][..tile.lens[s]];
                        let place = TileSegments::<T>::place(s, rect);
                        // A pixel no Gaussian reaches keeps the start state: nothing drawn,
                        // the whole list gone through.
                        let mut state = SegmentForward::start(&place, open);
                        // Only segments with pixels have entries.
                        if !list.is_empty() {
                            // SAFETY: `forward_segment_fn` picks a walk only on CPUs with its
                            // features.
                            unsafe { segment_fn(&tile.entries, list, place, &mut state) };
                        }
                        // Each segment row is a run of contiguous pixels in the band (none
                        // for a segment past the image's right edge).
                        let rows = if place.width == 0 { 0 } else { place.rows };
                        for row in 0..rows {
                            let first = place.pixel(row * SEGMENT_W, band_origin, width);
                            let pixels = first..first + place.width;
                            let lanes = row * SEGMENT_W..row * SEGMENT_W + place.width;
                            let rgb = rgb[3 * pixels.start..3 * pixels.end].chunks_exact_mut(3);
                            let alpha = &mut alpha[pixels.clone()];
                            let depth = &mut depth[pixels.clone()];
                            for (j, (l, o)) in lanes.clone().zip(rgb).enumerate() {
                                let t_final = state.t[l];
                                for c in 0..3 {
                                    o[c] = state.rgb[c][l] + t_final * background[c];
                                }
                                alpha[j] = T::ONE - t_final;
                                depth[j] = state.depth[l];
                            }
                            if replay {
                                last[pixels.clone()].copy_from_slice(&state.last[lanes.clone()]);
                                transmittance[pixels].copy_from_slice(&state.t[lanes]);
                            }
                        }
                    }
                }
            },
        );
    Ok(out)
}

/// One tile entry's gradient partial sums.
#[derive(Clone, Copy, Default)]
struct Partial<T> {
    xy: [T; 2],
    conic: [T; 3],
    color: [T; 3],
    opacity: T,
    depth: T,
    xy_abs: T,
}

/// One segment's backward state, lane per pixel: the loss gradient, the transmittance in
/// front of the current Gaussian, everything behind it as its alpha sees it (times
/// `1 - alpha`: the colour and depth drawn behind, the background, the coverage through
/// `T_final`), and how far the forward went (0 for lanes outside the image: nothing drawn).
struct SegmentBackward<T> {
    v_rgb: [[T; LANES]; 3],
    v_depth: [T; LANES],
    t: [T; LANES],
    behind: [T; LANES],
    last: [u32; LANES],
}

/// One tile entry's gradient sums lane by lane: each segment adds its lanes into the same lanes,
/// and the lanes are added up once per tile (in a fixed pairwise order), instead of once per
/// segment.
#[derive(Clone, Copy)]
struct LanePartial<T> {
    xy: [[T; LANES]; 2],
    conic: [[T; LANES]; 3],
    color: [[T; LANES]; 3],
    opacity: [T; LANES],
    depth: [T; LANES],
    xy_abs: [T; LANES],
}

impl<T: Real> LanePartial<T> {
    const ZERO: Self = LanePartial {
        xy: [[T::ZERO; LANES]; 2],
        conic: [[T::ZERO; LANES]; 3],
        color: [[T::ZERO; LANES]; 3],
        opacity: [T::ZERO; LANES],
        depth: [T::ZERO; LANES],
        xy_abs: [T::ZERO; LANES],
    };

    /// The lanes added up.
    fn sum(&self) -> Partial<T> {
        Partial {
            xy: self.xy.each_ref().map(lane_sum),
            conic: self.conic.each_ref().map(lane_sum),
            color: self.color.each_ref().map(lane_sum),
            opacity: lane_sum(&self.opacity),
            depth: lane_sum(&self.depth),
            xy_abs: lane_sum(&self.xy_abs),
        }
    }
}

/// Replays the segment `place` back to front over the entries `list` of `entries`, adding each
/// entry's gradients lane by lane into `partial` (indexed like `entries`). Lanes are evaluated
/// branch-free, so results are deterministic; each lane adds into its own accumulators, so the
/// sums do not depend on how the lanes are grouped into vectors.
// The lane index addresses a dozen per-lane arrays at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn backward_segment_body<T: Real>(
    entries: &[Footprint<T>],
    list: &[u32],
    place: SegmentPlace,
    mut s: SegmentBackward<T>,
    partial: &mut [LanePartial<T>],
) {
    let half = T::from_f64(0.5);
    let (cx, cy) = place.centres::<T>();
    // Entries at or past every lane's `last` were not drawn here.
    let longest = s.last.iter().copied().max().unwrap_or(0);
    let end = list.partition_point(|&j| j < longest);
    for &j in list[..end].iter().rev() {
        let f = &entries[j as usize];
        let e = &mut partial[j as usize];
        for l in 0..LANES {
            let (dx, dy, vis, alpha, clamped, drawn) = lane_hit(f, cx[l], cy[l]);
            let ok = drawn && j < s.last[l];
            // One division for the two quantities divided by `1 - alpha`.
            let inv_one_minus = T::ONE / (T::ONE - alpha);
            let t = s.t[l] * inv_one_minus;
            let w = T::select(ok, alpha * t);
            let own = f.color[0] * s.v_rgb[0][l]
                + f.color[1] * s.v_rgb[1][l]
                + f.color[2] * s.v_rgb[2][l]
                + f.depth * s.v_depth[l];
            let v_alpha = T::select(ok, t * own - s.behind[l] * inv_one_minus);
            s.behind[l] += w * own;
            s.t[l] = if ok { t } else { s.t[l] };
            // Channel by channel, as in the forward.
            e.color[0][l] += w * s.v_rgb[0][l];
            e.color[1][l] += w * s.v_rgb[1][l];
            e.color[2][l] += w * s.v_rgb[2][l];
            e.depth[l] += w * s.v_depth[l];
            // Where the 0.999 clamp is active, alpha does not depend on opacity or position.
            let free = T::select(!clamped, T::ONE);
            e.opacity[l] += free * vis * v_alpha;
            let v_sigma = -(free * v_alpha) * alpha;
            e.conic[0][l] += half * v_sigma * dx * dx;
            e.conic[1][l] += v_sigma * dx * dy;
            e.conic[2][l] += half * v_sigma * dy * dy;
            // d sigma / d xy = -(a dx + b dy, b dx + c dy).
            let gx = -v_sigma * (f.a * dx + f.b * dy);
            let gy = -v_sigma * (f.b * dx + f.c * dy);
            e.xy[0][l] += gx;
            e.xy[1][l] += gy;
            e.xy_abs[l] += (gx * gx + gy * gy).sqrt();
        }
    }
}

simd::variants!(
    backward_segment,
    backward_segment_body,
    (
        entries: &[Footprint<T>],
        list: &[u32],
        place: SegmentPlace,
        s: SegmentBackward<T>,
        partial: &mut [LanePartial<T>],
    )
);

/// A backward segment walk (the signature of `backward_segment_body`).
type SegmentReplay<T> =
    unsafe fn(&[Footprint<T>], &[u32], SegmentPlace, SegmentBackward<T>, &mut [LanePartial<T>]);

/// The fastest backward segment walk for `T` on this CPU (as [`forward_segment_fn`]).
fn backward_segment_fn<T: Real>() -> SegmentReplay<T> {
    #[cfg(target_arch = "x86_64")]
    if let Some((_, replay)) = explicit_walks::<T>() {
        return replay;
    }
    backward_segment::<T>()
}

/// Backward: the gradient of `sum(image * grad)` over the three images with respect to the
/// splats, given the forward's `replay` state for the same inputs, bins and `background`.
pub fn backward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
    replay: &ReplayState<'_, T>,
    grads: &RasterOutputGrads<'_, T>,
) -> Result<RasterGrads<T>, RasterError> {
    backward_with(
        a,
        bins,
        background,
        replay,
        grads,
        backward_segment_fn::<T>(),
    )
}

/// [`backward`] with the segment walk `segment_fn`.
fn backward_with<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
    replay: &ReplayState<'_, T>,
    grads: &RasterOutputGrads<'_, T>,
    segment_fn: SegmentReplay<T>,
) -> Result<RasterGrads<T>, RasterError> {
    let n = validate(a, bins)?;
    let footprints = Footprint::all(a);
    let count = bins.pixels();
    let lengths = [
        ("grad rgb", grads.rgb.len(), 3, "[H, W, 3]"),
        ("grad alpha", grads.alpha.len(), 1, "[H, W]"),
        ("grad depth", grads.depth.len(), 1, "[H, W]"),
        ("forward last", replay.last.len(), 1, "[H, W]"),
        (
            "forward transmittance",
            replay.transmittance.len(),
            1,
            "[H, W]",
        ),
    ];
    for (name, got, per, shape) in lengths {
        check_len(name, got, per * count, shape)?;
    }
    let width = bins.width as usize;
    let partials: Vec<Vec<Partial<T>>> = (0..bins.tile_count())
        .into_par_iter()
        .map_init(TileSegments::default, |tile, t| {
            let list = bins.tile(t);
            if list.is_empty() {
                return Vec::new();
            }
            let rect = bins.tile_pixels(t);
            tile.gather(&footprints, list, rect);
            tile.partial.clear();
            tile.partial.resize(list.len(), LanePartial::ZERO);
            for s in 0..SEGMENTS {
                let list = &tile.lists[s * tile.stride..][..tile.lens[s]];
                // Only segments with pixels have entries.
                if list.is_empty() {
                    continue;
                }
                let place = TileSegments::<T>::place(s, rect);
                let mut state = SegmentBackward {
                    v_rgb: [[T::ZERO; LANES]; 3],
                    v_depth: [T::ZERO; LANES],
                    t: [T::ONE; LANES],
                    behind: [T::ZERO; LANES],
                    last: [0; LANES],
                };
                for l in (0..LANES).filter(|&l| place.holds(l)) {
                    let i = place.pixel(l, (0, 0), width);
                    let v = [grads.rgb[3 * i], grads.rgb[3 * i + 1], grads.rgb[3 * i + 2]];
                    let t_final = replay.transmittance[i];
                    let bg = background[0] * v[0] + background[1] * v[1] + background[2] * v[2];
                    for (c, vc) in v.iter().enumerate() {
                        state.v_rgb[c][l] = *vc;
                    }
                    state.v_depth[l] = grads.depth[i];
                    state.t[l] = t_final;
                    state.behind[l] = t_final * (bg - grads.alpha[i]);
                    state.last[l] = replay.last[i];
                }
                // SAFETY: `backward_segment_fn` picks a walk only on CPUs with its features.
                unsafe { segment_fn(&tile.entries, list, place, state, &mut tile.partial) };
            }
            tile.partial.iter().map(LanePartial::sum).collect()
        })
        .collect();
    let mut g = RasterGrads {
        xy: vec![T::ZERO; 2 * n],
        conic: vec![T::ZERO; 3 * n],
        color: vec![T::ZERO; 3 * n],
        opacity: vec![T::ZERO; n],
        depth: vec![T::ZERO; n],
        xy_abs: vec![T::ZERO; n],
    };
    // One task per contiguous range of Gaussians: each walks every tile in order and adds only
    // its own Gaussians' partials, so every Gaussian still sums them in tile order, as a
    // serial reduce would (bit-identical whatever the number of threads).
    let chunk = n.div_ceil(rayon::current_num_threads().max(1)).max(1);
    (
        g.xy.par_chunks_mut(2 * chunk),
        g.conic.par_chunks_mut(3 * chunk),
        g.color.par_chunks_mut(3 * chunk),
        g.opacity.par_chunks_mut(chunk),
        g.depth.par_chunks_mut(chunk),
        g.xy_abs.par_chunks_mut(chunk),
    )
        .into_par_iter()
        .enumerate()
        .for_each(|(part, (xy, conic, color, opacity, depth, xy_abs))| {
            let ids = part * chunk..part * chunk + opacity.len();
            for (t, partial) in partials.iter().enumerate() {
                for (&id, e) in bins.tile(t).iter().zip(partial) {
                    let id = id as usize;
                    if !ids.contains(&id) {
                        continue;
                    }
                    let i = id - ids.start;
                    for k in 0..2 {
                        xy[2 * i + k] += e.xy[k];
                    }
                    for k in 0..3 {
                        conic[3 * i + k] += e.conic[k];
                        color[3 * i + k] += e.color[k];
                    }
                    opacity[i] += e.opacity;
                    depth[i] += e.depth;
                    xy_abs[i] += e.xy_abs;
                }
            }
        });
    Ok(g)
}

#[cfg(test)]
mod tests;
