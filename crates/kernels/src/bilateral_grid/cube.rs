//! The bilateral grid as CubeCL kernels, generic over the runtime and the float type:
//!
//! 1. `slice_kernel`: a unit per pixel, the interpolated map applied to its colour;
//! 2. `grad_rgb_kernel`: a unit per pixel, `dL/drgb` (through the map and the luminance);
//! 3. `grad_grid_kernel`: a unit per cell and output channel `i`, the four entries `4i..4i+4`
//!    of `dL/dG` at that cell, gathered over the pixels whose interpolation reads it (those
//!    within one cell's spacing of it in x and y). No atomics: each entry is written by one
//!    unit, in a fixed order, so the result is deterministic.
//!
//! The grid is read as its flat `[12, L, GH, GW]` layout (inputs made contiguous).

use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::{AFFINE_ENTRIES, BilateralGridGrads, BilateralGridOps, LUMA};
use crate::cube_alloc::output;

/// Units per cube.
const BLOCK: u32 = 256;
/// The luminance weights in `f32`.
const LUMA_R: f32 = LUMA[0] as f32;
/// See [`LUMA_R`].
const LUMA_G: f32 = LUMA[1] as f32;
/// See [`LUMA_R`].
const LUMA_B: f32 = LUMA[2] as f32;

/// The lower cell and the fraction of pixel `at` along an axis of `size` pixels and `cells`
/// (>= 2) cells.
#[cube]
fn axis<F: Float>(at: usize, size: usize, cells: usize) -> (usize, F) {
    let mut g = F::new(0.0);
    if size > 1 {
        g = F::cast_from(at) * F::cast_from(cells - 1) / F::cast_from(size - 1);
    }
    let floor = usize::cast_from(F::floor(g));
    let lower = select(floor > cells - 2, cells - 2, floor);
    (lower, g - F::cast_from(lower))
}

/// The luminance's lower cell and fraction on a grid of `levels` levels, and whether the
/// luminance lies strictly inside `(0, 1)`.
#[cube]
fn luma_axis<F: Float>(r: F, g: F, b: F, levels: usize) -> (usize, F, bool) {
    let s = F::new(LUMA_R) * r + F::new(LUMA_G) * g + F::new(LUMA_B) * b;
    let inside = s > F::new(0.0) && s < F::new(1.0);
    let gz = F::clamp(s, F::new(0.0), F::new(1.0)) * F::cast_from(levels - 1);
    let floor = usize::cast_from(F::floor(gz));
    let lower = select(floor > levels - 2, levels - 2, floor);
    (lower, gz - F::cast_from(lower), inside)
}

/// Entry `k`'s bilinear interpolation in x and y on the lower and the upper luminance level
/// around `cell` (the flat index of the lower corner in a `[L, GH, GW]` plane).
#[cube]
#[allow(clippy::too_many_arguments)]
fn levels_at<F: Float>(
    grid: &Tensor<F>,
    k: usize,
    cell: usize,
    gh: usize,
    gw: usize,
    plane: usize,
    fx: F,
    fy: F,
) -> (F, F) {
    let one = F::new(1.0);
    let at = k * plane + cell;
    let up = gh * gw;
    let lower = (grid[at] * (one - fx) + grid[at + 1] * fx) * (one - fy)
        + (grid[at + gw] * (one - fx) + grid[at + gw + 1] * fx) * fy;
    let upper = (grid[at + up] * (one - fx) + grid[at + up + 1] * fx) * (one - fy)
        + (grid[at + up + gw] * (one - fx) + grid[at + up + gw + 1] * fx) * fy;
    (lower, upper)
}

/// Row `k..k + 4` of the pixel's map `A` and of `dA/dgz`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn row_at<F: Float>(
    grid: &Tensor<F>,
    k: usize,
    cell: usize,
    gh: usize,
    gw: usize,
    plane: usize,
    fx: F,
    fy: F,
    fz: F,
) -> (F, F, F, F, F, F, F, F) {
    let one = F::new(1.0);
    let (l0, h0) = levels_at::<F>(grid, k, cell, gh, gw, plane, fx, fy);
    let (l1, h1) = levels_at::<F>(grid, k + 1, cell, gh, gw, plane, fx, fy);
    let (l2, h2) = levels_at::<F>(grid, k + 2, cell, gh, gw, plane, fx, fy);
    let (l3, h3) = levels_at::<F>(grid, k + 3, cell, gh, gw, plane, fx, fy);
    (
        l0 * (one - fz) + h0 * fz,
        l1 * (one - fz) + h1 * fz,
        l2 * (one - fz) + h2 * fz,
        l3 * (one - fz) + h3 * fz,
        h0 - l0,
        h1 - l1,
        h2 - l2,
        h3 - l3,
    )
}

/// Pixel `p`'s place on the grid: the lower corner's flat cell, the three fractions, and
/// whether its luminance has a gradient.
#[cube]
fn place<F: Float>(
    rgb: &Tensor<F>,
    p: usize,
    grid: &Tensor<F>,
) -> (usize, F, F, F, bool) {
    let (height, width) = (rgb.shape(0), rgb.shape(1));
    let (levels, gh, gw) = (grid.shape(1), grid.shape(2), grid.shape(3));
    let (x0, fx) = axis::<F>(p % width, width, gw);
    let (y0, fy) = axis::<F>(p / width, height, gh);
    let (z0, fz, inside) = luma_axis::<F>(rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2], levels);
    ((z0 * gh + y0) * gw + x0, fx, fy, fz, inside)
}

/// One unit per pixel: `out = A (r, g, b, 1)`.
#[cube(launch)]
fn slice_kernel<F: Float>(
    rgb: &Tensor<F>,
    grid: &Tensor<F>,
    out: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    if p >= rgb.shape(0) * rgb.shape(1) {
        terminate!();
    }
    let (gh, gw) = (grid.shape(2), grid.shape(3));
    let plane = grid.shape(1) * gh * gw;
    let (cell, fx, fy, fz, _inside) = place::<F>(rgb, p, grid);
    let (r, g, b) = (rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2]);
    #[unroll]
    for i in 0..3usize {
        let (a0, a1, a2, a3, _, _, _, _) = row_at::<F>(grid, 4 * i, cell, gh, gw, plane, fx, fy, fz);
        out[3 * p + i] = a0 * r + a1 * g + a2 * b + a3;
    }
}

/// One unit per pixel: `dL/drgb` from `grad = dL/dout`.
#[cube(launch)]
fn grad_rgb_kernel<F: Float>(
    rgb: &Tensor<F>,
    grid: &Tensor<F>,
    grad: &Tensor<F>,
    grad_rgb: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    if p >= rgb.shape(0) * rgb.shape(1) {
        terminate!();
    }
    let (levels, gh, gw) = (grid.shape(1), grid.shape(2), grid.shape(3));
    let plane = levels * gh * gw;
    let (cell, fx, fy, fz, inside) = place::<F>(rgb, p, grid);
    let (r, g, b) = (rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2]);
    let mut d_gz = F::new(0.0);
    let mut dr = F::new(0.0);
    let mut dg = F::new(0.0);
    let mut db = F::new(0.0);
    #[unroll]
    for i in 0..3usize {
        let gi = grad[3 * p + i];
        let (a0, a1, a2, _, d0, d1, d2, d3) = row_at::<F>(grid, 4 * i, cell, gh, gw, plane, fx, fy, fz);
        d_gz += gi * (d0 * r + d1 * g + d2 * b + d3);
        dr += gi * a0;
        dg += gi * a1;
        db += gi * a2;
    }
    let guided = select(inside, d_gz * F::cast_from(levels - 1), F::new(0.0));
    grad_rgb[3 * p] = dr + guided * F::new(LUMA_R);
    grad_rgb[3 * p + 1] = dg + guided * F::new(LUMA_G);
    grad_rgb[3 * p + 2] = db + guided * F::new(LUMA_B);
}

/// The weight of cell `c` along an axis for a pixel whose lower cell is `lower` at fraction `f`.
#[cube]
fn cell_weight<F: Float>(c: usize, lower: usize, f: F) -> F {
    let mut w = F::new(0.0);
    if lower == c {
        w = F::new(1.0) - f;
    } else if lower + 1 == c {
        w = f;
    }
    w
}

/// The pixel range `[first, last]` along an axis of `size` pixels whose interpolation on
/// `cells` cells can read cell `c`: those within one cell's spacing of it.
#[cube]
fn footprint(c: usize, size: usize, cells: usize) -> (usize, usize) {
    let span = size - 1;
    let steps = cells - 1;
    let mut first = 0;
    if c > 0 {
        first = ((c - 1) * span) / steps;
    }
    let ceil = ((c + 1) * span).div_ceil(steps);
    (first, select(ceil > span, span, ceil))
}

/// One unit per (output channel `i`, cell): entries `4i..4i+4` of `dL/dG` at the cell.
#[cube(launch)]
fn grad_grid_kernel<F: Float>(
    rgb: &Tensor<F>,
    grad: &Tensor<F>,
    grad_grid: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let unit = ABSOLUTE_POS;
    let (levels, gh, gw) = (grad_grid.shape(1), grad_grid.shape(2), grad_grid.shape(3));
    let plane = levels * gh * gw;
    if unit >= 3 * plane {
        terminate!();
    }
    let (height, width) = (rgb.shape(0), rgb.shape(1));
    let i = unit / plane;
    let cell = unit % plane;
    let (cz, cy, cx) = (cell / (gh * gw), (cell / gw) % gh, cell % gw);
    let (x_first, x_last) = footprint(cx, width, gw);
    let (y_first, y_last) = footprint(cy, height, gh);
    let mut ar = F::new(0.0);
    let mut ag = F::new(0.0);
    let mut ab = F::new(0.0);
    let mut a1 = F::new(0.0);
    for y in y_first..y_last + 1 {
        let (y0, fy) = axis::<F>(y, height, gh);
        let wy = cell_weight::<F>(cy, y0, fy);
        for x in x_first..x_last + 1 {
            let (x0, fx) = axis::<F>(x, width, gw);
            let p = y * width + x;
            let (r, g, b) = (rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2]);
            let (z0, fz, _inside) = luma_axis::<F>(r, g, b, levels);
            let w = cell_weight::<F>(cx, x0, fx) * wy * cell_weight::<F>(cz, z0, fz);
            let wg = w * grad[3 * p + i];
            ar += wg * r;
            ag += wg * g;
            ab += wg * b;
            a1 += wg;
        }
    }
    let at = 4 * i * plane + cell;
    grad_grid[at] = ar;
    grad_grid[at + plane] = ag;
    grad_grid[at + 2 * plane] = ab;
    grad_grid[at + 3 * plane] = a1;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> BilateralGridOps
    for CubeBackend<R, F, I, BT>
{
    fn bilateral_grid_forward(rgb: FloatTensor<Self>, grid: FloatTensor<Self>) -> FloatTensor<Self> {
        let rgb = into_contiguous(rgb);
        let grid = into_contiguous(grid);
        let dtype = rgb.dtype;
        let out = output(&rgb, rgb.shape(), dtype);
        let pixels = rgb.shape()[0] * rgb.shape()[1];
        let dim = CubeDim::new_1d(BLOCK);
        let count = calculate_cube_count_elemwise(&rgb.client, pixels, dim);
        slice_kernel::launch::<R>(
            &rgb.client,
            count,
            dim,
            rgb.clone().into_tensor_arg(),
            grid.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            dtype.into(),
        );
        out
    }

    fn bilateral_grid_backward(
        rgb: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> BilateralGridGrads<Self> {
        let rgb = into_contiguous(rgb);
        let grid = into_contiguous(grid);
        let grad = into_contiguous(grad);
        let dtype = rgb.dtype;
        let client = rgb.client.clone();
        let dim = CubeDim::new_1d(BLOCK);
        let pixels = rgb.shape()[0] * rgb.shape()[1];
        let grad_rgb = output(&rgb, rgb.shape(), dtype);
        grad_rgb_kernel::launch::<R>(
            &client,
            calculate_cube_count_elemwise(&client, pixels, dim),
            dim,
            rgb.clone().into_tensor_arg(),
            grid.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            grad_rgb.clone().into_tensor_arg(),
            dtype.into(),
        );
        let grad_grid = output(&grid, grid.shape(), dtype);
        let units = 3 * grid.shape().num_elements() / AFFINE_ENTRIES;
        grad_grid_kernel::launch::<R>(
            &client,
            calculate_cube_count_elemwise(&client, units, dim),
            dim,
            rgb.into_tensor_arg(),
            grad.into_tensor_arg(),
            grad_grid.clone().into_tensor_arg(),
            dtype.into(),
        );
        BilateralGridGrads {
            rgb: grad_rgb,
            grid: grad_grid,
        }
    }
}
