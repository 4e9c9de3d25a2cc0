//! `render_panorama` both ways: the sphere's projection against the cube's stitched faces, the
//! same panorama on every compiled backend, an empty field, and the size check; `panorama_pass`
//! against it and its gradients against f64 central differences.

use ember_field::{
    Camera, PanoramaProjection, RenderError, RenderOptions, panorama_pass, render_panorama,
};
use ember_kernels::SplatBackend;
use ember_kernels::backend::Cpu64;
use rand::RngExt;
use rand::rngs::StdRng;

use crate::common::{fresh_rng, join_sh, rel_err, uniform};
use crate::render::{Cpu, GRAD_NAMES, Scene, field_of, float_dtype, host};

/// No Gaussian, SH degree 0.
fn empty_scene() -> Scene {
    Scene {
        means: Vec::new(),
        quats: Vec::new(),
        log_scales: Vec::new(),
        logits: Vec::new(),
        sh: Vec::new(),
        k: 1,
    }
}

/// 300 Gaussians on a shell of radius 3 to 5 about a camera at the origin, a few degrees each.
fn surrounding_scene(test: &str) -> Scene {
    let mut rng = fresh_rng(test);
    let mut scene = empty_scene();
    for _ in 0..300 {
        let z: f64 = rng.random_range(-1.0..1.0);
        let a: f64 = rng.random_range(0.0..std::f64::consts::TAU);
        let r = rng.random_range(3.0..5.0);
        let s = (1.0 - z * z).sqrt();
        scene
            .means
            .extend([r * s * a.cos(), r * z, r * s * a.sin()]);
        scene
            .quats
            .extend((0..4).map(|_| rng.random_range(-1.0..1.0)));
        scene
            .log_scales
            .extend((0..3).map(|_| rng.random_range(-2.6..-1.6)));
        scene.logits.push(rng.random_range(0.0..3.0));
        scene.sh.extend((0..3).map(|_| rng.random_range(-1.5..1.5)));
    }
    scene
}

fn camera() -> Camera {
    Camera {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.1, -0.2, 0.05],
        fx: 1.0,
        fy: 1.0,
        cx: 0.0,
        cy: 0.0,
        width: 512,
        height: 256,
    }
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0f64.powi(2) / mse.max(1.0 / 12.0)).log10()
}

fn panorama<B: SplatBackend>(
    scene: &Scene,
    device: &B::Device,
    projection: PanoramaProjection,
) -> Vec<u8> {
    let field = field_of::<B>(scene, device);
    let options = RenderOptions::default().with_background([0.1, 0.2, 0.3]);
    render_panorama(&field, &camera(), 512, projection, &options).expect("the panorama")
}

/// The sphere's panorama and the cube's stitched faces draw the same scene: they differ by the
/// stitch's filtering and where overlapping splats change order across a face's edge.
#[test]
fn the_sphere_and_the_cube_draw_the_same_panorama() {
    let device = Default::default();
    let scene = surrounding_scene("the sphere and the cube");
    let sphere = panorama::<Cpu>(&scene, &device, PanoramaProjection::Sphere);
    let cube = panorama::<Cpu>(&scene, &device, PanoramaProjection::Cube);
    assert_eq!(sphere.len(), 512 * 256 * 3);
    let agree = psnr(&sphere, &cube);
    println!("sphere against cube: {agree:.2} dB");

    // Over 201 seeds: median 40.8 dB, lowest 31.6 (a seed where several large splats change
    // order across a face's edge); 34 dB failed 3 of them.
    assert!(agree > 30.0, "sphere against cube: {agree:.1} dB");
    assert_eq!(
        sphere,
        panorama::<Cpu>(&scene, &device, PanoramaProjection::Sphere),
        "deterministic on the CPU"
    );
}

/// No Gaussian: the background everywhere. An odd width is refused by name.
#[test]
fn an_empty_field_draws_the_background_and_a_bad_width_is_refused() {
    let device = Default::default();
    let field = field_of::<Cpu>(&empty_scene(), &device);
    let options = RenderOptions::default().with_background([0.0, 1.0, 0.0]);
    let rgb = render_panorama(&field, &camera(), 64, PanoramaProjection::Sphere, &options)
        .expect("an empty panorama");
    assert!(rgb.chunks_exact(3).all(|p| p == [0, 255, 0]));
    let field = field_of::<Cpu>(&surrounding_scene("a bad width"), &device);
    for projection in [PanoramaProjection::Sphere, PanoramaProjection::Cube] {
        let err = render_panorama(&field, &camera(), 63, projection, &options);
        assert!(matches!(err, Err(RenderError::PanoramaSize { width: 63 })));
    }
}

/// A 64x32 panorama of a dozen large Gaussians around the camera (each pixel they reach sees
/// them well inside their extents, so no alpha threshold sits within a step), one of them
/// across the back meridian (drawn on both edges), SH degree 1.
fn wide_scene(rng: &mut StdRng) -> Scene {
    let mut scene = Scene {
        k: 4,
        ..empty_scene()
    };
    let longitudes: Vec<f64> = (0..11)
        .map(|j| -2.9 + 0.52 * f64::from(j))
        .chain([std::f64::consts::PI - 0.05])
        .collect();
    for lon in longitudes {
        let lat: f64 = rng.random_range(-0.5..0.5);
        let r = rng.random_range(2.0..3.0);
        let p = [
            r * lat.cos() * lon.sin(),
            -r * lat.sin(),
            r * lat.cos() * lon.cos(),
        ];
        // The camera's centre is `-t` (identity rotation).
        let t = camera().translation;
        scene.means.extend((0..3).map(|a| p[a] - t[a]));
        scene.quats.extend(uniform(rng, 4, -1.0, 1.0));
        scene.log_scales.extend(uniform(rng, 3, -0.9, -0.5));
        scene.logits.push(rng.random_range(-1.0..0.5));
        scene.sh.extend(uniform(rng, 12, -0.8, 0.8));
    }
    scene
}

/// `panorama_pass` draws `render_panorama`'s sphere, and its gradients (the rasterizer's
/// backward, then the sphere's projection backward on the host, the copy's rows added into
/// their Gaussian) match f64 central differences of a weighted sum of the panorama's colour.
#[test]
fn the_panorama_pass_gradients_match_central_differences() {
    let mut rng = fresh_rng("panorama pass gradients");
    let scene = wide_scene(&mut rng);
    let camera = Camera {
        width: 64,
        height: 32,
        ..camera()
    };
    let options = RenderOptions::default().with_background([0.3, 0.1, 0.6]);
    let device = Default::default();
    let weights = uniform(&mut rng, 64 * 32 * 3, -1.0, 1.0);
    let draw = |s: &Scene| {
        let field = field_of::<Cpu64>(s, &device);
        match panorama_pass(&field, &camera, &options) {
            Ok(pass) => pass,
            Err(e) => panic!("the panorama pass refused a valid scene: {e}"),
        }
    };
    let pass = draw(&scene);
    let drawn: Vec<u8> = host(pass.rgb.clone())
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let field = field_of::<Cpu64>(&scene, &device);
    let sphere = render_panorama(&field, &camera, 64, PanoramaProjection::Sphere, &options)
        .expect("the panorama");
    // The pass rasterizes with the backward's forward, `render_panorama` with the images-only
    // one: the same sums, but a value at a half level may round to either side.
    let worst = drawn.iter().zip(&sphere).map(|(a, b)| a.abs_diff(*b)).max();
    assert_eq!(drawn.len(), sphere.len());
    assert!(
        worst <= Some(1),
        "the pass draws the sphere's panorama: {worst:?} levels off"
    );
    let grad_rgb = burn::tensor::Tensor::from_data(
        burn::tensor::TensorData::new(weights.clone(), [32, 64, 3]),
        (&device, float_dtype::<Cpu64>()),
    );
    let g = match pass.backward.run(grad_rgb) {
        Ok(g) => g,
        Err(e) => panic!("the panorama pass's backward failed: {e}"),
    };
    let got = [
        host(g.means),
        host(g.quats),
        host(g.log_scales),
        host(g.opacity_logits),
        join_sh(&host(g.sh_dc), &host(g.sh_rest)),
    ];
    let loss = |s: &Scene| -> f64 {
        let rgb = host(draw(s).rgb);
        rgb.iter().zip(&weights).map(|(x, w)| x * w).sum()
    };
    fn select(s: &mut Scene, which: usize) -> &mut Vec<f64> {
        match which {
            0 => &mut s.means,
            1 => &mut s.quats,
            2 => &mut s.log_scales,
            3 => &mut s.logits,
            _ => &mut s.sh,
        }
    }
    let slope = |which: usize, j: usize, eps: f64| {
        let (mut plus, mut minus) = (scene.clone(), scene.clone());
        select(&mut plus, which)[j] += eps;
        select(&mut minus, which)[j] -= eps;
        (loss(&plus) - loss(&minus)) / (2.0 * eps)
    };
    for (which, name) in GRAD_NAMES.iter().enumerate() {
        // A pixel whose alpha crosses 1/255 within a step makes a jump, not a slope: where the
        // differences over two steps disagree, the element is left out (about one run in 60
        // meets one, one in a few hundred two; a wrong gradient disagrees everywhere).
        let per = got[which].len() / scene.n();
        let mut got = got[which].clone();
        let mut numeric = Vec::with_capacity(got.len());
        let mut jumps = 0;
        for j in (0..got.len()).rev() {
            let (wide, narrow) = (slope(which, j, 1e-6), slope(which, j, 5e-7));
            if (wide - narrow).abs() > 1e-6 * (1.0 + wide.abs()) {
                jumps += 1;
                got.remove(j);
            } else {
                numeric.push(wide);
            }
        }
        numeric.reverse();
        assert!(jumps <= 3, "{name}: {jumps} elements sit on a threshold");
        let err = rel_err(&got, &numeric);
        println!("{name}: relative error {err:.2e}, {jumps} elements on a threshold");
        assert!(
            err < 1e-5,
            "{name}: the pass's backward vs central differences {err:.2e}"
        );
        // The Gaussian across the back meridian (the last) moves the loss.
        let last = &numeric[numeric.len() - per..];
        assert!(
            last.iter().any(|v| v.abs() > 1e-6),
            "{name}: the wrapped Gaussian"
        );
    }
}

/// The sphere's panorama on a GPU backend (projected on the host, rasterized on the device)
/// against the CPU's, to within the rasterizer's float differences.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn matches_cpu<B: SplatBackend>(name: &str, device: &B::Device) {
    let scene = surrounding_scene(name);
    let cpu = panorama::<Cpu>(&scene, &Default::default(), PanoramaProjection::Sphere);
    let gpu = panorama::<B>(&scene, device, PanoramaProjection::Sphere);
    let worst = cpu
        .iter()
        .zip(&gpu)
        .map(|(a, b)| a.abs_diff(*b))
        .max()
        .unwrap_or(0);
    assert!(worst <= 2, "{name}: a channel differs by {worst} levels");
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_sphere_panorama_matches_cpu() {
    matches_cpu::<crate::render::WgpuFused>("wgpu (fusion)", &Default::default());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_sphere_panorama_matches_cpu() {
    matches_cpu::<crate::render::CudaFused>("cuda (fusion)", &Default::default());
}
