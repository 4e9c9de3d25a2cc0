//! 360° panoramas: an equirectangular image cut into a rig of pinhole views that share its
//! centre, and pinhole images stitched back into a panorama.
//!
//! # The map
//! A panorama of `W x H` pixels (`W = 2 H`) holds every direction seen from one point. In the
//! panorama camera's axes (OpenCV: x right, y down, z forward), the continuous pixel position
//! `(u, v)` (pixel `(i, j)` covers `[i, i + 1) x [j, j + 1)`) is the direction of longitude and
//! latitude
//!
//! ```text
//! lon = 2π (u / W − 1/2)      in [−π, π): 0 at the centre column, positive to the right
//! lat = π (1/2 − v / H)       in [−π/2, π/2]: positive up
//! d   = (cos lat sin lon, −sin lat, cos lat cos lon)
//! ```
//!
//! and back, `lon = atan2(d_x, d_z)`, `lat = atan2(−d_y, hypot(d_x, d_z))`. This is nerfstudio's
//! `EQUIRECTANGULAR` camera (the centre column looks along the camera's forward axis, the top
//! row straight up), so a `transform_matrix` written for a panorama is the pose of this camera.
//!
//! # A rig ([`EquirectRig`])
//! `views` pinhole views per ring, a ring at each pitch of `pitch_deg` (yaw `360° k / views`,
//! every other ring turned by half a step), and with `poles` one view straight up and one
//! straight down; each a square of `size` pixels and a field of view of `fov_deg`. The view of
//! yaw `ψ` and pitch `θ` looks along `f = (cos θ sin ψ, −sin θ, cos θ cos ψ)`, its x axis is
//! `r = (cos ψ, 0, −sin ψ)` and its y axis `f × r`, so its rotation from the panorama's axes has
//! the rows `r`, `f × r`, `f` (a view's pose is that rotation after the panorama's pose).
//!
//! The default (8 views of 90° on the horizon and the two poles) covers the sphere: at yaw `δ`
//! from its nearest view, the ring reaches up to latitude `atan(cos δ)`, which is where the
//! pole's square begins at that yaw. Its default size gives a view's centre the panorama's own
//! density: `W / 2π` pixels per radian, a focal length of `W / 2π`, so
//! `size = W tan(fov / 2) / π` (652 px for a 2048-wide panorama).
//!
//! # Filtering ([`pyramid`])
//! A view pixel's footprint on the panorama is the parallelogram spanned by the Jacobian columns
//! `∂(u, v)/∂x` and `∂(u, v)/∂y`. Sampling its centre alone aliases wherever the view is coarser
//! than the panorama: views smaller than their share of it, and near the poles, where the
//! panorama spends `1 / cos lat` times more pixels on a degree of longitude. Each view pixel
//! instead averages `N = round(major / minor)` samples (at most 256) spread along the footprint's
//! longer axis, each a trilinear sample of the panorama's box-filtered mip pyramid at the level
//! whose texels are `max(major / N, minor)` pixels wide: the footprint's box, as GPUs filter
//! anisotropically (rounding, not ceiling, the sample count: a footprint less than 1.5 times
//! longer than wide takes one sample of its longer side, slightly blurrier across, at half the
//! cost; most of a ring view's pixels are such). Longitude wraps around; latitude stops at the poles. With the view pixel's
//! ray `p = Rᵀ (x', y', 1)` in the panorama's axes (`x' = (x + 0.5 − cx) / f`, so
//! `∂p/∂x = Rᵀ e_x / f`), the Jacobian is analytic:
//!
//! ```text
//! ρ = hypot(p_x, p_z)
//! ∂lon = (p_z ∂p_x − p_x ∂p_z) / ρ²
//! ∂lat = (p_y ∂ρ − ρ ∂p_y) / |p|²,   ∂ρ = (p_x ∂p_x + p_z ∂p_z) / ρ
//! ∂u = W ∂lon / 2π,   ∂v = −H ∂lat / π
//! ```
//!
//! # The way back ([`stitch`])
//! A panorama is filled from pinhole images of the same centre (a render's cube faces): each
//! panorama pixel takes the image whose forward axis is closest to its direction among those
//! that see it, sampled with the same footprint filter (the footprint of a panorama pixel on a
//! pinhole image, by the chain rule through the map above). A panorama pixel no image sees
//! is black.
//!
//! # Writing a rig out ([`split`])
//! [`split_panoramas`] writes each frame's views as images in COLMAP's rig layout (one folder a
//! view, `rig_config.json`), and as a nerfstudio `transforms.json` when the frames have poses.

pub mod pyramid;
mod resample;
mod rig;
pub mod split;

pub use pyramid::{FootprintTaps, Pyramid};
pub use resample::{CutPlan, cut_planned, cut_view, direction, panorama_position, stitch};
pub use rig::{EquirectRig, RigCamera};
pub use split::{
    IndexedPanorama, PANORAMA_INDEX, PanoramaFrame, PanoramaIndex, SplitOptions, SplitSummary,
    read_panorama_frames, split_panoramas,
};
