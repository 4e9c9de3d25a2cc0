//! `RenderBackward::weighted_coverage`: each Gaussian's blend weight summed over weighted
//! pixels. The blend weights of a pixel add up to its alpha (`sum_i alpha_i T_i = 1 - T`), so
//! the coverage of all Gaussians under any pixel weights `m` is `sum_p m_p alpha_p`, view by
//! view; a Gaussian no view draws covers nothing.

use burn::tensor::{Tensor, TensorData};
use ember_field::{Camera, RenderOptions, render_batch, render_pass};
use ember_kernels::SplatBackend;

use crate::common::{fresh_rng, uniform};
use crate::render::{field_of, float_dtype, host, random_scene, test_camera};

fn coverage_adds_up_to_the_weighted_alpha<B: SplatBackend>(label: &str, device: &B::Device) {
    let mut rng = fresh_rng(label);
    let n = 80;
    let scene = random_scene(&mut rng, n);
    let (width, height) = (41, 33);
    let cameras: Vec<Camera> = (0..2)
        .map(|_| test_camera(&mut rng, width, height))
        .collect();
    let (h, w) = (height as usize, width as usize);
    let weights = uniform(&mut rng, 2 * h * w, 0.0, 1.0);
    let options = RenderOptions::default().with_background([0.3, 0.1, 0.7]);
    let field = field_of::<B>(&scene, device);

    let alpha = host(render_batch(&field, &cameras, &options).unwrap().alpha);
    let pass = render_pass(&field, &cameras, &options).unwrap();
    let m = Tensor::<B, 1>::from_data(
        TensorData::new(weights.clone(), [2 * h * w]),
        (device, float_dtype::<B>()),
    )
    .reshape([2, h, w]);
    let coverage = host(pass.backward.weighted_coverage(m).unwrap());
    assert_eq!(coverage.len(), 2 * n);
    for view in 0..2 {
        let pixels = view * h * w..(view + 1) * h * w;
        let want: f64 = pixels.clone().map(|p| weights[p] * alpha[p]).sum();
        let got: f64 = coverage[view * n..(view + 1) * n].iter().sum();
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{label} view {view}: coverage {got} against weighted alpha {want}"
        );
        for (i, c) in coverage[view * n..(view + 1) * n].iter().enumerate() {
            assert!(*c >= -1e-6, "{label}: Gaussian {i} covers {c}");
            // `random_scene` puts every 37th Gaussian from the 5th behind the camera.
            if i % 37 == 5 {
                assert_eq!(*c, 0.0, "{label}: Gaussian {i} is behind the camera");
            }
        }
    }
}

#[test]
fn coverage_adds_up_to_the_weighted_alpha_cpu() {
    coverage_adds_up_to_the_weighted_alpha::<crate::render::Cpu>(
        "coverage cpu",
        &Default::default(),
    );
}

#[cfg(feature = "wgpu")]
#[test]
fn coverage_adds_up_to_the_weighted_alpha_wgpu() {
    coverage_adds_up_to_the_weighted_alpha::<crate::render::WgpuFused>(
        "coverage wgpu",
        &Default::default(),
    );
}
