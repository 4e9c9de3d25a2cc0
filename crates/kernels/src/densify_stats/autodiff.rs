//! The statistics on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (the totals steer densification; no gradient flows through them; see
//! [`crate::untracked`]).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{FloatTensor, IntTensor};

use super::{DensifyStatsOps, DensifyStatsPrimitives, ViewSize};
use crate::untracked::{Untracked, untracked_bundle};

untracked_bundle!(DensifyStatsPrimitives { grad_sum, visible_steps, max_radius });

impl<B: DensifyStatsOps, C: CheckpointStrategy> DensifyStatsOps for Autodiff<B, C> {
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        let out = B::accumulate_densify_stats(
            state.into_inner(),
            <Self as AutodiffBackend>::inner(screen_grads),
            <Self as AutodiffBackend>::int_inner(extents),
            view,
        );
        Untracked::from_inner(out)
    }
}
