//! The CPU projection op: f64 finite-difference gradients of every input, agreement with
//! gsplat's reference projection and gradients, culling, radii and tile counts.

use crate::project::cpu::{
    self, ProjectArrays, ProjectGrads, ProjectOutputGrads, ProjectOutputs, TILE_SIZE,
};
use crate::project::{CameraParams, ProjectError, ProjectOptions};
use rand::RngExt;
use rand::rngs::StdRng;

use ember_test_utils::{
    OracleCase, fresh_rng, join_sh, oracle_camera, oracle_err, rel_err, split_sh, uniform,
};

/// The inputs of one projection, f64, row-major.
#[derive(Clone, Debug)]
struct Scene {
    means: Vec<f64>,
    quats: Vec<f64>,
    log_scales: Vec<f64>,
    logits: Vec<f64>,
    sh: Vec<f64>,
    k: usize,
}

impl Scene {
    fn empty(k: usize) -> Self {
        Scene {
            means: Vec::new(),
            quats: Vec::new(),
            log_scales: Vec::new(),
            logits: Vec::new(),
            sh: Vec::new(),
            k,
        }
    }

    fn n(&self) -> usize {
        self.logits.len()
    }

    fn arrays(&self) -> ProjectArrays<'_, f64> {
        ProjectArrays {
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            opacity_logits: &self.logits,
            sh: &self.sh,
            sh_coeffs: self.k,
        }
    }

    fn push(&mut self, other: &Scene) {
        self.means.extend_from_slice(&other.means);
        self.quats.extend_from_slice(&other.quats);
        self.log_scales.extend_from_slice(&other.log_scales);
        self.logits.extend_from_slice(&other.logits);
        self.sh.extend_from_slice(&other.sh);
    }
}

fn forward(scene: &Scene, camera: &CameraParams, options: &ProjectOptions) -> ProjectOutputs<f64> {
    match cpu::forward(&scene.arrays(), camera, options) {
        Ok(out) => out,
        Err(e) => panic!("forward refused a valid scene: {e}"),
    }
}

fn backward(
    scene: &Scene,
    camera: &CameraParams,
    options: &ProjectOptions,
    w: &Weights,
) -> ProjectGrads<f64> {
    match cpu::backward(&scene.arrays(), camera, options, &w.grads()) {
        Ok(g) => g,
        Err(e) => panic!("backward refused a valid scene: {e}"),
    }
}

/// Loss weights per output: the analytic gradient is `backward(grads = weights)`.
#[derive(Clone, Debug)]
struct Weights {
    xy: Vec<f64>,
    depth: Vec<f64>,
    conic: Vec<f64>,
    color: Vec<f64>,
    opacity: Vec<f64>,
}

impl Weights {
    fn zeros(n: usize) -> Self {
        Weights {
            xy: vec![0.0; 2 * n],
            depth: vec![0.0; n],
            conic: vec![0.0; 3 * n],
            color: vec![0.0; 3 * n],
            opacity: vec![0.0; n],
        }
    }

    /// Random weights on the output `group` only (0 xy, 1 depth, 2 conic, 3 color, 4 opacity),
    /// so that a small output (the conic) is not drowned by a large one (the pixel position).
    fn random_group(rng: &mut StdRng, n: usize, group: usize) -> Self {
        let mut w = Weights::zeros(n);
        let target = match group {
            0 => &mut w.xy,
            1 => &mut w.depth,
            2 => &mut w.conic,
            3 => &mut w.color,
            _ => &mut w.opacity,
        };
        let len = target.len();
        *target = uniform(rng, len, -1.0, 1.0);
        w
    }

    fn grads(&self) -> ProjectOutputGrads<'_, f64> {
        ProjectOutputGrads {
            xy: &self.xy,
            depth: &self.depth,
            conic: &self.conic,
            color: &self.color,
            opacity: &self.opacity,
        }
    }

    fn loss(&self, out: &ProjectOutputs<f64>) -> f64 {
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        dot(&out.xy, &self.xy)
            + dot(&out.depth, &self.depth)
            + dot(&out.conic, &self.conic)
            + dot(&out.color, &self.color)
            + dot(&out.opacity, &self.opacity)
    }
}

/// A camera with a random pose, an off-centre principal point and non-square pixels.
fn random_camera(rng: &mut StdRng) -> CameraParams {
    let q = uniform(rng, 4, -1.0, 1.0);
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-3);
    let [w, x, y, z] = [q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm];
    let rotation = [
        1.0 - 2.0 * (y * y + z * z),
        2.0 * (x * y - w * z),
        2.0 * (x * z + w * y),
        2.0 * (x * y + w * z),
        1.0 - 2.0 * (x * x + z * z),
        2.0 * (y * z - w * x),
        2.0 * (x * z - w * y),
        2.0 * (y * z + w * x),
        1.0 - 2.0 * (x * x + y * y),
    ];
    let t = uniform(rng, 3, -1.0, 1.0);
    CameraParams {
        rotation,
        translation: [t[0], t[1], t[2]],
        fx: 70.0 + 10.0 * rng.random::<f64>(),
        fy: 60.0 + 10.0 * rng.random::<f64>(),
        cx: 35.0 + 10.0 * rng.random::<f64>(),
        cy: 25.0 + 10.0 * rng.random::<f64>(),
        width: 80,
        height: 56,
    }
}

/// World point of the camera-space point `p` (`R^T (p - t)`).
fn to_world(camera: &CameraParams, p: [f64; 3]) -> [f64; 3] {
    let r = camera.rotation;
    let d: [f64; 3] = core::array::from_fn(|k| p[k] - camera.translation[k]);
    core::array::from_fn(|k| r[k] * d[0] + r[3 + k] * d[1] + r[6 + k] * d[2])
}

/// The EWA clamp limits of `x / z` and `y / z`: `([-lim_x-, lim_x+], [-lim_y-, lim_y+])`.
fn clamp_limits(c: &CameraParams) -> ([f64; 2], [f64; 2]) {
    let (w, h) = (f64::from(c.width), f64::from(c.height));
    let mx = 0.15 * w / c.fx;
    let my = 0.15 * h / c.fy;
    (
        [-(c.cx / c.fx + mx), (w - c.cx) / c.fx + mx],
        [-(c.cy / c.fy + my), (h - c.cy) / c.fy + my],
    )
}

/// One random Gaussian at camera-space depth `z` and ratio `(u, v) = (x / z, y / z)`.
fn random_gaussian(
    rng: &mut StdRng,
    camera: &CameraParams,
    k: usize,
    z: f64,
    u: f64,
    v: f64,
) -> Scene {
    let mean = to_world(camera, [u * z, v * z, z]);
    let q = uniform(rng, 4, -1.0, 1.0);
    let norm = q.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-3);
    let len = 0.2 + 4.8 * rng.random::<f64>();
    // Coefficients of either sign, the DC term large enough that some channels clamp at zero.
    let mut sh = uniform(rng, 3 * k, -1.0, 1.0);
    for c in sh.iter_mut().take(3) {
        *c *= 2.5;
    }
    Scene {
        means: mean.to_vec(),
        quats: q.iter().map(|x| x / norm * len).collect(),
        log_scales: uniform(rng, 3, -1.5, -0.3),
        logits: vec![-2.0 + 5.0 * rng.random::<f64>()],
        sh,
        k,
    }
}

/// A ratio inside the clamp range, or just outside / just inside one of its ends (both sides).
fn random_ratio(rng: &mut StdRng, lim: [f64; 2]) -> f64 {
    let delta = 0.01 + 0.04 * rng.random::<f64>();
    match rng.random_range(0..6) {
        0 => lim[0] - delta,
        1 => lim[0] + delta,
        2 => lim[1] - delta,
        3 => lim[1] + delta,
        _ => lim[0] + 0.05 + (lim[1] - lim[0] - 0.1) * rng.random::<f64>(),
    }
}

/// `n` kept Gaussians (culled candidates are redrawn), a quarter of them with a clamped ratio.
fn random_scene(
    rng: &mut StdRng,
    camera: &CameraParams,
    options: &ProjectOptions,
    k: usize,
    n: usize,
) -> Scene {
    let (lim_x, lim_y) = clamp_limits(camera);
    let mut scene = Scene::empty(k);
    let mut clamped = 0;
    for _ in 0..1000 {
        if scene.n() == n {
            break;
        }
        let z = 1.2 + 4.0 * rng.random::<f64>();
        let (u, v) = (random_ratio(rng, lim_x), random_ratio(rng, lim_y));
        let is_clamped = u < lim_x[0] || u > lim_x[1] || v < lim_y[0] || v > lim_y[1];
        // Keep room for the clamped ones: they are the likeliest to be culled (off-screen).
        if !is_clamped && scene.n() - clamped >= n - n / 4 {
            continue;
        }
        let g = random_gaussian(rng, camera, k, z, u, v);
        if forward(&g, camera, options).radius[0] > 0 {
            scene.push(&g);
            clamped += usize::from(is_clamped);
        }
    }
    assert_eq!(scene.n(), n, "could not draw {n} visible Gaussians");
    assert!(clamped >= n / 4, "only {clamped} clamped Gaussians kept");
    scene
}

type Selector = fn(&mut Scene) -> &mut Vec<f64>;

const INPUTS: [(&str, Selector); 5] = [
    ("means", |s| &mut s.means),
    ("quats", |s| &mut s.quats),
    ("log_scales", |s| &mut s.log_scales),
    ("opacity_logits", |s| &mut s.logits),
    ("sh", |s| &mut s.sh),
];

fn analytic<'a>(g: &'a ProjectGrads<f64>, name: &str) -> &'a [f64] {
    match name {
        "means" => &g.means,
        "quats" => &g.quats,
        "log_scales" => &g.log_scales,
        "opacity_logits" => &g.opacity_logits,
        _ => &g.sh,
    }
}

/// Central differences of the weighted loss with respect to every element of one input.
fn numeric(
    scene: &Scene,
    camera: &CameraParams,
    options: &ProjectOptions,
    w: &Weights,
    select: Selector,
) -> Vec<f64> {
    let eps = 1e-6;
    let len = select(&mut scene.clone()).len();
    (0..len)
        .map(|e| {
            let mut plus = scene.clone();
            select(&mut plus)[e] += eps;
            let mut minus = scene.clone();
            select(&mut minus)[e] -= eps;
            let fp = w.loss(&forward(&plus, camera, options));
            let fm = w.loss(&forward(&minus, camera, options));
            (fp - fm) / (2.0 * eps)
        })
        .collect()
}

const GROUPS: [&str; 5] = ["xy", "depth", "conic", "color", "opacity"];

fn check_gradients(rng: &mut StdRng, degree: u32, antialiased: bool, view_dir_grad: bool) {
    let k = ((degree + 1) * (degree + 1)) as usize;
    let camera = random_camera(rng);
    let options = ProjectOptions {
        antialiased,
        view_dir_grad,
        ..ProjectOptions::default()
    };
    let scene = random_scene(rng, &camera, &options, k, 8);
    let mut worst = 0.0f64;
    for (group, group_name) in GROUPS.iter().enumerate() {
        let w = Weights::random_group(rng, scene.n(), group);
        let got = backward(&scene, &camera, &options, &w);
        for (name, select) in INPUTS {
            let got = analytic(&got, name);
            let detached = !view_dir_grad && name == "means" && *group_name == "color";
            if detached {
                // The colour reaches the means only through the (detached) view direction.
                assert!(
                    got.iter().all(|v| *v == 0.0),
                    "detached colour moved the means"
                );
                continue;
            }
            let want = numeric(&scene, &camera, &options, &w, select);
            let err = rel_err(got, &want);
            worst = worst.max(err);
            assert!(
                err < 1e-5,
                "degree {degree}, aa {antialiased}, view grad {view_dir_grad}: d {group_name} / \
                 d {name}: analytic {got:?} vs numeric {want:?} (rel err {err:e})"
            );
            let depends = match *group_name {
                "xy" | "depth" => name == "means",
                "conic" => matches!(name, "means" | "quats" | "log_scales"),
                "color" => name == "sh" || (name == "means" && degree > 0),
                _ => name == "opacity_logits" || (antialiased && name != "sh"),
            };
            if depends {
                assert!(
                    want.iter().any(|v| v.abs() > 1e-6),
                    "d {group_name} / d {name}: the check must see a non-zero gradient"
                );
            }
        }
    }
    println!(
        "degree {degree}, antialiased {antialiased}, view_dir_grad {view_dir_grad}: worst \
         relative error {worst:.2e}"
    );
}

#[test]
fn gradients_match_central_differences() {
    let mut rng = fresh_rng("project gradients");
    for degree in 0..=3 {
        for antialiased in [false, true] {
            for view_dir_grad in [true, false] {
                check_gradients(&mut rng, degree, antialiased, view_dir_grad);
            }
        }
    }
}

#[test]
fn fewer_sh_bands_than_stored() {
    let mut rng = fresh_rng("project sh bands");
    let camera = random_camera(&mut rng);
    let full = ProjectOptions::default();
    let scene = random_scene(&mut rng, &camera, &full, 16, 6);
    // Degree 1 of a degree-3 array equals a degree-1 array holding the first 4 coefficients.
    let options = ProjectOptions {
        sh_degree: Some(1),
        ..full
    };
    let mut truncated = scene.clone();
    truncated.k = 4;
    truncated.sh = scene.sh.chunks(48).flat_map(|c| c[..12].to_vec()).collect();
    let a = forward(&scene, &camera, &options);
    let b = forward(&truncated, &camera, &full);
    assert_eq!(a, b);
    let w = Weights::random_group(&mut rng, scene.n(), 3);
    let ga = backward(&scene, &camera, &options, &w);
    let gb = backward(&truncated, &camera, &full, &w);
    assert_eq!(ga.means, gb.means);
    for (i, (row_a, row_b)) in ga.sh.chunks(48).zip(gb.sh.chunks(12)).enumerate() {
        assert_eq!(&row_a[..12], row_b, "Gaussian {i}");
        assert!(
            row_a[12..].iter().all(|v| *v == 0.0),
            "unused bands got a gradient"
        );
    }
    let too_many = ProjectOptions {
        sh_degree: Some(2),
        ..full
    };
    assert!(matches!(
        cpu::forward(&truncated.arrays(), &camera, &too_many),
        Err(ProjectError::ShDegree {
            requested: 2,
            stored: 1
        })
    ));
}

#[test]
fn f32_matches_f64() {
    let mut rng = fresh_rng("project f32");
    let camera = random_camera(&mut rng);
    let options = ProjectOptions {
        antialiased: true,
        ..ProjectOptions::default()
    };
    let scene = random_scene(&mut rng, &camera, &options, 16, 32);
    let want = forward(&scene, &camera, &options);
    let f = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    let (means, quats, ls, logits, sh) = (
        f(&scene.means),
        f(&scene.quats),
        f(&scene.log_scales),
        f(&scene.logits),
        f(&scene.sh),
    );
    let arrays = ProjectArrays {
        means: &means,
        quats: &quats,
        log_scales: &ls,
        opacity_logits: &logits,
        sh: &sh,
        sh_coeffs: 16,
    };
    let got = match cpu::forward(&arrays, &camera, &options) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let g = |v: &[f32]| v.iter().map(|x| f64::from(*x)).collect::<Vec<f64>>();
    for (name, a, b) in [
        ("xy", g(&got.xy), &want.xy),
        ("depth", g(&got.depth), &want.depth),
        ("conic", g(&got.conic), &want.conic),
        ("color", g(&got.color), &want.color),
        ("opacity", g(&got.opacity), &want.opacity),
    ] {
        let err = rel_err(&a, b);
        assert!(err < 1e-4, "{name}: f32 vs f64 relative error {err:e}");
    }
    // Radii may differ by one where k sqrt(cov) is within rounding of an integer.
    for (a, b) in got.radius.iter().zip(&want.radius) {
        assert!(a.abs_diff(*b) <= 1, "radius {a} vs {b}");
    }
}

/// Every pixel centre where the splat's alpha reaches 1/255 lies inside the screen box, the
/// box is tight to within a pixel, and the tile count is the brute-force count.
#[test]
fn radius_covers_alpha_and_tiles_are_exact() {
    let mut rng = fresh_rng("project radius");
    for antialiased in [false, true] {
        let camera = random_camera(&mut rng);
        let options = ProjectOptions {
            antialiased,
            ..ProjectOptions::default()
        };
        let scene = random_scene(&mut rng, &camera, &options, 1, 24);
        let out = forward(&scene, &camera, &options);
        let (w, h) = (camera.width as i64, camera.height as i64);
        for i in 0..scene.n() {
            let (x, y) = (out.xy[2 * i], out.xy[2 * i + 1]);
            let (rx, ry) = (out.radius[2 * i] as f64, out.radius[2 * i + 1] as f64);
            let [a, b, c] = [out.conic[3 * i], out.conic[3 * i + 1], out.conic[3 * i + 2]];
            let mut reach = [0.0f64; 2];
            for py in -200..h + 200 {
                for px in -200..w + 200 {
                    let (dx, dy) = (px as f64 + 0.5 - x, py as f64 + 0.5 - y);
                    let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
                    if out.opacity[i] * (-sigma).exp() >= 1.0 / 255.0 {
                        assert!(
                            dx.abs() <= rx && dy.abs() <= ry,
                            "Gaussian {i}: pixel ({px}, {py}) has alpha >= 1/255 outside the \
                             box +-({rx}, {ry}) around ({x}, {y})"
                        );
                        reach = [reach[0].max(dx.abs()), reach[1].max(dy.abs())];
                    }
                }
            }
            // A pixel-centre grid finds the ellipse's extent to within half a pixel; ceil adds
            // up to one more.
            if reach[0] > 0.0 {
                assert!(
                    rx - reach[0] < 2.0,
                    "x radius {rx} loose (reach {})",
                    reach[0]
                );
                assert!(
                    ry - reach[1] < 2.0,
                    "y radius {ry} loose (reach {})",
                    reach[1]
                );
            }
            let tile = f64::from(TILE_SIZE);
            let count_axis = |lo: f64, hi: f64, size: u32| {
                (0..size.div_ceil(TILE_SIZE))
                    .filter(|t| tile * f64::from(t + 1) > lo && tile * f64::from(*t) < hi)
                    .count()
            };
            let brute = count_axis(x - rx, x + rx, camera.width)
                * count_axis(y - ry, y + ry, camera.height);
            assert_eq!(out.tiles[i] as usize, brute, "Gaussian {i} tiles");
            assert!(brute >= 1);
        }
    }
}

/// A camera looking down +z from the origin, 64x48, principal point at the centre.
fn simple_camera() -> CameraParams {
    CameraParams {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0, 0.0, 0.0],
        fx: 50.0,
        fy: 50.0,
        cx: 32.0,
        cy: 24.0,
        width: 64,
        height: 48,
    }
}

/// A Gaussian at camera-space `mean`, isotropic `scale`, SH degree 1 with non-zero coefficients.
fn simple_gaussian(mean: [f64; 3], scale: f64, logit: f64) -> Scene {
    Scene {
        means: mean.to_vec(),
        quats: vec![0.9, 0.1, -0.2, 0.3],
        log_scales: vec![scale.ln(), scale.ln() - 0.2, scale.ln() + 0.1],
        logits: vec![logit],
        sh: (0..12).map(|j| 0.3 - 0.05 * j as f64).collect(),
        k: 4,
    }
}

/// The one camera type's JSON form (the `--camera` file, the viewer's messages) and its centre.
#[test]
fn a_camera_round_trips_through_its_json_form_and_its_centre() {
    let mut rng = fresh_rng("camera_json");
    let camera = random_camera(&mut rng);
    let text = serde_json::to_string(&camera).unwrap();
    // serde_json's default float parsing may miss the shortest round trip by an ulp.
    let read: CameraParams = serde_json::from_str(&text).unwrap();
    let numbers = |c: &CameraParams| [&c.rotation[..], &c.translation, &[c.fx, c.fy, c.cx, c.cy]].concat();
    for (a, b) in numbers(&read).iter().zip(numbers(&camera)) {
        assert!((a - b).abs() <= 4.0 * f64::EPSILON * b.abs(), "{a} vs {b}");
    }
    assert_eq!((read.width, read.height), (camera.width, camera.height));
    let center = camera.center();
    let moved = camera.with_center(center);
    for (a, b) in moved.translation.iter().zip(&camera.translation) {
        assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{a} vs {b}");
    }
    for (a, b) in to_world(&camera, [0.0; 3]).iter().zip(&center) {
        assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{a} vs {b}");
    }
    let extra = text.replacen('{', r#"{"position": [0, 0, 0], "#, 1);
    let error = serde_json::from_str::<CameraParams>(&extra).unwrap_err();
    assert!(error.to_string().contains("position"), "{error}");
}

#[test]
fn culling() {
    let camera = simple_camera();
    let mut cases: Vec<(&str, Scene, bool)> = vec![
        (
            "kept, centre",
            simple_gaussian([0.0, 0.0, 3.0], 0.1, 1.0),
            true,
        ),
        (
            "behind the camera",
            simple_gaussian([0.0, 0.0, -3.0], 0.1, 1.0),
            false,
        ),
        (
            "closer than near",
            simple_gaussian([0.0, 0.0, 0.005], 0.001, 1.0),
            false,
        ),
        (
            "tiny opacity",
            simple_gaussian([0.0, 0.0, 3.0], 0.1, -7.0),
            false,
        ),
        (
            "off-screen left",
            simple_gaussian([-5.0, 0.0, 3.0], 0.05, 1.0),
            false,
        ),
        (
            "off-screen below",
            simple_gaussian([0.0, 5.0, 3.0], 0.05, 1.0),
            false,
        ),
        // Centre 4 px left of the image, radius well over 4 px.
        (
            "straddling the left edge",
            simple_gaussian([-36.0 * 3.0 / 50.0, 0.0, 3.0], 0.2, 1.0),
            true,
        ),
        // Centre 3 px below the image.
        (
            "straddling the bottom edge",
            simple_gaussian([0.0, 27.0 * 3.0 / 50.0, 3.0], 0.2, 1.0),
            true,
        ),
    ];
    for (name, select) in INPUTS {
        let mut g = simple_gaussian([0.0, 0.0, 3.0], 0.1, 1.0);
        let last = select(&mut g).len() - 1;
        select(&mut g)[last] = f64::NAN;
        cases.push((name, g, false));
    }
    let mut g = simple_gaussian([0.0, 0.0, 3.0], 0.1, 1.0);
    g.log_scales[1] = f64::INFINITY;
    cases.push(("infinite scale", g, false));

    let mut scene = Scene::empty(4);
    for (_, g, _) in &cases {
        scene.push(g);
    }
    let n = scene.n();
    for antialiased in [false, true] {
        let options = ProjectOptions {
            antialiased,
            ..ProjectOptions::default()
        };
        let out = forward(&scene, &camera, &options);
        let ones = Weights {
            xy: vec![1.0; 2 * n],
            depth: vec![1.0; n],
            conic: vec![1.0; 3 * n],
            color: vec![1.0; 3 * n],
            opacity: vec![1.0; n],
        };
        let grads = backward(&scene, &camera, &options, &ones);
        for (i, (name, _, kept)) in cases.iter().enumerate() {
            let r = [out.radius[2 * i], out.radius[2 * i + 1]];
            let outputs = [
                &out.xy[2 * i..2 * i + 2],
                &out.depth[i..i + 1],
                &out.conic[3 * i..3 * i + 3],
                &out.color[3 * i..3 * i + 3],
                &out.opacity[i..i + 1],
            ];
            let inputs = [
                &grads.means[3 * i..3 * i + 3],
                &grads.quats[4 * i..4 * i + 4],
                &grads.log_scales[3 * i..3 * i + 3],
                &grads.opacity_logits[i..i + 1],
                &grads.sh[12 * i..12 * i + 12],
            ];
            let grad_zero = inputs.iter().all(|s| s.iter().all(|v| *v == 0.0));
            if *kept {
                assert!(r[0] > 0 && r[1] > 0 && out.tiles[i] > 0, "{name}: culled");
                assert!(!grad_zero, "{name}: kept but no gradient");
                assert!(out.opacity[i] > 0.0 && out.depth[i] > 0.0, "{name}");
            } else {
                assert_eq!((r, out.tiles[i]), ([0, 0], 0), "{name}: kept");
                assert!(
                    outputs.iter().all(|s| s.iter().all(|v| *v == 0.0)),
                    "{name}: culled but has outputs {outputs:?}"
                );
                assert!(grad_zero, "{name}: culled but has gradients {inputs:?}");
            }
        }
    }
}

#[test]
fn degenerate_quaternion_is_identity_without_gradient() {
    let camera = simple_camera();
    let mut zero = simple_gaussian([0.1, -0.2, 3.0], 0.1, 1.0);
    zero.quats = vec![0.0; 4];
    let mut identity = zero.clone();
    identity.quats = vec![2.0, 0.0, 0.0, 0.0];
    let options = ProjectOptions::default();
    assert_eq!(
        forward(&zero, &camera, &options),
        forward(&identity, &camera, &options)
    );
    let mut rng = fresh_rng("project zero quat");
    let w = Weights::random_group(&mut rng, 1, 2);
    assert_eq!(backward(&zero, &camera, &options, &w).quats, vec![0.0; 4]);
}

#[test]
fn bad_shapes_and_options_are_errors() {
    let camera = simple_camera();
    let g = simple_gaussian([0.0, 0.0, 3.0], 0.1, 1.0);
    let options = ProjectOptions::default();
    let mut short = g.clone();
    short.quats.pop();
    assert!(matches!(
        cpu::forward(&short.arrays(), &camera, &options),
        Err(ProjectError::Length { name: "quats", .. })
    ));
    let mut odd = g.clone();
    odd.k = 5;
    odd.sh = vec![0.1; 15];
    assert!(matches!(
        cpu::forward(&odd.arrays(), &camera, &options),
        Err(ProjectError::ShCoeffs(5))
    ));
    let bad_camera = CameraParams { fx: 0.0, ..camera };
    assert!(matches!(
        cpu::forward(&g.arrays(), &bad_camera, &options),
        Err(ProjectError::Camera { name: "fx", .. })
    ));
    let bad_near = ProjectOptions {
        near: -1.0,
        ..options
    };
    assert!(matches!(
        cpu::forward(&g.arrays(), &camera, &bad_near),
        Err(ProjectError::Option { name: "near", .. })
    ));
    let w = Weights::zeros(2);
    assert!(matches!(
        cpu::backward(&g.arrays(), &camera, &options, &w.grads()),
        Err(ProjectError::Length {
            name: "grad xy",
            ..
        })
    ));
}

// ---- the gsplat oracle ----

fn check_oracle(case: &str) {
    let Some(file) = OracleCase::load(case) else {
        return;
    };
    let scene = Scene {
        means: file.get("means"),
        quats: file.get("quats"),
        log_scales: file.get("scales"),
        logits: file.get("opacities"),
        sh: file.get("coeffs"),
        k: 16,
    };
    let n = scene.n();
    let camera = oracle_camera();
    let options = ProjectOptions {
        sh_degree: Some(3),
        view_dir_grad: false,
        ..ProjectOptions::default()
    };
    let out = forward(&scene, &camera, &options);
    // gsplat zeroes the outputs of what it culls.
    let ref_conics = file.get("conics");
    let kept: Vec<bool> = (0..n)
        .map(|i| ref_conics[3 * i..3 * i + 3].iter().any(|v| *v != 0.0))
        .collect();
    for (i, kept) in kept.iter().enumerate() {
        assert_eq!(
            out.radius[2 * i] > 0,
            *kept,
            "{case}: Gaussian {i} culling differs"
        );
    }
    let mut report = Vec::new();
    let mut failed = Vec::new();
    let mut compare = |name: &str, got: &[f64], want: &[f64], width: usize| {
        let (ratio, abs) = oracle_err(got, want, width, &kept);
        report.push(format!(
            "{name}: max |delta| {abs:.3e} ({ratio:.2e} of the tolerance)"
        ));
        if ratio >= 1.0 {
            failed.push(name.to_string());
        }
    };
    compare("xys", &out.xy, &file.get("xys"), 2);
    compare("depths", &out.depth, &file.get("depths"), 1);
    compare("conics", &out.conic, &ref_conics, 3);

    let w = Weights {
        xy: file.get("v_xy"),
        conic: file.get("v_conics"),
        ..Weights::zeros(n)
    };
    let grads = backward(&scene, &camera, &options, &w);
    compare("v_means", &grads.means, &file.get("v_means"), 3);
    compare("v_quats", &grads.quats, &file.get("v_quats"), 4);
    compare("v_scales", &grads.log_scales, &file.get("v_scales"), 3);
    println!("{case} ({n} Gaussians):\n  {}", report.join("\n  "));
    assert!(
        failed.is_empty(),
        "{case}: outside the oracle tolerance: {failed:?}"
    );
}

#[test]
fn matches_gsplat_oracle_tiny() {
    check_oracle("tiny");
}

#[test]
fn matches_gsplat_oracle_basic() {
    check_oracle("basic");
}

/// The Burn op (`project_gaussians` under `Autodiff<NdArray>`) against the CPU kernels called
/// directly: the packed outputs, the extents, and the gradients of a weighted sum of `packed`
/// with respect to all five inputs.
#[test]
fn burn_op_matches_the_cpu_kernels() {
    use crate::{PACKED_WIDTH, project_gaussians};
    use burn::backend::Autodiff;
    use burn::tensor::{DType, Tensor, TensorData};
    type Ad = Autodiff<crate::backend::Cpu>;

    let mut rng = fresh_rng("project_burn_op");
    let camera = random_camera(&mut rng);
    let options = ProjectOptions::default();
    let scene = random_scene(&mut rng, &camera, &options, 16, 12);
    let n = scene.n();
    let device = Default::default();
    let f32s = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    // Round the scene to f32 so that both sides see the same inputs.
    let round = |v: &[f64]| v.iter().map(|x| *x as f32 as f64).collect::<Vec<f64>>();
    let scene = Scene {
        means: round(&scene.means),
        quats: round(&scene.quats),
        log_scales: round(&scene.log_scales),
        logits: round(&scene.logits),
        sh: round(&scene.sh),
        k: scene.k,
    };
    let t2 = |v: &[f64], w: usize| {
        Tensor::<Ad, 2>::from_data(TensorData::new(f32s(v), [n, w]), (&device, DType::F32))
            .require_grad()
    };
    let (means, quats, log_scales) = (
        t2(&scene.means, 3),
        t2(&scene.quats, 4),
        t2(&scene.log_scales, 3),
    );
    let logits = Tensor::<Ad, 1>::from_data(
        TensorData::new(f32s(&scene.logits), [n]),
        (&device, DType::F32),
    )
    .require_grad();
    let (dc, rest) = split_sh(&scene.sh, scene.k);
    let sh_part = |v: &[f64], k: usize| {
        Tensor::<Ad, 3>::from_data(TensorData::new(f32s(v), [n, k, 3]), (&device, DType::F32))
            .require_grad()
    };
    let (sh_dc, sh_rest) = (sh_part(&dc, 1), sh_part(&rest, scene.k - 1));
    let projected = project_gaussians(
        means.clone(),
        quats.clone(),
        log_scales.clone(),
        logits.clone(),
        sh_dc.clone(),
        sh_rest.clone(),
        &camera,
        &options,
    )
    .expect("valid inputs");
    let weights = uniform(&mut rng, n * PACKED_WIDTH, -1.0, 1.0);
    let w = Tensor::<Ad, 2>::from_data(
        TensorData::new(f32s(&weights), [n, PACKED_WIDTH]),
        (&device, DType::F32),
    );
    let grads = (projected.packed.clone() * w).sum().backward();

    let want = forward(&scene, &camera, &options);
    let packed: Vec<f64> = projected
        .packed
        .clone()
        .inner()
        .into_data()
        .convert::<f64>()
        .to_vec()
        .expect("f64");
    let col = |c: usize| {
        packed
            .chunks_exact(PACKED_WIDTH)
            .map(|r| r[c])
            .collect::<Vec<f64>>()
    };
    let pairs = |c: usize, w: usize| -> Vec<f64> {
        packed
            .chunks_exact(PACKED_WIDTH)
            .flat_map(|r| r[c..c + w].to_vec())
            .collect()
    };
    for (name, got, expect) in [
        ("xy", pairs(0, 2), &want.xy),
        ("depth", col(2), &want.depth),
        ("conic", pairs(3, 3), &want.conic),
        ("color", pairs(6, 3), &want.color),
        ("opacity", col(9), &want.opacity),
    ] {
        let err = rel_err(&got, expect);
        assert!(err < 1e-5, "{name}: rel err {err:e}");
    }
    let radius: Vec<i64> = projected
        .radius()
        .into_data()
        .convert::<i64>()
        .to_vec()
        .expect("i64");
    let tiles: Vec<i64> = projected
        .tiles()
        .into_data()
        .convert::<i64>()
        .to_vec()
        .expect("i64");
    assert_eq!(
        radius,
        want.radius
            .iter()
            .map(|r| i64::from(*r))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        tiles,
        want.tiles.iter().map(|t| i64::from(*t)).collect::<Vec<_>>()
    );

    let mut gw = Weights::zeros(n);
    for (i, row) in weights.chunks_exact(PACKED_WIDTH).enumerate() {
        let row: Vec<f64> = row.iter().map(|x| *x as f32 as f64).collect();
        gw.xy[2 * i..2 * i + 2].copy_from_slice(&row[0..2]);
        gw.depth[i] = row[2];
        gw.conic[3 * i..3 * i + 3].copy_from_slice(&row[3..6]);
        gw.color[3 * i..3 * i + 3].copy_from_slice(&row[6..9]);
        gw.opacity[i] = row[9];
    }
    let expect = backward(&scene, &camera, &options, &gw);
    fn host<B: burn::tensor::backend::Backend, const D: usize>(
        t: Option<Tensor<B, D>>,
    ) -> Vec<f64> {
        t.expect("tracked")
            .into_data()
            .convert::<f64>()
            .to_vec()
            .expect("f64")
    }
    let got_sh = join_sh(&host(sh_dc.grad(&grads)), &host(sh_rest.grad(&grads)));
    for (name, got, expect) in [
        ("means", host(means.grad(&grads)), &expect.means),
        ("quats", host(quats.grad(&grads)), &expect.quats),
        (
            "log_scales",
            host(log_scales.grad(&grads)),
            &expect.log_scales,
        ),
        (
            "opacity_logits",
            host(logits.grad(&grads)),
            &expect.opacity_logits,
        ),
        ("sh", got_sh, &expect.sh),
    ] {
        let err = rel_err(&got, expect);
        println!("burn op d/d{name}: rel err vs f64 kernels {err:.1e}");
        assert!(err < 1e-4, "d/d{name}: rel err {err:e}");
    }
    // Bad shapes are named errors.
    let bad_shapes = [
        (
            "quats",
            quats.clone().narrow(1, 0, 3),
            sh_dc.clone(),
            sh_rest.clone(),
        ),
        ("sh_dc", quats.clone(), sh_rest.clone(), sh_dc.clone()),
        ("SH", quats, sh_dc, sh_rest.narrow(1, 0, 2)),
    ];
    for (named, quats, sh_dc, sh_rest) in bad_shapes {
        let err = project_gaussians(
            means.clone(),
            quats,
            log_scales.clone(),
            logits.clone(),
            sh_dc,
            sh_rest,
            &camera,
            &options,
        )
        .unwrap_err();
        assert!(err.to_string().contains(named), "{err}");
    }
}

mod equirect;
mod pose;
