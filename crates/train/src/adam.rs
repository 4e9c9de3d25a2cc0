//! Adam with one learning rate and one state per [`ParamGroup`], on plain tensors.
//!
//! Why not Burn's `OptimizerAdaptor`/`SimpleOptimizer`: the same update, but its state is keyed
//! by `ParamId` inside record types, while densification must re-index the moments row by row
//! (select the surviving Gaussians, append zeros for new ones) and checkpoints must store them
//! next to the parameters. Owning the moments as `[N, columns]` tensors makes both a `select`
//! and a `cat`. The update is PyTorch's (which 3DGS uses): bias-corrected moments,
//! `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`, with `t` counted per group.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};
use ember_kernels::{AdamStep, SplatBackend, adam_step};

use crate::splats::ParamGroup;

/// Adam's hyper-parameters (rates come with each step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamSettings {
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
}

/// The moments of one group, row-aligned with its parameters.
#[derive(Debug, Clone)]
pub struct GroupState<B: Backend> {
    /// First moment, `[N, columns]`.
    pub exp_avg: Tensor<B, 2>,
    /// Second moment, `[N, columns]`.
    pub exp_avg_sq: Tensor<B, 2>,
    /// Steps taken by this group.
    pub steps: u64,
}

/// Per-group Adam (see the module docs).
#[derive(Debug, Clone)]
pub struct GroupAdam<B: Backend> {
    /// Hyper-parameters.
    pub settings: AdamSettings,
    /// Indexed by [`ParamGroup::index`].
    pub states: [GroupState<B>; 6],
}

impl<B: Backend> GroupAdam<B> {
    /// Zero moments for parameters of the given `[N, columns]` shapes.
    pub fn new(settings: AdamSettings, shapes: [[usize; 2]; 6], device: &B::Device) -> Self {
        GroupAdam {
            settings,
            states: shapes.map(|shape| GroupState {
                exp_avg: Tensor::zeros(shape, device),
                exp_avg_sq: Tensor::zeros(shape, device),
                steps: 0,
            }),
        }
    }

    /// Keeps the rows `keep` of every group's moments (in that order) and appends `appended`
    /// zero rows: the state of Gaussians that survive densification follows them, new
    /// Gaussians start with no history (as 3DGS does). Step counts are unchanged.
    pub fn reindex(&mut self, keep: &Tensor<B, 1, Int>, appended: usize) {
        let kept = keep.dims()[0];
        for state in &mut self.states {
            let cols = state.exp_avg.dims()[1];
            let device = state.exp_avg.device();
            let take = |t: &Tensor<B, 2>| -> Tensor<B, 2> {
                let selected = if kept == 0 || cols == 0 {
                    Tensor::zeros([kept, cols], &device)
                } else {
                    t.clone().select(0, keep.clone())
                };
                if appended == 0 {
                    selected
                } else if cols == 0 || kept == 0 {
                    Tensor::zeros([kept + appended, cols], &device)
                        .slice_assign([0..kept, 0..cols], selected)
                } else {
                    Tensor::cat(vec![selected, Tensor::zeros([appended, cols], &device)], 0)
                }
            };
            state.exp_avg = take(&state.exp_avg);
            state.exp_avg_sq = take(&state.exp_avg_sq);
        }
    }

    /// Zeroes one group's moments (after its parameter was overwritten, e.g. an opacity reset).
    pub fn reset_moments(&mut self, group: ParamGroup) {
        let state = &mut self.states[group.index()];
        state.exp_avg = state.exp_avg.zeros_like();
        state.exp_avg_sq = state.exp_avg_sq.zeros_like();
    }

    /// Rows of state held (the `N` the moments are aligned with).
    pub fn len(&self) -> usize {
        self.states[0].exp_avg.dims()[0]
    }

    /// Whether the moments hold no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: SplatBackend> GroupAdam<B> {
    /// One Adam step of `group`: returns the updated parameter. The update itself is
    /// [`ember_kernels::adam_step`] (one fused pass on ndarray, fused tensor ops on the GPU
    /// backends).
    ///
    /// # Panics
    /// When `grad` and `param` differ in shape from the group's moments (the trainer keeps
    /// them row-aligned).
    pub fn step(
        &mut self,
        group: ParamGroup,
        param: Tensor<B, 2>,
        grad: Tensor<B, 2>,
        lr: f64,
    ) -> Tensor<B, 2> {
        let AdamSettings { beta1, beta2, eps } = self.settings;
        let state = &mut self.states[group.index()];
        state.steps += 1;
        if param.dims()[1] == 0 || param.dims()[0] == 0 {
            return param;
        }
        let step = AdamStep {
            lr,
            beta1,
            beta2,
            eps,
            step: u32::try_from(state.steps).unwrap_or(u32::MAX),
        };
        let update = adam_step(
            param,
            grad,
            state.exp_avg.clone(),
            state.exp_avg_sq.clone(),
            &step,
        )
        .unwrap_or_else(|e| panic!("{} group: {e}", group.name()));
        state.exp_avg = update.exp_avg;
        state.exp_avg_sq = update.exp_avg_sq;
        update.param
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::{index_tensor, to_host};
    use burn::backend::NdArray;
    use burn::tensor::TensorData;

    type B = NdArray<f32>;

    fn settings() -> AdamSettings {
        AdamSettings {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
        }
    }

    #[test]
    fn first_step_moves_by_the_rate_against_the_gradient_sign() {
        let device = Default::default();
        let mut adam = GroupAdam::<B>::new(settings(), [[2, 3]; 6], &device);
        let p = Tensor::<B, 2>::zeros([2, 3], &device);
        let g = Tensor::<B, 2>::from_data(
            TensorData::new(vec![1.0f32, -2.0, 0.5, -0.1, 3.0, 7.0], [2, 3]),
            &device,
        );
        let out = to_host(adam.step(ParamGroup::Means, p, g, 0.01), "p").unwrap();
        let want = [-0.01, 0.01, -0.01, 0.01, -0.01, -0.01];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-7, "{out:?}");
        }
        assert_eq!(adam.states[0].steps, 1);
        assert_eq!(adam.states[1].steps, 0);
    }

    #[test]
    fn matches_a_scalar_reference_over_steps() {
        let device = Default::default();
        let mut adam = GroupAdam::<B>::new(settings(), [[1, 1]; 6], &device);
        let (mut p, mut m, mut v) = (0.3f64, 0.0f64, 0.0f64);
        let mut pt = Tensor::<B, 2>::full([1, 1], 0.3, &device);
        for t in 1..=20 {
            let g = (p * 3.0).sin() + 0.1 * t as f64;
            m = 0.9 * m + 0.1 * g;
            v = 0.999 * v + 0.001 * g * g;
            let mh = m / (1.0 - 0.9f64.powi(t));
            let vh = v / (1.0 - 0.999f64.powi(t));
            p -= 0.05 * mh / (vh.sqrt() + 1e-15);
            let gt = Tensor::<B, 2>::full([1, 1], g as f32, &device);
            pt = adam.step(ParamGroup::Opacity, pt, gt, 0.05);
        }
        let got = to_host(pt, "p").unwrap()[0] as f64;
        assert!((got - p).abs() < 1e-5, "{got} vs {p}");
    }

    #[test]
    fn reindex_keeps_rows_and_appends_zeros() {
        let device = Default::default();
        let mut adam = GroupAdam::<B>::new(settings(), [[4, 2]; 6], &device);
        let rows = Tensor::<B, 2>::from_data(
            TensorData::new((0..8).map(|v| v as f32).collect::<Vec<_>>(), [4, 2]),
            &device,
        );
        adam.states[2].exp_avg = rows.clone();
        adam.states[2].exp_avg_sq = rows;
        adam.reindex(&index_tensor(&[3, 1], &device), 2);
        assert_eq!(adam.len(), 4);
        let m = to_host(adam.states[2].exp_avg.clone(), "m").unwrap();
        assert_eq!(m, vec![6.0, 7.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
        adam.reset_moments(ParamGroup::LogScales);
        assert!(
            to_host(adam.states[2].exp_avg_sq.clone(), "v")
                .unwrap()
                .iter()
                .all(|v| *v == 0.0)
        );
    }
}
