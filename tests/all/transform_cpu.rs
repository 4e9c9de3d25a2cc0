//! Similarity transforms of Gaussian sets on the CPU: properties over random transforms
//! (identity, composition, inverse, SH colour from the rotated direction, the render of a moved
//! field from the moved camera), the batched form, and splat files to fields and back. The
//! kernel's caller-buffer API against its tensor op is tested in `crates/kernels/src/transform/tests.rs`.

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember::field::{Camera, GaussianField, RenderOptions, render, transform_camera};
use ember::kernels::project::cpu::sh_basis;
use ember::kernels::{Similarity, TransformError};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::common::uniform;

use ember::backend::Cpu;
use ember::backend::Cpu64;

/// Raw parameters of a random set, f64, row-major (`sh_rest` is `[N, K, 3]`).
#[derive(Clone, Debug)]
struct Set {
    means: Vec<f64>,
    quats: Vec<f64>,
    log_scales: Vec<f64>,
    logits: Vec<f64>,
    sh_dc: Vec<f64>,
    sh_rest: Vec<f64>,
    k: usize,
}

impl Set {
    fn random(seed: u64, n: usize, k: usize) -> Set {
        let mut rng = StdRng::seed_from_u64(seed);
        Set {
            means: uniform(&mut rng, 3 * n, -1.0, 1.0),
            // Unnormalised on purpose.
            quats: uniform(&mut rng, 4 * n, -2.0, 2.0),
            log_scales: uniform(&mut rng, 3 * n, -2.6, -1.6),
            logits: uniform(&mut rng, n, -1.0, 3.0),
            sh_dc: uniform(&mut rng, 3 * n, -1.0, 1.0),
            sh_rest: uniform(&mut rng, 3 * k * n, -0.4, 0.4),
            k,
        }
    }

    fn n(&self) -> usize {
        self.logits.len()
    }

    fn field<B: Backend>(&self) -> GaussianField<B> {
        let device: B::Device = Default::default();
        // Explicit dtype: Burn's default float dtype is a per-device setting shared by
        // `NdArray<f32>` and `NdArray<f64>`.
        let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
        let n = self.n();
        let t = |v: &[f64], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
        GaussianField::from_tensors(
            Tensor::from_data(t(&self.means, vec![n, 3]), (&device, dtype)),
            Tensor::from_data(t(&self.quats, vec![n, 4]), (&device, dtype)),
            Tensor::from_data(t(&self.log_scales, vec![n, 3]), (&device, dtype)),
            Tensor::from_data(t(&self.logits, vec![n]), (&device, dtype)),
            Tensor::from_data(t(&self.sh_dc, vec![n, 1, 3]), (&device, dtype)),
            Tensor::from_data(t(&self.sh_rest, vec![n, self.k, 3]), (&device, dtype)),
            None,
        )
        .unwrap()
    }
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().into_vec().unwrap()
}

/// All four transformed parameters of a field, flat.
fn params<B: Backend>(field: &GaussianField<B>) -> [Vec<f64>; 4] {
    [
        host(field.means.val()),
        host(field.quats.val()),
        host(field.log_scales.val()),
        host(field.sh_rest.val()),
    ]
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

prop_compose! {
    fn similarity()(
        axis in prop::array::uniform3(-1.0f64..1.0),
        angle in -3.1f64..3.1,
        scale in 0.3f64..3.0,
        translation in prop::array::uniform3(-3.0f64..3.0),
        centre in prop::array::uniform3(-2.0f64..2.0),
    ) -> Similarity {
        Similarity {
            translation,
            scale,
            ..Similarity::axis_angle(axis, angle).about(centre)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn identity_is_bit_exact(seed in any::<u64>(), k in prop::sample::select(vec![0usize, 3, 8, 15])) {
        let set = Set::random(seed, 17, k);
        let field = set.field::<Cpu>();
        let moved = field.transformed(&Similarity::identity()).unwrap();
        let before = params(&field);
        let after = params(&moved);
        for (a, b) in before.iter().zip(&after) {
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn composition_equals_sequential_application(
        seed in any::<u64>(),
        a in similarity(),
        b in similarity(),
    ) {
        let field = Set::random(seed, 9, 15).field::<Cpu64>();
        let sequential = field.transformed(&a).unwrap().transformed(&b).unwrap();
        let composed = field.transformed(&a.then(&b)).unwrap();
        for (x, y) in params(&sequential).iter().zip(&params(&composed)) {
            prop_assert!(max_diff(x, y) < 1e-9, "{}", max_diff(x, y));
        }
    }

    #[test]
    fn inverse_undoes(seed in any::<u64>(), s in similarity()) {
        let field = Set::random(seed, 9, 15).field::<Cpu64>();
        let back = field.transformed(&s).unwrap().transformed(&s.inverse()).unwrap();
        let before = params(&field);
        let after = params(&back);
        for (x, y) in before.iter().zip(&after) {
            prop_assert!(max_diff(x, y) < 1e-9, "{}", max_diff(x, y));
        }
    }

    #[test]
    fn sh_colour_is_kept_from_the_rotated_direction(
        seed in any::<u64>(),
        s in similarity(),
        d in prop::array::uniform3(-1.0f64..1.0),
    ) {
        let norm = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        prop_assume!(norm > 0.1);
        let d = d.map(|v| v / norm);
        let set = Set::random(seed, 1, 15);
        let moved = set.field::<Cpu64>().transformed(&s).unwrap();
        let rotated = host(moved.sh_rest.val());
        let colour = |coeffs: &[f64], dir: [f64; 3], c: usize| {
            let basis = sh_basis::<f64>(3, dir);
            (0..15).map(|k| coeffs[3 * k + c] * basis[k + 1]).sum::<f64>()
        };
        for c in 0..3 {
            let before = colour(&set.sh_rest, d, c);
            let after = colour(&rotated, s.apply_direction(d), c);
            prop_assert!((before - after).abs() < 1e-10, "{} vs {}", before, after);
        }
    }
}

fn camera() -> Camera {
    Camera {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0, 0.0, 4.0],
        fx: 48.0,
        fy: 48.0,
        cx: 32.0,
        cy: 24.0,
        width: 64,
        height: 48,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// The image of the moved field from the moved camera is the original image: every
    /// parameter (means, rotations, scales, SH bands) must have moved consistently.
    #[test]
    fn render_of_moved_field_from_moved_camera_is_unchanged(seed in any::<u64>(), s in similarity()) {
        let field = Set::random(seed, 40, 15).field::<Cpu64>();
        let options = RenderOptions::default();
        let original = render(&field, &camera(), &options).unwrap();
        let moved = field.transformed(&s).unwrap();
        let seen = render(&moved, &transform_camera(&camera(), &s), &options).unwrap();
        let rgb = max_diff(&host(original.rgb), &host(seen.rgb));
        let alpha = max_diff(&host(original.alpha), &host(seen.alpha));
        prop_assert!(rgb < 1e-6 && alpha < 1e-6, "rgb {} alpha {}", rgb, alpha);
        let depth: Vec<f64> = host(original.depth).iter().map(|d| d * s.scale).collect();
        prop_assert!(max_diff(&depth, &host(seen.depth)) < 1e-6 * s.scale.max(1.0));
    }
}

#[test]
fn without_sh_rotation_the_render_changes() {
    // The render test above would pass with SH left alone only if SH did not matter: check
    // that it does (a rotated field with unrotated bands looks different).
    let set = Set::random(7, 40, 15);
    let s = Similarity::axis_angle([0.0, 1.0, 0.0], 1.0);
    let field = set.field::<Cpu64>();
    let moved = field.transformed(&s).unwrap();
    let stale = GaussianField::<Cpu64>::from_tensors(
        moved.means.val(),
        moved.quats.val(),
        moved.log_scales.val(),
        moved.opacity_logits.val(),
        moved.sh_dc.val(),
        field.sh_rest.val(),
        None,
    )
    .unwrap();
    let options = RenderOptions::default();
    let camera_moved = transform_camera(&camera(), &s);
    let original = host(render(&field, &camera(), &options).unwrap().rgb);
    let stale = host(render(&stale, &camera_moved, &options).unwrap().rgb);
    assert!(max_diff(&original, &stale) > 1e-3);
}

#[test]
fn batch_equals_single_transforms_and_autodiff_is_untracked() {
    let set = Set::random(11, 50, 8);
    let frames = [
        Similarity::identity(),
        Similarity::axis_angle([1.0, 2.0, 0.5], 0.8).about([0.5, 0.0, 0.0]),
        Similarity {
            scale: 2.0,
            translation: [0.0, 1.0, -1.0],
            ..Similarity::identity()
        },
    ];
    let field = set.field::<Cpu>();
    let batch = field.transformed_batch(&frames).unwrap();
    assert_eq!(batch.len(), 3);
    for (moved, s) in batch.iter().zip(&frames) {
        assert_eq!(params(moved), params(&field.transformed(s).unwrap()));
    }
    let tracked = set.field::<Autodiff<Cpu>>();
    let moved = tracked.transformed(&frames[1]).unwrap();
    assert_eq!(params(&moved), params(&batch[1]));
    assert!(matches!(
        field.transformed_batch(&[]),
        Err(TransformError::NoTransforms)
    ));
    assert!(matches!(
        field.transformed(&Similarity::scaling(-1.0)),
        Err(TransformError::NonPositiveScale(_))
    ));
}

#[test]
fn splat_files_to_fields_and_back() {
    let Some(path) = crate::common::data_path("splats/gaussiansplats3d-pr477/lod4_tile_0.ply")
    else {
        return;
    };
    let splats = ember::data::read_splats(&path).unwrap();
    let field = ember::splats::field_from_splats::<Cpu>(&splats, &Default::default()).unwrap();
    assert_eq!(field.num_gaussians(), 489);
    assert_eq!(field.sh_degree(), 3);
    assert!(ember::splats::splats_from_field(&field).unwrap() == splats);
    // The file transform and the field transform are the same kernel.
    let s = Similarity::axis_angle([0.0, 1.0, 0.0], 0.4).then(&Similarity::scaling(1.5));
    let moved = ember::splats::splats_from_field(&field.transformed(&s).unwrap()).unwrap();
    let expected = splats.transformed(&s).unwrap();
    // Compared field by field: a failure names the parameter, not 40k numbers.
    assert!(moved.means == expected.means, "means");
    assert!(moved.quats == expected.quats, "quats");
    assert!(moved.log_scales == expected.log_scales, "log_scales");
    assert!(moved.sh_rest == expected.sh_rest, "sh_rest");
    assert!(moved == expected);
}
