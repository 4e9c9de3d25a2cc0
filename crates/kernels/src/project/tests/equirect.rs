//! The projection onto a sphere ([`crate::project::cpu::equirect`]): each splat against the
//! equirectangular map evaluated independently (its position, and its covariance through the
//! map's Jacobian by f64 central differences), the backward against central differences of the
//! forward, the copies across the back meridian, the poles, culling and the camera check.

use super::{GROUPS, INPUTS, Scene, Selector, Weights, analytic, random_camera, to_world};
use crate::project::cpu::equirect::{self, EquirectSplats};
use crate::project::cpu::{TILE_SIZE, sh_basis};
use crate::project::{CameraParams, ProjectError, ProjectOptions};
use crate::quat::rotation_matrix;
use ember_test_utils::{fresh_rng, rel_err, uniform};
use rand::RngExt;
use rand::rngs::StdRng;
use std::f64::consts::{PI, TAU};

/// A `width x width / 2` panorama camera at `camera`'s pose.
fn panorama(camera: CameraParams, width: u32) -> CameraParams {
    CameraParams {
        width,
        height: width / 2,
        ..camera
    }
}

/// The map itself: camera-space `p` to the panorama position `(u, v)`.
fn map(p: [f64; 3], width: f64, height: f64) -> [f64; 2] {
    let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
    [
        width * (p[0].atan2(p[2]) / TAU + 0.5),
        height * (0.5 - (-p[1] / r).asin() / PI),
    ]
}

/// One Gaussian at camera-space `p` (world position through `camera`), random shape, opacity
/// and colour, SH degree `k` coefficients.
fn gaussian_at(rng: &mut StdRng, camera: &CameraParams, p: [f64; 3], k: usize) -> Scene {
    let q = uniform(rng, 4, -1.0, 1.0);
    Scene {
        means: to_world(camera, p).to_vec(),
        quats: q,
        log_scales: uniform(rng, 3, -3.0, -1.8),
        logits: vec![0.5 + 2.0 * rng.random::<f64>()],
        sh: uniform(rng, 3 * k, -1.0, 1.0),
        k,
    }
}

fn project(scene: &Scene, camera: &CameraParams, options: &ProjectOptions) -> EquirectSplats<f64> {
    match equirect::forward(&scene.arrays(), camera, options) {
        Ok(out) => out,
        Err(e) => panic!("the sphere's projection refused a valid scene: {e}"),
    }
}

/// Every splat of Gaussians all around the camera (away from the poles, where the test's
/// finite differences of `atan2` are well defined) is where the map puts its centre, as far
/// as its distance, shaped by the map's Jacobian (central differences in f64) and coloured as
/// seen from the camera's centre.
#[test]
fn a_splat_is_the_equirectangular_maps_linearisation() {
    let mut rng = fresh_rng("equirect splats");
    for (degree, antialiased) in [(0usize, false), (1, true), (3, false)] {
        let k = (degree + 1) * (degree + 1);
        let camera = panorama(random_camera(&mut rng), 512);
        let (w, h) = (512.0, 256.0);
        let options = ProjectOptions {
            antialiased,
            ..ProjectOptions::default()
        };
        let mut scene = Scene::empty(k);
        let mut points = Vec::new();
        for _ in 0..40 {
            let lon = rng.random_range(-3.0..3.0);
            let lat: f64 = rng.random_range(-1.2..1.2);
            let r = rng.random_range(1.0..6.0);
            let p = [
                r * lat.cos() * f64::sin(lon),
                -r * lat.sin(),
                r * lat.cos() * f64::cos(lon),
            ];
            scene.push(&gaussian_at(&mut rng, &camera, p, k));
            points.push(p);
        }
        let out = project(&scene, &camera, &options).outputs;
        let mut kept = 0;
        for (i, p) in points.iter().enumerate() {
            if out.radius[2 * i] == 0 {
                continue;
            }
            kept += 1;
            let [u, v] = map(*p, w, h);
            assert!(rel_err(&out.xy[2 * i..2 * i + 2], &[u, v]) < 1e-12);
            let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            assert!(rel_err(&[out.depth[i]], &[r]) < 1e-12);

            // The map's Jacobian by central differences, then C = J W Sigma W^T J^T.
            let step = 1e-6 * r;
            let jac: [[f64; 3]; 2] = {
                let mut j = [[0.0; 3]; 2];
                for axis in 0..3 {
                    let (mut plus, mut minus) = (*p, *p);
                    plus[axis] += step;
                    minus[axis] -= step;
                    let (a, b) = (map(plus, w, h), map(minus, w, h));
                    for row in 0..2 {
                        j[row][axis] = (a[row] - b[row]) / (2.0 * step);
                    }
                }
                j
            };
            let q = &scene.quats[4 * i..4 * i + 4];
            let norm = q.iter().map(|x| x * x).sum::<f64>().sqrt();
            let rq = rotation_matrix([q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm]);
            let s: Vec<f64> = scene.log_scales[3 * i..3 * i + 3]
                .iter()
                .map(|l| (2.0 * l).exp())
                .collect();
            let rw = camera.rotation;
            // A = J W (2x3), then C = A Rq S^2 Rq^T A^T.
            let a: [[f64; 3]; 2] = core::array::from_fn(|row| {
                core::array::from_fn(|col| (0..3).map(|m| jac[row][m] * rw[3 * m + col]).sum())
            });
            let ar: [[f64; 3]; 2] = core::array::from_fn(|row| {
                core::array::from_fn(|col| (0..3).map(|m| a[row][m] * rq[3 * m + col]).sum())
            });
            let cov = |x: usize, y: usize| (0..3).map(|m| ar[x][m] * ar[y][m] * s[m]).sum::<f64>();
            let expected = [cov(0, 0), cov(0, 1), cov(1, 1)];
            let c = &out.conic[3 * i..3 * i + 3];
            let det = c[0] * c[2] - c[1] * c[1];
            let eps = options.eps2d;
            let drawn = [c[2] / det - eps, -c[1] / det, c[0] / det - eps];
            let scale = expected[0].abs() + expected[2].abs();
            for (d, e) in drawn.iter().zip(&expected) {
                assert!(
                    (d - e).abs() < 1e-5 * scale,
                    "covariance {drawn:?} against the map's {expected:?}"
                );
            }

            // Colour as seen from the camera's centre, opacity the pinhole's.
            let dir = p.map(|x| x / r);
            let world_dir: [f64; 3] =
                core::array::from_fn(|m| (0..3).map(|row| rw[3 * row + m] * dir[row]).sum());
            let basis = sh_basis(degree, world_dir);
            for ch in 0..3 {
                let raw = 0.5
                    + (0..k)
                        .map(|kk| basis[kk] * scene.sh[3 * k * i + 3 * kk + ch])
                        .sum::<f64>();
                assert!((out.color[3 * i + ch] - raw.max(0.0)).abs() < 1e-9);
            }
            if !antialiased {
                let sigmoid = 1.0 / (1.0 + (-scene.logits[i]).exp());
                assert!(rel_err(&[out.opacity[i]], &[sigmoid]) < 1e-12);
            }
        }
        assert!(kept >= 30, "{kept} of 40 kept");
    }
}

/// Gaussians all around a panorama, two across the back meridian (drawn twice) and two within
/// a pixel row of a pole (where `rho` is held), SH degree `k` coefficients.
fn gradient_scene(rng: &mut StdRng, camera: &CameraParams, k: usize) -> Scene {
    // (longitude, cos(latitude), up or down)
    let mut directions: Vec<(f64, f64, f64)> = (0..8)
        .map(|_| {
            let up = if rng.random::<bool>() { 1.0 } else { -1.0 };
            (rng.random_range(-2.8..2.8), rng.random_range(0.4..1.0), up)
        })
        .collect();
    // Behind, either side of the back meridian, a pixel or less from it; then `cos(lat) =
    // 0.01` against the hold's `sin(π / H)`, 0.025 at H = 128.
    directions.extend([
        (PI - 0.02, 0.9, 1.0),
        (-PI + 0.03, 0.8, -1.0),
        (0.7, 0.01, 1.0),
        (-2.0, 0.01, -1.0),
    ]);
    let mut scene = Scene::empty(k);
    for (lon, cos_lat, up) in directions {
        let r = rng.random_range(1.5..4.0);
        let sin_lat = up * (1.0 - cos_lat * cos_lat).sqrt();
        let p = [r * cos_lat * lon.sin(), -r * sin_lat, r * cos_lat * lon.cos()];
        scene.push(&gaussian_at(rng, camera, p, k));
    }
    scene
}

/// The backward of every input against f64 central differences of `sum(output * weights)`
/// over every row the forward drew, the copies' included, one output group at a time, for SH
/// degrees 0 to 3, with and without the antialiasing compensation and the view direction's
/// gradient.
#[test]
fn gradients_match_central_differences() {
    let mut rng = fresh_rng("equirect gradients");
    let mut worst = 0.0f64;
    for degree in 0..=3u32 {
        for (antialiased, view_dir_grad) in [(false, true), (true, false), (true, true)] {
            let k = ((degree + 1) * (degree + 1)) as usize;
            let camera = panorama(random_camera(&mut rng), 256);
            let options = ProjectOptions {
                antialiased,
                view_dir_grad,
                ..ProjectOptions::default()
            };
            let scene = gradient_scene(&mut rng, &camera, k);
            let EquirectSplats { outputs, copies } = project(&scene, &camera, &options);
            let n = scene.n();
            assert!(
                copies.len() >= 2 && (8..12).all(|i| outputs.radius[2 * i] > 0),
                "the scene draws its wrapped and polar Gaussians: copies {copies:?}"
            );
            for (group, group_name) in GROUPS.iter().enumerate() {
                let w = Weights::random_group(&mut rng, n + copies.len(), group);
                let got = match equirect::backward(
                    &scene.arrays(),
                    &camera,
                    &options,
                    &w.grads(),
                    &copies,
                ) {
                    Ok(g) => g,
                    Err(e) => panic!("the sphere's backward refused a valid scene: {e}"),
                };
                for (name, select) in INPUTS {
                    let got = analytic(&got, name);
                    if !view_dir_grad && name == "means" && *group_name == "color" {
                        // The colour reaches the means only through the (detached) view
                        // direction.
                        assert!(got.iter().all(|v| *v == 0.0), "detached colour moved the means");
                        continue;
                    }
                    let want = numeric(&scene, &camera, &options, &w, &copies, select);
                    let err = rel_err(got, &want);
                    worst = worst.max(err);
                    assert!(
                        err < 1e-5,
                        "degree {degree}, aa {antialiased}, view grad {view_dir_grad}: d \
                         {group_name} / d {name}: analytic {got:?} vs numeric {want:?} \
                         (rel err {err:e})"
                    );
                }
                let reaches = match *group_name {
                    "color" => "sh",
                    "opacity" => "opacity_logits",
                    _ => "means",
                };
                let (_, select) = INPUTS.iter().find(|(name, _)| *name == reaches).unwrap();
                let want = numeric(&scene, &camera, &options, &w, &copies, *select);
                assert!(
                    want.iter().any(|v| v.abs() > 1e-6),
                    "d {group_name} / d {reaches}: the check must see a non-zero gradient"
                );
            }
        }
    }
    println!("the sphere's backward: worst relative error {worst:.2e}");
}

/// Central differences of the weighted loss over the forward's rows with respect to every
/// element of one input; every perturbed forward draws the same copies.
fn numeric(
    scene: &Scene,
    camera: &CameraParams,
    options: &ProjectOptions,
    w: &Weights,
    copies: &[u32],
    select: Selector,
) -> Vec<f64> {
    let eps = 1e-6;
    let len = select(&mut scene.clone()).len();
    let loss = |s: &Scene| {
        let out = project(s, camera, options);
        assert_eq!(out.copies, copies, "a step of {eps} changed which splats wrap");
        w.loss(&out.outputs)
    };
    (0..len)
        .map(|e| {
            let mut plus = scene.clone();
            select(&mut plus)[e] += eps;
            let mut minus = scene.clone();
            select(&mut minus)[e] -= eps;
            (loss(&plus) - loss(&minus)) / (2.0 * eps)
        })
        .collect()
}

/// A copy of no Gaussian, and gradients of another length, are refused by name.
#[test]
fn the_backward_refuses_rows_it_did_not_draw() {
    let mut rng = fresh_rng("equirect backward rows");
    let camera = panorama(random_camera(&mut rng), 128);
    let scene = gaussian_at(&mut rng, &camera, [0.0, 0.0, 2.0], 1);
    let options = ProjectOptions::default();
    let w = Weights::zeros(2);
    let err = equirect::backward(&scene.arrays(), &camera, &options, &w.grads(), &[1]);
    assert!(
        matches!(err, Err(ProjectError::CopyRow { row: 1, gaussian: 1, n: 1 })),
        "{err:?}"
    );
    let err = equirect::backward(&scene.arrays(), &camera, &options, &w.grads(), &[]);
    assert!(
        matches!(err, Err(ProjectError::Length { name: "grad xy", .. })),
        "{err:?}"
    );
}

/// A splat across the back meridian is drawn on both edges: the copy is the same splat `W`
/// pixels over, and the two boxes' tiles are the box's own; one in front has no copy.
#[test]
fn a_splat_across_the_back_meridian_is_drawn_on_both_edges() {
    let mut rng = fresh_rng("equirect wrap");
    let camera = panorama(random_camera(&mut rng), 256);
    let options = ProjectOptions::default();
    let mut scene = Scene::empty(1);
    // Just right of straight behind (lon slightly below pi: u just left of W), and straight
    // ahead.
    for p in [[0.05, 0.1, -2.0], [0.0, 0.1, 2.0]] {
        let mut g = gaussian_at(&mut rng, &camera, p, 1);
        g.log_scales = vec![-2.0; 3];
        scene.push(&g);
    }
    let EquirectSplats { outputs: out, copies } = project(&scene, &camera, &options);
    assert_eq!(copies, vec![0], "only the one behind wraps");
    assert_eq!(out.depth.len(), 3);
    let (x, copy_x) = (out.xy[0], out.xy[4]);
    assert!(x > 240.0 && x < 256.0, "{x}");
    assert!((copy_x - (x - 256.0)).abs() < 1e-12);
    assert_eq!(out.xy[1], out.xy[5]);
    assert_eq!(out.conic[0..3], out.conic[6..9]);
    assert_eq!(out.color[0..3], out.color[6..9]);
    assert_eq!((out.depth[0], out.opacity[0]), (out.depth[2], out.opacity[2]));
    assert_eq!(out.radius[0..2], out.radius[4..6]);
    let rx = f64::from(out.radius[0]);
    assert!(x + rx > 256.0 && copy_x - rx < 0.0);
    let tile = f64::from(TILE_SIZE);
    let ry = f64::from(out.radius[1]);
    let y = out.xy[1];
    let rows = ((y + ry) / tile).ceil().min(8.0) - ((y - ry) / tile).floor().max(0.0);
    let columns = ((x + rx) / tile).ceil() - ((x - rx) / tile).floor();
    assert_eq!(
        f64::from(out.tiles[0] + out.tiles[2]),
        rows * columns,
        "the two halves cover the box's tiles"
    );
}

/// Straight up and straight down stay finite, held to the panorama's width; a Gaussian behind
/// the camera is drawn (no near plane but the distance), one closer than `near` is not.
#[test]
fn poles_stay_finite_and_only_distance_culls() {
    let mut rng = fresh_rng("equirect poles");
    let camera = panorama(random_camera(&mut rng), 128);
    let options = ProjectOptions::default();
    let mut scene = Scene::empty(1);
    for p in [
        [0.0, -2.0, 0.0],
        [1e-9, 2.0, 0.0],
        [0.3, 0.2, -1.5],
        [0.001, 0.0, -0.004],
    ] {
        scene.push(&gaussian_at(&mut rng, &camera, p, 1));
    }
    // The poles' Gaussians round, so that their extent in latitude is known: 0.1 units across
    // at distance 2 is 0.05 rad, 2.04 rows of a 64-row panorama for one standard deviation.
    for i in 0..2 {
        scene.log_scales[3 * i..3 * i + 3].copy_from_slice(&[0.1f64.ln(); 3]);
        scene.logits[i] = 5.0;
    }
    let out = project(&scene, &camera, &options).outputs;
    for i in 0..2 {
        assert!(out.radius[2 * i] > 0 && out.radius[2 * i] <= 64, "pole {i}");
        let c = &out.conic[3 * i..3 * i + 3];
        assert!(c.iter().all(|c| c.is_finite()));
        // Held at a pixel row from the pole, the splat keeps its latitude extent: the dilated
        // variance in v is (0.05 H / π)^2 + 0.3 whatever its azimuth.
        let var_v = c[0] / (c[0] * c[2] - c[1] * c[1]);
        let expected = (0.05 * 64.0 / PI).powi(2) + options.eps2d;
        assert!(
            (var_v - expected).abs() < 0.02 * expected,
            "pole {i}: variance in v {var_v:.3}, expected {expected:.3}"
        );
    }
    assert!(out.xy[1] < 1.0 && out.xy[3] > 63.0, "up at the top, down at the bottom");
    assert!(out.radius[4] > 0, "behind the camera is drawn");
    assert_eq!(out.radius[6..8], [0, 0], "closer than near is culled");
}

/// A panorama camera that is not 2:1, or is odd, is refused by name.
#[test]
fn a_panorama_camera_must_be_two_to_one() {
    let mut rng = fresh_rng("equirect camera");
    let pose = random_camera(&mut rng);
    let scene = gaussian_at(&mut rng, &pose, [0.0, 0.0, 2.0], 1);
    for (width, height) in [(300, 100), (101, 50)] {
        let camera = CameraParams {
            width,
            height,
            ..random_camera(&mut rng)
        };
        let err = equirect::forward(&scene.arrays(), &camera, &ProjectOptions::default());
        assert!(
            matches!(err, Err(ProjectError::Camera { name: "height", .. })),
            "{err:?}"
        );
    }
}
