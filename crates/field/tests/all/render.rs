//! `render` end to end (projection, binning, compositing, autodiff) on every compiled backend:
//! the gsplat oracle through the public API, GPU against CPU on fresh random scenes, f64 central
//! differences of the whole pipeline, edge cases, and bit-identical CPU repeats.

use burn::backend::Autodiff;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_field::{
    Camera, GaussianField, RenderError, RenderOptions, render, render_batch, render_batch_images,
};
use ember_kernels::{CameraParams, ProjectOptions, SplatBackend};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::common::{
    OracleCase, fresh_rng, join_sh, oracle_camera, oracle_err, rel_err, split_sh, uniform,
};

pub use ember_kernels::backend::Cpu;
use ember_kernels::backend::Cpu64;
#[cfg(feature = "wgpu")]
pub type WgpuFused = ember_kernels::backend::Wgpu;
#[cfg(feature = "wgpu")]
pub type WgpuPlain =
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
#[cfg(feature = "cuda")]
pub type CudaFused = ember_kernels::backend::Cuda;

/// A scene's raw parameters, f64, row-major (`sh` is `[N, K, 3]`).
#[derive(Clone, Debug)]
pub struct Scene {
    pub means: Vec<f64>,
    pub quats: Vec<f64>,
    pub log_scales: Vec<f64>,
    pub logits: Vec<f64>,
    pub sh: Vec<f64>,
    pub k: usize,
}

impl Scene {
    pub fn n(&self) -> usize {
        self.logits.len()
    }
}

/// Loss weights per image: `L = sum(w_rgb rgb) + sum(w_alpha alpha) + sum(w_depth alpha depth)`.
pub struct Weights {
    pub rgb: Vec<f64>,
    pub alpha: Vec<f64>,
    pub depth: Vec<f64>,
}

/// What a render gives back, as f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub rgb: Vec<f64>,
    pub alpha: Vec<f64>,
    pub depth: Vec<f64>,
    /// means, quats, log_scales, opacity_logits, sh (`[N, K, 3]`).
    pub grads: Vec<Vec<f64>>,
    /// `[N, 3]`: `(dL/dx, dL/dy, xy_abs)`.
    pub screen: Vec<f64>,
}

pub const GRAD_NAMES: [&str; 5] = ["means", "quats", "log_scales", "opacity_logits", "sh"];

pub fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float data")
}

pub fn float_dtype<B: Backend>() -> burn::tensor::DType {
    <B::FloatElem as burn::tensor::Element>::dtype()
}

/// The field of `scene` on `B`, in `B`'s float type.
pub fn field_of<B: Backend>(scene: &Scene, device: &B::Device) -> GaussianField<B> {
    let n = scene.n();
    let k = scene.k;
    let (dc, rest) = split_sh(&scene.sh, k);
    // Explicit dtype: Burn's default float dtype is a per-device setting shared by
    // `NdArray<f32>` and `NdArray<f64>`.
    let dtype = float_dtype::<B>();
    let t = |v: &[f64], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
    match GaussianField::from_tensors(
        Tensor::from_data(t(&scene.means, vec![n, 3]), (device, dtype)),
        Tensor::from_data(t(&scene.quats, vec![n, 4]), (device, dtype)),
        Tensor::from_data(t(&scene.log_scales, vec![n, 3]), (device, dtype)),
        Tensor::from_data(t(&scene.logits, vec![n]), (device, dtype)),
        Tensor::from_data(t(&dc, vec![n, 1, 3]), (device, dtype)),
        Tensor::from_data(t(&rest, vec![n, k - 1, 3]), (device, dtype)),
        None,
    ) {
        Ok(f) => f,
        Err(e) => panic!("scene refused: {e}"),
    }
}

/// The gradients of every parameter of `field` in [`GRAD_NAMES`] order (zeros where none
/// arrived), the SH bands joined into `[N, K, 3]`.
pub fn param_grads<B: SplatBackend>(
    field: &GaussianField<Autodiff<B>>,
    grads: &<Autodiff<B> as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> Vec<Vec<f64>> {
    let g2 = |p: &burn::module::Param<Tensor<Autodiff<B>, 2>>| match p.grad(grads) {
        Some(g) => host(g),
        None => vec![0.0; p.dims().iter().product()],
    };
    let g3 = |p: &burn::module::Param<Tensor<Autodiff<B>, 3>>| match p.grad(grads) {
        Some(g) => host(g),
        None => vec![0.0; p.dims().iter().product()],
    };
    let logits = match field.opacity_logits.grad(grads) {
        Some(g) => host(g),
        None => vec![0.0; field.num_gaussians()],
    };
    let sh = join_sh(&g3(&field.sh_dc), &g3(&field.sh_rest));
    vec![
        g2(&field.means),
        g2(&field.quats),
        g2(&field.log_scales),
        logits,
        sh,
    ]
}

/// The integer values of `t`.
pub fn host_int<B: Backend, const D: usize>(t: Tensor<B, D, burn::tensor::Int>) -> Vec<i64> {
    t.into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .expect("int data")
}

/// Renders `scene` under autodiff on `B` and differentiates the weighted loss.
pub fn run<B: SplatBackend>(
    scene: &Scene,
    camera: &Camera,
    options: &RenderOptions,
    weights: &Weights,
    device: &B::Device,
) -> Rendered {
    let field = field_of::<Autodiff<B>>(scene, device);
    let out = match render(&field, camera, options) {
        Ok(o) => o,
        Err(e) => panic!("render refused a valid scene: {e}"),
    };
    let (h, w) = (camera.height as usize, camera.width as usize);
    let wt = |v: &[f64]| {
        Tensor::<Autodiff<B>, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (device, float_dtype::<B>()),
        )
    };
    let loss = (out.rgb.clone() * wt(&weights.rgb).reshape([h, w, 3])).sum()
        + (out.alpha.clone() * wt(&weights.alpha).reshape([h, w])).sum()
        + (out.alpha.clone() * out.depth.clone() * wt(&weights.depth).reshape([h, w])).sum();
    let grads = loss.backward();
    let screen = match out.aux.screen_grads.grad(&grads) {
        Some(g) => host(g),
        None => vec![0.0; 3 * scene.n()],
    };
    Rendered {
        rgb: host(out.rgb.inner()),
        alpha: host(out.alpha.inner()),
        depth: host(out.depth.inner()),
        grads: param_grads(&field, &grads),
        screen,
    }
}

// ---- the gsplat oracle, through `render` ----

fn check_oracle<B: SplatBackend>(case: &str, device: &B::Device) {
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
    let camera: CameraParams = oracle_camera();
    let options = RenderOptions {
        project: ProjectOptions {
            sh_degree: Some(3),
            view_dir_grad: false,
            ..ProjectOptions::default()
        },
        background: [0.0; 3],
        ..RenderOptions::default()
    };
    let img = file.get("out_img");
    let v_img = file.get("v_out_img");
    let channels = |img: &[f64], lo: usize, hi: usize| -> Vec<f64> {
        img.chunks_exact(4)
            .flat_map(|p| p[lo..hi].to_vec())
            .collect()
    };
    let (w, h) = (camera.width as usize, camera.height as usize);
    let weights = Weights {
        rgb: channels(&v_img, 0, 3),
        alpha: channels(&v_img, 3, 4),
        depth: vec![0.0; w * h],
    };
    let got = run::<B>(&scene, &camera, &options, &weights, device);
    let pixels = vec![true; w * h];
    let all = vec![true; n];
    let mut failed = Vec::new();
    let mut report = Vec::new();
    let mut compare = |name: &str, got: &[f64], want: &[f64], width: usize, rows: &[bool]| {
        let (ratio, abs) = oracle_err(got, want, width, rows);
        report.push(format!(
            "{name}: max |delta| {abs:.3e} ({ratio:.2e} of the tolerance)"
        ));
        if ratio >= 1.0 {
            failed.push(name.to_string());
        }
    };
    compare("rgb", &got.rgb, &channels(&img, 0, 3), 3, &pixels);
    compare("alpha", &got.alpha, &channels(&img, 3, 4), 1, &pixels);
    let screen_xy: Vec<f64> = got
        .screen
        .chunks_exact(3)
        .flat_map(|s| [s[0], s[1]])
        .collect();
    let conics = file.get("conics");
    let kept: Vec<bool> = (0..n)
        .map(|i| conics[3 * i..3 * i + 3].iter().any(|v| *v != 0.0))
        .collect();
    compare(
        "v_xy (screen_grads)",
        &screen_xy,
        &file.get("v_xy"),
        2,
        &kept,
    );
    let refs = ["v_means", "v_quats", "v_scales", "v_opacities", "v_coeffs"];
    let widths = [3, 4, 3, 1, 48];
    for ((name, got), width) in refs.iter().zip(&got.grads).zip(widths) {
        compare(name, got, &file.get(name), width, &all);
    }
    println!(
        "{case} on {} ({n} Gaussians):\n  {}",
        B::name(device),
        report.join("\n  ")
    );
    assert!(
        failed.is_empty(),
        "{case} on {}: outside the oracle tolerance: {failed:?}",
        B::name(device)
    );
}

#[test]
fn render_matches_gsplat_oracle_cpu() {
    check_oracle::<Cpu>("tiny", &Default::default());
    check_oracle::<Cpu>("basic", &Default::default());
}

#[cfg(feature = "wgpu")]
#[test]
fn render_matches_gsplat_oracle_wgpu() {
    check_oracle::<WgpuFused>("basic", &Default::default());
    check_oracle::<WgpuPlain>("basic", &Default::default());
    check_oracle::<WgpuFused>("tiny", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn render_matches_gsplat_oracle_cuda() {
    check_oracle::<CudaFused>("basic", &Default::default());
    check_oracle::<CudaFused>("tiny", &Default::default());
}

// ---- random scenes ----

/// A camera at the origin looking down +z, slightly rotated, `width x height` pixels.
pub fn test_camera(rng: &mut StdRng, width: u32, height: u32) -> Camera {
    let (a, b) = (
        rng.random::<f64>() * 0.2 - 0.1,
        rng.random::<f64>() * 0.2 - 0.1,
    );
    let (ca, sa, cb, sb) = (a.cos(), a.sin(), b.cos(), b.sin());
    // Rotation about y by `a`, then about x by `b`.
    let rotation = [ca, 0.0, sa, sb * sa, cb, -sb * ca, -cb * sa, sb, cb * ca];
    let f = 0.9 * f64::from(width.max(height));
    Camera {
        rotation,
        translation: [0.0, 0.0, 0.0],
        fx: f,
        fy: 1.1 * f,
        cx: f64::from(width) * 0.47,
        cy: f64::from(height) * 0.53,
        width,
        height,
    }
}

/// `n` Gaussians in front of the camera at depths 2..6 (a few behind it, culled), SH degree 1,
/// sizes from a fraction of a pixel to a large part of the image.
pub fn random_scene(rng: &mut StdRng, n: usize) -> Scene {
    let k = 4;
    let mut means = Vec::with_capacity(3 * n);
    for i in 0..n {
        let z = if i % 37 == 5 {
            -1.0
        } else {
            2.0 + 4.0 * rng.random::<f64>()
        };
        let spread = 0.6 * z.abs();
        means.extend([
            spread * (rng.random::<f64>() - 0.5),
            spread * (rng.random::<f64>() - 0.5),
            z,
        ]);
    }
    Scene {
        means,
        quats: uniform(rng, 4 * n, -1.0, 1.0),
        log_scales: uniform(rng, 3 * n, -4.0, -1.5),
        logits: uniform(rng, n, -2.0, 4.0),
        sh: uniform(rng, n * k * 3, -0.8, 0.8),
        k,
    }
}

pub fn random_weights(rng: &mut StdRng, camera: &Camera) -> Weights {
    let p = camera.width as usize * camera.height as usize;
    Weights {
        rgb: uniform(rng, 3 * p, -1.0, 1.0),
        alpha: uniform(rng, p, -1.0, 1.0),
        depth: uniform(rng, p, -0.1, 0.1),
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn compare_to_cpu<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    // 600 Gaussians: several 256-entry batches per tile, and opaque overlaps that stop pixels.
    // 120x90 (8x6 tiles): many tilted boxes of 2x2 tiles and more, which the GPU binning trims
    // to their ellipses.
    for (n, width, height) in [(600, 45, 37), (40, 16, 16), (300, 1, 1), (400, 120, 90)] {
        let camera = test_camera(&mut rng, width, height);
        let scene = random_scene(&mut rng, n);
        let mut weights = random_weights(&mut rng, &camera);
        let options = RenderOptions::default().with_background([0.2, 0.5, 0.9]);
        let mut want = run::<Cpu>(&scene, &camera, &options, &weights, &Default::default());
        let mut got = run::<B>(&scene, &camera, &options, &weights, device);
        let flipped = threshold_flips(&got, &want);
        if !flipped.is_empty() {
            println!(
                "{label} N={n} {width}x{height}: pixels {flipped:?} left out (a Gaussian at the 1/255 floor)"
            );
            for &p in &flipped {
                weights.rgb[3 * p..3 * p + 3].fill(0.0);
                weights.alpha[p] = 0.0;
                weights.depth[p] = 0.0;
            }
            want = run::<Cpu>(&scene, &camera, &options, &weights, &Default::default());
            got = run::<B>(&scene, &camera, &options, &weights, device);
            for &p in &flipped {
                got.rgb[3 * p..3 * p + 3].copy_from_slice(&want.rgb[3 * p..3 * p + 3]);
                got.alpha[p] = want.alpha[p];
                got.depth[p] = want.depth[p];
            }
        }
        let mut errors = vec![
            ("rgb", rel_err(&got.rgb, &want.rgb)),
            ("alpha", rel_err(&got.alpha, &want.alpha)),
            ("depth", rel_err(&got.depth, &want.depth)),
            ("screen_grads", rel_err(&got.screen, &want.screen)),
        ];
        for (name, (g, w)) in GRAD_NAMES.iter().zip(got.grads.iter().zip(&want.grads)) {
            errors.push((name, rel_err(g, w)));
        }
        println!("{label} N={n} {width}x{height}: {errors:?}");
        for (name, err) in errors {
            assert!(
                err < 2e-3,
                "{label} N={n} {width}x{height}: {name} differs from the CPU by {err:.2e}"
            );
        }
    }
}

/// Pixels where the two renders disagree because one Gaussian's alpha sits at the compositing
/// floor (`1/255`) within float rounding, so one side blends it and the other skips it: a step of
/// at most `1/255` in the pixel's alpha, rare (one pixel in thousands of runs). Any other
/// disagreement, or more than a few such pixels, fails the test.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn threshold_flips(got: &Rendered, want: &Rendered) -> Vec<usize> {
    let flipped: Vec<usize> = (0..want.alpha.len())
        .filter(|&p| (got.alpha[p] - want.alpha[p]).abs() > 1e-5)
        .collect();
    for &p in &flipped {
        let step = (got.alpha[p] - want.alpha[p]).abs();
        assert!(
            step <= 1.0 / 255.0 + 1e-5,
            "pixel {p}: alpha {} against the CPU's {}, more than one Gaussian at the floor",
            got.alpha[p],
            want.alpha[p]
        );
    }
    assert!(
        flipped.len() <= 2 + want.alpha.len() / 1000,
        "{} pixels' alpha differs from the CPU: {flipped:?}",
        flipped.len()
    );
    flipped
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_render_matches_cpu() {
    compare_to_cpu::<WgpuFused>("wgpu (fusion)", &Default::default());
    compare_to_cpu::<WgpuPlain>("wgpu (cube)", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_render_matches_cpu() {
    compare_to_cpu::<CudaFused>("cuda (fusion)", &Default::default());
}

// ---- f64 central differences of the whole pipeline ----

#[test]
fn render_gradients_match_central_differences() {
    let mut rng = fresh_rng("render_gradients_match_central_differences");
    let camera = test_camera(&mut rng, 20, 18);
    let mut scene = random_scene(&mut rng, 6);
    // Large, fairly opaque Gaussians near the image centre: every pixel sees several of them
    // well inside their extents, so no alpha threshold sits within the step of a pixel.
    for i in 0..scene.n() {
        let z = 3.0 + rng.random::<f64>();
        scene.means[3 * i..3 * i + 3].copy_from_slice(&[
            0.4 * (rng.random::<f64>() - 0.5),
            0.4 * (rng.random::<f64>() - 0.5),
            z,
        ]);
        for s in &mut scene.log_scales[3 * i..3 * i + 3] {
            *s = -1.2 + 0.3 * rng.random::<f64>();
        }
        scene.logits[i] = -1.0 + rng.random::<f64>();
    }
    let weights = random_weights(&mut rng, &camera);
    let options = RenderOptions::default().with_background([0.3, 0.1, 0.6]);
    let device = Default::default();
    let base = run::<Cpu64>(&scene, &camera, &options, &weights, &device);
    let loss = |s: &Scene| -> f64 {
        let field = field_of::<Cpu64>(s, &device);
        let out = match render(&field, &camera, &options) {
            Ok(o) => o,
            Err(e) => panic!("render refused: {e}"),
        };
        let dot = |a: Vec<f64>, b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let alpha = host(out.alpha);
        let depth = host(out.depth);
        let ad: Vec<f64> = alpha.iter().zip(&depth).map(|(a, d)| a * d).collect();
        dot(host(out.rgb), &weights.rgb) + dot(alpha, &weights.alpha) + dot(ad, &weights.depth)
    };
    let eps = 1e-6;
    for (which, name) in GRAD_NAMES.iter().enumerate() {
        let len = base.grads[which].len();
        let mut numeric = vec![0.0; len];
        for (j, slot) in numeric.iter_mut().enumerate() {
            let mut plus = scene.clone();
            let mut minus = scene.clone();
            fn field(s: &mut Scene, which: usize) -> &mut Vec<f64> {
                match which {
                    0 => &mut s.means,
                    1 => &mut s.quats,
                    2 => &mut s.log_scales,
                    3 => &mut s.logits,
                    _ => &mut s.sh,
                }
            }
            field(&mut plus, which)[j] += eps;
            field(&mut minus, which)[j] -= eps;
            *slot = (loss(&plus) - loss(&minus)) / (2.0 * eps);
        }
        let err = rel_err(&base.grads[which], &numeric);
        println!("{name}: relative error {err:.2e}");
        assert!(
            err < 1e-5,
            "{name}: autodiff vs central differences {err:.2e}"
        );
    }
}

// ---- edge cases and determinism ----

/// An empty field renders as the background with zero alpha.
fn empty_field_renders_the_background<B: SplatBackend>(
    label: &str,
    camera: &Camera,
    options: &RenderOptions,
    device: &B::Device,
) {
    let empty = Scene {
        means: vec![],
        quats: vec![],
        log_scales: vec![],
        logits: vec![],
        sh: vec![],
        k: 1,
    };
    let field = field_of::<B>(&empty, device);
    let out = render(&field, camera, options).expect("an empty field renders");
    let p = camera.width as usize * camera.height as usize;
    let background: Vec<f64> = (0..p)
        .flat_map(|_| options.background.map(f64::from))
        .collect();
    assert_eq!(host(out.rgb), background, "{label}: empty field");
    assert!(
        host(out.alpha).iter().all(|a| *a == 0.0),
        "{label}: empty field alpha"
    );
}

fn edge_cases<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    let bg = [0.25, 0.5, 0.75];
    let options = RenderOptions::default().with_background(bg);
    let background_image = |camera: &Camera| -> Vec<f64> {
        let p = camera.width as usize * camera.height as usize;
        (0..p).flat_map(|_| bg.map(f64::from)).collect()
    };

    // An empty field and a field whose Gaussians are all behind the camera: the background,
    // zero alpha, zero gradients.
    let camera = test_camera(&mut rng, 33, 17);
    let weights = random_weights(&mut rng, &camera);
    if B::name(device).contains("cuda") {
        // Burn 0.21's CUDA backend cannot create zero-size tensors ("the provided strides are
        // not supported"), so an empty field cannot even be built there.
        println!("{label}: the empty field is skipped on cuda");
    } else {
        empty_field_renders_the_background::<B>(label, &camera, &options, device);
    }
    let mut behind = random_scene(&mut rng, 20);
    for i in 0..20 {
        behind.means[3 * i + 2] = -2.0 - rng.random::<f64>();
    }
    let r = run::<B>(&behind, &camera, &options, &weights, device);
    let bg_img: Vec<f64> = background_image(&camera)
        .iter()
        .map(|v| f64::from(*v as f32))
        .collect();
    assert_eq!(r.rgb, bg_img, "{label}: culled scene");
    assert!(r.alpha.iter().all(|a| *a == 0.0), "{label}: culled alpha");
    for (name, g) in GRAD_NAMES.iter().zip(&r.grads) {
        assert!(
            g.iter().all(|v| *v == 0.0),
            "{label}: culled scene, {name} gradient"
        );
    }

    // A 1x1 image, and a camera inside the cloud: finite and equal to the CPU's.
    for (width, height, inside) in [(1, 1, false), (29, 21, true)] {
        let camera = test_camera(&mut rng, width, height);
        let mut scene = random_scene(&mut rng, 120);
        if inside {
            for i in 0..scene.n() {
                for c in 0..3 {
                    scene.means[3 * i + c] = 4.0 * (rng.random::<f64>() - 0.5);
                }
            }
        }
        let weights = random_weights(&mut rng, &camera);
        let got = run::<B>(&scene, &camera, &options, &weights, device);
        let want = run::<Cpu>(&scene, &camera, &options, &weights, &Default::default());
        assert!(
            got.rgb.iter().all(|v| v.is_finite()),
            "{label}: {width}x{height}"
        );
        assert!(
            rel_err(&got.rgb, &want.rgb) < 2e-3,
            "{label}: {width}x{height} (inside: {inside}) differs from the CPU"
        );
        for (name, (g, w)) in GRAD_NAMES.iter().zip(got.grads.iter().zip(&want.grads)) {
            assert!(
                rel_err(g, w) < 2e-3,
                "{label}: {width}x{height} (inside: {inside}) {name} gradient differs"
            );
        }
    }

    // NaN parameters: the Gaussian is culled, the rest renders as without it.
    let camera = test_camera(&mut rng, 24, 24);
    let scene = random_scene(&mut rng, 30);
    let mut poisoned = scene.clone();
    poisoned.means.extend([f64::NAN, 0.0, 3.0]);
    poisoned.quats.extend([1.0, 0.0, 0.0, 0.0]);
    poisoned.log_scales.extend([-1.0, -1.0, -1.0]);
    poisoned.logits.extend([2.0]);
    poisoned.sh.extend(vec![0.5; 12]);
    let clean = field_of::<B>(&scene, device);
    let dirty = field_of::<B>(&poisoned, device);
    let a = host(render(&clean, &camera, &options).expect("clean").rgb);
    let b = host(
        render(&dirty, &camera, &options)
            .expect("NaN is culled, not refused")
            .rgb,
    );
    assert_eq!(a, b, "{label}: a NaN Gaussian changed the image");
    assert!(
        dirty.validate().is_err(),
        "{label}: validate() must name the NaN parameter"
    );
}

#[test]
fn render_edge_cases_cpu() {
    edge_cases::<Cpu>("render edge cases (cpu)", &Default::default());
}

#[cfg(feature = "wgpu")]
#[test]
fn render_edge_cases_wgpu() {
    edge_cases::<WgpuFused>("render edge cases (wgpu)", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn render_edge_cases_cuda() {
    edge_cases::<CudaFused>("render edge cases (cuda)", &Default::default());
}

#[test]
fn cpu_renders_are_bit_identical() {
    let mut rng = fresh_rng("cpu_renders_are_bit_identical");
    let camera = test_camera(&mut rng, 70, 50);
    let scene = random_scene(&mut rng, 500);
    let weights = random_weights(&mut rng, &camera);
    let options = RenderOptions::default();
    let device = Default::default();
    let first = run::<Cpu>(&scene, &camera, &options, &weights, &device);
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        let again = pool.install(|| run::<Cpu>(&scene, &camera, &options, &weights, &device));
        assert!(first == again, "render differs with {threads} threads");
    }
}

/// Two forwards of the same scene give the same image: the binning sorts are stable and the
/// forward has no atomics (only the backward's sums may differ in the last bits).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn forward_is_deterministic<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    let camera = test_camera(&mut rng, 64, 40);
    let scene = random_scene(&mut rng, 700);
    let field = field_of::<B>(&scene, device);
    let options = RenderOptions::default();
    let a = host(render(&field, &camera, &options).expect("render").rgb);
    let b = host(render(&field, &camera, &options).expect("render").rgb);
    assert_eq!(a, b, "{label}: two GPU forwards differ");
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_forward_is_deterministic() {
    forward_is_deterministic::<WgpuFused>("wgpu forward determinism", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_forward_is_deterministic() {
    forward_is_deterministic::<CudaFused>("cuda forward determinism", &Default::default());
}

// ---- several cameras at once ----

/// `render_batch` (one batched projection and rasterization) against one `render` per camera
/// on `B`: the stacked images equal the single renders exactly, and a loss over the batch gives
/// every parameter of the field the gradient the sum of the per-camera losses gives it (and
/// each camera's rows of the screen-space probe its own view's gradient).
fn batch_matches_single_renders<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    let n = 60;
    let scene = random_scene(&mut rng, n);
    let (width, height) = (37, 29);
    let cameras: Vec<Camera> = (0..3)
        .map(|_| test_camera(&mut rng, width, height))
        .collect();
    let weights: Vec<Weights> = cameras
        .iter()
        .map(|c| random_weights(&mut rng, c))
        .collect();
    let options = RenderOptions::default().with_background([0.2, 0.4, 0.6]);
    let (h, w) = (height as usize, width as usize);
    let wt = |v: &[f64], shape: [usize; 3]| {
        Tensor::<Autodiff<B>, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]),
            (device, float_dtype::<B>()),
        )
        .reshape(shape)
    };
    let view_loss = |rgb: Tensor<Autodiff<B>, 3>, alpha: Tensor<Autodiff<B>, 2>, c: usize| {
        (rgb * wt(&weights[c].rgb, [h, w, 3])).sum()
            + (alpha.unsqueeze_dim::<3>(2) * wt(&weights[c].alpha, [h, w, 1])).sum()
    };

    let field = field_of::<Autodiff<B>>(&scene, device);
    let batch = render_batch(&field, &cameras, &options).unwrap();
    assert_eq!(batch.rgb.dims(), [3, h, w, 3]);
    assert_eq!(batch.alpha.dims(), [3, h, w]);
    assert_eq!(batch.depth.dims(), [3, h, w]);
    assert_eq!(batch.aux.screen_grads.dims(), [3 * n, 3]);
    assert_eq!(batch.aux.extents.dims(), [3 * n, 3]);
    assert_eq!(batch.aux.radius().dims(), [3 * n, 2]);
    let mut loss = None;
    for c in 0..3 {
        let rgb = batch.rgb.clone().narrow(0, c, 1).reshape([h, w, 3]);
        let alpha = batch.alpha.clone().narrow(0, c, 1).reshape([h, w]);
        let l = view_loss(rgb, alpha, c);
        loss = Some(match loss {
            None => l,
            Some(acc) => acc + l,
        });
    }
    let grads = loss.unwrap().backward();
    let batch_params = param_grads(&field, &grads);
    let batch_screen = host(batch.aux.screen_grads.grad(&grads).unwrap())[3 * n..6 * n].to_vec();
    let batch_radius = host_int(batch.aux.radius().inner());

    let single_field = field_of::<Autodiff<B>>(&scene, device);
    let singles: Vec<_> = cameras
        .iter()
        .map(|camera| render(&single_field, camera, &options).unwrap())
        .collect();
    let stacked = |f: &dyn Fn(&ember_field::RenderOutput<Autodiff<B>>) -> Vec<f64>| {
        singles.iter().flat_map(f).collect::<Vec<f64>>()
    };
    assert_eq!(
        host(batch.rgb.clone().inner()),
        stacked(&|o| host(o.rgb.clone().inner()))
    );
    assert_eq!(
        host(batch.alpha.clone().inner()),
        stacked(&|o| host(o.alpha.clone().inner()))
    );
    assert_eq!(
        host(batch.depth.clone().inner()),
        stacked(&|o| host(o.depth.clone().inner()))
    );
    let mut loss = None;
    for (c, o) in singles.iter().enumerate() {
        let l = view_loss(o.rgb.clone(), o.alpha.clone(), c);
        loss = Some(match loss {
            None => l,
            Some(acc) => acc + l,
        });
    }
    let grads = loss.unwrap().backward();
    let single_params = param_grads(&single_field, &grads);
    let single_screen = host(singles[1].aux.screen_grads.grad(&grads).unwrap());
    let single_radius: Vec<i64> = singles
        .iter()
        .flat_map(|o| host_int(o.aux.radius().inner()))
        .collect();
    assert_eq!(batch_radius, single_radius, "{label}: radii");
    for ((name, batch), single) in GRAD_NAMES.iter().zip(&batch_params).zip(&single_params) {
        assert!(
            batch.iter().any(|&g| g != 0.0),
            "{label}: no {name} gradient"
        );
        let err = rel_err(batch, single);
        assert!(err < 1e-5, "{label}: d/d{name}, relative error {err}");
    }
    let err = rel_err(&batch_screen, &single_screen);
    assert!(
        err < 1e-5,
        "{label}: camera 1 screen gradient, relative error {err}"
    );
}

/// A field without higher SH bands (`sh_rest` `[N, 0, 3]`, which the projection takes as it
/// is) renders, with every gradient, as the same field with band 1 stored but not evaluated.
/// The gradients agree to `grad_tolerance` (relative): tight on the CPU, looser on a GPU,
/// whose backward adds with atomics in no fixed order.
fn degree_zero_field_renders_like_an_unused_band<B: SplatBackend>(
    label: &str,
    device: &B::Device,
    grad_tolerance: f64,
) {
    let mut rng = fresh_rng(label);
    let scene = random_scene(&mut rng, 50);
    let camera = test_camera(&mut rng, 40, 31);
    let weights = random_weights(&mut rng, &camera);
    let options = RenderOptions::default().with_background([0.1, 0.5, 0.3]);
    let bare = Scene {
        sh: split_sh(&scene.sh, scene.k).0,
        k: 1,
        ..scene.clone()
    };
    let got = run::<B>(&bare, &camera, &options, &weights, device);
    let want = run::<B>(
        &scene,
        &camera,
        &options.with_sh_degree(0),
        &weights,
        device,
    );
    assert!(got.alpha.iter().any(|&a| a > 0.1), "{label}: nothing drawn");
    for (name, a, b) in [
        ("rgb", &got.rgb, &want.rgb),
        ("alpha", &got.alpha, &want.alpha),
        ("depth", &got.depth, &want.depth),
        ("screen", &got.screen, &want.screen),
    ] {
        let err = rel_err(a, b);
        assert!(err < 1e-6, "{label}: {name}, relative error {err}");
    }
    let (want_dc, want_rest) = split_sh(&want.grads[4], scene.k);
    assert!(want_rest.iter().all(|&g| g == 0.0), "{label}: unused band");
    let pairs = got.grads[..4].iter().zip(&want.grads[..4]);
    for (name, (a, b)) in GRAD_NAMES
        .iter()
        .zip(pairs.chain([(&got.grads[4], &want_dc)]))
    {
        assert!(b.iter().any(|&g| g != 0.0), "{label}: no {name} gradient");
        let err = rel_err(a, b);
        assert!(
            err < grad_tolerance,
            "{label}: d/d{name}, relative error {err}"
        );
    }
}

#[test]
fn degree_zero_field_renders_cpu() {
    degree_zero_field_renders_like_an_unused_band::<Cpu>(
        "render_degree_zero_cpu",
        &Default::default(),
        1e-6,
    );
}

// No CUDA variant: Burn 0.21's CUDA backend cannot create the `[N, 0, 3]` tensor at all.
#[cfg(feature = "wgpu")]
#[test]
fn degree_zero_field_renders_wgpu() {
    // Seen up to 1.8e-6 from the order of the atomic adds (as the batch test allows 1e-5).
    degree_zero_field_renders_like_an_unused_band::<WgpuFused>(
        "render_degree_zero_wgpu",
        &Default::default(),
        1e-5,
    );
}

#[test]
fn render_batch_matches_single_renders_cpu() {
    batch_matches_single_renders::<Cpu>("render batch cpu", &Default::default());
}

#[cfg(feature = "wgpu")]
#[test]
fn render_batch_matches_single_renders_wgpu() {
    batch_matches_single_renders::<WgpuFused>("render batch wgpu", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn render_batch_matches_single_renders_cuda() {
    batch_matches_single_renders::<CudaFused>("render batch cuda", &Default::default());
}

/// A backend without autodiff draws through `RasterOps::rasterize_images` (the images alone,
/// no replay state; on ndarray built in their final shapes): its images equal the tracked
/// forward's under `Autodiff`, bit for bit, for one view and for a batch.
fn plain_render_matches_tracked<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    let scene = random_scene(&mut rng, 60);
    let cameras: Vec<Camera> = (0..3).map(|_| test_camera(&mut rng, 37, 29)).collect();
    let options = RenderOptions::default().with_background([0.2, 0.4, 0.6]);
    let plain = field_of::<B>(&scene, device);
    let tracked = field_of::<Autodiff<B>>(&scene, device);
    let got = render(&plain, &cameras[0], &options).unwrap();
    let want = render(&tracked, &cameras[0], &options).unwrap();
    assert!(
        host(got.alpha.clone()).iter().any(|&a| a > 0.1),
        "{label}: nothing drawn"
    );
    assert_eq!(got.rgb.dims(), want.rgb.dims(), "{label}: rgb shape");
    assert_eq!(host(got.rgb), host(want.rgb.inner()), "{label}: rgb");
    assert_eq!(host(got.alpha), host(want.alpha.inner()), "{label}: alpha");
    assert_eq!(host(got.depth), host(want.depth.inner()), "{label}: depth");
    let got = render_batch(&plain, &cameras, &options).unwrap();
    let want = render_batch(&tracked, &cameras, &options).unwrap();
    // The images alone are the same images.
    let images = render_batch_images(&plain, &cameras, &options).unwrap();
    assert_eq!(
        host(images.rgb),
        host(got.rgb.clone()),
        "{label}: images rgb"
    );
    assert_eq!(
        host(images.alpha),
        host(got.alpha.clone()),
        "{label}: images alpha"
    );
    assert_eq!(got.rgb.dims(), want.rgb.dims(), "{label}: batch rgb shape");
    assert_eq!(host(got.rgb), host(want.rgb.inner()), "{label}: batch rgb");
    assert_eq!(
        host(got.alpha),
        host(want.alpha.inner()),
        "{label}: batch alpha"
    );
    assert_eq!(
        host(got.depth),
        host(want.depth.inner()),
        "{label}: batch depth"
    );
}

#[test]
fn plain_render_matches_tracked_cpu() {
    plain_render_matches_tracked::<Cpu>("plain render cpu", &Default::default());
    plain_render_matches_tracked::<Cpu64>("plain render cpu f64", &Default::default());
}

#[cfg(feature = "wgpu")]
#[test]
fn plain_render_matches_tracked_wgpu() {
    plain_render_matches_tracked::<WgpuFused>("plain render wgpu", &Default::default());
}

#[test]
fn render_batch_refuses_bad_camera_lists_and_draws_empty_fields() {
    let mut rng = fresh_rng("render batch errors");
    let device = Default::default();
    let field = field_of::<Cpu>(&random_scene(&mut rng, 5), &device);
    let options = RenderOptions::default();
    assert!(matches!(
        render_batch(&field, &[], &options),
        Err(RenderError::NoCameras)
    ));
    let cameras = [test_camera(&mut rng, 20, 10), test_camera(&mut rng, 21, 10)];
    match render_batch(&field, &cameras, &options) {
        Err(RenderError::BatchSize {
            index: 1,
            width: 21,
            height: 10,
            first_width: 20,
            first_height: 10,
        }) => {}
        other => panic!("expected a batch size error, got {other:?}"),
    }
    let empty = field_of::<Cpu>(&random_scene(&mut rng, 0), &device);
    let cameras = [test_camera(&mut rng, 6, 4), test_camera(&mut rng, 6, 4)];
    let background = [0.1, 0.7, 0.3];
    let out = render_batch(&empty, &cameras, &options.with_background(background)).unwrap();
    assert_eq!(out.rgb.dims(), [2, 4, 6, 3]);
    let rgb = host(out.rgb);
    for (i, v) in rgb.iter().enumerate() {
        assert!(
            (v - f64::from(background[i % 3])).abs() < 1e-7,
            "rgb[{i}] = {v}"
        );
    }
    assert!(host(out.alpha).iter().all(|&a| a == 0.0));
    let images =
        render_batch_images(&empty, &cameras, &options.with_background(background)).unwrap();
    assert_eq!(host(images.rgb), rgb);
    assert_eq!(images.alpha.dims(), [2, 4, 6]);
    assert!(host(images.alpha).iter().all(|&a| a == 0.0));
    assert!(matches!(
        render_batch_images(&field, &[], &options),
        Err(RenderError::NoCameras)
    ));
}

// ---- tile lists of a given length, and their overflow ----
