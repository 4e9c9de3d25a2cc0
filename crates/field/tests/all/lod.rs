//! Level of detail through the public API: threshold 0 draws exactly what `render` draws of the
//! leaves (bit for bit on the CPU), far views draw far fewer Gaussians at a small error, a camera
//! moving away changes the image smoothly (no pop where nodes merge), and every compiled GPU
//! backend draws the CPU's cut.

use burn::tensor::backend::Backend;
use ember_data::{HierarchyConfig, Splats};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use ember_field::render_lod_images;
use ember_field::splats::field_from_splats;
use ember_field::{
    Camera, DEFAULT_LOD_THRESHOLD, GaussianField, GaussianHierarchy, RenderOptions, drawn_cut,
    lod_cut, render, render_lod,
};
use ember_kernels::SplatBackend;

use crate::render::Cpu;

/// A textured, gently curved sheet of `side x side` small Gaussians around the origin (the kind
/// of surface a trained capture is made of), SH degree 1.
fn sheet(side: usize) -> Splats {
    let n = side * side;
    let mut s = Splats {
        sh_degree: 1,
        ..Splats::default()
    };
    let spacing = 2.0 / side as f32;
    for i in 0..n {
        let (u, v) = ((i % side) as f32, (i / side) as f32);
        let (x, y) = (u * spacing - 1.0, v * spacing - 1.0);
        s.means
            .push([x, y, 0.15 * (3.0 * x).sin() * (2.0 * y).cos()]);
        let turn = 0.3 * (u * 0.37).sin();
        s.quats.push([turn.cos(), 0.0, 0.0, turn.sin()]);
        s.log_scales.push([
            (0.8 * spacing).ln(),
            (0.6 * spacing).ln(),
            (0.1 * spacing).ln(),
        ]);
        s.opacity_logits.push(1.5 + (u * 0.11 + v * 0.07).sin());
        s.sh_dc.push([
            (x * 4.0).sin() * 1.2,
            (y * 5.0).cos() * 1.2,
            ((x + y) * 3.0).sin(),
        ]);
        s.sh_rest
            .extend((0..9).map(|j| 0.1 * ((i + j) as f32 * 0.3).sin()));
    }
    s
}

/// Looking at the origin from `distance` along a slanted axis.
fn camera(distance: f64, width: u32, height: u32) -> Camera {
    let eye = [0.35 * distance, -0.25 * distance, -distance * 0.9];
    let norm = |v: [f64; 3]| {
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        v.map(|x| x / n)
    };
    let cross = |a: [f64; 3], b: [f64; 3]| {
        [
            a[1] * b[2] - a[2] * b[1],
            a[2] * b[0] - a[0] * b[2],
            a[0] * b[1] - a[1] * b[0],
        ]
    };
    let forward = norm(eye.map(|v| -v));
    let right = norm(cross(forward, [0.0, -1.0, 0.0]));
    let down = cross(forward, right);
    let f = f64::from(height) / (2.0 * 25f64.to_radians().tan());
    Camera {
        rotation: [right, down, forward].concat().try_into().unwrap(),
        translation: [0.0; 3],
        fx: f,
        fy: f,
        cx: f64::from(width) / 2.0,
        cy: f64::from(height) / 2.0,
        width,
        height,
    }
    .with_center(eye)
}

fn pixels<B: Backend>(t: burn::tensor::Tensor<B, 3>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

fn psnr(a: &[f32], b: &[f32]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (1.0 / mse.max(1e-20)).log10()
}

fn hierarchy_of<B: SplatBackend>(
    splats: &Splats,
    device: &B::Device,
) -> (GaussianField<B>, GaussianHierarchy<B>) {
    let field = field_from_splats::<B>(splats, device).unwrap();
    let hierarchy = field.hierarchy(&HierarchyConfig::default()).unwrap();
    (field, hierarchy)
}

#[test]
fn threshold_zero_is_todays_render_bit_for_bit() {
    let device = Default::default();
    let (field, hierarchy) = hierarchy_of::<Cpu>(&sheet(40), &device);
    assert_eq!(hierarchy.leaves, 1600);
    for distance in [1.5, 4.0, 12.0] {
        let cam = camera(distance, 96, 72);
        let options = RenderOptions::default();
        let want = render(&field, &cam, &options).unwrap();
        let got = render_lod(&hierarchy, &cam, &options).unwrap();
        assert_eq!(pixels(got.rgb), pixels(want.rgb), "distance {distance}");
        assert_eq!(
            got.alpha.into_data().into_vec::<f32>().unwrap(),
            want.alpha.into_data().into_vec::<f32>().unwrap()
        );
        // Close enough that every node opens: the leaves again, the same bits.
        let near = render_lod(
            &hierarchy,
            &camera(0.3, 96, 72),
            &options.with_lod_threshold(1e-3),
        )
        .unwrap();
        let full = render(&field, &camera(0.3, 96, 72), &options).unwrap();
        assert_eq!(pixels(near.rgb), pixels(full.rgb));
    }
}

#[test]
fn far_views_draw_fewer_gaussians_at_a_small_error() {
    let device = Default::default();
    let (field, hierarchy) = hierarchy_of::<Cpu>(&sheet(60), &device);
    // A threshold of one pixel: the sheet's colours change every few Gaussians, a harder
    // scene than a trained capture (whose default is `DEFAULT_LOD_THRESHOLD`).
    let options = RenderOptions::default().with_lod_threshold(1.0);
    let mut drawn = Vec::new();
    for distance in [2.0, 4.0, 8.0, 16.0, 32.0] {
        let cam = camera(distance, 160, 120);
        let cut = lod_cut(&hierarchy, &cam, options.lod_threshold).unwrap();
        let full = pixels(render(&field, &cam, &options).unwrap().rgb);
        let lod = pixels(render(&cut.field, &cam, &options).unwrap().rgb);
        let p = psnr(&lod, &full);
        println!("distance {distance}: PSNR {p:.1} dB against the full render");
        assert!(
            p > 33.0,
            "distance {distance}: PSNR {p:.1} dB against the full render"
        );
        assert_eq!(cut.field.num_gaussians(), cut.drawn());
        drawn.push(cut.drawn());
    }
    // A node near the threshold is drawn with its children (the blend), so a uniform sheet,
    // whose nodes of one level all reach the threshold together, draws more than its leaves
    // at one distance; beyond it, far fewer.
    println!(
        "drawn at 2, 4, 8, 16, 32: {drawn:?} of {} leaves",
        hierarchy.leaves
    );
    assert!(drawn[3] < drawn[0] && drawn[4] < drawn[3], "{drawn:?}");
    assert!(
        drawn[4] * 4 < hierarchy.leaves,
        "{drawn:?} of {}",
        hierarchy.leaves
    );
}

#[test]
fn a_cut_that_saves_little_is_drawn_as_the_leaves() {
    let device = Default::default();
    let (field, hierarchy) = hierarchy_of::<Cpu>(&sheet(40), &device);
    let options = RenderOptions::default()
        .with_lod_threshold(1.0)
        .with_lod_min_saving(0.5);
    let mut seen = [false; 2];
    for distance in [2.0, 32.0] {
        let cam = camera(distance, 96, 72);
        let exact = lod_cut(&hierarchy, &cam, 1.0).unwrap().drawn();
        let drawn = drawn_cut(&hierarchy, &cam, &options).unwrap();
        let saves_little = exact * 2 > hierarchy.leaves;
        seen[usize::from(saves_little)] = true;
        if saves_little {
            assert_eq!(drawn.drawn(), hierarchy.leaves, "distance {distance}");
            let want = pixels(render(&field, &cam, &options).unwrap().rgb);
            let got = pixels(render_lod(&hierarchy, &cam, &options).unwrap().rgb);
            assert_eq!(got, want, "distance {distance}: the leaves, bit for bit");
        } else {
            assert_eq!(drawn.drawn(), exact, "distance {distance}: the cut itself");
        }
    }
    assert_eq!(seen, [true, true], "both cases should occur");
}

#[test]
fn the_bound_on_left_out_leaves_holds_in_every_view_and_is_tight_up_close() {
    let device = Default::default();
    let (_, hierarchy) = hierarchy_of::<Cpu>(&sheet(60), &device);
    let l = hierarchy.leaves;
    let mut near_bound = None;
    for threshold in [0.5f32, 1.0, 4.0] {
        for distance in [0.3, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0] {
            let cam = camera(distance, 160, 120);
            let weights = lod_cut(&hierarchy, &cam, threshold)
                .unwrap()
                .weights
                .into_data()
                .into_vec::<f32>()
                .unwrap();
            let left_out = weights[..l].iter().filter(|&&w| w == 0.0).count();
            let bound = hierarchy.merged_leaves_at_most(&cam, threshold);
            println!(
                "tau {threshold}, distance {distance}: {left_out} leaves left out, bound {bound}"
            );
            assert!(
                bound >= left_out && bound <= l,
                "tau {threshold}, distance {distance}: bound {bound}, {left_out} left out"
            );
            if threshold == 1.0 && distance == 1.0 {
                near_bound = Some(bound);
            }
        }
    }
    // Up close the bound alone shows that nothing merges, so the leaves are drawn unweighed.
    assert_eq!(near_bound, Some(0));
    assert_eq!(
        hierarchy.merged_leaves_at_most(&camera(32.0, 160, 120), 0.0),
        0
    );
}

#[test]
fn moving_away_does_not_pop() {
    let device = Default::default();
    let (field, hierarchy) = hierarchy_of::<Cpu>(&sheet(50), &device);
    let options = RenderOptions::default().with_lod_threshold(DEFAULT_LOD_THRESHOLD);
    // The largest change between neighbouring frames, with and without level of detail: the
    // blend keeps the first within a small multiple of the second (a pop is a jump that the
    // camera's own motion does not explain).
    let (mut lod_step, mut full_step) = (0.0f64, 0.0f64);
    let (mut last_lod, mut last_full): (Option<Vec<f32>>, Option<Vec<f32>>) = (None, None);
    for step in 0..48 {
        let cam = camera(3.0 * 1.03f64.powi(step), 80, 60);
        let lod = pixels(render_lod(&hierarchy, &cam, &options).unwrap().rgb);
        let full = pixels(render(&field, &cam, &options).unwrap().rgb);
        let change = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| f64::from((x - y).abs()))
                .sum::<f64>()
                / a.len() as f64
        };
        if let (Some(l), Some(f)) = (&last_lod, &last_full) {
            lod_step = lod_step.max(change(&lod, l));
            full_step = full_step.max(change(&full, f));
        }
        last_lod = Some(lod);
        last_full = Some(full);
    }
    assert!(
        lod_step <= 1.5 * full_step + 2e-3,
        "largest frame-to-frame change {lod_step:.5} with level of detail, {full_step:.5} without"
    );
}

/// The device's cut (every node drawn, opacities scaled) gives the CPU's images.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_matches_cpu<B: SplatBackend>(label: &str) {
    let device = Default::default();
    let splats = sheet(40);
    let (gpu_field, gpu) = hierarchy_of::<B>(&splats, &device);
    let (_, cpu) = hierarchy_of::<Cpu>(&splats, &Default::default());
    for (distance, threshold) in [(2.0, 0.0), (2.0, 1.0), (8.0, 1.0), (20.0, 2.0)] {
        let cam = camera(distance, 96, 72);
        let options = RenderOptions::default().with_lod_threshold(threshold);
        let got = pixels(
            render_lod_images(&gpu, &cam, &options)
                .unwrap()
                .rgb
                .squeeze_dim(0),
        );
        let want = pixels(render_lod(&cpu, &cam, &options).unwrap().rgb);
        let p = psnr(&got, &want);
        assert!(
            p > 60.0,
            "{label}: distance {distance}, threshold {threshold}: PSNR {p:.1} dB"
        );
        if threshold == 0.0 {
            let plain = pixels(render(&gpu_field, &cam, &options).unwrap().rgb);
            let lod = pixels(render_lod(&gpu, &cam, &options).unwrap().rgb);
            assert_eq!(lod, plain, "{label}: threshold 0 against render");
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_lod_matches_cpu() {
    gpu_matches_cpu::<crate::render::WgpuFused>("wgpu");
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_lod_matches_cpu() {
    gpu_matches_cpu::<crate::render::CudaFused>("cuda");
}
