//! Mip-Splatting's 3D smoothing filter: each Gaussian convolved with an isotropic Gaussian as
//! wide as the finest sampling any training camera gave its centre, so that a field holds no
//! detail finer than its photos could show (which a closer or sharper view than any training
//! one would draw as thin spikes and gaps: Mip-Splatting's zoom-in artifacts).
//!
//! **The sampling interval.** A camera with focal lengths `fx, fy` (pixels) sees a point at
//! camera depth `z` with pixels `z / max(fx, fy)` world units apart. Gaussian `k`'s interval
//! `T_k` is the smallest over the training cameras that see its centre: in front of the near
//! plane and projected within the image widened by [`SmoothingOptions::margin`] of its size on
//! each side. A Gaussian that no camera sees takes the largest `T` of those seen (it is
//! constrained by nothing finer); a field that no camera sees gets no filter.
//!
//! **The filter.** Its variance is `sigma_k^2 = s T_k^2` ([`SmoothingOptions::strength`] `s`,
//! in squared pixels of that finest view; Mip-Splatting's 0.2). [`SmoothingFilter::apply`]
//! folds it into the raw parameters (the op [`ember_kernels::smoothing_fold`], whose module
//! docs state the math: the same rotation with each scale widened to `sqrt(s^2 + sigma^2)`,
//! the opacity scaled so that the Gaussian's integral is kept), so the drawn field is an
//! ordinary field: what an export writes, and what other tools then draw. The filter is a
//! constant of a step: the gradient does not flow into `sigma` (training measures it again
//! from the centres on a schedule); [`SmoothingFilter::backward`] is the chain rule through the
//! fold.

use burn::module::{Param, ParamId};
use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use ember_kernels::{SmoothingOps, smoothing_fold, smoothing_fold_backward};

use crate::{Camera, GaussianField, ModelError};

/// How [`SmoothingFilter::from_cameras`] measures the sampling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmoothingOptions {
    /// The filter's variance in squared pixels of the finest view (`s`; Mip-Splatting's 0.2).
    pub strength: f64,
    /// Camera-space depth below which a camera does not see a centre, world units (the
    /// projection's near plane).
    pub near: f64,
    /// How far outside the image a centre still counts as seen, as a fraction of the image's
    /// width and height on each side (Mip-Splatting's 0.15).
    pub margin: f64,
}

impl Default for SmoothingOptions {
    fn default() -> Self {
        SmoothingOptions {
            strength: 0.2,
            near: ember_kernels::ProjectOptions::default().near,
            margin: 0.15,
        }
    }
}

/// A field's 3D smoothing filter (see the module docs): one variance per Gaussian.
#[derive(Clone, Debug)]
pub struct SmoothingFilter<B: Backend> {
    /// `[N]`: each Gaussian's filter variance `sigma^2`, world units squared.
    pub variance: Tensor<B, 1>,
}

impl<B: Backend> SmoothingFilter<B> {
    /// The filter of Gaussians centred at `means` `[N, 3]` sampled by `cameras` (see the module
    /// docs).
    pub fn from_cameras(
        means: Tensor<B, 2>,
        cameras: &[Camera],
        options: SmoothingOptions,
    ) -> SmoothingFilter<B> {
        let [n, _] = means.dims();
        let device = means.device();
        if n == 0 {
            return SmoothingFilter::from_variance(Tensor::zeros([0], &device));
        }
        // Not infinity: a GPU compiler may assume finite values.
        let unseen = Tensor::<B, 1>::full([n], f32::MAX, &device);
        let m: [Tensor<B, 1>; 3] =
            std::array::from_fn(|j| means.clone().narrow(1, j, 1).reshape([n]));
        let interval = cameras.iter().fold(unseen, |finest, camera| {
            // `p_cam = R p + t`, one row at a time: elementwise in f32 on every backend (a
            // GPU's matmul may take reduced-precision paths), and in one order of the sums.
            let (r, t) = (&camera.rotation, &camera.translation);
            let column = |i: usize| {
                m[0].clone().mul_scalar(r[3 * i])
                    + m[1].clone().mul_scalar(r[3 * i + 1])
                    + m[2].clone().mul_scalar(r[3 * i + 2])
                    + t[i]
            };
            let z = column(2);
            let (w, h) = (camera.width as f64, camera.height as f64);
            let (lo_x, hi_x) = (-options.margin * w, (1.0 + options.margin) * w);
            let (lo_y, hi_y) = (-options.margin * h, (1.0 + options.margin) * h);
            let in_front = z.clone().greater_elem(options.near);
            // Behind the near plane the division is meaningless; `in_front` masks it out.
            let safe_z = z.clone().clamp_min(options.near);
            let u = column(0).div(safe_z.clone()) * camera.fx + camera.cx;
            let v = column(1).div(safe_z) * camera.fy + camera.cy;
            let seen = in_front
                .bool_and(u.clone().greater_equal_elem(lo_x))
                .bool_and(u.lower_equal_elem(hi_x))
                .bool_and(v.clone().greater_equal_elem(lo_y))
                .bool_and(v.lower_equal_elem(hi_y));
            let here = z / camera.fx.max(camera.fy);
            let finer = seen.bool_and(here.clone().lower(finest.clone()));
            finest.mask_where(finer, here)
        });
        let seen = interval.clone().lower_elem(f32::MAX);
        let coarsest = interval
            .clone()
            .mask_fill(seen.clone().bool_not(), 0.0)
            .max()
            .expand([n]);
        let interval = interval.mask_where(seen.bool_not(), coarsest);
        SmoothingFilter {
            variance: interval.powi_scalar(2) * options.strength,
        }
    }

    /// The filter with the given variances `[N]` (world units squared).
    pub fn from_variance(variance: Tensor<B, 1>) -> SmoothingFilter<B> {
        SmoothingFilter { variance }
    }

    /// The number of Gaussians it filters.
    pub fn len(&self) -> usize {
        self.variance.dims()[0]
    }

    /// Whether it filters no Gaussian.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: SmoothingOps> SmoothingFilter<B> {
    /// `field` as drawn: the filter folded into its log-scales and opacity logits, the other
    /// parameters shared. A field to draw or export, not one to train: under `Autodiff` its
    /// folded parameters are computed from the raw ones, so the gradient of a render reaches
    /// `field`'s. A filter of another number of Gaussians than `field`'s is refused.
    pub fn apply(&self, field: &GaussianField<B>) -> Result<GaussianField<B>, ModelError> {
        let (log_scales, opacity_logits) = smoothing_fold(
            field.log_scales.val(),
            field.opacity_logits.val(),
            self.variance.clone(),
        )
        .map_err(|e| ModelError::Invalid(e.to_string()))?;
        // Not `Param::from_tensor`: under `Autodiff` that would make the folded values leaves
        // of their own and cut them from the raw parameters.
        Ok(GaussianField {
            means: field.means.clone(),
            quats: field.quats.clone(),
            log_scales: Param::initialized(ParamId::new(), log_scales),
            opacity_logits: Param::initialized(ParamId::new(), opacity_logits),
            sh_dc: field.sh_dc.clone(),
            sh_rest: field.sh_rest.clone(),
            features: field.features.clone(),
        })
    }

    /// The gradients with respect to the raw `log_scales` `[N, 3]` and `opacity_logits` `[N]`
    /// from those with respect to the drawn field's (`grad_log_scales` `[N, 3]`,
    /// `grad_opacity_logits` `[N]`): the chain rule through the fold.
    pub fn backward(
        &self,
        log_scales: Tensor<B, 2>,
        opacity_logits: Tensor<B, 1>,
        grad_log_scales: Tensor<B, 2>,
        grad_opacity_logits: Tensor<B, 1>,
    ) -> Result<(Tensor<B, 2>, Tensor<B, 1>), ModelError> {
        smoothing_fold_backward(
            log_scales,
            opacity_logits,
            self.variance.clone(),
            grad_log_scales,
            grad_opacity_logits,
        )
        .map_err(|e| ModelError::Invalid(e.to_string()))
    }
}
