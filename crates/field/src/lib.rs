//! Ember's model layer: the learnable [`GaussianField`] and its differentiable queries.
//!
//! `ember-field` knows nothing about files; the custom ops it calls live in `ember-kernels`.

#![warn(missing_docs)]

mod gaussian_field;
mod init;
pub mod sh;

pub use ember_kernels::{Covariance, FieldError, FieldOptions, SplatAutodiffBackend, SplatBackend};
pub use gaussian_field::{GaussianField, GaussianFieldConfig, ModelError};
pub use init::knn_mean_distance;
