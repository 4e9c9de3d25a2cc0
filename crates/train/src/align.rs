//! Held-out views measured after test-time alignment (`eval.align_steps`): each held-out
//! camera's pose and its photo's exposure fitted to the photo, the field frozen, before the
//! aligned PSNR and SSIM are taken.
//!
//! ## Why
//! A held-out photo carries two things no field can learn from the training photos: its own
//! exposure (a camera's automatic exposure changes along a walk) and its own pose error
//! (COLMAP's poses drift along a walk, a held-out camera's with its neighbours'). A field drawn
//! from corrected training photos or cameras (`appearance.kind`, `poses.refine`) is measured
//! by the plain metrics against both, while a field trained on the photos as shot drew its
//! neighbours' exposure and drift in and is not (BENCHMARKS.md, issue 51). Methods that refine
//! poses measure held-out views as their papers do: the held-out camera's pose is fitted to its
//! photo with the field frozen first (BARF and the pose-free splatting methods), and an
//! appearance model's held-out photo gets its own appearance fitted (NeRF-W). The plain metrics
//! are reported beside the aligned ones, always.
//!
//! ## The fit
//! `steps` Adam steps on a correction of the held-out camera's pose, parametrised and stepped
//! as the training cameras' refinement ([`crate::poses`]: a turn about the camera's centre and a
//! shift in its axes, `PosesConfig`'s default rates decaying to 1% over the steps), minimising
//! the training loss, `(1 - lambda) L1 + lambda (1 - SSIM)`, between the photo and the render
//! times one gain per channel. The gains are refitted at every step by least squares over the
//! pixels the photo's mask keeps, `g_c = sum(r_c t_c) / sum(r_c^2)`, and held fixed in the
//! step's gradient. The aligned metrics are those of the render at the fitted pose times the
//! fitted gains, clamped to `[0, 1]`: nine numbers fitted to a photo of ~10^5 pixels.
//!
//! ## What it costs
//! Each step is one render of the view and its backward (the field's gradients are computed
//! and dropped: the pose's gradient is a sum over them), and one read of six numbers: on two
//! CPU cores at 400x300 and 150 000 Gaussians, ~0.35 s a step (BENCHMARKS.md).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use ember_field::{Camera, GaussianField, RenderOptions, render, render_pass, to_host};
use ember_kernels::{LossOptions, LossOutputs, SplatBackend};
use serde::{Deserialize, Serialize};

use crate::config::{OptimConfig, PoseAnchor, PosesConfig};
use crate::error::TrainError;
use crate::poses::CameraPoses;

/// What the alignment of one held-out view fitted, and the view measured after it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlignedMetrics {
    /// PSNR of the aligned render, dB.
    pub psnr: f32,
    /// SSIM of the aligned render.
    pub ssim: f32,
    /// How far the fitted pose turned the camera, degrees (a mean over the views in a report).
    pub degrees: f64,
    /// How far it moved the camera's centre, scene units (a mean over the views in a report).
    pub shift: f64,
}

/// A held-out view after [`align_view`]: the aligned render and how far the camera moved.
#[derive(Debug, Clone)]
pub struct AlignedView<B: Backend> {
    /// The render at the fitted pose times the fitted gains, clamped to `[0, 1]`, `[H, W, 3]`.
    pub rgb: Tensor<B, 3>,
    /// The fitted gains, R, G, B.
    pub gains: [f64; 3],
    /// The fitted pose's turn from the given one, degrees.
    pub degrees: f64,
    /// The fitted pose's centre's move from the given one, scene units.
    pub shift: f64,
}

/// Fits `camera`'s pose and a gain per channel to `photo` (`[H, W, 3]` in `[0, 1]`, over the
/// pixels `mask` `[H, W, 1]` keeps) in `steps` steps with `field` frozen (see the module
/// docs); `extent` is the scene's, the unit of the shift's rate. `view` names the view in
/// errors.
#[allow(clippy::too_many_arguments)]
pub fn align_view<B: SplatBackend>(
    field: &GaussianField<B>,
    camera: &Camera,
    photo: &Tensor<B, 3>,
    mask: Option<&Tensor<B, 3>>,
    options: &RenderOptions,
    steps: usize,
    extent: f64,
    view: &str,
) -> Result<AlignedView<B>, TrainError> {
    let render_error = |cause| TrainError::Render {
        view: view.to_string(),
        cause,
    };
    let rates = PosesConfig {
        refine: true,
        start: 0,
        // One camera's correction is all of their mean: anchoring would undo every step.
        anchor: PoseAnchor::None,
        ..PosesConfig::default()
    };
    let adam = OptimConfig::default();
    let mut pose = CameraPoses::new(&rates, 1, (adam.beta1, adam.beta2, adam.eps), extent, steps)
        .expect("a refining config has poses");
    let masked = |image: Tensor<B, 3>| match mask {
        Some(mask) => image * mask.clone(),
        None => image,
    };
    let target = masked(photo.clone());
    let [h, w, _] = photo.dims();
    for step in 0..steps {
        let drawn = pose.camera(0, camera);
        let pass =
            render_pass(field, core::slice::from_ref(&drawn), options).map_err(render_error)?;
        let rendered = pass.images.rgb(0);
        let gains = gain_tensor(exposure_gains(&rendered, photo, mask, view)?, &target);
        let compared = masked(rendered * gains.clone());
        let out = B::photometric_loss_forward(
            compared.into_primitive().tensor(),
            target.clone().into_primitive().tensor(),
            LossOptions::default(),
            LossOutputs::Gradient,
        );
        let grad = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(
            out.grad.expect("asked for the gradient"),
        ));
        let grad_rgb = (masked(grad) * gains).reshape([1, h, w, 3]);
        let gradients = pass.backward.run(grad_rgb, true).map_err(render_error)?;
        pose.update(0, gradients.poses[0], step);
    }
    let drawn = pose.camera(0, camera);
    let rendered = render(field, &drawn, options).map_err(render_error)?.rgb;
    let gains = exposure_gains(&rendered, photo, mask, view)?;
    let rgb = (rendered * gain_tensor(gains, photo)).clamp(0.0, 1.0);
    let (degrees, shift) = pose.moved(0, camera);
    Ok(AlignedView {
        rgb,
        gains,
        degrees,
        shift,
    })
}

/// The gain per channel that best fits `rendered` to `photo` (both `[H, W, 3]`) by least
/// squares over the pixels `mask` keeps: `sum(r_c t_c) / sum(r_c^2)`, `1` for a channel the
/// render leaves black.
fn exposure_gains<B: Backend>(
    rendered: &Tensor<B, 3>,
    photo: &Tensor<B, 3>,
    mask: Option<&Tensor<B, 3>>,
    view: &str,
) -> Result<[f64; 3], TrainError> {
    let [h, w, _] = rendered.dims();
    let (r, t) = match mask {
        Some(mask) => (
            rendered.clone() * mask.clone(),
            photo.clone() * mask.clone(),
        ),
        None => (rendered.clone(), photo.clone()),
    };
    let (r, t) = (r.reshape([h * w, 3]), t.reshape([h * w, 3]));
    let sums = Tensor::cat(
        vec![(r.clone() * t).sum_dim(0), r.powi_scalar(2).sum_dim(0)],
        0,
    );
    let sums =
        to_host(sums, "exposure gains").map_err(|e| TrainError::Scene(format!("{view}: {e}")))?;
    Ok([0, 1, 2].map(|c| match sums[3 + c] > 0.0 {
        true => f64::from(sums[c]) / f64::from(sums[3 + c]),
        false => 1.0,
    }))
}

/// `gains` as a `[1, 1, 3]` tensor on `like`'s device.
fn gain_tensor<B: Backend>(gains: [f64; 3], like: &Tensor<B, 3>) -> Tensor<B, 3> {
    let values = gains.map(|g| g as f32).to_vec();
    Tensor::from_data(TensorData::new(values, [1, 1, 3]), &like.device())
}
