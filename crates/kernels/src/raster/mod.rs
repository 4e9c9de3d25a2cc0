//! Rasterization: the projected splats binned into 16x16 screen tiles and alpha-composited front
//! to back into an image, with its backward.
//!
//! # Inputs (the [projection](crate::project)'s outputs, per Gaussian `i`, row-major)
//! | input     | shape    | notes                                                              |
//! |-----------|----------|--------------------------------------------------------------------|
//! | `xy`      | `[N, 2]` | splat centre, pixels (the centre of pixel `(0, 0)` is `(0.5, 0.5)`) |
//! | `depth`   | `[N]`    | sort key (camera `z`) and the value the depth image averages       |
//! | `conic`   | `[N, 3]` | `(a, b, c)`: `sigma = 1/2 (a dx^2 + c dy^2) + b dx dy`              |
//! | `color`   | `[N, 3]` | RGB                                                                |
//! | `opacity` | `[N]`    | in `[0, 1]`                                                        |
//! | `radius`  | `[N, 2]` | `u32` screen-box half-extents (binning only); `(0, 0)` is culled   |
//!
//! # Binning
//! The image of `width x height` pixels is cut into `tiles_x x tiles_y` tiles of 16x16 pixels,
//! `tiles_x = ceil(width / 16)`, `tiles_y = ceil(height / 16)`, numbered row-major
//! (`tile = ty tiles_x + tx`); the last column and row of tiles may be partial. A Gaussian with
//! `radius = (rx, ry) != (0, 0)` goes into every tile of the index ranges
//! `floor((x - rx) / 16) ..= ceil((x + rx) / 16) - 1` (and `y`), clipped to the image: the rule
//! the projection's `tiles` count uses, so the number of tiles a Gaussian lands in is that count.
//! Each tile lists its Gaussians front to back: by `depth` ascending, ties by index. The lists
//! are stored as CSR (`offsets` `[tiles + 1]`, `ids` `[offsets[tiles]]`).
//!
//! # Compositing
//! Pixel `(px, py)` (column, row) has centre `(px + 1/2, py + 1/2)`. Its tile's list is walked
//! front to back with transmittance `T = 1`; for Gaussian `i`, with `d = centre - xy_i`:
//!
//! ```text
//! sigma = 1/2 (a dx^2 + c dy^2) + b dx dy          skipped when sigma < 0
//! alpha = min(0.999, opacity exp(-sigma))           skipped when alpha < 1/255
//! T'    = T (1 - alpha)                             the walk stops (i not drawn) when T' <= 1e-4
//! rgb  += T alpha color,  depth += T alpha depth_i,  T = T'
//! ```
//!
//! # Outputs (`H = height`, `W = width`, row-major)
//! | output          | shape       | meaning                                                |
//! |-----------------|-------------|--------------------------------------------------------|
//! | `rgb`           | `[H, W, 3]` | composited colour plus `T_final background`            |
//! | `alpha`         | `[H, W]`    | `1 - T_final`                                          |
//! | `depth`         | `[H, W]`    | `sum T alpha depth_i`: the alpha-weighted depth, **not** divided by `alpha` (divide for the expected depth of the covered part) |
//! | `last`          | `[H, W]`    | `u32` entries of the tile's list the walk went through: the stopping Gaussian's position, or the list length |
//! | `transmittance` | `[H, W]`    | `T_final`                                              |
//!
//! `last` and `transmittance` are what the backward replays from.
//!
//! # Backward
//! The gradient of a scalar loss with respect to `xy`, `conic`, `color`, `opacity` and `depth`,
//! given its gradients with respect to `rgb`, `alpha` and `depth` (the image). Each pixel is
//! replayed back to front from `last`, the transmittance in front of each Gaussian recovered as
//! `T / (1 - alpha)`; `alpha` receives its own colour term `T (color . v_rgb + depth v_depth)`
//! minus everything behind it (the colour and depth drawn behind, and the background and
//! `v_alpha` through `T_final`) divided by `1 - alpha`. Skipped pairs get no gradient, nor do
//! `opacity`, `conic` and `xy` where the `0.999` clamp is active. Also returned: `xy_abs` `[N]`,
//! for densification, the sum over pixels of the Euclidean norm of each pixel's contribution to
//! the Gaussian's `xy` gradient (`sum_p |dL_p/dxy_i|`). The image gradients are per pixel, so
//! `L` is the loss as given (no normalisation by the pixel count).
//!
//! Results are deterministic: each tile accumulates into its own buffer, and the buffers are
//! summed in tile order, so they do not depend on the thread count.

pub mod cpu;

/// Why a rasterization was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RasterError {
    /// An array's length does not match the number of Gaussians or of pixels.
    #[error("rasterization: `{name}` has {got} values, expected {expected} ({shape})")]
    Length {
        /// The array's name.
        name: &'static str,
        /// Its length.
        got: usize,
        /// The expected length.
        expected: usize,
        /// The expected shape, in words.
        shape: &'static str,
    },
    /// The image has no pixels.
    #[error("rasterization: the image is {width}x{height}; both sides must be at least 1")]
    EmptyImage {
        /// Image width, pixels.
        width: u32,
        /// Image height, pixels.
        height: u32,
    },
    /// More Gaussians than a `u32` index holds.
    #[error("rasterization: {0} Gaussians; at most 2^32 - 1")]
    TooMany(usize),
    /// The bins were made for another number of Gaussians.
    #[error("rasterization: the bins index {bins} Gaussians, the arrays hold {arrays}")]
    BinsMismatch {
        /// The Gaussian count of the bins.
        bins: usize,
        /// The Gaussian count of the arrays.
        arrays: usize,
    },
}
