//! The tiles of a splat's screen box that its ellipse reaches, for the GPU binning (see
//! [binning](crate::raster#binning)): a box of at least 2x2 tiles is trimmed row by row to the
//! tiles where `alpha >= 1/255` can hold.

use cubecl::prelude::*;

use crate::project::cpu::TILE_SIZE;
use crate::project::cube::{MAX_EXTENT_SIGMAS, MIN_ALPHA};

/// Added to the ellipse's bound `t = k^2` (`q = 2 sigma`), so that rounding never drops a tile
/// the rasterizer draws a pixel of.
pub(crate) const COVER_MARGIN: f32 = 2e-3;

/// A splat's screen box's tiles `x0..x1`, `y0..y1` (half-open, clipped to the image) and,
/// where the box is trimmed (`trims`: at least 2x2 tiles and a positive definite conic), its
/// drawn ellipse `a dx^2 + 2 b dx dy + c dy^2 <= t` around `(x, y)`.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Cover<F: Float> {
    x: F,
    y: F,
    a: F,
    b: F,
    det: F,
    t: F,
    /// Half-extent of the ellipse along `y`: `sqrt(t a / det)`.
    half_y: F,
    /// Half-extent along `x`: `sqrt(t c / det)`.
    half_x: F,
    /// The `dy` of the ellipse's rightmost point (`-dy` is the leftmost's).
    dy_right: F,
    x0: u32,
    x1: u32,
    pub y0: u32,
    pub y1: u32,
    trims: bool,
}

/// A half-open range of tile columns.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Span {
    pub lo: u32,
    pub hi: u32,
}

/// `floor(lo / 16) .. ceil(hi / 16)` clipped to `0..tiles`, empty when it misses.
#[cube]
fn tile_range<F: Float>(lo: F, hi: F, tiles: u32) -> Span {
    let tile = F::new(TILE_SIZE as f32);
    let zero = F::new(0.0);
    let limit = F::cast_from(tiles);
    let first = u32::cast_from(F::floor(F::min(F::max(lo / tile, zero), limit)));
    let last = u32::cast_from(F::ceil(F::min(F::max(hi / tile, zero), limit)));
    Span {
        lo: first,
        hi: u32::max(last, first),
    }
}

/// The cover of a kept splat at `(x, y)` with conic `(a, b, c)`, `opacity` and box half-extents
/// `(rx, ry)` in an image of `tiles_x x tiles_y` tiles.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn cover_new<F: Float>(
    x: F,
    y: F,
    a: F,
    b: F,
    c: F,
    opacity: F,
    rx: F,
    ry: F,
    tiles_x: u32,
    tiles_y: u32,
) -> Cover<F> {
    let zero = F::new(0.0);
    let det = a * c - b * b;
    let k = F::min(
        F::sqrt(F::new(2.0) * F::ln(F::max(opacity / F::new(MIN_ALPHA), F::new(1.0)))),
        F::new(MAX_EXTENT_SIGMAS),
    );
    let t = k * k + F::new(COVER_MARGIN);
    let columns = tile_range::<F>(x - rx, x + rx, tiles_x);
    let rows = tile_range::<F>(y - ry, y + ry, tiles_y);
    let half_x = F::sqrt(t * c / det);
    let positive = det > zero && a > zero && c > zero;
    Cover::<F> {
        x,
        y,
        a,
        b,
        det,
        t,
        half_y: F::sqrt(t * a / det),
        half_x,
        dy_right: -b * half_x / c,
        x0: columns.lo,
        x1: columns.hi,
        y0: rows.lo,
        y1: rows.hi,
        trims: positive && columns.hi - columns.lo >= 2 && rows.hi - rows.lo >= 2,
    }
}

/// The columns of tile row `ty` (one of the box's) the splat is listed in: the box's row,
/// trimmed to the ellipse where the box is.
///
/// At a fixed `dy` the ellipse spans `dx = -(b / a) dy +- sqrt(t a - det dy^2) / a`; the right
/// end is concave in `dy` and the left end convex, so over the row's band of `dy` their extremes
/// are the ellipse's own (where the band holds that point) or at the band's ends.
#[cube]
pub(crate) fn cover_row<F: Float>(cover: &Cover<F>, ty: u32) -> Span {
    let tile = F::new(TILE_SIZE as f32);
    let top = F::max(F::cast_from(ty) * tile - cover.y, -cover.half_y);
    let bottom = F::min(F::cast_from(ty + 1) * tile - cover.y, cover.half_y);
    let mut lo = cover.x0;
    let mut hi = cover.x1;
    if cover.trims {
        hi = cover.x0;
    }
    if cover.trims && top <= bottom {
        let zero = F::new(0.0);
        let slope = -cover.b / cover.a;
        let half_top = F::sqrt(F::max(cover.t * cover.a - cover.det * top * top, zero)) / cover.a;
        let half_bottom = F::sqrt(F::max(
            cover.t * cover.a - cover.det * bottom * bottom,
            zero,
        )) / cover.a;
        let mut right = F::max(slope * top + half_top, slope * bottom + half_bottom);
        if top <= cover.dy_right && cover.dy_right <= bottom {
            right = cover.half_x;
        }
        let mut left = F::min(slope * top - half_top, slope * bottom - half_bottom);
        if top <= -cover.dy_right && -cover.dy_right <= bottom {
            left = -cover.half_x;
        }
        let range = tile_range::<F>(cover.x + left, cover.x + right, cover.x1);
        lo = u32::max(range.lo, cover.x0);
        hi = u32::max(range.hi, lo);
    }
    Span { lo, hi }
}
