//! The bilateral grid on the CPU: rayon over image rows, generic over `f32`/`f64` (the `f64`
//! one is the oracle of the GPU kernels). The grid coordinates are found in `f64` for both.

use rayon::prelude::*;

use super::{AFFINE_ENTRIES, LUMA};
use crate::real::Real;

/// Rows per band of the grid's gradient: each band sums its own copy of the grid's gradient,
/// and the copies are added in band order (deterministic whatever the thread count).
const BAND_ROWS: usize = 8;

/// A grid's shape `[L, GH, GW]` and the image's `[H, W]`.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// The grid's cells `[L, GH, GW]` (each >= 2).
    pub cells: [usize; 3],
    /// The image's `[H, W]`.
    pub image: [usize; 2],
}

impl Layout {
    fn plane(&self) -> usize {
        self.cells.iter().product()
    }

    /// The lower cell and the fraction along one axis of `size` pixels and `cells` cells.
    fn axis(at: usize, size: usize, cells: usize) -> (usize, f64) {
        let g = if size > 1 {
            at as f64 * (cells - 1) as f64 / (size - 1) as f64
        } else {
            0.0
        };
        let lower = (g.floor() as usize).min(cells - 2);
        (lower, g - lower as f64)
    }
}

/// Where one pixel reads the grid: the lower corner's offset in a `[L, GH, GW]` plane, the
/// eight corner weights (`c, b, a` order: z outermost), and whether the luminance lies
/// strictly inside `(0, 1)` (where it has a gradient).
struct Corners<T> {
    base: usize,
    offsets: [usize; 8],
    weights: [T; 8],
    /// `dw/dgz` of each corner.
    dz: [T; 8],
    inside: bool,
}

fn corners<T: Real>(layout: &Layout, y: usize, x: usize, rgb: [T; 3]) -> Corners<T> {
    let [levels, gh, gw] = layout.cells;
    let (x0, fx) = Layout::axis(x, layout.image[1], gw);
    let (y0, fy) = Layout::axis(y, layout.image[0], gh);
    let s = LUMA[0] * rgb[0].to_f64() + LUMA[1] * rgb[1].to_f64() + LUMA[2] * rgb[2].to_f64();
    let inside = s > 0.0 && s < 1.0;
    let gz = s.clamp(0.0, 1.0) * (levels - 1) as f64;
    let z0 = (gz.floor() as usize).min(levels - 2);
    let fz = gz - z0 as f64;
    let mut offsets = [0; 8];
    let mut weights = [T::ZERO; 8];
    let mut dz = [T::ZERO; 8];
    for c in 0..2 {
        for b in 0..2 {
            for a in 0..2 {
                let corner = 4 * c + 2 * b + a;
                let wx = if a == 0 { 1.0 - fx } else { fx };
                let wy = if b == 0 { 1.0 - fy } else { fy };
                let wz = if c == 0 { 1.0 - fz } else { fz };
                offsets[corner] = (c * gh + b) * gw + a;
                weights[corner] = T::from_f64(wx * wy * wz);
                dz[corner] = T::from_f64(wx * wy * if c == 0 { -1.0 } else { 1.0 });
            }
        }
    }
    Corners {
        base: (z0 * gh + y0) * gw + x0,
        offsets,
        weights,
        dz,
        inside,
    }
}

/// The interpolated affine map `A` of one pixel (and, with `dz`, `dA/dgz`).
fn affine<T: Real>(grid: &[T], plane: usize, at: &Corners<T>, dz: bool) -> [[T; 12]; 2] {
    let mut a = [T::ZERO; AFFINE_ENTRIES];
    let mut da = [T::ZERO; AFFINE_ENTRIES];
    for k in 0..AFFINE_ENTRIES {
        let entry = &grid[k * plane + at.base..];
        for corner in 0..8 {
            let g = entry[at.offsets[corner]];
            a[k] += at.weights[corner] * g;
            if dz {
                da[k] += at.dz[corner] * g;
            }
        }
    }
    [a, da]
}

fn pixel<T: Real>(rgb: &[T], p: usize) -> [T; 3] {
    [rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2]]
}

/// `out [H, W, 3]` from `rgb [H, W, 3]` and `grid [12, L, GH, GW]` (the module docs).
pub fn slice<T: Real>(rgb: &[T], grid: &[T], layout: Layout, out: &mut [T]) {
    let plane = layout.plane();
    let width = layout.image[1];
    out.par_chunks_mut(3 * width)
        .enumerate()
        .for_each(|(y, row)| {
            for x in 0..width {
                let c = pixel(rgb, y * width + x);
                let at = corners(&layout, y, x, c);
                let [a, _] = affine(grid, plane, &at, false);
                for i in 0..3 {
                    let k = 4 * i;
                    row[3 * x + i] = a[k] * c[0] + a[k + 1] * c[1] + a[k + 2] * c[2] + a[k + 3];
                }
            }
        });
}

/// The backward of [`slice`]: `grad_rgb [H, W, 3]` and `grad_grid [12, L, GH, GW]` (both
/// overwritten) from `grad [H, W, 3]`.
pub fn slice_backward<T: Real>(
    rgb: &[T],
    grid: &[T],
    grad: &[T],
    layout: Layout,
    grad_rgb: &mut [T],
    grad_grid: &mut [T],
) {
    let plane = layout.plane();
    let [levels, _, _] = layout.cells;
    let width = layout.image[1];
    let z_scale = (levels - 1) as f64;
    let bands: Vec<Vec<T>> = grad_rgb
        .par_chunks_mut(3 * width * BAND_ROWS)
        .enumerate()
        .map(|(band, rows)| {
            let mut partial = vec![T::ZERO; grid.len()];
            for (r, row) in rows.chunks_mut(3 * width).enumerate() {
                let y = band * BAND_ROWS + r;
                for x in 0..width {
                    let p = y * width + x;
                    let c = pixel(rgb, p);
                    let g = pixel(grad, p);
                    let at = corners(&layout, y, x, c);
                    let [a, da] = affine(grid, plane, &at, at.inside);
                    let u = [c[0], c[1], c[2], T::ONE];
                    let mut d_gz = T::ZERO;
                    for (i, &gi) in g.iter().enumerate() {
                        for (j, &uj) in u.iter().enumerate() {
                            let k = 4 * i + j;
                            let grad_a = gi * uj;
                            d_gz += grad_a * da[k];
                            let entry = &mut partial[k * plane + at.base..];
                            for corner in 0..8 {
                                let o = at.offsets[corner];
                                entry[o] += at.weights[corner] * grad_a;
                            }
                        }
                    }
                    for j in 0..3 {
                        let direct = g[0] * a[j] + g[1] * a[4 + j] + g[2] * a[8 + j];
                        let guided = if at.inside {
                            d_gz * T::from_f64(z_scale * LUMA[j])
                        } else {
                            T::ZERO
                        };
                        row[3 * x + j] = direct + guided;
                    }
                }
            }
            partial
        })
        .collect();
    grad_grid.fill(T::ZERO);
    for partial in bands {
        for (total, v) in grad_grid.iter_mut().zip(partial) {
            *total += v;
        }
    }
}
