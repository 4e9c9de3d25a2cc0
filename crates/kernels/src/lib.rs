//! Ember's compute layer: one extension trait per custom op, and [`SplatBackend`], all of them
//! together.
//!
//! Burn composes its `Backend` from per-concept op traits (`FloatTensorOps`, `ModuleOps`, ...);
//! this crate adds one trait per op in the same way: [`FieldOps`], [`ProjectOps`], [`RasterOps`],
//! [`TransformOps`], [`LossOps`], [`BilateralGridOps`], [`AdamOps`], [`NoiseOps`], [`DensifyStatsOps`], [`LodOps`]
//! and [`SmoothingOps`].
//! Each entry function bounds only the trait it uses (`fn rasterize<B: RasterOps>`);
//! [`SplatBackend`] is the alias over all eleven that the pipeline asks for, with no methods of its
//! own, plus
//! [`DeviceMemory`] (the allocator's figures, for peak-memory reports).
//!
//! Each op lives in its own folder with all of its implementations side by side:
//!
//! - `mod.rs`: the contract (shapes, conventions, what is differentiable), the entry function
//!   that checks shapes, and the op trait;
//! - `cpu.rs`: the rayon kernels on plain slices, generic over `f32`/`f64` (the `f64` one is the
//!   oracle the GPU kernels are tested against);
//! - `ndarray.rs`: `impl<B: NdArrayBackend> XOps for B`, running `cpu.rs` on ndarray tensors
//!   (`NdArrayBackend` is every `NdArray<E, I, Q>`, its element bounds written once);
//! - `cube.rs`: the CubeCL kernels (one source for wgpu and cuda) and
//!   `impl XOps for CubeBackend<R, F, I, BT>`;
//! - `fusion.rs`: `impl<B: FusionBackend + XOps> XOps for Fusion<B>`, a custom fusion operation
//!   that runs `B`'s implementation (Burn's `Wgpu` and `Cuda` are fusion backends);
//! - `autodiff.rs`: `impl<B: XOps, C: CheckpointStrategy> XOps for Autodiff<B, C>`, the
//!   hand-written `Backward` node (what it saves, what it calls);
//! - `tests.rs` and `gpu_tests.rs`: its tests (the CPU kernel against f64 central differences,
//!   the GPU kernels against the CPU).
//!
//! The [`transform`], [`noise`] and [`optim`] (one fused Adam update) ops have no backward: they
//! edit a scene or step an optimizer, and their outputs are untracked under `Autodiff`. The
//! [`optim`] op's trait method defaults to Burn tensor ops, for backends Ember does not
//! implement it on. The [`sort`]
//! functions (prefix sum, radix sort) run on the unfused CubeCL backend only.
//!
//! # Adding an op
//! 1. A folder `src/myop/` with
//!    - `mod.rs`: the contract in the module docs, the input/output structs, the entry function
//!      (`pub fn myop<B: MyOps>(..)`, which checks shapes) and the trait
//!      `pub trait MyOps: Backend { fn myop_forward(..); fn myop_backward(..); }`;
//!    - `cpu.rs`: the CPU kernels on slices, generic over [`real::Real`];
//!    - `ndarray.rs`: `impl<B: NdArrayBackend> MyOps for B`, calling `cpu.rs`;
//!    - `cube.rs`: the CubeCL kernels and `impl MyOps for CubeBackend<R, F, I, BT>`;
//!    - `fusion.rs`: `impl<B: FusionBackend + MyOps> MyOps for Fusion<B>`;
//!    - `autodiff.rs`: `impl<B: MyOps, C: CheckpointStrategy> MyOps for Autodiff<B, C>`, with
//!      the hand-written `Backward` node; an op without a backward runs `B`'s implementation
//!      untracked, its structs of tensors moved by one `untracked_bundle!` line each
//!      (`crate::untracked`);
//!    - `tests.rs` (declared `#[cfg(test)] mod tests;` in `mod.rs`): the CPU kernel against f64
//!      central differences, the ndarray op against the CPU kernel, and bad inputs;
//!    - `gpu_tests.rs` (declared under `#[cfg(all(test, any(feature = "wgpu", feature =
//!      "cuda")))]`): the GPU kernels against the CPU on random inputs.
//!
//!    The tests are unit tests of the crate: they run in its one test binary, use the crate's
//!    own paths (`crate::myop::cpu`), and share seeded inputs and comparisons through the
//!    dev-only `ember-test-utils`.
//! 2. One entry in the `ops!` list of this file: `myop: MyOps { MyInputs, MyError, myop }` (the
//!    module, its trait, the re-exports). The module declaration, the re-exports, the alias
//!    [`SplatBackend`] and its blanket impl are made from that list.
//!
//! # Contiguous tensors on the GPU
//! A CubeCL kernel that indexes a tensor densely (`t[row * width + col]`) must be given a
//! contiguous one: every input goes through `into_contiguous`, outputs are made with
//! `empty_device_contiguous_dtype` (through the crate's `cube_alloc::output`), and a table
//! uploaded from the host is 1-D (or made contiguous). CUDA's allocator pads the rows of a 2-D
//! upload to an aligned pitch (a 400-byte row is stored in 512 bytes) while wgpu's does not, so a
//! missed case passes every wgpu test and reads the wrong values on CUDA: the wgpu tests cannot
//! catch it, only a run on CUDA can.

#![warn(missing_docs)]

pub mod activity;
pub mod backend;
#[cfg(feature = "cube")]
mod cube_alloc;
#[cfg(feature = "cube")]
mod cube_math;
pub mod host_allocator;
pub mod memory;
#[cfg(feature = "ndarray")]
mod ndarray_host;
pub mod quat;
pub mod real;
mod simd;
pub mod sort;
mod untracked;

pub use activity::{ActivityCounts, ActivityError, DeviceActivity, count_device_activity};
pub use memory::{DeviceMemory, MemoryUsage};

use burn::tensor::backend::AutodiffBackend;

/// The unfused wgpu backend (`CubeBackend` without Burn's fusion): what the sort functions of
/// [`sort`] take, and a way to test a kernel apart from the fusion wrapper.
#[cfg(feature = "wgpu")]
pub type WgpuCube = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;

/// The unfused CUDA backend, as [`WgpuCube`] (Burn does not re-export the CUDA runtime type).
#[cfg(feature = "cuda")]
pub type CudaCube = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;

/// The op list: for each op, its module, its trait and what the crate root re-exports from it.
/// Each entry declares the module (`pub mod field;`) and the re-exports, and the traits together
/// make [`SplatBackend`] and its blanket impl, so adding an op is its folder and one entry here.
macro_rules! ops {
    ($($module:ident: $op:ident { $($export:ident),* $(,)? }),+ $(,)?) => {
        $(
            pub mod $module;
            pub use $module::{$op, $($export),*};
        )+

        /// A Burn backend that can run every one of Ember's custom ops: the op traits together,
        /// as Burn's `Backend` is its `FloatTensorOps`, `ModuleOps`, ... together, and report its
        /// device memory ([`DeviceMemory`]). It has no methods of its own and is implemented for
        /// every backend that implements the op traits.
        ///
        /// Code that runs one op can ask for that op's trait alone ([`field_query`] takes
        /// `B: FieldOps`); code that runs the whole pipeline asks for `SplatBackend`.
        pub trait SplatBackend: $($op +)+ DeviceMemory {}

        impl<B> SplatBackend for B where B: $($op +)+ DeviceMemory {}
    };
}

ops! {
    field: FieldOps {
        Covariance, FieldError, FieldGrads, FieldInputs, FieldOptions, field_query,
    },
    project: ProjectOps {
        CameraParams, PACKED_WIDTH, ProjectError, ProjectGrads, ProjectInputs, ProjectOptions,
        ProjectPrimitives, Projected, SH_C0, project_gaussians, project_views,
    },
    raster: RasterOps {
        IMAGE_CHANNELS, RasterError, RasterGradPrimitives, RasterImages, RasterPrimitives,
        RasterSetup, RasterState, Rasterized, RasterizedViews, rasterize, rasterize_views,
    },
    transform: TransformOps {
        Similarity, TransformError, TransformInputs, TransformPrimitives, TransformedGaussians,
        transform_gaussians,
    },
    loss: LossOps { LossError, LossOptions, LossOutputs, LossPrimitives, photometric_loss, ssim },
    bilateral_grid: BilateralGridOps {
        AFFINE_ENTRIES, BilateralGridError, BilateralGridGrads, identity_grid,
        slice_bilateral_grid, slice_bilateral_grid_backward,
    },
    optim: AdamOps {
        AdamGroup, AdamPrimitives, AdamStep, AdamUpdate, OptimError, adam_step,
        adam_step_tensor_ops, adam_steps_visible_tensor_ops,
    },
    noise: NoiseOps { MeanNoise, NoiseError, NoiseInputs, perturb_means },
    densify_stats: DensifyStatsOps {
        DensifyStats, DensifyStatsError, DensifyStatsPrimitives, ViewSize,
        accumulate_densify_stats, densify_stats_tensor_ops,
    },
    lod: LodOps {
        LodError, LodInputs, LodNodes, LodView, lod_gather_tensor_ops, lod_leaves_tensor_ops,
        lod_weights, lod_weights_tensor_ops, weighted_logits_tensor_ops,
    },
    smoothing: SmoothingOps {
        SmoothingError, smoothing_fold, smoothing_fold_backward,
        smoothing_fold_backward_tensor_ops, smoothing_fold_tensor_ops,
    },
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
