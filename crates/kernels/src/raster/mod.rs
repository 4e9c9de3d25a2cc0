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
//! the projection's `tiles` count uses, so the number of tiles a Gaussian lands in is at most
//! that count. The GPU binning leaves out, for a box of at least 2x2 tiles, the tiles its
//! ellipse `a dx^2 + 2 b dx dy + c dy^2 <= k^2 + 0.002` does not reach (`k = min(sqrt(2 ln(255
//! opacity)), 3.33)`: where `alpha >= 1/255` can hold, with a margin for rounding), each tile
//! taken as the closed square `[16 tx, 16 tx + 16] x [16 ty, 16 ty + 16]`: on a trained lego
//! frame at 800x600, about a fifth of the box tiles, which its compositing would walk for
//! nothing. The CPU keeps the boxes and skips those Gaussians per 8x2-pixel segment as it
//! composites (trimming its boxes too cost more than it saved, BENCHMARKS.md); the images are
//! the same.
//! Each tile lists its Gaussians front to back: by `depth` ascending, ties by index. The lists
//! are stored as CSR (`offsets` `[tiles + 1]`, `ids` `[offsets[tiles]]`).
//!
//! ## Lists of a size fixed in advance (GPU)
//! Sizing the lists exactly needs the pair count `M` on the host, a wait for the projection and
//! the depth sort inside every render. With a capacity `c` ([`RasterSetup::tile_pairs`]) the GPU
//! allocates `c` entries and waits for nothing: the pairs are emitted in depth order, Gaussian
//! by Gaussian, and the lists keep the Gaussians whose pairs all fit (rows `0..listed` of the
//! depth order, `listed` the largest prefix with at most `c` pairs). When `M > c`, each tile's
//! walk goes on past its list over the depth order from row `listed`, testing each row's
//! [`extents`](crate::project) and trimmed box as the binning does: the same pairs in the same
//! order, so the same image and gradients, only slower. `(M, listed)` is written to
//! [`RasterState::pairs`], for the caller to read when it next waits for the device anyway and
//! size the next lists (the trainer keeps `1.25` times the largest count seen).
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
//! On the CPU, results are deterministic: each tile accumulates into its own buffer, and the
//! buffers are summed in tile order, so they do not depend on the thread count. On the GPU the
//! backward adds with atomics (see `cube.rs`), so gradients may differ in the last bits from
//! run to run.
//!
//! # As a Burn op
//! [`rasterize`] takes the projection's `packed` `[N, PACKED_WIDTH]` floats and `extents`
//! `[N, 3]` integers (see [`crate::project`]) and returns [`Rasterized`]: `rgb`, `alpha` and
//! the alpha-weighted `depth`. The backend op behind it writes them into one flat image
//! `[IMAGE_CHANNELS H W]` of planes: `rgb` `[H, W, 3]` first, then `alpha` `[H, W]` at
//! `IMAGE_ALPHA H W`, then `depth` `[H, W]` at `IMAGE_DEPTH H W`, so that each output is a
//! contiguous range of it (a strided view, such as one channel of an interleaved image, is
//! copied element by element on ndarray, which costs more than a slice copy of a plane). Under `Autodiff` the image is differentiable with respect to `packed`, so
//! gradients flow on into the projection; the screen-space statistics densification needs
//! arrive as the gradient of the probe [`Rasterized::screen_grads`]. The binning
//! (`offsets`, `ids`), `last` and `transmittance` travel as an opaque [`RasterState`] from the
//! forward to the backward.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod cube;
#[cfg(feature = "cube")]
pub(crate) mod fusion;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorMetadata, TensorPrimitive};

use crate::project::PACKED_WIDTH;

/// Planes of `H W` values in the backend op's flat image: `rgb` (3, pixel-interleaved),
/// `alpha`, alpha-weighted `depth`.
pub const IMAGE_CHANNELS: usize = 5;
/// Where `rgb` `[H, W, 3]` starts in the flat image, in units of `H W` values.
pub const IMAGE_RGB: usize = 0;
/// Where `alpha` `[H, W]` starts in the flat image, in units of `H W` values.
pub const IMAGE_ALPHA: usize = 3;
/// Where the alpha-weighted `depth` `[H, W]` starts in the flat image, in units of `H W` values.
pub const IMAGE_DEPTH: usize = 4;

/// What a rasterization draws into: the image size, the background colour, the number of
/// views drawn at once, and how many tile entries the GPU's lists hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RasterSetup {
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
    /// RGB added behind the splats, weighted by the final transmittance.
    pub background: [f32; 3],
    /// `C`, the views drawn in one pass (see [`rasterize_views`]): the rows of `packed` are
    /// `C` blocks of equal size, block `v` drawn into image `v`.
    pub views: u32,
    /// How many (tile, Gaussian) pairs the GPU's tile lists hold (see
    /// [Binning](self#binning)): `None` sizes them exactly, which reads the count back (the
    /// host waits for the projection and the depth sort); `Some(c)` sizes them for `c` without
    /// waiting, and composites the pairs past `c` by walking the depth order (the same image,
    /// slower). The CPU always bins exactly.
    pub tile_pairs: Option<u32>,
}

impl RasterSetup {
    /// One `width x height` image on a black background, lists sized exactly.
    pub fn new(width: u32, height: u32) -> Self {
        RasterSetup {
            width,
            height,
            background: [0.0; 3],
            views: 1,
            tile_pairs: None,
        }
    }

    /// The same setup with another background.
    pub fn with_background(self, background: [f32; 3]) -> Self {
        RasterSetup { background, ..self }
    }

    /// The same setup drawing `views` images at once.
    pub fn with_views(self, views: u32) -> Self {
        RasterSetup { views, ..self }
    }

    /// The same setup with tile lists of `tile_pairs` entries (see [`RasterSetup::tile_pairs`]).
    pub fn with_tile_pairs(self, tile_pairs: Option<u32>) -> Self {
        RasterSetup { tile_pairs, ..self }
    }

    /// Tiles per row and per column.
    pub fn tiles(&self) -> (u32, u32) {
        use crate::project::cpu::TILE_SIZE;
        (
            self.width.div_ceil(TILE_SIZE),
            self.height.div_ceil(TILE_SIZE),
        )
    }
}

/// What the forward hands the backward (backend primitives; the layouts are the backend's own,
/// so treat it as opaque).
#[derive(Debug, Clone)]
pub struct RasterState<B: Backend> {
    /// `[C tiles + 1]`: each tile's range of `ids` (view `v`'s tiles are `v tiles ..`).
    pub tile_offsets: IntTensor<B>,
    /// `[M]` (at least one entry): row indices of `packed`, each tile's front to back.
    pub ids: IntTensor<B>,
    /// `[C H, W]`: entries of its tile's list each pixel went through.
    pub last: IntTensor<B>,
    /// `[C H, W]`: the final transmittance.
    pub transmittance: FloatTensor<B>,
    /// `[C N]`: the rows in depth order, which the GPU walks past its lists when they
    /// overflow (one unused entry on the CPU).
    pub order: IntTensor<B>,
    /// `[2]`: `(pairs, listed)`: the (tile, Gaussian) pairs the views make, and how many rows
    /// of the depth order the lists hold (`C N` unless the pairs overflowed
    /// [`RasterSetup::tile_pairs`]).
    pub pairs: IntTensor<B>,
    /// `[C N, 3]`: the forward's `extents` (the overflow walk tests the tiles from them).
    pub extents: IntTensor<B>,
}

/// The forward's outputs as backend primitives.
#[derive(Debug, Clone)]
pub struct RasterPrimitives<B: Backend> {
    /// `[C IMAGE_CHANNELS H W]`: per view, the planes `rgb`, `alpha`, `depth` (see the module
    /// docs).
    pub image: FloatTensor<B>,
    /// For the backward.
    pub state: RasterState<B>,
}

/// The images of a forward pass alone, as backend primitives (see
/// [`RasterOps::rasterize_images`]).
#[derive(Debug, Clone)]
pub struct RasterImages<B: Backend> {
    /// `[C, H, W, 3]`: composited colour plus `T_final background`.
    pub rgb: FloatTensor<B>,
    /// `[C, H, W]`: `1 - T_final`.
    pub alpha: FloatTensor<B>,
    /// `[C, H, W]`: `sum T alpha depth`.
    pub weighted_depth: FloatTensor<B>,
}

/// The backward's outputs as backend primitives.
#[derive(Debug, Clone)]
pub struct RasterGradPrimitives<B: Backend> {
    /// `[C N, PACKED_WIDTH]`: the loss gradient with respect to `packed`.
    pub packed: FloatTensor<B>,
    /// `[C N, 3]`: per row `(dL/dx, dL/dy, xy_abs)`, the screen-space gradient of its
    /// centre and `sum` over pixels of `|dL_pixel / dxy|` (see the module docs).
    pub screen_grads: FloatTensor<B>,
}

/// The result of [`rasterize`] (`H`, `W`: the setup's height and width).
#[derive(Debug, Clone)]
pub struct Rasterized<B: Backend> {
    /// `[H, W, 3]`: composited colour plus `T_final background`.
    pub rgb: Tensor<B, 3>,
    /// `[H, W]`: `1 - T_final`.
    pub alpha: Tensor<B, 2>,
    /// `[H, W]`: `sum T alpha depth` (divide by `alpha` for the expected depth).
    pub weighted_depth: Tensor<B, 2>,
    /// `[N, 3]` zeros whose gradient, after a backward pass through the images, holds the
    /// densification statistics `(dL/dx, dL/dy, xy_abs)` (`xy_abs` = sum over pixels of
    /// `|dL_pixel / dxy|`). Tracked only under `Autodiff`.
    pub screen_grads: Tensor<B, 2>,
}

/// The result of [`rasterize_views`]: [`Rasterized`]'s images with a leading view axis `C`.
#[derive(Debug, Clone)]
pub struct RasterizedViews<B: Backend> {
    /// `[C, H, W, 3]`
    pub rgb: Tensor<B, 4>,
    /// `[C, H, W]`
    pub alpha: Tensor<B, 3>,
    /// `[C, H, W]`
    pub weighted_depth: Tensor<B, 3>,
    /// `[C N, 3]` probe, row for row with `packed` (see [`Rasterized::screen_grads`]).
    pub screen_grads: Tensor<B, 2>,
    /// `[2]`: the pairs the views made and the rows the lists held (see
    /// [`RasterState::pairs`]); `None` where the images were drawn alone (no autodiff).
    pub pairs: Option<Tensor<B, 1, Int>>,
}

/// The images `(rgb [C, H, W, 3], alpha [C, H, W], weighted_depth [C, H, W])` as views of
/// the op's flat image `[C IMAGE_CHANNELS H W]`.
fn image_planes<B: Backend>(
    image: Tensor<B, 1>,
    views: usize,
    h: usize,
    w: usize,
) -> (Tensor<B, 4>, Tensor<B, 3>, Tensor<B, 3>) {
    let pixels = h * w;
    let image = image.reshape([views, IMAGE_CHANNELS * pixels]);
    let plane =
        |start: usize, planes: usize| image.clone().narrow(1, start * pixels, planes * pixels);
    (
        plane(IMAGE_RGB, 3).reshape([views, h, w, 3]),
        plane(IMAGE_ALPHA, 1).reshape([views, h, w]),
        plane(IMAGE_DEPTH, 1).reshape([views, h, w]),
    )
}

/// The tile rasterizer on a backend: what [`rasterize`] dispatches to. Implemented for every
/// backend Ember supports, each in its own file of this folder.
///
/// Implementations may assume the shapes [`rasterize`] checks.
pub trait RasterOps: Backend {
    /// Forward pass of the rasterizer (see the [module docs](self) for the contract): the
    /// projection's `packed [C N, PACKED_WIDTH]` and `extents [C N, 3]` (`C = setup.views`)
    /// composited into the flat images `[C IMAGE_CHANNELS H W]` (per view, the planes `rgb`,
    /// `alpha`, `depth`), with the state the backward replays from.
    ///
    /// `screen_grads` `[C N, 3]` is a probe: its value is ignored, and under `Autodiff` its
    /// gradient receives the backward's screen-space statistics.
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self>;

    /// The images of [`rasterize_forward`](Self::rasterize_forward) alone, for a render no
    /// gradient flows through (a viewer's frame, an evaluation on a backend without autodiff):
    /// a backend may skip building the state the backward replays from, and hand the images
    /// over in their final shapes. The default splits `rasterize_forward`'s flat image.
    fn rasterize_images(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        setup: RasterSetup,
    ) -> RasterImages<Self> {
        let device = Self::float_device(&packed);
        let rows = packed.shape().dims::<2>()[0];
        let probe = Tensor::<Self, 2>::zeros([rows, 3], &device);
        let image =
            Self::rasterize_forward(packed, extents, probe.into_primitive().tensor(), setup).image;
        let (rgb, alpha, weighted_depth) = image_planes::<Self>(
            Tensor::from_primitive(TensorPrimitive::Float(image)),
            setup.views as usize,
            setup.height as usize,
            setup.width as usize,
        );
        RasterImages {
            rgb: rgb.into_primitive().tensor(),
            alpha: alpha.into_primitive().tensor(),
            weighted_depth: weighted_depth.into_primitive().tensor(),
        }
    }

    /// Backward pass of the rasterizer: the gradient of a scalar loss with respect to `packed`,
    /// given `grad_image [C IMAGE_CHANNELS H W]` and the forward's state, and the screen-space
    /// statistics `[C N, 3]`.
    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self>;
}

/// Rasterizes projected splats (the outputs of [`crate::project_gaussians`]): `packed`
/// `[N, PACKED_WIDTH]`, `extents` `[N, 3]` (`radius_x, radius_y, tiles`). Differentiable with
/// respect to `packed` under `Autodiff`. `setup.views` must be 1 (see [`rasterize_views`]).
pub fn rasterize<B: RasterOps>(
    packed: Tensor<B, 2>,
    extents: Tensor<B, 2, Int>,
    setup: &RasterSetup,
) -> Result<Rasterized<B>, RasterError> {
    if setup.views != 1 {
        return Err(RasterError::Views {
            views: setup.views,
            rows: packed.dims()[0],
        });
    }
    let (h, w) = (setup.height as usize, setup.width as usize);
    let out = rasterize_views(packed, extents, setup)?;
    Ok(Rasterized {
        rgb: out.rgb.reshape([h, w, 3]),
        alpha: out.alpha.reshape([h, w]),
        weighted_depth: out.weighted_depth.reshape([h, w]),
        screen_grads: out.screen_grads,
    })
}

/// Rasterizes `C = setup.views` views at once (one pass, one launch per kernel on a GPU): the
/// outputs of [`crate::project_views`], `packed` `[C N, PACKED_WIDTH]` and `extents`
/// `[C N, 3]`, rows `v N ..` drawn into image `v`, every view `width x height`. Each image is
/// what [`rasterize`] draws from its block of rows alone. Differentiable with respect to
/// `packed` under `Autodiff`.
pub fn rasterize_views<B: RasterOps>(
    packed: Tensor<B, 2>,
    extents: Tensor<B, 2, Int>,
    setup: &RasterSetup,
) -> Result<RasterizedViews<B>, RasterError> {
    check(&packed, &extents, setup)?;
    let rows = packed.dims()[0];
    let views = setup.views as usize;
    let device = packed.device();
    let (h, w) = (setup.height as usize, setup.width as usize);
    if rows == 0 {
        return Ok(RasterizedViews {
            rgb: Tensor::<B, 1>::from_floats(setup.background, &device)
                .reshape([1, 1, 1, 3])
                .repeat(&[views, h, w, 1]),
            alpha: Tensor::zeros([views, h, w], &device),
            weighted_depth: Tensor::zeros([views, h, w], &device),
            // Uploaded, not filled: a fill kernel over zero elements is an invalid launch on
            // CUDA.
            screen_grads: Tensor::from_data(
                burn::tensor::TensorData::new(Vec::<f32>::new(), [0, 3]),
                &device,
            ),
            pairs: None,
        });
    }
    let screen_grads = Tensor::<B, 2>::zeros([rows, 3], &device).require_grad();
    if !B::ad_enabled(&device) {
        let images = B::rasterize_images(
            packed.into_primitive().tensor(),
            extents.into_primitive(),
            *setup,
        );
        return Ok(RasterizedViews {
            rgb: Tensor::from_primitive(TensorPrimitive::Float(images.rgb)),
            alpha: Tensor::from_primitive(TensorPrimitive::Float(images.alpha)),
            weighted_depth: Tensor::from_primitive(TensorPrimitive::Float(images.weighted_depth)),
            screen_grads,
            pairs: None,
        });
    }
    let out = B::rasterize_forward(
        packed.into_primitive().tensor(),
        extents.into_primitive(),
        screen_grads.clone().into_primitive().tensor(),
        *setup,
    );
    let image = Tensor::from_primitive(TensorPrimitive::Float(out.image));
    let (rgb, alpha, weighted_depth) = image_planes(image, views, h, w);
    Ok(RasterizedViews {
        rgb,
        alpha,
        weighted_depth,
        screen_grads,
        pairs: Some(Tensor::from_primitive(out.state.pairs)),
    })
}

/// What [`rasterize_views`] refuses: shapes, views, image size, counts, background.
fn check<B: Backend>(
    packed: &Tensor<B, 2>,
    extents: &Tensor<B, 2, Int>,
    setup: &RasterSetup,
) -> Result<(), RasterError> {
    let [rows, width] = packed.dims();
    if width != PACKED_WIDTH {
        return Err(RasterError::Length {
            name: "packed",
            got: rows * width,
            expected: rows * PACKED_WIDTH,
            shape: "[C N, PACKED_WIDTH]",
        });
    }
    let [en, ew] = extents.dims();
    if en != rows || ew != 3 {
        return Err(RasterError::Length {
            name: "extents",
            got: en * ew,
            expected: 3 * rows,
            shape: "[C N, 3]",
        });
    }
    let views = setup.views as usize;
    if views == 0 || rows % views != 0 {
        return Err(RasterError::Views {
            views: setup.views,
            rows,
        });
    }
    if setup.width == 0 || setup.height == 0 {
        return Err(RasterError::EmptyImage {
            width: setup.width,
            height: setup.height,
        });
    }
    if u32::try_from(rows).is_err() {
        return Err(RasterError::TooMany(rows));
    }
    let (tiles_x, tiles_y) = setup.tiles();
    if u32::try_from(u64::from(tiles_x) * u64::from(tiles_y) * views as u64 + 1).is_err() {
        return Err(RasterError::TooManyTiles { views: setup.views });
    }
    if let Some(&value) = setup.background.iter().find(|c| !c.is_finite()) {
        return Err(RasterError::Background(value));
    }
    Ok(())
}

/// The forward of [`rasterize_views`] for a caller that runs the backward itself
/// ([`rasterize_views_backward`]) rather than through `Autodiff`: the flat images
/// `[C IMAGE_CHANNELS H W]` (per view the planes `rgb`, `alpha`, `depth`, see the module docs)
/// and the state the backward replays from, on a backend without autodiff (nothing is
/// tracked). Refuses what [`rasterize_views`] refuses, and an empty `packed`.
pub fn rasterize_views_forward<B: RasterOps>(
    packed: Tensor<B, 2>,
    extents: Tensor<B, 2, Int>,
    setup: &RasterSetup,
) -> Result<RasterPrimitives<B>, RasterError> {
    check(&packed, &extents, setup)?;
    if packed.dims()[0] == 0 {
        return Err(RasterError::NoRows);
    }
    let packed = packed.into_primitive().tensor();
    // The probe's value is never read, and without autodiff nothing tracks it.
    let probe = packed.clone();
    Ok(B::rasterize_forward(
        packed,
        extents.into_primitive(),
        probe,
        *setup,
    ))
}

/// The backward of [`rasterize_views_forward`]: given the gradient of a scalar loss with
/// respect to the colour images alone, `grad_rgb` `[C, H, W, 3]` (alpha and depth take no
/// part in it), the gradient with respect to `packed` `[C N, PACKED_WIDTH]` and the screen-space
/// statistics `[C N, 3]` (see [`Rasterized::screen_grads`]).
pub fn rasterize_views_backward<B: RasterOps>(
    packed: Tensor<B, 2>,
    state: RasterState<B>,
    grad_rgb: Tensor<B, 4>,
    setup: &RasterSetup,
) -> Result<(Tensor<B, 2>, Tensor<B, 2>), RasterError> {
    let expected = [
        setup.views as usize,
        setup.height as usize,
        setup.width as usize,
        3,
    ];
    if grad_rgb.dims() != expected {
        return Err(RasterError::Length {
            name: "grad_rgb",
            got: grad_rgb.dims().iter().product(),
            expected: expected.iter().product(),
            shape: "[C, H, W, 3]",
        });
    }
    let g = B::rasterize_backward(
        packed.into_primitive().tensor(),
        state,
        grad_rgb.into_primitive().tensor(),
        *setup,
    );
    Ok((
        Tensor::from_primitive(TensorPrimitive::Float(g.packed)),
        Tensor::from_primitive(TensorPrimitive::Float(g.screen_grads)),
    ))
}

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
    /// The rows do not split into `views` equal blocks, or `views` is zero.
    #[error("rasterization: {rows} rows do not split into {views} views of equal size")]
    Views {
        /// [`RasterSetup::views`].
        views: u32,
        /// The rows of `packed`.
        rows: usize,
    },
    /// The views' tiles together overflow a `u32` tile index.
    #[error("rasterization: {views} views have more tiles than a u32 index holds")]
    TooManyTiles {
        /// [`RasterSetup::views`].
        views: u32,
    },
    /// The background colour is not finite.
    #[error("rasterization: background component {0} is not finite")]
    Background(f32),
    /// [`rasterize_views_forward`] was given no rows (an empty field draws the background:
    /// [`rasterize_views`] does that).
    #[error("rasterization: no Gaussians to rasterize")]
    NoRows,
    /// The bins were made for another number of Gaussians.
    #[error("rasterization: the bins index {bins} Gaussians, the arrays hold {arrays}")]
    BinsMismatch {
        /// The Gaussian count of the bins.
        bins: usize,
        /// The Gaussian count of the arrays.
        arrays: usize,
    },
}

#[cfg(test)]
mod tests;
