//! The tile rasterizer on the CPU: rayon, one independent task per tile, generic over `f32` /
//! `f64` (`f64` is what the finite-difference gradient checks run on).
//!
//! The forward renders each tile into its own buffer and copies the tiles into the image; the
//! backward accumulates each tile's per-Gaussian partial sums in a buffer of its own and adds
//! the buffers up in tile order, so every result is bit-identical whatever the thread count.

// `!(a >= b)` is used on purpose: it is true when either side is NaN, so NaN is skipped.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use rayon::prelude::*;

use super::RasterError;
use crate::project::cpu::TILE_SIZE;
use crate::real::Real;
use crate::simd::{self, lane_sum};

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

/// The Gaussians of every tile, front to back, as CSR. Made by [`bin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bins {
    width: u32,
    height: u32,
    tiles_x: u32,
    tiles_y: u32,
    gaussians: usize,
    offsets: Vec<usize>,
    ids: Vec<u32>,
}

impl Bins {
    /// Bins from their CSR arrays (as [`Bins::offsets`] and [`Bins::ids`] return them), for
    /// `gaussians` splats in a `width x height` image; `None` when the arrays are inconsistent.
    pub fn from_csr(
        width: u32,
        height: u32,
        gaussians: usize,
        offsets: Vec<usize>,
        ids: Vec<u32>,
    ) -> Option<Self> {
        let tiles_x = width.div_ceil(TILE_SIZE);
        let tiles_y = height.div_ceil(TILE_SIZE);
        let tiles = tiles_x as usize * tiles_y as usize;
        let consistent = offsets.len() == tiles + 1
            && offsets.first() == Some(&0)
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets[tiles] <= ids.len()
            && ids.iter().all(|&i| (i as usize) < gaussians);
        consistent.then_some(Bins {
            width,
            height,
            tiles_x,
            tiles_y,
            gaussians,
            offsets,
            ids,
        })
    }

    /// Image width, pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Image height, pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Tiles per row, `ceil(width / 16)`.
    pub fn tiles_x(&self) -> u32 {
        self.tiles_x
    }

    /// Tiles per column, `ceil(height / 16)`.
    pub fn tiles_y(&self) -> u32 {
        self.tiles_y
    }

    /// `[tiles + 1]`: tile `t`'s Gaussians are `ids[offsets[t]..offsets[t + 1]]`.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// `[offsets[tiles]]`: Gaussian indices, each tile's front to back.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The Gaussians of tile `tile` (row-major), front to back; empty past the last tile.
    pub fn tile(&self, tile: usize) -> &[u32] {
        match (self.offsets.get(tile), self.offsets.get(tile + 1)) {
            (Some(&lo), Some(&hi)) => &self.ids[lo..hi],
            _ => &[],
        }
    }

    fn tile_count(&self) -> usize {
        self.tiles_x as usize * self.tiles_y as usize
    }

    fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Tile `t`'s pixel ranges: columns `x0..x1`, rows `y0..y1`.
    fn tile_pixels(&self, t: usize) -> (usize, usize, usize, usize) {
        let size = TILE_SIZE as usize;
        let (tx, ty) = (t % self.tiles_x as usize, t / self.tiles_x as usize);
        let (x0, y0) = (tx * size, ty * size);
        (
            x0,
            (x0 + size).min(self.width as usize),
            y0,
            (y0 + size).min(self.height as usize),
        )
    }
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

/// Half-open tile index range of `[centre - radius, centre + radius]`, clipped to `tiles`;
/// `None` when empty (or NaN).
fn tile_span(centre: f64, radius: f64, tiles: u32) -> Option<(u32, u32)> {
    let tile = f64::from(TILE_SIZE);
    let lo = ((centre - radius) / tile).floor().max(0.0);
    let hi = ((centre + radius) / tile).ceil().min(f64::from(tiles));
    // Both are integers in `[0, tiles]` when `hi > lo`, so the casts are exact.
    (hi > lo).then_some((lo as u32, hi as u32))
}

/// Bins the splats of `xy` `[N, 2]`, `depth` `[N]`, `radius` `[N, 2]` into the tiles of a
/// `width x height` image (see [binning](super#binning)).
pub fn bin<T: Real>(
    xy: &[T],
    depth: &[T],
    radius: &[u32],
    width: u32,
    height: u32,
) -> Result<Bins, RasterError> {
    let n = depth.len();
    check_len("xy", xy.len(), 2 * n, "[N, 2]")?;
    check_len("radius", radius.len(), 2 * n, "[N, 2]")?;
    if width == 0 || height == 0 {
        return Err(RasterError::EmptyImage { width, height });
    }
    if u32::try_from(n).is_err() {
        return Err(RasterError::TooMany(n));
    }
    let tiles_x = width.div_ceil(TILE_SIZE);
    let tiles_y = height.div_ceil(TILE_SIZE);
    let rects: Vec<Option<[u32; 4]>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (rx, ry) = (radius[2 * i], radius[2 * i + 1]);
            if rx == 0 && ry == 0 {
                return None;
            }
            let (x0, x1) = tile_span(xy[2 * i].to_f64(), f64::from(rx), tiles_x)?;
            let (y0, y1) = tile_span(xy[2 * i + 1].to_f64(), f64::from(ry), tiles_y)?;
            Some([x0, x1, y0, y1])
        })
        .collect();
    let tiles = tiles_x as usize * tiles_y as usize;
    let mut offsets = vec![0usize; tiles + 1];
    for [x0, x1, y0, y1] in rects.iter().flatten() {
        for ty in *y0..*y1 {
            for tx in *x0..*x1 {
                offsets[ty as usize * tiles_x as usize + tx as usize + 1] += 1;
            }
        }
    }
    for t in 0..tiles {
        offsets[t + 1] += offsets[t];
    }
    let mut cursor = offsets.clone();
    let mut ids = vec![0u32; offsets[tiles]];
    for (i, rect) in rects.iter().enumerate() {
        let Some([x0, x1, y0, y1]) = *rect else {
            continue;
        };
        for ty in y0..y1 {
            for tx in x0..x1 {
                let t = ty as usize * tiles_x as usize + tx as usize;
                // `n` fits in `u32` (checked above).
                ids[cursor[t]] = i as u32;
                cursor[t] += 1;
            }
        }
    }
    let mut segments = Vec::with_capacity(tiles);
    let mut rest = ids.as_mut_slice();
    for t in 0..tiles {
        let (head, tail) = core::mem::take(&mut rest).split_at_mut(offsets[t + 1] - offsets[t]);
        segments.push(head);
        rest = tail;
    }
    segments.into_par_iter().for_each(|segment| {
        segment.sort_unstable_by(|&p, &q| {
            let (dp, dq) = (depth[p as usize].to_f64(), depth[q as usize].to_f64());
            dp.total_cmp(&dq).then(p.cmp(&q))
        });
    });
    Ok(Bins {
        width,
        height,
        tiles_x,
        tiles_y,
        gaussians: n,
        offsets,
        ids,
    })
}

/// Checks the splat arrays against each other and the bins; returns `N`.
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
/// `reach` bounds `sigma` beyond which its alpha is certainly below `1/255`
/// (`ln(255 opacity)`, as `alpha <= opacity exp(-sigma)`, plus a margin far above rounding);
/// `ex`, `ey` are the half-extents in pixels of the ellipse `sigma <= reach` (its axis-aligned
/// bounding box, widened by a margin). Pixels outside are skipped before any arithmetic; no
/// decision changes, since every pixel outside has `alpha < 1/255`.
#[derive(Clone, Copy, Debug)]
struct Footprint<T> {
    x: T,
    y: T,
    a: T,
    b: T,
    c: T,
    opacity: T,
    reach: T,
    color: [T; 3],
    depth: T,
    /// Infinite when the conic is not positive definite (no bound), negative when nothing can
    /// be drawn.
    ex: f32,
    ey: f32,
}

impl<T: Real> Footprint<T> {
    fn new(a: &RasterArrays<'_, T>, g: usize) -> Self {
        const MARGIN: f64 = 1e-3;
        let bound = (a.opacity[g].to_f64() / MIN_ALPHA).ln() + MARGIN;
        let [ca, cb, cc] = [0, 1, 2].map(|k| a.conic[3 * g + k].to_f64());
        let det = ca * cc - cb * cb;
        // `0.5 d^T A d <= r` spans `sqrt(2 r (A^-1)_xx)` along x; the relative and absolute
        // margins cover the rounding of `sigma` in `T` and of the extent in `f32`.
        let extent = |diag: f64| {
            if bound < 0.0 {
                -1.0
            } else if ca > 0.0 && det > 0.0 {
                ((2.0 * bound * diag / det).sqrt() * (1.0 + 1e-4) + 1e-2) as f32
            } else {
                f32::INFINITY
            }
        };
        Footprint {
            x: a.xy[2 * g],
            y: a.xy[2 * g + 1],
            a: a.conic[3 * g],
            b: a.conic[3 * g + 1],
            c: a.conic[3 * g + 2],
            opacity: a.opacity[g],
            reach: T::from_f64(bound),
            color: [a.color[3 * g], a.color[3 * g + 1], a.color[3 * g + 2]],
            depth: a.depth[g],
            ex: extent(cc),
            ey: extent(ca),
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

/// The pixel indices `lo..hi` (clipped to `first..end`) whose centres `p + 0.5` lie within
/// `extent` of `centre`; empty when none do.
fn span(centre: f64, extent: f64, first: usize, end: usize) -> (usize, usize) {
    // `max`/`min` drop NaN, leaving the whole range to the per-lane test, which skips NaN.
    let lo = (centre - extent - 0.5).ceil().max(first as f64);
    let hi = (centre + extent - 0.5).floor().min(end as f64 - 1.0);
    if hi < lo {
        (first, first)
    } else {
        // Both are integers in `[first, end - 1]`.
        (lo as usize, hi as usize + 1)
    }
}

/// Pixels per row segment: one tile row, one vector of lanes.
const ROW: usize = TILE_SIZE as usize;

/// One entry of a tile's list, gathered into a contiguous buffer per tile (the rows walk the
/// list many times).
#[derive(Clone, Copy)]
struct TileEntry<T> {
    splat: Footprint<T>,
    /// Pixel rows `rows.0..rows.1` of the image and lanes `lanes.0..lanes.1` of the tile's rows
    /// its bounding box meets.
    rows: (u32, u32),
    lanes: (u32, u32),
}

/// Tile `t`'s list as [`TileEntry`]s.
fn gather_tile<T: Real>(
    footprints: &[Footprint<T>],
    list: &[u32],
    (x0, x1, y0, y1): (usize, usize, usize, usize),
) -> Vec<TileEntry<T>> {
    list.iter()
        .map(|&g| {
            let splat = footprints[g as usize];
            let (r0, r1) = span(splat.y.to_f64(), f64::from(splat.ey), y0, y1);
            let (c0, c1) = span(splat.x.to_f64(), f64::from(splat.ex), x0, x1);
            // Pixel indices are below 2^32 (image sides are `u32`).
            TileEntry {
                splat,
                rows: (r0 as u32, r1 as u32),
                lanes: ((c0 - x0) as u32, (c1 - x0) as u32),
            }
        })
        .collect()
}

/// A [`TileEntry`] on the pixel row centred at `cy`: what every lane shares.
#[derive(Clone, Copy)]
struct RowSplat<T> {
    x: T,
    /// `cy - y`.
    dy: T,
    a: T,
    b: T,
    c: T,
    opacity: T,
    reach: T,
    color: [T; 3],
    depth: T,
}

impl<T: Real> RowSplat<T> {
    #[inline(always)]
    fn new(e: &TileEntry<T>, cy: T) -> Self {
        let f = &e.splat;
        RowSplat {
            x: f.x,
            dy: cy - f.y,
            a: f.a,
            b: f.b,
            c: f.c,
            opacity: f.opacity,
            reach: f.reach,
            color: f.color,
            depth: f.depth,
        }
    }
}

/// One lane's view of a [`RowSplat`]: the offset, `exp(-sigma)`, the clamped alpha, whether the
/// clamp is active, and whether the pair is drawn at all (`sigma >= 0`, within reach,
/// `alpha >= 1/255`; false for NaN).
#[inline(always)]
fn lane_hit<T: Real>(s: &RowSplat<T>, cx: T) -> (T, T, T, bool, bool) {
    let dx = cx - s.x;
    let sigma = T::from_f64(0.5) * (s.a * dx * dx + s.c * s.dy * s.dy) + s.b * dx * s.dy;
    let vis = (-sigma).exp();
    let raw = s.opacity * vis;
    let max_alpha = T::from_f64(MAX_ALPHA);
    let clamped = raw > max_alpha;
    let alpha = if clamped { max_alpha } else { raw };
    let drawn = sigma >= T::ZERO && sigma <= s.reach && alpha >= T::from_f64(MIN_ALPHA);
    (dx, vis, alpha, clamped, drawn)
}

/// The centres of the lanes of a row starting at column `x0`.
#[inline(always)]
fn lane_centres<T: Real>(x0: usize) -> [T; ROW] {
    core::array::from_fn(|l| T::from_f64((x0 + l) as f64 + 0.5))
}

/// One pixel row's forward state, lane per pixel.
struct RowForward<T> {
    t: [T; ROW],
    rgb: [[T; ROW]; 3],
    depth: [T; ROW],
    last: [u32; ROW],
    live: [bool; ROW],
}

/// Composites `list` front to back over the pixel row `py`, columns `x0..x1` (at most
/// [`ROW`]), appending the pixels to `out`. The row is walked Gaussian by Gaussian, each one
/// evaluated on all lanes at once (branch-free, so that it vectorises) and only when its
/// bounding box meets the row; the walk ends when every pixel has stopped. Each pixel sees the
/// Gaussians in list order with the per-pixel arithmetic, so results do not depend on the
/// vector width.
#[inline(always)]
fn forward_row_body<T: Real>(
    list: &[TileEntry<T>],
    py: usize,
    x0: usize,
    x1: usize,
    out: &mut Vec<Pixel<T>>,
) {
    let min_t = T::from_f64(MIN_TRANSMITTANCE);
    let width = x1 - x0;
    let cx = lane_centres::<T>(x0);
    let cy = T::from_f64(py as f64 + 0.5);
    let row = py as u32;
    // A tile list is at most `N <= u32::MAX` long.
    let mut s = RowForward {
        t: [T::ONE; ROW],
        rgb: [[T::ZERO; ROW]; 3],
        depth: [T::ZERO; ROW],
        last: [list.len() as u32; ROW],
        live: core::array::from_fn(|l| l < width),
    };
    let mut running = width;
    for (j, e) in list.iter().enumerate() {
        if row < e.rows.0 || row >= e.rows.1 {
            continue;
        }
        let (lo, hi) = e.lanes;
        let sp = RowSplat::new(e, cy);
        let mut stopped = 0;
        for l in 0..ROW {
            let (_, _, alpha, _, drawn) = lane_hit(&sp, cx[l]);
            let ok = drawn && s.live[l] && (l as u32).wrapping_sub(lo) < hi - lo;
            let next = s.t[l] * (T::ONE - alpha);
            let stop = ok && next <= min_t;
            let draw = ok && !stop;
            let w = T::select(draw, alpha * s.t[l]);
            for (acc, c) in s.rgb.iter_mut().zip(sp.color) {
                acc[l] += w * c;
            }
            s.depth[l] += w * sp.depth;
            s.t[l] = if draw { next } else { s.t[l] };
            s.last[l] = if stop { j as u32 } else { s.last[l] };
            s.live[l] = s.live[l] && !stop;
            stopped += usize::from(stop);
        }
        running -= stopped;
        if running == 0 {
            break;
        }
    }
    out.extend((0..width).map(|l| Pixel {
        rgb: [s.rgb[0][l], s.rgb[1][l], s.rgb[2][l]],
        depth: s.depth[l],
        transmittance: s.t[l],
        last: s.last[l],
    }));
}

simd::variants!(
    forward_row,
    forward_row_body,
    (
        list: &[TileEntry<T>],
        py: usize,
        x0: usize,
        x1: usize,
        out: &mut Vec<Pixel<T>>,
    )
);

/// One pixel's forward result.
#[derive(Clone, Copy)]
struct Pixel<T> {
    rgb: [T; 3],
    depth: T,
    transmittance: T,
    last: u32,
}

/// Forward: the images of the splats over `background` (RGB).
pub fn forward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
) -> Result<RasterOutputs<T>, RasterError> {
    validate(a, bins)?;
    let footprints = Footprint::all(a);
    let row_fn = forward_row::<T>();
    let tiles: Vec<Vec<Pixel<T>>> = (0..bins.tile_count())
        .into_par_iter()
        .map(|t| {
            let (x0, x1, y0, y1) = bins.tile_pixels(t);
            let list = gather_tile(&footprints, bins.tile(t), (x0, x1, y0, y1));
            let mut pixels = Vec::with_capacity((x1 - x0) * (y1 - y0));
            for py in y0..y1 {
                // SAFETY: `simd::variants!` returns a build only on CPUs with its features.
                unsafe { row_fn(&list, py, x0, x1, &mut pixels) };
            }
            pixels
        })
        .collect();
    let count = bins.pixels();
    let width = bins.width as usize;
    let mut out = RasterOutputs {
        rgb: vec![T::ZERO; 3 * count],
        alpha: vec![T::ZERO; count],
        depth: vec![T::ZERO; count],
        last: vec![0; count],
        transmittance: vec![T::ZERO; count],
    };
    for (t, pixels) in tiles.iter().enumerate() {
        let (x0, x1, y0, _) = bins.tile_pixels(t);
        let tile_w = x1 - x0;
        for (k, p) in pixels.iter().enumerate() {
            let i = (y0 + k / tile_w) * width + x0 + k % tile_w;
            for ((o, c), b) in out.rgb[3 * i..3 * i + 3]
                .iter_mut()
                .zip(p.rgb)
                .zip(background)
            {
                *o = c + p.transmittance * b;
            }
            out.alpha[i] = T::ONE - p.transmittance;
            out.depth[i] = p.depth;
            out.last[i] = p.last;
            out.transmittance[i] = p.transmittance;
        }
    }
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

/// One pixel row's backward state, lane per pixel: the loss gradient, the transmittance in
/// front of the current Gaussian, everything behind it as its alpha sees it (times
/// `1 - alpha`: the colour and depth drawn behind, the background, the coverage through
/// `T_final`), and how far the forward went.
struct RowBackward<T> {
    v_rgb: [[T; ROW]; 3],
    v_depth: [T; ROW],
    t: [T; ROW],
    behind: [T; ROW],
    last: [u32; ROW],
}

/// Per-lane gradient sums of one Gaussian on one row, before the lanes are added up.
struct LaneGrads<T> {
    xy: [[T; ROW]; 2],
    conic: [[T; ROW]; 3],
    color: [[T; ROW]; 3],
    opacity: [T; ROW],
    depth: [T; ROW],
    xy_abs: [T; ROW],
}

/// Replays the pixel row `py` (its tile's lanes start at column `x0`) back to front over `list`, adding each
/// entry's gradients into `partial` (indexed like `list`). Lanes are evaluated branch-free and
/// summed in a fixed pairwise order, so results are deterministic.
// The lane index addresses a dozen per-lane arrays at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn backward_row_body<T: Real>(
    list: &[TileEntry<T>],
    py: usize,
    x0: usize,
    s: &mut RowBackward<T>,
    partial: &mut [Partial<T>],
) {
    let half = T::from_f64(0.5);
    let cx = lane_centres::<T>(x0);
    let cy = T::from_f64(py as f64 + 0.5);
    let row = py as u32;
    let longest = s.last.iter().copied().max().unwrap_or(0) as usize;
    for j in (0..longest.min(list.len())).rev() {
        let e = &list[j];
        if row < e.rows.0 || row >= e.rows.1 {
            continue;
        }
        let (lo, hi) = e.lanes;
        let sp = RowSplat::new(e, cy);
        let mut d = LaneGrads {
            xy: [[T::ZERO; ROW]; 2],
            conic: [[T::ZERO; ROW]; 3],
            color: [[T::ZERO; ROW]; 3],
            opacity: [T::ZERO; ROW],
            depth: [T::ZERO; ROW],
            xy_abs: [T::ZERO; ROW],
        };
        for l in 0..ROW {
            let (dx, vis, alpha, clamped, drawn) = lane_hit(&sp, cx[l]);
            let ok = drawn && (j as u32) < s.last[l] && (l as u32).wrapping_sub(lo) < hi - lo;
            let one_minus = T::ONE - alpha;
            let t = s.t[l] / one_minus;
            let w = T::select(ok, alpha * t);
            let own = sp.color[0] * s.v_rgb[0][l]
                + sp.color[1] * s.v_rgb[1][l]
                + sp.color[2] * s.v_rgb[2][l]
                + sp.depth * s.v_depth[l];
            let v_alpha = T::select(ok, t * own - s.behind[l] / one_minus);
            s.behind[l] += w * own;
            s.t[l] = if ok { t } else { s.t[l] };
            for c in 0..3 {
                d.color[c][l] = w * s.v_rgb[c][l];
            }
            d.depth[l] = w * s.v_depth[l];
            // Where the 0.999 clamp is active, alpha does not depend on opacity or position.
            let free = T::select(!clamped, T::ONE);
            d.opacity[l] = free * vis * v_alpha;
            let v_sigma = -(free * v_alpha) * alpha;
            d.conic[0][l] = half * v_sigma * dx * dx;
            d.conic[1][l] = v_sigma * dx * sp.dy;
            d.conic[2][l] = half * v_sigma * sp.dy * sp.dy;
            // d sigma / d xy = -(a dx + b dy, b dx + c dy).
            let gx = -v_sigma * (sp.a * dx + sp.b * sp.dy);
            let gy = -v_sigma * (sp.b * dx + sp.c * sp.dy);
            d.xy[0][l] = gx;
            d.xy[1][l] = gy;
            d.xy_abs[l] = (gx * gx + gy * gy).sqrt();
        }
        let e = &mut partial[j];
        for k in 0..2 {
            e.xy[k] += lane_sum(&d.xy[k]);
        }
        for k in 0..3 {
            e.conic[k] += lane_sum(&d.conic[k]);
            e.color[k] += lane_sum(&d.color[k]);
        }
        e.opacity += lane_sum(&d.opacity);
        e.depth += lane_sum(&d.depth);
        e.xy_abs += lane_sum(&d.xy_abs);
    }
}

simd::variants!(
    backward_row,
    backward_row_body,
    (
        list: &[TileEntry<T>],
        py: usize,
        x0: usize,
        s: &mut RowBackward<T>,
        partial: &mut [Partial<T>],
    )
);

/// Backward: the gradient of `sum(image * grad)` over the three images with respect to the
/// splats, given the forward's `replay` state for the same inputs, bins and `background`.
pub fn backward<T: Real>(
    a: &RasterArrays<'_, T>,
    bins: &Bins,
    background: [T; 3],
    replay: &ReplayState<'_, T>,
    grads: &RasterOutputGrads<'_, T>,
) -> Result<RasterGrads<T>, RasterError> {
    let n = validate(a, bins)?;
    let footprints = Footprint::all(a);
    let row_fn = backward_row::<T>();
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
        .map(|t| {
            let list = bins.tile(t);
            let mut partial = vec![Partial::default(); list.len()];
            if list.is_empty() {
                return partial;
            }
            let (x0, x1, y0, y1) = bins.tile_pixels(t);
            let entries = gather_tile(&footprints, list, (x0, x1, y0, y1));
            for py in y0..y1 {
                let mut row = RowBackward {
                    v_rgb: [[T::ZERO; ROW]; 3],
                    v_depth: [T::ZERO; ROW],
                    t: [T::ONE; ROW],
                    behind: [T::ZERO; ROW],
                    last: [0; ROW],
                };
                for (l, px) in (x0..x1).enumerate() {
                    let i = py * width + px;
                    let v = [grads.rgb[3 * i], grads.rgb[3 * i + 1], grads.rgb[3 * i + 2]];
                    let t_final = replay.transmittance[i];
                    let bg = background[0] * v[0] + background[1] * v[1] + background[2] * v[2];
                    for (c, vc) in v.iter().enumerate() {
                        row.v_rgb[c][l] = *vc;
                    }
                    row.v_depth[l] = grads.depth[i];
                    row.t[l] = t_final;
                    row.behind[l] = t_final * (bg - grads.alpha[i]);
                    row.last[l] = replay.last[i];
                }
                // SAFETY: `simd::variants!` returns a build only on CPUs with its features.
                unsafe { row_fn(&entries, py, x0, &mut row, &mut partial) };
            }
            partial
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
    for (t, partial) in partials.iter().enumerate() {
        for (&id, e) in bins.tile(t).iter().zip(partial) {
            let i = id as usize;
            for k in 0..2 {
                g.xy[2 * i + k] += e.xy[k];
            }
            for k in 0..3 {
                g.conic[3 * i + k] += e.conic[k];
                g.color[3 * i + k] += e.color[k];
            }
            g.opacity[i] += e.opacity;
            g.depth[i] += e.depth;
            g.xy_abs[i] += e.xy_abs;
        }
    }
    Ok(g)
}
