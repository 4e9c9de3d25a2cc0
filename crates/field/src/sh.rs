//! Spherical-harmonics conventions shared by the model and the renderer.

pub use ember_kernels::SH_C0;

/// Number of SH coefficients per colour channel for a degree: `(d + 1)^2`.
pub fn num_coefficients(degree: usize) -> usize {
    (degree + 1) * (degree + 1)
}

/// The SH DC coefficient that renders as the linear colour `rgb` (in `[0, 1]`).
pub fn rgb_to_dc(rgb: f64) -> f64 {
    (rgb - 0.5) / SH_C0
}

/// The colour a DC coefficient renders as (before clamping at zero).
pub fn dc_to_rgb(dc: f64) -> f64 {
    dc * SH_C0 + 0.5
}
