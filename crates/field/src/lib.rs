//! Ember's model layer: the learnable [`GaussianField`], its differentiable queries,
//! [`render`] (and [`render_batch`] for several cameras; [`render_pass`] when the caller runs
//! the backward itself), level of detail ([`lod`]: a
//! [`GaussianHierarchy`] drawn by the cut each view needs, [`render_lod`]), and [`Similarity`] transforms of a whole field
//! ([`GaussianField::transformed`], [`transform_camera`]), and 360° panoramas
//! ([`render_panorama`]: every Gaussian projected onto the sphere, or a cube's faces stitched
//! into the equirectangular map; [`panorama_pass`] the sphere's with its backward, to fit a
//! field to panoramas directly), and Mip-Splatting's 3D smoothing filter
//! ([`SmoothingFilter`]: the training cameras' sampling rate folded into scales and opacities).
//!
//! `ember-field` knows no file format: [`splats`] turns `ember-data`'s host [`ember_data::Splats`]
//! (what every format reads into) into a field and back. The custom ops it calls live in
//! `ember-kernels`.

#![warn(missing_docs)]

mod gaussian_field;
mod init;
pub mod lod;
mod panorama;
mod panorama_pass;
mod pass;
mod render;
pub mod sh;
mod smoothing;
pub mod splats;
mod transform;

pub use ember_kernels::transform::{Similarity, TransformError};
pub use ember_kernels::{Covariance, FieldError, FieldOptions, SplatAutodiffBackend, SplatBackend};
pub use gaussian_field::{GaussianField, GaussianFieldConfig, ModelError, to_host};
pub use init::knn_mean_distance;
pub use lod::{
    DEFAULT_LOD_MIN_SAVING, DEFAULT_LOD_THRESHOLD, GaussianHierarchy, LodCut, drawn_cut, lod_cut,
    render_lod, render_lod_images,
};
pub use panorama::{PanoramaProjection, cube_rig, render_panorama, rig_cameras};
pub use panorama_pass::{PanoramaBackward, PanoramaPass, panorama_batch_pass, panorama_pass};
pub use pass::{PassImages, RenderBackward, RenderGradients, RenderPass, render_pass};
pub use render::{
    BatchImages, BatchRenderOutput, RenderAux, RenderError, RenderOptions, RenderOutput, project,
    render, render_batch, render_batch_images,
};
pub use smoothing::{SmoothingFilter, SmoothingOptions};
pub use transform::transform_camera;

/// A pinhole camera, world to camera, OpenCV axes (the kernels' [`ember_kernels::CameraParams`]).
pub type Camera = ember_kernels::CameraParams;
