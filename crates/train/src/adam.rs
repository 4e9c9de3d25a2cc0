//! Adam with one learning rate and one state per [`ParamGroup`], on the field's own tensors.
//!
//! Why not Burn's `OptimizerAdaptor`/`SimpleOptimizer`: the same update, but its state is keyed
//! by `ParamId` inside record types, while densification must re-index the moments row by row
//! (select the surviving Gaussians, append zeros for new ones) and checkpoints must store them
//! next to the parameters. The moments here have the model's layout (each is a
//! [`GaussianField`] of the parameters' shapes), so densification re-indexes them with the
//! field's own [`GaussianField::select`] and [`GaussianField::cat`]. The update is PyTorch's
//! (which 3DGS uses): bias-corrected moments,
//! `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`, with `t` counted per group.
//!
//! With `optim.visible_adam` the step passes one weight per Gaussian (positive where a view of
//! the step draws it) and only those rows are updated: the sparse Adam of Taming 3DGS, whose
//! unseen rows keep parameters and moments (`ember_kernels`' optim module docs). `t` still
//! counts every step of the group.

use burn::module::Param;
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};
use ember_field::GaussianField;
use ember_kernels::{AdamGroup, AdamOps, AdamPrimitives, AdamStep};

use crate::params::ParamGroup;

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

/// The gradient of each parameter of a field, in its layout (`None`: the parameter received
/// none this step and is left as it is).
#[derive(Debug, Clone)]
pub struct FieldGradients<B: Backend> {
    /// `[N, 3]`
    pub means: Option<Tensor<B, 2>>,
    /// `[N, 4]`
    pub quats: Option<Tensor<B, 2>>,
    /// `[N, 3]`
    pub log_scales: Option<Tensor<B, 2>>,
    /// `[N]`
    pub opacity_logits: Option<Tensor<B, 1>>,
    /// `[N, 1, 3]`
    pub sh_dc: Option<Tensor<B, 3>>,
    /// `[N, K, 3]`
    pub sh_rest: Option<Tensor<B, 3>>,
}

/// Per-group Adam (see the module docs).
#[derive(Debug, Clone)]
pub struct GroupAdam<B: Backend> {
    /// Hyper-parameters.
    pub settings: AdamSettings,
    /// First moments, in the field's layout (features, if any, are not trained).
    pub exp_avg: GaussianField<B>,
    /// Second moments, in the field's layout.
    pub exp_avg_sq: GaussianField<B>,
    /// Steps taken by each group, indexed by [`ParamGroup::index`].
    pub steps: [u64; 6],
}

impl<B: Backend> GroupAdam<B> {
    /// Zero moments for the parameters of `field`.
    pub fn new(settings: AdamSettings, field: &GaussianField<B>) -> Self {
        let mut zeros = field.zeros(field.num_gaussians());
        zeros.features = None;
        GroupAdam {
            settings,
            exp_avg: zeros.clone(),
            exp_avg_sq: zeros,
            steps: [0; 6],
        }
    }

    /// Keeps the rows `keep` of every group's moments (in that order) and appends `appended`
    /// zero rows: the state of Gaussians that survive densification follows them, new
    /// Gaussians start with no history (as 3DGS does). Step counts are unchanged.
    pub fn reindex(&mut self, keep: &Tensor<B, 1, Int>, appended: usize) {
        let take = |moments: &GaussianField<B>| {
            let kept = moments.select(keep);
            let new = kept.zeros(appended);
            kept.cat(new).expect("moments of one degree")
        };
        self.exp_avg = take(&self.exp_avg);
        self.exp_avg_sq = take(&self.exp_avg_sq);
    }

    /// Zeroes one group's moments (after its parameter was overwritten, e.g. an opacity reset).
    pub fn reset_moments(&mut self, group: ParamGroup) {
        for moments in [&mut self.exp_avg, &mut self.exp_avg_sq] {
            let zeros = group.columns(moments).zeros_like();
            group.set_columns(moments, zeros);
        }
    }

    /// Zeroes the moments of the Gaussians `rows` in every group (e.g. Gaussians that were moved
    /// or whose opacity was shared out).
    pub fn zero_rows(&mut self, rows: &[usize]) {
        let n = self.len();
        if rows.is_empty() || n == 0 {
            return;
        }
        let mut keep = vec![1.0f32; n];
        for &r in rows {
            keep[r] = 0.0;
        }
        let mask =
            Tensor::<B, 1>::from_data(TensorData::new(keep, [n]), &self.exp_avg.means.device());
        fn masked<B: Backend, const D: usize>(
            param: &mut Param<Tensor<B, D>>,
            mask: &Tensor<B, 1>,
        ) {
            let mut dims = [1; D];
            dims[0] = mask.dims()[0];
            if param.dims().iter().product::<usize>() > 0 {
                *param = Param::from_tensor(param.val() * mask.clone().reshape(dims));
            }
        }
        for moments in [&mut self.exp_avg, &mut self.exp_avg_sq] {
            masked(&mut moments.means, &mask);
            masked(&mut moments.quats, &mask);
            masked(&mut moments.log_scales, &mask);
            masked(&mut moments.opacity_logits, &mask);
            masked(&mut moments.sh_dc, &mask);
            masked(&mut moments.sh_rest, &mask);
        }
    }

    /// Rows of state held (the `N` the moments are aligned with).
    pub fn len(&self) -> usize {
        self.exp_avg.num_gaussians()
    }

    /// Whether the moments hold no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: AdamOps> GroupAdam<B> {
    /// One Adam step of every parameter of `field` that has a gradient, at the learning rate
    /// `lr(group)`: [`AdamOps::adam_steps`] over the groups (one fused pass each on ndarray,
    /// one kernel launch for all of them on the GPU backends). With `visible` (`[N]`, one
    /// weight per Gaussian), only the Gaussians of positive weight are updated
    /// ([`AdamOps::adam_steps_visible`]); the others keep parameters and moments, and every
    /// group's step count still advances.
    ///
    /// # Panics
    /// When a gradient and its parameter differ in shape from the moments (the trainer keeps
    /// them row-aligned), or `visible` is not one weight per Gaussian.
    pub fn step(
        &mut self,
        field: &mut GaussianField<B>,
        grads: FieldGradients<B>,
        visible: Option<Tensor<B, 1>>,
        lr: impl Fn(ParamGroup) -> f64,
    ) {
        let AdamSettings { beta1, beta2, eps } = self.settings;
        let (m, v) = (&self.exp_avg, &self.exp_avg_sq);
        let mut groups = Vec::with_capacity(ParamGroup::ALL.len());
        let mut updates = Vec::with_capacity(ParamGroup::ALL.len());
        let steps = &mut self.steps;
        let mut add = |group: ParamGroup, tensors: Option<[FloatTensor<B>; 4]>| {
            let Some([param, grad, exp_avg, exp_avg_sq]) = tensors else {
                return;
            };
            let count = &mut steps[group.index()];
            *count += 1;
            if param.shape().num_elements() == 0 {
                return;
            }
            groups.push(group);
            updates.push(AdamGroup {
                state: AdamPrimitives {
                    param,
                    exp_avg,
                    exp_avg_sq,
                },
                grad,
                step: AdamStep {
                    lr: lr(group),
                    beta1,
                    beta2,
                    eps,
                    step: u32::try_from(*count).unwrap_or(u32::MAX),
                },
            });
        };
        add(
            ParamGroup::Means,
            primitives(&field.means, grads.means, &m.means, &v.means),
        );
        add(
            ParamGroup::Quats,
            primitives(&field.quats, grads.quats, &m.quats, &v.quats),
        );
        add(
            ParamGroup::LogScales,
            primitives(
                &field.log_scales,
                grads.log_scales,
                &m.log_scales,
                &v.log_scales,
            ),
        );
        add(
            ParamGroup::Opacity,
            primitives(
                &field.opacity_logits,
                grads.opacity_logits,
                &m.opacity_logits,
                &v.opacity_logits,
            ),
        );
        add(
            ParamGroup::ShDc,
            primitives(&field.sh_dc, grads.sh_dc, &m.sh_dc, &v.sh_dc),
        );
        add(
            ParamGroup::ShRest,
            primitives(&field.sh_rest, grads.sh_rest, &m.sh_rest, &v.sh_rest),
        );
        let (m, v) = (&mut self.exp_avg, &mut self.exp_avg_sq);
        let updated = match visible {
            Some(visible) => {
                assert_eq!(
                    visible.dims()[0],
                    field.num_gaussians(),
                    "Adam: one visibility weight per Gaussian"
                );
                B::adam_steps_visible(updates, visible.into_primitive().tensor())
            }
            None => B::adam_steps(updates),
        };
        for (group, out) in groups.into_iter().zip(updated) {
            match group {
                ParamGroup::Means => assign(&mut field.means, &mut m.means, &mut v.means, out),
                ParamGroup::Quats => assign(&mut field.quats, &mut m.quats, &mut v.quats, out),
                ParamGroup::LogScales => assign(
                    &mut field.log_scales,
                    &mut m.log_scales,
                    &mut v.log_scales,
                    out,
                ),
                ParamGroup::Opacity => assign(
                    &mut field.opacity_logits,
                    &mut m.opacity_logits,
                    &mut v.opacity_logits,
                    out,
                ),
                ParamGroup::ShDc => assign(&mut field.sh_dc, &mut m.sh_dc, &mut v.sh_dc, out),
                ParamGroup::ShRest => {
                    assign(&mut field.sh_rest, &mut m.sh_rest, &mut v.sh_rest, out)
                }
            }
        }
    }
}

/// `[param, grad, exp_avg, exp_avg_sq]` as primitives when there is a gradient.
///
/// # Panics
/// When the gradient's or a moment's shape is not the parameter's.
fn primitives<B: Backend, const D: usize>(
    param: &Param<Tensor<B, D>>,
    grad: Option<Tensor<B, D>>,
    m: &Param<Tensor<B, D>>,
    v: &Param<Tensor<B, D>>,
) -> Option<[FloatTensor<B>; 4]> {
    let grad = grad?;
    let expected = param.dims();
    for (name, dims) in [
        ("gradient", grad.dims()),
        ("moments", m.dims()),
        ("moments", v.dims()),
    ] {
        assert_eq!(
            dims, expected,
            "Adam: the {name} differ in shape from the parameter"
        );
    }
    Some([param.val(), grad, m.val(), v.val()].map(|t| t.into_primitive().tensor()))
}

/// Stores an update into the parameter and its moments.
fn assign<B: Backend, const D: usize>(
    param: &mut Param<Tensor<B, D>>,
    m: &mut Param<Tensor<B, D>>,
    v: &mut Param<Tensor<B, D>>,
    out: AdamPrimitives<B>,
) {
    let tensor = |p| Tensor::<B, D>::from_primitive(TensorPrimitive::Float(p));
    *param = Param::from_tensor(tensor(out.param));
    *m = Param::from_tensor(tensor(out.exp_avg));
    *v = Param::from_tensor(tensor(out.exp_avg_sq));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::index_tensor;
    use burn::tensor::TensorData;
    use ember_field::to_host;

    type B = ember_kernels::backend::Cpu;

    fn settings() -> AdamSettings {
        AdamSettings {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
        }
    }

    /// `n` Gaussians with every parameter zero (SH degree 1).
    fn zero_field(n: usize) -> GaussianField<B> {
        let device = Default::default();
        GaussianField::from_tensors(
            Tensor::zeros([n, 3], &device),
            Tensor::zeros([n, 4], &device),
            Tensor::zeros([n, 3], &device),
            Tensor::zeros([n], &device),
            Tensor::zeros([n, 1, 3], &device),
            Tensor::zeros([n, 3, 3], &device),
            None,
        )
        .unwrap()
    }

    fn no_grads() -> FieldGradients<B> {
        FieldGradients {
            means: None,
            quats: None,
            log_scales: None,
            opacity_logits: None,
            sh_dc: None,
            sh_rest: None,
        }
    }

    #[test]
    fn first_step_moves_by_the_rate_against_the_gradient_sign() {
        let device = Default::default();
        let mut field = zero_field(2);
        let mut adam = GroupAdam::<B>::new(settings(), &field);
        let g = Tensor::<B, 2>::from_data(
            TensorData::new(vec![1.0f32, -2.0, 0.5, -0.1, 3.0, 7.0], [2, 3]),
            &device,
        );
        let grads = FieldGradients {
            means: Some(g),
            ..no_grads()
        };
        adam.step(&mut field, grads, None, |_| 0.01);
        let out = to_host(field.means.val(), "p").unwrap();
        let want = [-0.01, 0.01, -0.01, 0.01, -0.01, -0.01];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-7, "{out:?}");
        }
        assert_eq!(adam.steps[ParamGroup::Means.index()], 1);
        assert_eq!(adam.steps[ParamGroup::Quats.index()], 0);
        assert!(
            to_host(field.quats.val(), "q")
                .unwrap()
                .iter()
                .all(|v| *v == 0.0)
        );
    }

    #[test]
    fn matches_a_scalar_reference_over_steps() {
        let device = Default::default();
        let mut field = zero_field(1);
        field.opacity_logits = Param::from_tensor(Tensor::full([1], 0.3, &device));
        let mut adam = GroupAdam::<B>::new(settings(), &field);
        let (mut p, mut m, mut v) = (0.3f64, 0.0f64, 0.0f64);
        for t in 1..=20 {
            let g = (p * 3.0).sin() + 0.1 * t as f64;
            m = 0.9 * m + 0.1 * g;
            v = 0.999 * v + 0.001 * g * g;
            let mh = m / (1.0 - 0.9f64.powi(t));
            let vh = v / (1.0 - 0.999f64.powi(t));
            p -= 0.05 * mh / (vh.sqrt() + 1e-15);
            let grads = FieldGradients {
                opacity_logits: Some(Tensor::full([1], g as f32, &device)),
                ..no_grads()
            };
            adam.step(&mut field, grads, None, |_| 0.05);
        }
        let got = to_host(field.opacity_logits.val(), "p").unwrap()[0] as f64;
        assert!((got - p).abs() < 1e-5, "{got} vs {p}");
        assert_eq!(adam.steps[ParamGroup::Opacity.index()], 20);
    }

    #[test]
    fn visible_step_leaves_unseen_gaussians_and_their_moments() {
        let device = Default::default();
        let mut field = zero_field(3);
        let mut adam = GroupAdam::<B>::new(settings(), &field);
        let grads = || FieldGradients {
            means: Some(Tensor::<B, 2>::ones([3, 3], &device)),
            sh_rest: Some(Tensor::<B, 3>::ones([3, 3, 3], &device)),
            ..no_grads()
        };
        adam.step(&mut field, grads(), None, |_| 0.01);
        let after_one = to_host(field.means.val(), "p").unwrap();
        let rest_one = to_host(field.sh_rest.val(), "sh").unwrap();
        let moments = to_host(adam.exp_avg.means.val(), "m").unwrap();
        // Gaussian 1 unseen (weight 0), 0 and 2 seen (a count of views).
        let visible =
            Tensor::<B, 1>::from_data(TensorData::new(vec![2.0f32, 0.0, 1.0], [3]), &device);
        adam.step(&mut field, grads(), Some(visible), |_| 0.01);
        let means = to_host(field.means.val(), "p").unwrap();
        let m = to_host(adam.exp_avg.means.val(), "m").unwrap();
        assert_eq!(means[3..6], after_one[3..6], "the unseen Gaussian moved");
        assert_eq!(
            m[3..6],
            moments[3..6],
            "the unseen Gaussian's moments changed"
        );
        for r in [0, 2] {
            assert!(
                means[3 * r] < after_one[3 * r],
                "seen Gaussian {r} did not move"
            );
            assert!(m[3 * r] > moments[3 * r]);
        }
        let rest = to_host(field.sh_rest.val(), "sh").unwrap();
        assert_eq!(rest[9..18], rest_one[9..18]);
        assert!(rest[..9].iter().zip(&rest_one).all(|(v, one)| v < one));
        assert_eq!(adam.steps[ParamGroup::Means.index()], 2);
    }

    #[test]
    fn reindex_keeps_rows_and_appends_zeros() {
        let device = Default::default();
        let field = zero_field(4);
        let mut adam = GroupAdam::<B>::new(settings(), &field);
        let rows = Tensor::<B, 2>::from_data(
            TensorData::new((0..12).map(|v| v as f32).collect::<Vec<_>>(), [4, 3]),
            &device,
        );
        adam.exp_avg.log_scales = Param::from_tensor(rows.clone());
        adam.exp_avg_sq.log_scales = Param::from_tensor(rows);
        adam.reindex(&index_tensor(&[3, 1], &device), 2);
        assert_eq!(adam.len(), 4);
        assert_eq!(adam.exp_avg.sh_rest.dims(), [4, 3, 3]);
        let m = to_host(adam.exp_avg.log_scales.val(), "m").unwrap();
        assert_eq!(
            m,
            vec![9.0, 10.0, 11.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
        adam.reset_moments(ParamGroup::LogScales);
        assert!(
            to_host(adam.exp_avg_sq.log_scales.val(), "v")
                .unwrap()
                .iter()
                .all(|v| *v == 0.0)
        );
        assert_eq!(adam.exp_avg_sq.log_scales.dims(), [4, 3]);
    }
}
