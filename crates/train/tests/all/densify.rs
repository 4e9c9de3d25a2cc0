//! Densification keeps parameters, optimizer moments and statistics aligned.

use burn::tensor::{Int, Tensor, TensorData};
use ember_field::GaussianField;
use ember_field::to_host;
use ember_train::adam::{AdamSettings, GroupAdam};
use ember_train::config::DensifyConfig;
use ember_train::densify::{AdaptiveDensity, RefineContext, StepStatistics, Strategy};
use ember_train::params::ParamGroup;

use crate::common;

type I = ember_kernels::backend::Cpu;

fn tensor2(values: Vec<f32>, shape: [usize; 2]) -> Tensor<I, 2> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// Six Gaussians: 0 small + strong gradient (clone), 1 large + strong gradient (split),
/// 2 transparent (prune), 3 and 4 quiet, 5 large + strong gradient but transparent (prune only).
fn setup() -> (GaussianField<I>, GroupAdam<I>, AdaptiveDensity<I>) {
    let n = 6;
    let logit = |o: f32| (o / (1.0 - o)).ln();
    let columns = [
        tensor2((0..18).map(|v| v as f32 * 0.1).collect(), [n, 3]),
        tensor2([1.0, 0.0, 0.0, 0.0].repeat(n), [n, 4]),
        tensor2(
            [0.001f32, 0.5, 0.001, 0.001, 0.001, 0.5]
                .iter()
                .flat_map(|s| [s.ln(); 3])
                .collect(),
            [n, 3],
        ),
        tensor2(
            vec![
                logit(0.5),
                logit(0.5),
                logit(0.001),
                logit(0.5),
                logit(0.5),
                logit(0.001),
            ],
            [n, 1],
        ),
        tensor2((0..18).map(|v| v as f32).collect(), [n, 3]),
        tensor2((0..54).map(|v| -(v as f32)).collect(), [n, 9]),
    ];
    let mut field = GaussianField::from_tensors(
        Tensor::zeros([n, 3], &Default::default()),
        Tensor::zeros([n, 4], &Default::default()),
        Tensor::zeros([n, 3], &Default::default()),
        Tensor::zeros([n], &Default::default()),
        Tensor::zeros([n, 1, 3], &Default::default()),
        Tensor::zeros([n, 3, 3], &Default::default()),
        None,
    )
    .unwrap();
    for (group, values) in ParamGroup::ALL.into_iter().zip(columns) {
        group.set_columns(&mut field, values);
    }
    let settings = AdamSettings {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-15,
    };
    let mut adam = GroupAdam::new(settings, &field);
    // Moments that identify their row: equal to the parameters themselves.
    for group in ParamGroup::ALL {
        group.set_columns(&mut adam.exp_avg, group.columns(&field));
        group.set_columns(&mut adam.exp_avg_sq, group.columns(&field) * 2.0);
    }
    let config = DensifyConfig {
        start: 0,
        interval: 1,
        grad_threshold: 2e-4,
        percent_dense: 0.01,
        opacity_reset_interval: 0,
        ..DensifyConfig::default()
    };
    let mut strategy = AdaptiveDensity::new(config, n, &Default::default());
    // Screen gradients (pixels) on a 100x100 image: NDC norm = |g| * 50.
    let strong = 1e-5f32; // 5e-4 in NDC, above the threshold
    let g = [strong, strong, strong, 1e-8, 1e-8, strong];
    let stats = StepStatistics {
        screen_grads: tensor2(g.iter().flat_map(|v| [*v, 0.0, 0.0]).collect(), [n, 3]),
        extents: Tensor::<I, 2, Int>::from_data(
            TensorData::new([3i64, 3, 1].repeat(n), [n, 3]),
            &Default::default(),
        ),
        width: 100,
        height: 100,
    };
    strategy.observe(0, &stats).unwrap();
    (field, adam, strategy)
}

#[test]
fn refine_keeps_parameters_and_moments_aligned() {
    let (mut field, mut adam, mut strategy) = setup();
    let before = field.clone();
    let context = RefineContext {
        step: 1,
        extent: 1.0,
        seed: 9,
        lr_means: 1e-3,
        region: ([0.0; 3], 1.0),
    };
    let report = strategy.refine(context, &mut field, &mut adam).unwrap();
    assert_eq!(
        (report.cloned, report.split, report.pruned),
        (1, 1, 2),
        "{report:?}"
    );
    // Survivors 0, 3, 4; then the clone of 0; then two children of 1.
    assert_eq!(field.num_gaussians(), 6);
    assert_eq!(adam.len(), 6);
    for (_, t) in strategy.state() {
        assert_eq!(t.dims(), [6], "accumulators follow the new count");
    }
    for group in ParamGroup::ALL {
        let cols = group.columns(&field).dims()[1];
        let p = to_host(group.columns(&field), "p").unwrap();
        let m = to_host(group.columns(&adam.exp_avg), "m").unwrap();
        let v = to_host(group.columns(&adam.exp_avg_sq), "v").unwrap();
        let old = to_host(group.columns(&before), "old").unwrap();
        // Survivors carry their own moments (which equal their parameters here).
        for (row, orig) in [0usize, 3, 4].iter().enumerate() {
            assert_eq!(
                &m[row * cols..(row + 1) * cols],
                &old[orig * cols..(orig + 1) * cols]
            );
            assert_eq!(
                &p[row * cols..(row + 1) * cols],
                &old[orig * cols..(orig + 1) * cols]
            );
            for c in 0..cols {
                assert_eq!(v[row * cols + c], 2.0 * old[orig * cols + c]);
            }
        }
        // New Gaussians start with zero moments.
        assert!(m[3 * cols..].iter().all(|x| *x == 0.0), "{}", group.name());
        assert!(v[3 * cols..].iter().all(|x| *x == 0.0), "{}", group.name());
        // The clone copies Gaussian 0.
        assert_eq!(&p[3 * cols..4 * cols], &old[0..cols]);
    }
    // Split children: scale / 1.6, colours copied, centres moved.
    let ls = to_host(field.log_scales.val(), "s").unwrap();
    for child in [4usize, 5] {
        assert!((ls[3 * child] - (0.5f32.ln() - 1.6f32.ln())).abs() < 1e-6);
    }
    let dc = to_host(field.sh_dc.val(), "dc").unwrap();
    assert_eq!(&dc[12..15], &[3.0, 4.0, 5.0]);
    let means = to_host(field.means.val(), "means").unwrap();
    assert_ne!(&means[12..15], &[0.3f32, 0.4, 0.5]);
}

#[test]
fn training_with_densification_stays_aligned() {
    let config = common::tiny_config();
    let mut trainer = ember_train::Trainer::<common::B>::new(
        config,
        common::scene(&common::tiny_config()),
        &Default::default(),
    )
    .unwrap();
    let start = trainer.num_gaussians();
    let mut changed = false;
    for _ in 0..12 {
        let report = trainer.step().unwrap();
        changed |= report.refine.cloned + report.refine.split + report.refine.pruned > 0;
        let n = trainer.num_gaussians();
        assert_eq!(trainer.adam().len(), n);
        for group in ParamGroup::ALL {
            assert_eq!(group.columns(trainer.field()).dims()[0], n);
            assert_eq!(
                group.columns(&trainer.adam().exp_avg).dims(),
                group.columns(trainer.field()).dims()
            );
        }
        for (_, t) in trainer.strategy().state() {
            assert_eq!(t.dims(), [n]);
        }
    }
    assert!(changed, "densification ran (started with {start})");
    trainer.field().validate().unwrap();
}

#[test]
fn mcmc_respects_the_cap_and_keeps_state_aligned() {
    let config = common::tiny_config()
        .with_overrides(&[
            "densify.strategy=mcmc",
            "densify.start=2",
            "densify.interval=2",
            "densify.max_gaussians=230",
            "loss.opacity_reg=0.01",
            "loss.scale_reg=0.01",
        ])
        .unwrap();
    let scene = common::scene(&config);
    let mut trainer =
        ember_train::Trainer::<common::B>::new(config, scene, &Default::default()).unwrap();
    assert_eq!(trainer.num_gaussians(), 200);
    let mut added = 0;
    for _ in 0..12 {
        let report = trainer.step().unwrap();
        added += report.refine.added;
        let n = trainer.num_gaussians();
        assert!(n <= 230, "{n} above the cap");
        assert_eq!(trainer.adam().len(), n);
        for group in ParamGroup::ALL {
            assert_eq!(
                group.columns(&trainer.adam().exp_avg).dims(),
                group.columns(trainer.field()).dims()
            );
        }
    }
    assert_eq!(
        trainer.num_gaussians(),
        230,
        "grew to the cap ({added} added)"
    );
    trainer.field().validate().unwrap();
}

/// MCMC drawing by the multi-view error: the trainer scores views before each densifying
/// refinement; the run grows to the cap with the state aligned, repeats itself to the bit,
/// and chooses other sources than the draw by opacity alone.
#[test]
fn error_driven_mcmc_changes_the_draws_and_repeats() {
    let train = |error_weight: &str| {
        let config = common::tiny_config()
            .with_overrides(&[
                "densify.strategy=mcmc",
                "densify.start=2",
                "densify.interval=2",
                "densify.max_gaussians=230",
                "densify.opacity_reset_interval=0",
                "densify.error_views=3",
                &format!("densify.error_weight={error_weight}"),
            ])
            .unwrap();
        let scene = common::scene(&config);
        let mut trainer =
            ember_train::Trainer::<common::B>::new(config, scene, &Default::default()).unwrap();
        for _ in 0..12 {
            trainer.step().unwrap();
            assert_eq!(trainer.adam().len(), trainer.num_gaussians());
        }
        assert_eq!(trainer.num_gaussians(), 230);
        trainer.field().validate().unwrap();
        to_host(trainer.field().means.val(), "means").unwrap()
    };
    let scored = train("1.0");
    assert_eq!(scored, train("1.0"), "a scored run repeats itself");
    assert_ne!(scored, train("0.0"), "the scores changed the draws");
}

#[test]
fn mcmc_relocation_preserves_the_composited_opacity() {
    for (o, n) in [(0.3f32, 2usize), (0.9, 3), (0.05, 5)] {
        let (each, _) = ember_train::densify::relocation(o, n, 0.0);
        let together = 1.0 - (1.0 - each).powi(n as i32);
        assert!((together - o).abs() < 1e-4, "o {o}, n {n}: {together}");
    }
}

/// What `observe` accumulates: the NDC norm of each visible Gaussian's screen gradient (both
/// axes, each scaled by its half image size), the visible steps and the larger radius axis.
#[test]
fn observe_accumulates_norms_visibility_and_max_radius() {
    let n = 4;
    let mut strategy = AdaptiveDensity::<I>::new(DensifyConfig::default(), n, &Default::default());
    let (gx, gy) = ([1e-3f32, -2e-3, 0.5, 0.0], [3e-3f32, 0.0, 0.5, -4e-3]);
    let stats = StepStatistics {
        screen_grads: tensor2((0..n).flat_map(|i| [gx[i], gy[i], 7.0]).collect(), [n, 3]),
        // (rx, ry, tiles): the third is not drawn (no tiles), the fourth is drawn with a zero
        // radius.
        extents: Tensor::<I, 2, Int>::from_data(
            TensorData::new(vec![3i64, 8, 4, 5, 2, 1, 9, 9, 0, 0, 0, 1], [n, 3]),
            &Default::default(),
        ),
        width: 200,
        height: 100,
    };
    strategy.observe(0, &stats).unwrap();
    strategy.observe(1, &stats).unwrap();
    let state: std::collections::HashMap<_, _> = strategy
        .state()
        .into_iter()
        .map(|(name, t)| (name, to_host(t.unsqueeze_dim::<2>(1), name).unwrap()))
        .collect();
    for i in 0..n {
        let seen = if i == 2 { 0.0 } else { 1.0 };
        let norm = ((gx[i] * 100.0).powi(2) + (gy[i] * 50.0).powi(2)).sqrt();
        let got = state["grad_sum"][i];
        assert!(
            (got - 2.0 * seen * norm).abs() <= 1e-6 * norm.max(1.0),
            "{i}: {got}"
        );
        assert_eq!(state["visible_steps"][i], 2.0 * seen);
    }
    assert_eq!(state["max_radius"], vec![8.0, 5.0, 0.0, 0.0]);
}
