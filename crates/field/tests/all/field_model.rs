//! `GaussianField` and the tensor-level query: construction, differentiability, edge cases and
//! bad input.

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use ember_field::*;
use ember_kernels::field_query;

use crate::common::{fresh_rng, uniform};

type B = ember_kernels::backend::Cpu;
type AD = Autodiff<B>;

fn tensor<Bk: burn::tensor::backend::Backend>(v: Vec<f32>, shape: [usize; 2]) -> Tensor<Bk, 2> {
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

fn values(t: Tensor<B, 2>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().expect("f32")
}

/// One Gaussian at the origin with unit scale: value at distance r along x is exp(-r^2/2).
#[test]
fn single_isotropic_gaussian_has_closed_form_values() {
    let points = tensor::<B>(
        vec![0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.3, -0.4, 1.2],
        [4, 3],
    );
    let out = field_query(
        points,
        tensor(vec![0.0; 3], [1, 3]),
        tensor(vec![0.3, -0.2, 0.5, 0.7], [1, 4]), // any rotation: isotropic
        tensor(vec![0.0; 3], [1, 3]),
        tensor(vec![2.0], [1, 1]),
        FieldOptions::default(),
    )
    .expect("valid");
    let want = [0.0f32, 1.0, 4.0, 0.09 + 0.16 + 1.44].map(|d2| 2.0 * (-0.5 * d2).exp());
    for (g, w) in values(out).iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn mismatched_shapes_are_named_errors() {
    let ok = |n: usize, k: usize| tensor::<B>(vec![0.5; n * k], [n, k]);
    let err = field_query(
        ok(4, 2),
        ok(3, 3),
        ok(3, 4),
        ok(3, 3),
        ok(3, 1),
        FieldOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, FieldError::Shape { name: "points", .. }),
        "{err}"
    );
    let err = field_query(
        ok(4, 3),
        ok(3, 3),
        ok(2, 4),
        ok(3, 3),
        ok(3, 1),
        FieldOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, FieldError::Shape { name: "quats", .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("quats") && err.to_string().contains("[2, 4]"),
        "{err}"
    );
    let err = field_query(
        ok(4, 3),
        ok(3, 3),
        ok(3, 4),
        ok(3, 2),
        ok(3, 1),
        FieldOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FieldError::Shape {
                name: "log_scales",
                ..
            }
        ),
        "{err}"
    );
    let err = field_query(
        ok(4, 3),
        ok(3, 3),
        ok(3, 4),
        ok(3, 3),
        ok(2, 1),
        FieldOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FieldError::Shape {
                name: "features",
                ..
            }
        ),
        "{err}"
    );
    let err = field_query(
        ok(4, 3),
        ok(3, 3),
        ok(3, 4),
        ok(3, 3),
        tensor(vec![], [3, 0]),
        FieldOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err, FieldError::NoChannels { n: 3 });
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let err = field_query(
            ok(4, 3),
            ok(3, 3),
            ok(3, 4),
            ok(3, 3),
            ok(3, 1),
            FieldOptions::default().with_cutoff(bad),
        )
        .unwrap_err();
        assert!(matches!(err, FieldError::Cutoff(_)), "{err}");
    }
}

#[test]
fn empty_inputs_have_documented_results() {
    // N = 0: zeros [P, C], and autodiff still works (the points get no gradient).
    let points = tensor::<AD>(vec![0.1, 0.2, 0.3, 1.0, 1.0, 1.0], [2, 3]).require_grad();
    let empty = |k| tensor::<AD>(vec![], [0, k]);
    let out = field_query(
        points.clone(),
        empty(3),
        empty(4),
        empty(3),
        empty(2),
        FieldOptions::default(),
    )
    .expect("N = 0 is valid");
    assert_eq!(out.dims(), [2, 2]);
    assert_eq!(
        out.clone()
            .inner()
            .into_data()
            .to_vec::<f32>()
            .expect("f32"),
        vec![0.0; 4]
    );
    let _ = out.sum().backward();
    // P = 0: [0, C].
    let out = field_query(
        tensor::<B>(vec![], [0, 3]),
        tensor(vec![0.0; 3], [1, 3]),
        tensor(vec![1.0, 0.0, 0.0, 0.0], [1, 4]),
        tensor(vec![0.0; 3], [1, 3]),
        tensor(vec![1.0; 5], [1, 5]),
        FieldOptions::default(),
    )
    .expect("P = 0 is valid");
    assert_eq!(out.dims(), [0, 5]);
}

#[test]
fn zero_quaternion_is_identity_with_zero_gradient() {
    let mut rng = fresh_rng("zero_quat");
    let pts = uniform(&mut rng, 3 * 9, -1.0, 1.0)
        .iter()
        .map(|v| *v as f32)
        .collect::<Vec<_>>();
    let run = |q: Vec<f32>| {
        let quats = tensor::<AD>(q, [1, 4]).require_grad();
        let out = field_query(
            tensor::<AD>(pts.clone(), [9, 3]),
            tensor(vec![0.1, -0.2, 0.3], [1, 3]),
            quats.clone(),
            tensor(vec![-0.5, 0.2, 0.0], [1, 3]),
            tensor(vec![1.0], [1, 1]),
            FieldOptions::default(),
        )
        .expect("valid");
        let grads = out.clone().sum().backward();
        let g = quats
            .grad(&grads)
            .expect("tracked")
            .into_data()
            .to_vec::<f32>()
            .expect("f32");
        (out.inner().into_data().to_vec::<f32>().expect("f32"), g)
    };
    let (zero, zero_grad) = run(vec![0.0; 4]);
    let (identity, _) = run(vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(zero, identity);
    assert_eq!(zero_grad, vec![0.0; 4]);
}

#[test]
fn nan_parameters_propagate_and_validate_names_them() {
    let device = Default::default();
    let config = GaussianFieldConfig::new().with_seed(3);
    let field = GaussianField::<B>::random_in_box(&config, 10, [-1.0; 3], [1.0; 3], &device)
        .expect("field");
    assert!(field.validate().is_ok());
    let mut means = field.means.val().into_data().to_vec::<f32>().expect("f32");
    means[3 * 7 + 1] = f32::NAN;
    let field = GaussianField::from_tensors(
        tensor(means, [10, 3]),
        field.quats.val(),
        field.log_scales.val(),
        field.opacity_logits.val(),
        field.sh_dc.val(),
        field.sh_rest.val(),
        None,
    )
    .expect("shapes");
    let err = field.validate().unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::NonFinite {
                parameter: "means",
                index: 7,
                ..
            }
        ),
        "{err}"
    );
    let out = field
        .query(tensor(vec![0.0; 6], [2, 3]), FieldOptions::default())
        .expect("query");
    assert!(
        out.into_data()
            .to_vec::<f32>()
            .expect("f32")
            .iter()
            .all(|v| v.is_nan())
    );
}

#[test]
fn field_query_is_differentiable_for_every_parameter_and_the_points() {
    let device = Default::default();
    let config = GaussianFieldConfig::new()
        .with_seed(11)
        .with_feature_channels(3)
        .with_sh_degree(2);
    let field = GaussianField::<AD>::random_in_box(&config, 64, [-1.0; 3], [1.0; 3], &device)
        .expect("field");
    assert_eq!(field.num_gaussians(), 64);
    assert_eq!(field.sh_degree(), 2);
    assert_eq!(field.sh_rest.dims(), [64, 8, 3]);
    let mut rng = fresh_rng("module_grad");
    let pts = uniform(&mut rng, 3 * 50, -1.0, 1.0)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let points = tensor::<AD>(pts, [50, 3]).require_grad();
    let density = field
        .query(points.clone(), FieldOptions::default())
        .expect("query");
    assert_eq!(density.dims(), [50]);
    let feats = field
        .query_features(points.clone(), FieldOptions::default())
        .expect("features");
    assert_eq!(feats.dims(), [50, 3]);
    let grads = (density.sum() + feats.sum()).backward();
    let nonzero = |t: Option<Tensor<B, 2>>| {
        t.expect("gradient")
            .into_data()
            .to_vec::<f32>()
            .expect("f32")
            .iter()
            .any(|v| *v != 0.0)
    };
    assert!(nonzero(field.means.grad(&grads)));
    assert!(nonzero(field.quats.grad(&grads)));
    assert!(nonzero(field.log_scales.grad(&grads)));
    assert!(nonzero(
        field.features.as_ref().expect("features").grad(&grads)
    ));
    assert!(nonzero(points.grad(&grads)));
    assert!(
        field
            .opacity_logits
            .grad(&grads)
            .expect("opacity gradient")
            .into_data()
            .to_vec::<f32>()
            .expect("f32")
            .iter()
            .any(|v| *v != 0.0)
    );
}

#[test]
fn from_points_uses_colours_and_neighbour_scales() {
    let device = Default::default();
    // A 4x4x4 lattice of spacing 0.5: every point's 3 nearest neighbours are 0.5 away.
    let points: Vec<f32> = (0..64)
        .flat_map(|i| {
            [
                (i % 4) as f32 * 0.5,
                ((i / 4) % 4) as f32 * 0.5,
                (i / 16) as f32 * 0.5,
            ]
        })
        .collect();
    let colours: Vec<f32> = (0..64).flat_map(|i| [i as f32 / 64.0, 0.25, 1.0]).collect();
    let field =
        GaussianField::<B>::from_points(&GaussianFieldConfig::new(), &points, &colours, &device)
            .expect("field");
    let scales = field
        .log_scales
        .val()
        .exp()
        .into_data()
        .to_vec::<f32>()
        .expect("f32");
    assert!(scales.iter().all(|s| (s - 0.5).abs() < 1e-5), "{scales:?}");
    let dc = field.sh_dc.val().into_data().to_vec::<f32>().expect("f32");
    for (d, c) in dc.iter().zip(&colours) {
        assert!((ember_field::sh::dc_to_rgb(*d as f64) as f32 - c).abs() < 1e-6);
    }
    let opacity = field.opacities().into_data().to_vec::<f32>().expect("f32");
    assert!(opacity.iter().all(|o| (o - 0.1).abs() < 1e-6));
    assert!(matches!(
        field.query_features(tensor(vec![0.0; 3], [1, 3]), FieldOptions::default()),
        Err(ModelError::NoFeatures)
    ));
    let err = GaussianField::<B>::from_points(
        &GaussianFieldConfig::new(),
        &[0.0, f32::NAN, 0.0],
        &[0.5; 3],
        &device,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::NonFinite {
                parameter: "points",
                index: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn cutoff_keeps_a_gaussian_whose_scale_overflows() {
    // exp(100) overflows f32: W = 0, d^2 = 0 everywhere, so the Gaussian adds its weight at every
    // point, with or without a cutoff (its box is infinite and covers the whole grid).
    let mut rng = fresh_rng("overflowing_scale");
    let pts: Vec<f32> = uniform(&mut rng, 3 * 40, -5.0, 5.0)
        .iter()
        .map(|v| *v as f32)
        .collect();
    for options in [
        FieldOptions::default(),
        FieldOptions::default().with_cutoff(3.0),
    ] {
        let out = field_query(
            tensor::<B>(pts.clone(), [40, 3]),
            tensor(vec![0.3, 0.1, -0.2, 1.0, 1.0, 1.0], [2, 3]),
            tensor(vec![1.0, 0.0, 0.0, 0.0, 0.6, 0.0, 0.8, 0.0], [2, 4]),
            tensor(vec![100.0, 100.0, 100.0, -6.0, -6.0, -6.0], [2, 3]),
            tensor(vec![0.75, 1.0], [2, 1]),
            options,
        )
        .expect("valid");
        // The second Gaussian is tiny and far from every point (up to rounding of e^-huge).
        for v in values(out) {
            assert!((v - 0.75).abs() < 1e-6, "{options:?}: {v}");
        }
    }
}

#[test]
fn a_field_fits_a_target_density_with_per_group_adam() {
    // The training pattern later issues build on: a GaussianField under Autodiff, Adam stepped
    // once per parameter group with that group's gradients. Target: two anisotropic blobs.
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    let device = Default::default();
    let target = |x: &[f32]| -> f32 {
        let a = (-(x[0] - 0.3).powi(2) / 0.02 - x[1].powi(2) / 0.1 - x[2].powi(2) / 0.1).exp();
        let b = 0.6
            * (-(x[0] + 0.4).powi(2) / 0.1 - (x[1] - 0.2).powi(2) / 0.02 - x[2].powi(2) / 0.05)
                .exp();
        a + b
    };
    let config = GaussianFieldConfig::new()
        .with_seed(5)
        .with_opacity(0.3)
        .with_scale(Some(0.25));
    let mut field = GaussianField::<AD>::random_in_box(&config, 32, [-0.8; 3], [0.8; 3], &device)
        .expect("field");
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-15)
        .init::<AD, GaussianField<AD>>();
    let mut rng = fresh_rng("fit_two_blobs");
    let mut losses = Vec::new();
    for _ in 0..80 {
        let pts: Vec<f32> = uniform(&mut rng, 3 * 512, -1.0, 1.0)
            .iter()
            .map(|v| *v as f32)
            .collect();
        let want: Vec<f32> = pts.chunks_exact(3).map(target).collect();
        let got = field
            .query(tensor::<AD>(pts, [512, 3]), FieldOptions::default())
            .expect("query");
        let want = Tensor::<AD, 1>::from_data(TensorData::new(want, [512]), &device);
        let loss = (got - want).powi_scalar(2).mean();
        losses.push(loss.clone().into_scalar());
        let mut grads = loss.backward();
        for (lr, ids) in [
            (1e-2, vec![field.means.id]),
            (2e-2, vec![field.log_scales.id, field.quats.id]),
            (5e-2, vec![field.opacity_logits.id]),
        ] {
            let group = GradientsParams::from_params(&mut grads, &field, &ids);
            field = optim.step(lr, field, group);
        }
    }
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    println!("loss {first:.4} -> {last:.4}");
    assert!(
        last.is_finite() && last < first / 4.0,
        "loss {first} -> {last}: the fit does not converge"
    );
    assert!(field.validate().is_ok());
}
