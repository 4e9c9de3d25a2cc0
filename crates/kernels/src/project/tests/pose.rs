//! The pose gradient of the projection against f64 central differences (see
//! [`crate::project::pose`]), on the scenes and weights of the projection's own tests.

use super::{GROUPS, Weights, backward, forward, random_camera, random_scene};
use crate::project::ProjectOptions;
use ember_test_utils::{fresh_rng, rel_err, split_sh};

/// The pose gradient ([`crate::project::pose`]) against f64 central differences of the
/// projection with the camera moved by a correction `(tau, omega)`, per output group, at every
/// SH degree, with and without the view direction's gradient and the antialiasing filter; and
/// the device reduction of its moments against the host one.
#[test]
fn pose_gradient_matches_central_differences() {
    use crate::project::pose::PoseMoments;
    use burn::backend::NdArray;
    use burn::tensor::{DType, Tensor, TensorData};

    let mut rng = fresh_rng("pose gradient");
    let device = Default::default();
    for degree in 0..=3u32 {
        for (view_dir_grad, antialiased) in [(true, false), (false, true), (true, true)] {
            let k = ((degree + 1) * (degree + 1)) as usize;
            let camera = random_camera(&mut rng);
            let options = ProjectOptions {
                view_dir_grad,
                antialiased,
                ..ProjectOptions::default()
            };
            let scene = random_scene(&mut rng, &camera, &options, k, 8);
            let n = scene.n();
            let (_, rest) = split_sh(&scene.sh, k);
            for (group, group_name) in GROUPS.iter().enumerate() {
                let w = Weights::random_group(&mut rng, n, group);
                let g = backward(&scene, &camera, &options, &w);
                let (_, grad_rest) = split_sh(&g.sh, k);
                let moments = PoseMoments::from_slices(
                    &scene.means,
                    &scene.quats,
                    &rest,
                    &g.means,
                    &g.quats,
                    &grad_rest,
                    k,
                    camera.center(),
                );
                let got = moments.gradient(&camera, view_dir_grad);
                if !view_dir_grad && *group_name == "color" {
                    // The colours' view directions are held fixed: nothing else of the colour
                    // depends on the camera.
                    assert!(got.iter().all(|v| *v == 0.0), "colour moved the pose: {got:?}");
                    continue;
                }
                let eps = 1e-6;
                let want: Vec<f64> = (0..6)
                    .map(|e| {
                        let moved = |sign: f64| {
                            let mut delta = [0.0; 6];
                            delta[e] = sign * eps;
                            let cam = camera.corrected(
                                [delta[0], delta[1], delta[2]],
                                [delta[3], delta[4], delta[5]],
                            );
                            w.loss(&forward(&scene, &cam, &options))
                        };
                        (moved(1.0) - moved(-1.0)) / (2.0 * eps)
                    })
                    .collect();
                let err = rel_err(&got, &want);
                assert!(
                    err < 1e-5,
                    "degree {degree}, view grad {view_dir_grad}: d {group_name} / d pose: \
                     analytic {got:?} vs numeric {want:?} (rel err {err:e})"
                );
                let depends = match *group_name {
                    "color" => degree > 0,
                    "opacity" => antialiased,
                    _ => true,
                };
                if depends {
                    assert!(
                        want.iter().any(|v| v.abs() > 1e-6),
                        "d {group_name} / d pose: the check must see a non-zero gradient"
                    );
                }

                // The same moments reduced on the device (f64 ndarray).
                let t2 = |v: &[f64], width: usize| {
                    Tensor::<NdArray, 2>::from_data(
                        TensorData::new(v.to_vec(), [n, width]),
                        (&device, DType::F64),
                    )
                };
                let t3 = |v: &[f64]| {
                    Tensor::<NdArray, 3>::from_data(
                        TensorData::new(v.to_vec(), [n, k - 1, 3]),
                        (&device, DType::F64),
                    )
                };
                let on_device = PoseMoments::from_tensors(
                    t2(&scene.means, 3),
                    t2(&scene.quats, 4),
                    t3(&rest),
                    t2(&g.means, 3),
                    t2(&g.quats, 4),
                    t3(&grad_rest),
                    camera.center(),
                );
                let flat = |m: &PoseMoments| {
                    let mut v = m.grad_means.to_vec();
                    v.extend(m.means);
                    v.extend(m.quats);
                    v.extend(&m.sh);
                    v
                };
                let err = rel_err(&flat(&on_device), &flat(&moments));
                assert!(err < 1e-12, "device moments differ from the host's: {err:e}");
            }
        }
    }
}

/// [`rotation_vector`](crate::project::pose::rotation_vector) inverts
/// [`rotation_matrix`](crate::project::pose::rotation_matrix) from the smallest turns to just
/// short of a half turn, and [`invert`](crate::project::pose::invert) undoes a rigid map.
#[test]
fn rotation_vector_and_invert_undo_their_maps() {
    use crate::project::pose::{compose, invert, rotation_matrix, rotation_vector};
    use rand::RngExt;

    let mut rng = fresh_rng("rotation vector");
    use core::f64::consts::PI;
    // The last two on either side of the half-turn branch's switch, 1e-3 short of pi.
    for angle in [0.0, 1e-9, 1e-5, 1e-4, 2e-4, 0.01, 0.5, 2.0, 3.1, PI - 1.5e-3, PI - 3e-6] {
        for _ in 0..8 {
            let axis: [f64; 3] = core::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let norm = axis.iter().map(|v| v * v).sum::<f64>().sqrt();
            let omega = axis.map(|v| v / norm * angle);
            let back = rotation_vector(&rotation_matrix(omega));
            let err = (0..3).map(|k| (back[k] - omega[k]).abs()).fold(0.0, f64::max);
            assert!(err < 1e-9, "angle {angle}: {omega:?} came back as {back:?}");

            let t: [f64; 3] = core::array::from_fn(|_| rng.random_range(-5.0..5.0));
            let r = rotation_matrix(omega);
            let (ri, ti) = invert(&r, &t);
            let (identity, zero) = compose(&ri, &ti, &r, &t);
            for e in 0..9 {
                let expected = f64::from(u8::from(e % 4 == 0));
                assert!((identity[e] - expected).abs() < 1e-12, "{identity:?}");
            }
            assert!(zero.iter().all(|v| v.abs() < 1e-12), "{zero:?}");
        }
    }
}
