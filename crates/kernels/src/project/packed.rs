//! The packed projection rows on the host: `[N, PACKED_WIDTH]` row-major, as the projection
//! writes them and the rasterizer reads them, to and from the separate arrays the CPU kernels
//! take.

use rayon::prelude::*;

use super::{PACKED_COLOR, PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_WIDTH, PACKED_XY};
use crate::real::Real;

/// The packed projection rows (`[N, PACKED_WIDTH]`) as separate arrays, the layout the CPU
/// kernels take: the projection's outputs, the rasterizer's inputs, and both ops' gradients.
pub(crate) struct PackedColumns<T> {
    /// `[N, 2]`
    pub(crate) xy: Vec<T>,
    /// `[N]`
    pub(crate) depth: Vec<T>,
    /// `[N, 3]`
    pub(crate) conic: Vec<T>,
    /// `[N, 3]`
    pub(crate) color: Vec<T>,
    /// `[N]`
    pub(crate) opacity: Vec<T>,
}

impl<T: Real> PackedColumns<T> {
    /// Splits row-major packed rows into columns (on all threads, [`ROWS_PER_TASK`] rows each).
    #[cfg(feature = "ndarray")]
    pub(crate) fn split(packed: &[T]) -> Self {
        let n = packed.len() / PACKED_WIDTH;
        let mut c = PackedColumns {
            xy: vec![T::ZERO; 2 * n],
            depth: vec![T::ZERO; n],
            conic: vec![T::ZERO; 3 * n],
            color: vec![T::ZERO; 3 * n],
            opacity: vec![T::ZERO; n],
        };
        let per = ROWS_PER_TASK;
        (
            packed.par_chunks(PACKED_WIDTH * per),
            c.xy.par_chunks_mut(2 * per),
            c.depth.par_chunks_mut(per),
            c.conic.par_chunks_mut(3 * per),
            c.color.par_chunks_mut(3 * per),
            c.opacity.par_chunks_mut(per),
        )
            .into_par_iter()
            .for_each(|(rows, xy, depth, conic, color, opacity)| {
                for (i, row) in rows.chunks_exact(PACKED_WIDTH).enumerate() {
                    xy[2 * i..2 * i + 2].copy_from_slice(&row[PACKED_XY..PACKED_XY + 2]);
                    depth[i] = row[PACKED_DEPTH];
                    conic[3 * i..3 * i + 3].copy_from_slice(&row[PACKED_CONIC..PACKED_CONIC + 3]);
                    color[3 * i..3 * i + 3].copy_from_slice(&row[PACKED_COLOR..PACKED_COLOR + 3]);
                    opacity[i] = row[PACKED_OPACITY];
                }
            });
        c
    }

    /// The row-major packed rows (on all threads, [`ROWS_PER_TASK`] rows each).
    pub(crate) fn pack(&self) -> Vec<T> {
        let n = self.opacity.len();
        let mut packed = vec![T::ZERO; n * PACKED_WIDTH];
        let per = ROWS_PER_TASK;
        (
            packed.par_chunks_mut(PACKED_WIDTH * per),
            self.xy.par_chunks(2 * per),
            self.depth.par_chunks(per),
            self.conic.par_chunks(3 * per),
            self.color.par_chunks(3 * per),
            self.opacity.par_chunks(per),
        )
            .into_par_iter()
            .for_each(|(rows, xy, depth, conic, color, opacity)| {
                for (i, row) in rows.chunks_exact_mut(PACKED_WIDTH).enumerate() {
                    row[PACKED_XY..PACKED_XY + 2].copy_from_slice(&xy[2 * i..2 * i + 2]);
                    row[PACKED_DEPTH] = depth[i];
                    row[PACKED_CONIC..PACKED_CONIC + 3].copy_from_slice(&conic[3 * i..3 * i + 3]);
                    row[PACKED_COLOR..PACKED_COLOR + 3].copy_from_slice(&color[3 * i..3 * i + 3]);
                    row[PACKED_OPACITY] = opacity[i];
                }
            });
        packed
    }
}

/// Rows per rayon task of the host-side reshuffles (packing, splitting, interleaving): the
/// copies run on all threads instead of the caller's alone.
pub(crate) const ROWS_PER_TASK: usize = 4096;

