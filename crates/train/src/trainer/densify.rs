//! The trainer's side of densification: each step's statistics handed to the strategy, the
//! error scores a strategy asks for before a refinement, and the refinement itself.
//!
//! # Error scores (`densify.error_weight`)
//! Where the field is wrong, as FastGS (Ren et al. 2025) finds it: `K = densify.error_views`
//! training views, drawn from `(seed, step)` without repeats, are drawn as a step draws them
//! (refined cameras, the resolution schedule's size, each photo's appearance transform and
//! mask) and compared with their photos. A pixel's error is its colour's mean absolute
//! difference `e_p`; the pixels whose error, scaled to `[0, 1]` over the view
//! (`(e_p - min e) / (max e - min e)`), exceeds `densify.error_threshold` are the view's
//! high-error pixels `H`. Gaussian `i`'s score is its blend weight summed over them, averaged
//! over the views:
//!
//! `s_i = (1 / K) sum_v sum_{p in H_v} alpha_i(p) T_i(p)`
//!
//! (the rasterizer's backward with `H`'s indicator as the upstream gradient:
//! [`ember_field::RenderBackward::weighted_coverage`]). FastGS counts the high-error pixels
//! inside a Gaussian's footprint; weighting each by the Gaussian's share of the pixel's colour
//! credits the Gaussians that drew the error, not those hidden behind them. In a data-parallel
//! run each replica scores its share of the `K` views and the scores are summed over the
//! replicas ([`crate::reduce::Reducer::sum_rows`]), so every replica refines with the same numbers.

use burn::tensor::Tensor;
use ember_field::render_pass;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use super::{
    Inner, SMOOTHING_EVERY, STREAM_DENSIFY, STREAM_ERRORS, StepViews, Trainer, derive_seed,
    smoothing_filter,
};
use crate::densify::{RefineContext, RefineReport, StepStatistics};
use crate::error::TrainError;
use crate::params::ParamGroup;
use ember_field::SplatAutodiffBackend;

impl<B: SplatAutodiffBackend> Trainer<B> {
    /// Hands densification the statistics of every view of the batch: each (view, Gaussian)
    /// pair is one observation, as gsplat counts a batch.
    pub(super) fn observe(
        &mut self,
        step: usize,
        views: &StepViews<Inner<B>>,
        screen_grads: Tensor<Inner<B>, 2>,
        extents: Tensor<Inner<B>, 2, burn::tensor::Int>,
    ) -> Result<(), TrainError> {
        let batch = self.config.batch_size;
        let n = self.field.num_gaussians();
        let (screen_grads, extents) = self.reducer.statistics(screen_grads, extents, batch)?;
        let camera = views.cameras[0];
        for j in 0..batch {
            // A batch of one observes the tensors whole: on a GPU each narrow would be one more
            // operation for the host to record. The loss averages the views, so each view's
            // screen gradient is scaled back up by `B` to the size it has in a batch of one.
            let (view_grads, view_extents) = if batch == 1 {
                (screen_grads.clone(), extents.clone())
            } else {
                (
                    screen_grads.clone().narrow(0, j * n, n) * batch as f32,
                    extents.clone().narrow(0, j * n, n),
                )
            };
            let stats = StepStatistics {
                screen_grads: view_grads,
                extents: view_extents,
                width: camera.width,
                height: camera.height,
            };
            self.strategy.observe(step, &stats)?;
        }
        Ok(())
    }

    /// Densification after the update of (0-based) step `step`, with the error scores the
    /// strategy asks for; the tile lists follow the number of Gaussians.
    pub(super) fn refine(&mut self, step: usize) -> Result<RefineReport, TrainError> {
        let before = self.field.num_gaussians();
        let views = self.strategy.error_views(step + 1);
        if views > 0 && before > 0 {
            let scores = self.error_scores(step, views)?;
            self.strategy.observe_errors(scores)?;
        }
        let context = RefineContext {
            step: step + 1,
            extent: self.scene.extent,
            seed: derive_seed(self.config.seed, STREAM_DENSIFY, step as u64 + 1),
            lr_means: self.learning_rate(ParamGroup::Means, step),
            region: self.region,
        };
        let report = self
            .strategy
            .refine(context, &mut self.field, &mut self.adam)?;
        let after = self.field.num_gaussians();
        if after != before {
            self.tile_lists.scale(after as f64 / before.max(1) as f64);
        }
        if self.smoothing.is_some()
            && (after != before || (step + 1).is_multiple_of(SMOOTHING_EVERY))
        {
            self.smoothing = smoothing_filter(&self.config, &self.scene, &self.field);
        }
        Ok(report)
    }

    /// `[N]`: the error scores `s` of the module docs over `count` training views (at most all
    /// of them), as (0-based) step `step` draws them.
    fn error_scores(
        &mut self,
        step: usize,
        count: usize,
    ) -> Result<Tensor<Inner<B>, 1>, TrainError> {
        let mut order: Vec<usize> = (0..self.scene.train.len()).collect();
        let seed = derive_seed(self.config.seed, STREAM_ERRORS, step as u64 + 1);
        order.shuffle(&mut StdRng::seed_from_u64(seed));
        let count = count.min(order.len());
        let share: Vec<usize> = self.reducer.share(count).map(|j| order[j]).collect();
        let views = self.views_of(share, step, self.scene.background)?;
        let options = self.render_options(self.sh_degree_at(step), views.background);
        let drawn = self
            .smoothing
            .as_ref()
            .map(|filter| filter.apply(&self.field))
            .transpose()?;
        let field = drawn.as_ref().unwrap_or(&self.field);
        let threshold = self.config.densify.error_threshold as f32;
        let mut sum = Tensor::<Inner<B>, 1>::zeros([self.field.num_gaussians()], &self.device);
        for (j, target) in views.targets.iter().enumerate() {
            let camera = &views.cameras[j..j + 1];
            let pass =
                render_pass(field, camera, &options).map_err(|cause| TrainError::Render {
                    view: views.names[j].clone(),
                    cause,
                })?;
            let rendered = pass.images.rgb(0);
            let rendered = match &self.appearance {
                Some(appearance) if appearance.active_at(step) => appearance
                    .transform()
                    .apply(rendered, appearance.row(views.views[j])),
                _ => rendered,
            };
            let rendered = match views.masks.get(j) {
                Some(mask) => rendered * mask.clone(),
                None => rendered,
            };
            let [h, w, _] = target.dims();
            let error = (rendered - target.clone())
                .abs()
                .mean_dim(2)
                .reshape([h, w]);
            let (low, high) = (error.clone().min(), error.clone().max());
            let spread = (high - low.clone()).clamp_min(f32::MIN_POSITIVE);
            let scaled = (error - low.unsqueeze()).div(spread.unsqueeze());
            let marked = scaled.greater_elem(threshold).float().reshape([1, h, w]);
            let coverage =
                pass.backward
                    .weighted_coverage(marked)
                    .map_err(|cause| TrainError::Render {
                        view: views.names[j].clone(),
                        cause,
                    })?;
            sum = sum + coverage;
        }
        let scores = self.reducer.sum_rows(sum)?;
        Ok(scores.div_scalar(count.max(1) as f32))
    }
}
