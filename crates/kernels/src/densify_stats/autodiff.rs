//! The statistics on `Autodiff<B>`: `B`'s implementation on the inner tensors, the result
//! untracked (the totals steer densification; no gradient flows through them).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{FloatTensor, IntTensor};

use super::{DensifyStatsOps, DensifyStatsPrimitives, ViewSize};

impl<B: DensifyStatsOps, C: CheckpointStrategy> DensifyStatsOps for Autodiff<B, C> {
    fn accumulate_densify_stats(
        state: DensifyStatsPrimitives<Self>,
        screen_grads: FloatTensor<Self>,
        extents: IntTensor<Self>,
        view: ViewSize,
    ) -> DensifyStatsPrimitives<Self> {
        let inner = |t| <Autodiff<B, C> as AutodiffBackend>::inner(t);
        let outer = |t| <Autodiff<B, C> as AutodiffBackend>::from_inner(t);
        let out = B::accumulate_densify_stats(
            DensifyStatsPrimitives {
                grad_sum: inner(state.grad_sum),
                visible_steps: inner(state.visible_steps),
                max_radius: inner(state.max_radius),
            },
            inner(screen_grads),
            <Autodiff<B, C> as AutodiffBackend>::int_inner(extents),
            view,
        );
        DensifyStatsPrimitives {
            grad_sum: outer(out.grad_sum),
            visible_steps: outer(out.visible_steps),
            max_radius: outer(out.max_radius),
        }
    }
}
