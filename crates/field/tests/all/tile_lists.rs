//! The GPU's tile lists of a capacity fixed in advance (`RenderOptions::tile_pairs`): the pairs
//! past the lists composited from the depth order, on every compiled backend.

use burn::backend::Autodiff;
use burn::tensor::{Tensor, TensorData};
use ember_field::{Camera, RenderOptions, render_batch};
use ember_kernels::SplatBackend;

use crate::common::{fresh_rng, rel_err};
#[cfg(feature = "cuda")]
use crate::render::CudaFused;
use crate::render::{
    Cpu, GRAD_NAMES, Rendered, Scene, Weights, field_of, float_dtype, host, host_int, param_grads,
    random_scene, random_weights, test_camera,
};
#[cfg(feature = "wgpu")]
use crate::render::{WgpuFused, WgpuPlain};

/// Renders `scene` through `cameras` as a batch under autodiff with lists of `tile_pairs`
/// entries: the images, every gradient of a weighted loss of colour, alpha and depth, and the
/// `[2]` pair counts.
fn run_batch_with_lists<B: SplatBackend>(
    scene: &Scene,
    cameras: &[Camera],
    weights: &[Weights],
    tile_pairs: Option<u32>,
    device: &B::Device,
) -> (Rendered, Vec<i64>) {
    let field = field_of::<Autodiff<B>>(scene, device);
    let options = RenderOptions::default()
        .with_background([0.2, 0.5, 0.9])
        .with_tile_pairs(tile_pairs);
    let out = render_batch(&field, cameras, &options).unwrap();
    let (h, w) = (cameras[0].height as usize, cameras[0].width as usize);
    let mut loss = None;
    for (c, weights) in weights.iter().enumerate() {
        let wt = |v: &[f64]| {
            Tensor::<Autodiff<B>, 1>::from_data(
                TensorData::new(v.to_vec(), [v.len()]),
                (device, float_dtype::<B>()),
            )
        };
        let rgb = out.rgb.clone().narrow(0, c, 1).reshape([h, w, 3]);
        let alpha = out.alpha.clone().narrow(0, c, 1).reshape([h, w]);
        let depth = out.depth.clone().narrow(0, c, 1).reshape([h, w]);
        let l = (rgb * wt(&weights.rgb).reshape([h, w, 3])).sum()
            + (alpha.clone() * wt(&weights.alpha).reshape([h, w])).sum()
            + (alpha * depth * wt(&weights.depth).reshape([h, w])).sum();
        loss = Some(match loss {
            None => l,
            Some(sum) => sum + l,
        });
    }
    let grads = loss.unwrap().backward();
    let pairs = host_int(
        out.aux
            .tile_pairs
            .clone()
            .expect("a tracked render keeps its counts")
            .inner(),
    );
    (
        Rendered {
            rgb: host(out.rgb.inner()),
            alpha: host(out.alpha.inner()),
            depth: host(out.depth.inner()),
            grads: param_grads(&field, &grads),
            screen: host(out.aux.screen_grads.grad(&grads).unwrap()),
        },
        pairs,
    )
}

/// Lists sized exactly, sized with room to spare, too short by a little or a lot, or empty,
/// draw the same images bit for bit (the pairs past the lists are walked in the same depth
/// order), and give the same gradients up to the order of the GPU's atomic additions; the
/// counts say how many pairs the views made and how many rows the lists held.
fn lists_of_any_length_render_the_same<B: SplatBackend>(
    label: &str,
    device: &B::Device,
    grad_tolerance: f64,
    gpu: bool,
) {
    let mut rng = fresh_rng(label);
    let n = 300;
    let scene = random_scene(&mut rng, n);
    let cameras: Vec<Camera> = (0..2).map(|_| test_camera(&mut rng, 45, 37)).collect();
    let weights: Vec<Weights> = cameras
        .iter()
        .map(|c| random_weights(&mut rng, c))
        .collect();
    let (exact, pairs) = run_batch_with_lists::<B>(&scene, &cameras, &weights, None, device);
    let rows = 2 * n as i64;
    assert_eq!(pairs[1], rows, "{label}: exact lists hold every row");
    assert!(pairs[0] > 0, "{label}: no pairs");
    assert!(
        exact.alpha.iter().any(|&a| a > 0.1),
        "{label}: nothing drawn"
    );
    let m = pairs[0] as u32;
    for capacity in [2 * m, m, m - m / 10, m / 3, 1, 0] {
        let (got, got_pairs) =
            run_batch_with_lists::<B>(&scene, &cameras, &weights, Some(capacity), device);
        assert_eq!(got_pairs[0], pairs[0], "{label} {capacity}: pair count");
        let listed = got_pairs[1];
        if capacity >= m {
            assert_eq!(listed, rows, "{label} {capacity}: every row listed");
        } else if gpu {
            assert!(
                listed < rows,
                "{label} {capacity}: {listed} rows listed of {rows}"
            );
        } else {
            assert_eq!(listed, rows, "{label} {capacity}: the CPU lists every row");
        }
        assert_eq!(got.rgb, exact.rgb, "{label} {capacity}: rgb");
        assert_eq!(got.alpha, exact.alpha, "{label} {capacity}: alpha");
        assert_eq!(got.depth, exact.depth, "{label} {capacity}: depth");
        let mut errors = vec![("screen_grads", rel_err(&got.screen, &exact.screen))];
        for (name, (g, w)) in GRAD_NAMES.iter().zip(got.grads.iter().zip(&exact.grads)) {
            errors.push((name, rel_err(g, w)));
        }
        for (name, err) in errors {
            assert!(
                err <= grad_tolerance,
                "{label} {capacity}: {name} differs from the exact lists' by {err:.2e}"
            );
        }
    }
}

#[test]
fn lists_of_any_length_render_the_same_cpu() {
    // The CPU bins exactly whatever the setup says: the same bits.
    lists_of_any_length_render_the_same::<Cpu>("lists cpu", &Default::default(), 0.0, false);
}

#[cfg(feature = "wgpu")]
#[test]
fn lists_of_any_length_render_the_same_wgpu() {
    lists_of_any_length_render_the_same::<WgpuFused>("lists wgpu", &Default::default(), 1e-5, true);
    lists_of_any_length_render_the_same::<WgpuPlain>(
        "lists wgpu (cube)",
        &Default::default(),
        1e-5,
        true,
    );
}

#[cfg(feature = "cuda")]
#[test]
fn lists_of_any_length_render_the_same_cuda() {
    lists_of_any_length_render_the_same::<CudaFused>("lists cuda", &Default::default(), 1e-5, true);
}
