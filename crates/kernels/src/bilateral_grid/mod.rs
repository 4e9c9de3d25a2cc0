//! A bilateral grid of affine colour transforms sliced by pixel position and luminance: the
//! per-photo colour model of Wang et al. 2024 ("Bilateral Guided Radiance Field Processing"),
//! a local, tone-dependent exposure and white balance.
//!
//! # Definition
//! A grid `G [12, L, GH, GW]` holds at each of its `L x GH x GW` cells the 12 entries of a 3x4
//! affine colour map, row-major (`k = 4 i + j`: output channel `i`, input `j`, `j = 3` the
//! offset). Pixel `(y, x)` of an image `rgb [H, W, 3]` reads the grid at
//!
//! ```text
//! gx = x (GW - 1) / (W - 1)        gy = y (GH - 1) / (H - 1)        (0 when W or H is 1)
//! s  = 0.299 r + 0.587 g + 0.114 b                                   (the guidance: luminance)
//! gz = clamp(s, 0, 1) (L - 1)
//! ```
//!
//! by trilinear interpolation: with `x0 = min(floor(gx), GW - 2)`, `fx = gx - x0` (likewise `y0,
//! fy`, `z0, fz`) and the weights `w(0) = 1 - f`, `w(1) = f` per axis,
//!
//! ```text
//! A_k     = sum_{a,b,c in {0,1}} wx(a) wy(b) wz(c) G[k, z0 + c, y0 + b, x0 + a]
//! out_i   = A_{4i} r + A_{4i+1} g + A_{4i+2} b + A_{4i+3}
//! ```
//!
//! The identity grid (`A = [I | 0]` in every cell, [`identity_grid`]) leaves every image as it is.
//!
//! # Backward
//! From `dL/dout [H, W, 3]` (`g_i` at a pixel), with `u = (r, g, b, 1)`:
//!
//! ```text
//! dL/dA_{4i+j}            = g_i u_j
//! dL/dG[k, cell]         += w(cell) dL/dA_k                              (over every pixel)
//! dL/drgb_j               = sum_i g_i A_{4i+j}
//!                           + [0 < s < 1] (L - 1) c_j sum_k dL/dA_k dA_k/dgz
//! dA_k/dgz                = sum_{a,b} wx(a) wy(b) (G[k, z0+1, y0+b, x0+a] - G[k, z0, y0+b, x0+a])
//! ```
//!
//! with `c = (0.299, 0.587, 0.114)`: the render's gradient flows through the colour map and
//! through the luminance that picks the cell. Both are checked against f64 central differences.
//!
//! # Implementations
//! - `cpu.rs`: rayon over rows, generic over `f32`/`f64`; the grid's gradient is summed per
//!   fixed band of rows and the bands added in order, so it is deterministic;
//! - `cube.rs`: three CubeCL kernels: the slice (a unit per pixel), the render's gradient (a
//!   unit per pixel) and the grid's (a unit per cell and output channel, gathering the pixels
//!   whose interpolation touches it: no atomics, deterministic);
//! - `ndarray.rs`, `fusion.rs`, `autodiff.rs`: the [`BilateralGridOps`] impls for each backend;
//!   under `Autodiff` both inputs are differentiable.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};

/// Entries of one cell's affine colour map (3 rows of `r, g, b, offset`).
pub const AFFINE_ENTRIES: usize = 12;
/// The luminance weights of the guidance `s = c . rgb` (ITU-R BT.601).
pub const LUMA: [f64; 3] = [0.299, 0.587, 0.114];

/// Why a grid cannot be sliced.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BilateralGridError {
    /// The image is not `[H, W, 3]` with pixels.
    #[error("the image is {0:?}; expected [H, W, 3] with H, W >= 1")]
    Image([usize; 3]),
    /// The grid is not `[12, L, GH, GW]` with at least two cells a side.
    #[error("the grid is {0:?}; expected [12, L, GH, GW] with L, GH, GW >= 2")]
    Grid([usize; 4]),
    /// The gradient differs in shape from the image.
    #[error("the gradient {grad:?} differs in shape from the image {image:?}")]
    Gradient {
        /// The gradient's shape.
        grad: [usize; 3],
        /// The image's shape.
        image: [usize; 3],
    },
}

/// The backward's outputs as backend primitives.
#[derive(Debug, Clone)]
pub struct BilateralGridGrads<B: Backend> {
    /// `dL/drgb` `[H, W, 3]`.
    pub rgb: FloatTensor<B>,
    /// `dL/dG` `[12, L, GH, GW]`.
    pub grid: FloatTensor<B>,
}

fn check(rgb: [usize; 3], grid: [usize; 4]) -> Result<(), BilateralGridError> {
    if rgb[0] == 0 || rgb[1] == 0 || rgb[2] != 3 {
        return Err(BilateralGridError::Image(rgb));
    }
    if grid[0] != AFFINE_ENTRIES || grid[1..].iter().any(|&n| n < 2) {
        return Err(BilateralGridError::Grid(grid));
    }
    Ok(())
}

/// The bilateral grid op on a backend: what [`slice_bilateral_grid`] and
/// [`slice_bilateral_grid_backward`] dispatch to. Implemented for every backend Ember
/// supports, each in its own file of this folder.
pub trait BilateralGridOps: Backend {
    /// `out [H, W, 3]`: `rgb [H, W, 3]` through `grid [12, L, GH, GW]` (the
    /// [module docs](self)). Differentiable with respect to both under `Autodiff`.
    fn bilateral_grid_forward(rgb: FloatTensor<Self>, grid: FloatTensor<Self>)
    -> FloatTensor<Self>;

    /// The gradients with respect to `rgb` and `grid` from `grad [H, W, 3]`, the loss's
    /// gradient with respect to the forward's output.
    fn bilateral_grid_backward(
        rgb: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> BilateralGridGrads<Self>;
}

/// `rgb [H, W, 3]` through the bilateral grid `grid [12, L, GH, GW]` (the [module docs](self)):
/// each pixel's colour mapped by the affine transform interpolated at its position and
/// luminance. Differentiable with respect to both inputs under `Autodiff`.
pub fn slice_bilateral_grid<B: BilateralGridOps>(
    rgb: Tensor<B, 3>,
    grid: Tensor<B, 4>,
) -> Result<Tensor<B, 3>, BilateralGridError> {
    check(rgb.dims(), grid.dims())?;
    let out = B::bilateral_grid_forward(
        rgb.into_primitive().tensor(),
        grid.into_primitive().tensor(),
    );
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

/// The backward of [`slice_bilateral_grid`] called directly (a training step that writes its
/// own backward): from `grad [H, W, 3]`, `(dL/drgb [H, W, 3], dL/dgrid [12, L, GH, GW])`.
pub fn slice_bilateral_grid_backward<B: BilateralGridOps>(
    rgb: Tensor<B, 3>,
    grid: Tensor<B, 4>,
    grad: Tensor<B, 3>,
) -> Result<(Tensor<B, 3>, Tensor<B, 4>), BilateralGridError> {
    check(rgb.dims(), grid.dims())?;
    if grad.dims() != rgb.dims() {
        return Err(BilateralGridError::Gradient {
            grad: grad.dims(),
            image: rgb.dims(),
        });
    }
    let grads = B::bilateral_grid_backward(
        rgb.into_primitive().tensor(),
        grid.into_primitive().tensor(),
        grad.into_primitive().tensor(),
    );
    Ok((
        Tensor::from_primitive(TensorPrimitive::Float(grads.rgb)),
        Tensor::from_primitive(TensorPrimitive::Float(grads.grid)),
    ))
}

/// The identity grid `[12, L, GH, GW]` for a grid of `cells = [L, GH, GW]`: `A = [I | 0]` in
/// every cell.
pub fn identity_grid<B: Backend>(cells: [usize; 3], device: &B::Device) -> Tensor<B, 4> {
    let per_entry = cells.iter().product::<usize>();
    let values: Vec<f32> = (0..AFFINE_ENTRIES)
        .flat_map(|k| {
            let diagonal = k % 5 == 0;
            std::iter::repeat_n(if diagonal { 1.0 } else { 0.0 }, per_entry)
        })
        .collect();
    Tensor::from_data(
        TensorData::new(values, [AFFINE_ENTRIES, cells[0], cells[1], cells[2]]),
        device,
    )
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
