//! The CPU binning of [the op contract](super::super#binning): every tile's Gaussians, front to
//! back, as CSR ([`Bins`]), in bands of tile rows sorted on all threads.

use rayon::prelude::*;

use super::{check_len, order};
use crate::project::cpu::TILE_SIZE;
use crate::raster::RasterError;
use crate::real::Real;

/// The Gaussians of every tile, front to back, as CSR. Made by [`bin`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bins {
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) tiles_x: u32,
    pub(super) tiles_y: u32,
    pub(super) gaussians: usize,
    pub(super) offsets: Vec<usize>,
    pub(super) ids: Vec<u32>,
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

    pub(super) fn tile_count(&self) -> usize {
        self.tiles_x as usize * self.tiles_y as usize
    }

    pub(super) fn pixels(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Tile `t`'s pixel ranges: columns `x0..x1`, rows `y0..y1`.
    pub(super) fn tile_pixels(&self, t: usize) -> (usize, usize, usize, usize) {
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

/// Half-open tile index range of `[centre - radius, centre + radius]`, clipped to `tiles`;
/// `None` when empty (or NaN).
#[inline(always)]
fn tile_span(centre: f64, radius: f64, tiles: u32) -> Option<(u32, u32)> {
    // `clamp` would pass a NaN centre through, and a NaN spans nothing.
    if centre.is_nan() {
        return None;
    }
    let tile = f64::from(TILE_SIZE);
    let limit = f64::from(tiles);
    // Clamped to `[0, tiles]` before rounding, which gives the ranges of rounding first (the
    // bounds are integers). There the truncating cast is `floor` and needs no libm call (the
    // baseline x86-64 has no rounding instruction).
    let lo = ((centre - radius) / tile).clamp(0.0, limit) as u32;
    let end = ((centre + radius) / tile).clamp(0.0, limit);
    let hi = end as u32 + u32::from(f64::from(end as u32) < end);
    (hi > lo).then_some((lo, hi))
}

/// Gaussians per task of the binning's first pass.
const BIN_CHUNK: usize = 8192;

/// Bins the splats of `xy` `[N, 2]`, `depth` `[N]`, `radius` `[N, 2]` into the tiles of a
/// `width x height` image (see [binning](super#binning)).
///
/// The tile rows are cut into bands, two per thread. A first pass over the Gaussians (in
/// chunks, in index order) lists each drawn one in every band its tiles reach; each band then
/// sorts its own list front to back and counts and fills its own tiles, with no test of other
/// bands' Gaussians and with the sorts of the bands on all threads.
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
    let tiles_x = width.div_ceil(TILE_SIZE) as usize;
    let tiles_y = height.div_ceil(TILE_SIZE) as usize;
    let tiles = tiles_x * tiles_y;
    let rows_per_band = tiles_y
        .div_ceil(2 * rayon::current_num_threads().max(1))
        .max(1);
    let bands = tiles_y.div_ceil(rows_per_band);
    let band_rows = |band: usize| band * rows_per_band..((band + 1) * rows_per_band).min(tiles_y);
    // Per chunk of Gaussians, per band: the drawn Gaussians whose tiles reach the band.
    let chunks: Vec<Vec<Vec<order::Drawn>>> = (0..n.div_ceil(BIN_CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let mut listed = vec![Vec::new(); bands];
            for i in chunk * BIN_CHUNK..((chunk + 1) * BIN_CHUNK).min(n) {
                let (rx, ry) = (radius[2 * i], radius[2 * i + 1]);
                if rx == 0 && ry == 0 {
                    continue;
                }
                let span = |centre: T, r: u32, tiles: usize| {
                    tile_span(centre.to_f64(), f64::from(r), tiles as u32)
                };
                let Some((x0, x1)) = span(xy[2 * i], rx, tiles_x) else {
                    continue;
                };
                let Some((y0, y1)) = span(xy[2 * i + 1], ry, tiles_y) else {
                    continue;
                };
                // `n` fits in `u32` (checked above).
                let drawn = order::Drawn::new(i as u32, depth[i], [x0, x1, y0, y1]);
                for band in listed
                    .iter_mut()
                    .take((y1 as usize - 1) / rows_per_band + 1)
                    .skip(y0 as usize / rows_per_band)
                {
                    band.push(drawn);
                }
            }
            listed
        })
        .collect();
    // Each band's Gaussians front to back, and its tiles' counts.
    let sorted: Vec<(Vec<order::Drawn>, Vec<usize>)> = (0..bands)
        .into_par_iter()
        .map(|band| {
            let listed: Vec<order::Drawn> = chunks
                .iter()
                .flat_map(|listed| listed[band].iter().copied())
                .collect();
            let listed = order::front_to_back(listed, depth);
            let rows = band_rows(band);
            let mut counts = vec![0usize; rows.len() * tiles_x];
            for d in &listed {
                for_band_tiles(d.rect, rows.clone(), tiles_x, |t| counts[t] += 1);
            }
            (listed, counts)
        })
        .collect();
    drop(chunks);
    let mut offsets = Vec::with_capacity(tiles + 1);
    offsets.push(0);
    for (_, counts) in &sorted {
        for c in counts {
            offsets.push(offsets[offsets.len() - 1] + c);
        }
    }
    let mut ids = vec![0u32; offsets[tiles]];
    let mut parts = Vec::with_capacity(bands);
    let mut rest = ids.as_mut_slice();
    for band in 0..bands {
        let rows = band_rows(band);
        let (t0, t1) = (rows.start * tiles_x, rows.end * tiles_x);
        let (head, tail) = core::mem::take(&mut rest).split_at_mut(offsets[t1] - offsets[t0]);
        parts.push((band, head));
        rest = tail;
    }
    parts
        .into_par_iter()
        .zip(&sorted)
        .for_each(|((band, part), (listed, _))| {
            let rows = band_rows(band);
            let t0 = rows.start * tiles_x;
            let mut cursor: Vec<usize> = offsets[t0..t0 + rows.len() * tiles_x]
                .iter()
                .map(|o| o - offsets[t0])
                .collect();
            for d in listed {
                let i = d.index();
                for_band_tiles(d.rect, rows.clone(), tiles_x, |t| {
                    part[cursor[t]] = i;
                    cursor[t] += 1;
                });
            }
        });
    Ok(Bins {
        width,
        height,
        tiles_x: tiles_x as u32,
        tiles_y: tiles_y as u32,
        gaussians: n,
        offsets,
        ids,
    })
}

/// Calls `visit` with each tile of the tile rectangle `[x0, x1, y0, y1]` (half-open) in the
/// tile rows `rows`, numbered from the first tile of `rows`, row-major (`tiles_x` per row).
#[inline(always)]
fn for_band_tiles(
    [x0, x1, y0, y1]: [u32; 4],
    rows: core::ops::Range<usize>,
    tiles_x: usize,
    mut visit: impl FnMut(usize),
) {
    for ty in (y0 as usize).max(rows.start)..(y1 as usize).min(rows.end) {
        let row = (ty - rows.start) * tiles_x;
        for tx in x0 as usize..x1 as usize {
            visit(row + tx);
        }
    }
}
