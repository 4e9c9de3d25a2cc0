//! Ember's compute layer: the [`SplatBackend`] extension trait and every custom op behind it.
//!
//! Each op lives in its own folder with all of its implementations side by side:
//! the contract and the tensor-level entry point in `mod.rs`, the rayon CPU version (also the
//! f64 oracle the GPU kernels are tested against) in `cpu.rs`, the CubeCL kernels (generic over
//! the CubeCL runtime, so one source serves wgpu and cuda) in `cube.rs`, the fusion wrapper in
//! `fusion.rs` and the autodiff `Backward` in `autodiff.rs`.
//!
//! | backend                              | implementation                       |
//! |--------------------------------------|--------------------------------------|
//! | `NdArray<f32 or f64>`                | rayon CPU kernels (`field/cpu.rs`)   |
//! | `CubeBackend<R, ..>` (wgpu, cuda)    | CubeCL kernels (`field/cube.rs`)     |
//! | `Fusion<B>` (burn's `Wgpu`, `Cuda`)  | a custom fusion op running `B`'s     |
//! | `Autodiff<B>`                        | hand-written `Backward` calling `B`  |
//!
//! The [`loss`] op (L1 + SSIM with its gradient in one pass) has the same layout.
//!
//! The [`transform`] op (similarity transforms of Gaussian sets, SH bands rotated) has the same
//! layout without a backward: it edits a scene and its outputs are untracked under `Autodiff`.
//!
//! The [`optim`] op (one fused Adam update) has a default implementation in Burn tensor ops,
//! which the fusion backends fuse; only ndarray overrides it, with one rayon pass.
//!
//! A CubeCL kernel that indexes a tensor densely (`t[row * width + col]`) must be given a
//! contiguous one: every input goes through `into_contiguous`, outputs are made with
//! `empty_device_contiguous_dtype`, and a table uploaded from the host is 1-D (or made
//! contiguous). CUDA's allocator pads the rows of a 2-D upload to an aligned pitch (a 400-byte
//! row is stored in 512 bytes) while wgpu's does not, so a missed case passes every wgpu test
//! and reads the wrong values on CUDA (the transform op did, until a device run caught it).

#![warn(missing_docs)]

mod backend;
pub mod field;
pub mod host_allocator;
pub mod loss;
#[cfg(feature = "ndarray")]
mod ndarray_host;
pub mod optim;
pub mod project;
mod quat;
pub mod raster;
pub mod real;
mod simd;
pub mod sort;
pub mod transform;

pub use field::{Covariance, FieldError, FieldGrads, FieldInputs, FieldOptions, field_query};
pub use loss::{LossError, LossOptions, LossPrimitives, photometric_loss, ssim};
pub use optim::{AdamPrimitives, AdamStep, AdamUpdate, OptimError, adam_step};
pub use project::{
    CameraParams, PACKED_WIDTH, ProjectError, ProjectGrads, ProjectInputs, ProjectOptions,
    ProjectPrimitives, Projected, project_gaussians,
};
pub use raster::{
    IMAGE_CHANNELS, RasterError, RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState,
    Rasterized, rasterize,
};
pub use transform::{
    Similarity, TransformError, TransformInputs, TransformPrimitives, TransformedGaussians,
    transform_gaussians,
};

use burn::tensor::backend::{AutodiffBackend, Backend};

/// The unfused wgpu backend (`CubeBackend` without Burn's fusion): what the sort functions of
/// [`sort`] take, and a way to test a kernel apart from the fusion wrapper.
#[cfg(feature = "wgpu")]
pub type WgpuCube = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;

/// The unfused CUDA backend, as [`WgpuCube`] (Burn does not re-export the CUDA runtime type).
#[cfg(feature = "cuda")]
pub type CudaCube = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
use burn::tensor::ops::{FloatTensor, IntTensor};

/// A Burn backend that can run Ember's custom ops.
///
/// Callers normally use the tensor-level functions ([`field_query`]) which validate shapes and
/// dispatch here; implementations may assume the shapes documented on each method.
pub trait SplatBackend: Backend {
    /// Forward pass of the Gaussian-field query (see [`field`] for the contract).
    ///
    /// Returns `values` `[P, C]`.
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self>;

    /// Backward pass of the Gaussian-field query: the gradient of a scalar loss with respect to
    /// every input, given `grad_values` `[P, C]` (the loss gradient with respect to the output).
    ///
    /// `points_grad = false` skips the gradient with respect to the query points
    /// (`FieldGrads::points` is then `None`), which saves a pass when the points are data.
    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self>;

    /// Forward pass of the projection (see [`project`] for the contract): every Gaussian's
    /// splat as seen by `camera`, as `packed [N, PACKED_WIDTH]` floats (the differentiable
    /// outputs) and `extents [N, 3]` integers (`radius_x, radius_y, tiles`).
    fn project_forward(
        inputs: ProjectInputs<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self>;

    /// Backward pass of the projection: the gradient of a scalar loss with respect to every
    /// input, given `grad_packed [N, PACKED_WIDTH]` (the loss gradient with respect to
    /// `packed`). Culled Gaussians get zero.
    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectGrads<Self>;

    /// Forward pass of the rasterizer (see [`raster`] for the contract): the projection's
    /// `packed [N, PACKED_WIDTH]` and `extents [N, 3]` composited into the flat image
    /// `[IMAGE_CHANNELS H W]` (the planes `rgb`, `alpha`, `depth`), with the state the
    /// backward replays from.
    ///
    /// `screen_grads` `[N, 3]` is a probe: its value is ignored, and under `Autodiff` its
    /// gradient receives the backward's screen-space statistics.
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self>;

    /// Backward pass of the rasterizer: the gradient of a scalar loss with respect to `packed`,
    /// given `grad_image [IMAGE_CHANNELS H W]` and the forward's state, and the screen-space
    /// statistics `[N, 3]`.
    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self>;

    /// The similarity transform of a Gaussian set (see [`transform`] for the contract): one
    /// transformed copy per entry of `similarities` (non-empty, each valid), frame-major
    /// outputs `[F, N, ...]`. Not differentiable: on `Autodiff` the outputs are untracked.
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self>;

    /// The fused photometric loss (see [`loss`] for the contract) of `rendered` `[H, W, C]`
    /// against `target` `[H, W, C]`: the loss `[1]` and, when `with_grad`, its gradient with
    /// respect to `rendered` `[H, W, C]`. On `Autodiff` the loss is differentiable with respect
    /// to `rendered` whatever `with_grad` says.
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        with_grad: bool,
    ) -> LossPrimitives<Self>;

    /// One Adam update (see [`optim`] for the formula) of `state` with `grad`, all of one
    /// shape: the updated parameter and moments. Not differentiable. The default runs Burn
    /// tensor ops, which the fusion backends fuse into one kernel.
    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        optim::adam_step_tensor_ops(state, grad, step)
    }
}

/// An autodiff backend whose inner backend also implements [`SplatBackend`]: what training and
/// fitting code asks for.
pub trait SplatAutodiffBackend: SplatBackend + AutodiffBackend<InnerBackend: SplatBackend> {}

impl<B, C> SplatAutodiffBackend for burn::backend::Autodiff<B, C>
where
    B: SplatBackend,
    C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy,
{
}
