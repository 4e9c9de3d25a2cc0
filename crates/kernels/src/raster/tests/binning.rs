//! Binning, edge cases and determinism.

use super::*;

/// Every Gaussian composited at every pixel (row-major index `i`), depth order, no tiles:
/// calls `draw(i, g, T alpha)` for every Gaussian `g` drawn at `i`, front to back, and returns
/// each pixel's final transmittance.
fn brute_force_walk(
    s: &Splats<f64>,
    width: u32,
    height: u32,
    mut draw: impl FnMut(usize, usize, f64),
) -> Vec<f64> {
    let n = s.opacity.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&p, &q| s.depth[p].total_cmp(&s.depth[q]).then(p.cmp(&q)));
    let mut transmittance = Vec::new();
    for py in 0..height {
        for px in 0..width {
            let i = (py * width + px) as usize;
            let (cx, cy) = (f64::from(px) + 0.5, f64::from(py) + 0.5);
            let mut t = 1.0;
            for &g in &order {
                let (dx, dy) = (cx - s.xy[2 * g], cy - s.xy[2 * g + 1]);
                let [a, b, c] = [s.conic[3 * g], s.conic[3 * g + 1], s.conic[3 * g + 2]];
                let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
                let alpha = (s.opacity[g] * (-sigma).exp()).min(0.999);
                if sigma < 0.0 || alpha < 1.0 / 255.0 {
                    continue;
                }
                let next = t * (1.0 - alpha);
                if next <= 1e-4 {
                    break;
                }
                draw(i, g, t * alpha);
                t = next;
            }
            transmittance.push(t);
        }
    }
    transmittance
}

/// The image [`brute_force_walk`] composites: what the tiled forward must equal when every
/// radius covers the whole image.
fn brute_force(s: &Splats<f64>, width: u32, height: u32, bg: [f64; 3]) -> Vec<f64> {
    let mut rgb = vec![0.0; 3 * (width * height) as usize];
    let t = brute_force_walk(s, width, height, |i, g, w| {
        for ch in 0..3 {
            rgb[3 * i + ch] += w * s.color[3 * g + ch];
        }
    });
    for (i, t) in t.iter().enumerate() {
        for ch in 0..3 {
            rgb[3 * i + ch] += t * bg[ch];
        }
    }
    rgb
}

#[test]
fn tiled_matches_brute_force_on_odd_sizes() {
    let mut rng = fresh_rng("raster tiled_matches_brute_force_on_odd_sizes");
    for (width, height) in [(37u32, 21u32), (16, 16), (17, 1), (1, 40), (1, 1)] {
        let mut s = random_splats(&mut rng, 12, width, height);
        s.radius = vec![1000; s.radius.len()];
        let bins = bin(&s, width, height);
        assert_eq!(bins.tiles_x(), width.div_ceil(16));
        assert_eq!(bins.tiles_y(), height.div_ceil(16));
        let tiles = bins.tiles_x() * bins.tiles_y();
        assert_eq!(tiles_per_gaussian(&bins, 12), vec![tiles; 12]);
        for t in 0..tiles as usize {
            let list = bins.tile(t);
            assert!(
                list.windows(2)
                    .all(|w| s.depth[w[0] as usize] <= s.depth[w[1] as usize])
            );
        }
        let bg = [0.1, 0.5, 0.9];
        let out = forward(&s, &bins, bg);
        let want = brute_force(&s, width, height, bg);
        for (k, (got, want)) in out.rgb.iter().zip(&want).enumerate() {
            assert!(
                (got - want).abs() < 1e-12,
                "{width}x{height} rgb[{k}]: {got} vs {want}"
            );
        }
    }
}

/// `d sum(v_rgb rgb) / d color` by brute force: each Gaussian's weight `T alpha` at every
/// pixel, from [`brute_force_walk`].
fn brute_force_color_grad(s: &Splats<f64>, width: u32, height: u32, v_rgb: &[f64]) -> Vec<f64> {
    let mut grad = vec![0.0; 3 * s.opacity.len()];
    brute_force_walk(s, width, height, |i, g, w| {
        for ch in 0..3 {
            grad[3 * g + ch] += w * v_rgb[3 * i + ch];
        }
    });
    grad
}

/// The compositing skips a Gaussian on every 8-pixel half row its ellipse cannot reach; with
/// many small, thin, rotated splats binned into every tile, most (Gaussian, segment) pairs are
/// skipped, and the image and the colour gradient still equal the brute force's.
#[test]
fn segment_culling_matches_brute_force() {
    let mut rng = fresh_rng("raster segment_culling_matches_brute_force");
    let (width, height) = (53u32, 37u32);
    let n = 160;
    let mut s = random_splats(&mut rng, n, width, height);
    for g in 0..n {
        // Standard deviations from 0.3 to 6 pixels: up to 20:1 ellipses at any angle.
        let conic = random_conic(&mut rng, 0.3, 6.0);
        s.conic[3 * g..3 * g + 3].copy_from_slice(&conic);
    }
    s.radius = vec![1000; 2 * n];
    let bins = bin(&s, width, height);
    let bg = [0.3, 0.2, 0.1];
    let out = forward(&s, &bins, bg);
    let want = brute_force(&s, width, height, bg);
    for (k, (got, want)) in out.rgb.iter().zip(&want).enumerate() {
        assert!((got - want).abs() < 1e-12, "rgb[{k}]: {got} vs {want}");
    }
    let pixels = (width * height) as usize;
    let v_rgb = uniform(&mut rng, 3 * pixels, -1.0, 1.0);
    let zeros = vec![0.0; pixels];
    let grads = RasterOutputGrads {
        rgb: &v_rgb,
        alpha: &zeros,
        depth: &zeros,
    };
    let g = backward(&s, &bins, bg, &out, &grads);
    let want = brute_force_color_grad(&s, width, height, &v_rgb);
    for (k, (got, want)) in g.color.iter().zip(&want).enumerate() {
        assert!(
            (got - want).abs() < 1e-10 * (1.0 + want.abs()),
            "color grad[{k}]: {got} vs {want}"
        );
    }
}

#[test]
fn binning_follows_the_tile_rule() {
    // Tile 16 wide: x = 20, r = 4 covers [16, 24]: tile 1 only; r = 5 reaches tile 0.
    let s = Splats {
        xy: vec![20.0, 8.0, 20.0, 8.0, 20.0, 8.0, 40.0, 40.0],
        depth: vec![3.0, 1.0, 1.0, 2.0],
        conic: [1.0, 0.0, 1.0].repeat(4),
        color: vec![0.5; 12],
        opacity: vec![0.5; 4],
        radius: vec![4, 4, 5, 4, 0, 0, 8, 100],
    };
    let bins = bin(&s, 40, 20);
    assert_eq!((bins.tiles_x(), bins.tiles_y()), (3, 2));
    // Gaussian 0: tiles x 1, y 0 (8 +- 4 in [4, 12]). Gaussian 1: x 0..=1, y 0. Gaussian 2 is
    // culled. Gaussian 3: x 2 ([32, 48] clipped), y 0..=1.
    assert_eq!(tiles_per_gaussian(&bins, 4), vec![1, 2, 0, 2]);
    assert_eq!(bins.tile(0), &[1]);
    assert_eq!(bins.tile(1), &[1, 0]);
    assert_eq!(bins.tile(2), &[3]);
    assert_eq!(bins.tile(5), &[3]);
    assert_eq!(bins.offsets().len(), 7);
    assert_eq!(bins.tile(6), &[] as &[u32]);
}

/// Random scenes (repeated depths, NaN depths, NaN centres, culled and huge boxes, an image
/// of many tile rows, so that boxes straddle the binning's bands) against a brute force: each
/// tile lists the Gaussians whose clipped box covers it, by depth (`total_cmp`), ties by index;
/// for `f64` inputs and for `f32` ones.
#[test]
fn binning_matches_brute_force() {
    let mut rng = fresh_rng("binning_brute_force");
    for (width, height) in [(300u32, 517u32), (17, 16), (1, 200)] {
        let n = 3000;
        let mut xy = uniform(&mut rng, 2 * n, -40.0, f64::from(width.max(height)) + 40.0);
        // A few depths shared by many Gaussians, a few NaN, the rest random.
        let mut depth = uniform(&mut rng, n, 0.5, 4.0);
        for (i, d) in depth.iter_mut().enumerate() {
            match i % 11 {
                0 => *d = 2.0,
                1 if i % 7 == 0 => *d = f64::NAN,
                _ => {}
            }
        }
        xy[2 * 17] = f64::NAN;
        let radius: Vec<u32> = (0..2 * n)
            .map(|k| match rng.random_range(0..20) {
                0 => 0,
                1 => 400,
                _ => rng.random_range(1..40) * u32::from(k % 2 == 0 || rng.random::<bool>()),
            })
            .collect();
        let (tiles_x, tiles_y) = (width.div_ceil(16) as i64, height.div_ceil(16) as i64);
        // Every tile's list by the rule, from `f64` values.
        let reference = |xy: &[f64], depth: &[f64]| {
            let mut want: Vec<Vec<u32>> = vec![Vec::new(); (tiles_x * tiles_y) as usize];
            for i in 0..n {
                let (rx, ry) = (f64::from(radius[2 * i]), f64::from(radius[2 * i + 1]));
                if rx == 0.0 && ry == 0.0 || xy[2 * i].is_nan() || xy[2 * i + 1].is_nan() {
                    continue;
                }
                let span = |c: f64, r: f64, tiles: i64| {
                    let lo = (((c - r) / 16.0).floor() as i64).max(0);
                    let hi = (((c + r) / 16.0).ceil() as i64).min(tiles);
                    lo..hi
                };
                for ty in span(xy[2 * i + 1], ry, tiles_y) {
                    for tx in span(xy[2 * i], rx, tiles_x) {
                        want[(ty * tiles_x + tx) as usize].push(i as u32);
                    }
                }
            }
            for list in &mut want {
                list.sort_by(|&a, &b| {
                    depth[a as usize]
                        .total_cmp(&depth[b as usize])
                        .then(a.cmp(&b))
                });
            }
            want
        };
        let bins = cpu::bin(&xy, &depth, &radius, width, height).expect("valid arrays");
        for (t, list) in reference(&xy, &depth).iter().enumerate() {
            assert_eq!(bins.tile(t), list.as_slice(), "{width}x{height}, tile {t}");
        }
        assert!(
            bins.ids().len() > n / 20,
            "{width}x{height}: too few entries to test"
        );
        // `f32` sorts its depths another way (a radix sort of 32-bit keys).
        let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let (xy32, depth32) = (narrow(&xy), narrow(&depth));
        let bins = cpu::bin(&xy32, &depth32, &radius, width, height).expect("valid arrays");
        for (t, list) in reference(&widen(&xy32), &widen(&depth32))
            .iter()
            .enumerate()
        {
            assert_eq!(
                bins.tile(t),
                list.as_slice(),
                "f32, {width}x{height}, tile {t}"
            );
        }
    }
}

#[test]
fn empty_and_culled_scenes_give_the_background() {
    let bg = [0.25, 0.5, 0.75];
    let empty = Splats::<f64> {
        xy: vec![],
        depth: vec![],
        conic: vec![],
        color: vec![],
        opacity: vec![],
        radius: vec![],
    };
    let culled = Splats {
        xy: vec![5.0, 5.0, 10.0, 3.0],
        depth: vec![1.0, 2.0],
        conic: vec![0.1, 0.0, 0.1, 0.2, 0.05, 0.3],
        color: vec![1.0; 6],
        opacity: vec![0.9, 0.9],
        radius: vec![0; 4],
    };
    for s in [empty, culled] {
        let n = s.opacity.len();
        let (width, height) = (37u32, 21u32);
        let pixels = (width * height) as usize;
        let bins = bin(&s, width, height);
        assert!(bins.ids().is_empty());
        let out = forward(&s, &bins, bg);
        assert_eq!(out.rgb, bg.repeat(pixels));
        assert_eq!(out.alpha, vec![0.0; pixels]);
        assert_eq!(out.depth, vec![0.0; pixels]);
        assert_eq!(out.transmittance, vec![1.0; pixels]);
        assert_eq!(out.last, vec![0; pixels]);
        let ones = vec![1.0; 3 * pixels];
        let grads = RasterOutputGrads {
            rgb: &ones,
            alpha: &ones[..pixels],
            depth: &ones[..pixels],
        };
        let g = backward(&s, &bins, bg, &out, &grads);
        assert_eq!(g.xy, vec![0.0; 2 * n]);
        assert_eq!(g.conic, vec![0.0; 3 * n]);
        assert_eq!(g.color, vec![0.0; 3 * n]);
        assert_eq!(g.opacity, vec![0.0; n]);
        assert_eq!(g.depth, vec![0.0; n]);
        assert_eq!(g.xy_abs, vec![0.0; n]);
    }
}

#[test]
fn one_pixel_image() {
    let s: Splats<f64> = Splats {
        xy: vec![0.5, 0.5, 0.7, 0.2],
        depth: vec![2.0, 1.0],
        conic: vec![1.0, 0.0, 1.0, 2.0, 0.3, 1.0],
        color: vec![0.2, 0.4, 0.6, 1.0, 0.0, 0.5],
        opacity: vec![0.6, 0.5],
        radius: vec![1, 1, 1, 1],
    };
    let bg = [0.1, 0.2, 0.3];
    let bins = bin(&s, 1, 1);
    assert_eq!(bins.tile(0), &[1, 0]);
    let out = forward(&s, &bins, bg);
    // Gaussian 1 in front: d = (-0.2, 0.3), sigma = (2 * 0.04 + 0.09) / 2 + 0.3 * -0.06.
    let sigma1: f64 = 0.5 * (2.0 * 0.04 + 0.09) - 0.3 * 0.06;
    let a1 = 0.5 * (-sigma1).exp();
    let a0 = 0.6;
    let t = (1.0 - a1) * (1.0 - a0);
    for (c, b) in bg.iter().enumerate() {
        let want = a1 * s.color[3 + c] + (1.0 - a1) * a0 * s.color[c] + t * b;
        assert!((out.rgb[c] - want).abs() < 1e-14, "rgb[{c}]");
    }
    assert!((out.alpha[0] - (1.0 - t)).abs() < 1e-14);
    assert!((out.depth[0] - (a1 * 1.0 + (1.0 - a1) * a0 * 2.0)).abs() < 1e-14);
    assert_eq!(out.last, vec![2]);
}

#[test]
fn transmittance_stop_and_clamp() {
    // Three opaque splats centred on the pixel: the first two clamp at 0.999 (T = 1e-3 then
    // 1e-6 <= 1e-4), so the walk stops before the second; the third is never reached.
    let s: Splats<f64> = Splats {
        xy: vec![0.5; 6],
        depth: vec![1.0, 2.0, 3.0],
        conic: [1.0, 0.0, 1.0].repeat(3),
        color: vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        opacity: vec![1.0; 3],
        radius: vec![1; 6],
    };
    let bins = bin(&s, 1, 1);
    let bg = [0.0, 0.0, 0.0];
    let out = forward(&s, &bins, bg);
    assert_eq!(out.last, vec![1]);
    assert!((out.rgb[0] - 0.999).abs() < 1e-15);
    assert_eq!(&out.rgb[1..], &[0.0, 0.0]);
    let ones = [1.0, 1.0, 1.0];
    let grads = RasterOutputGrads {
        rgb: &ones,
        alpha: &ones[..1],
        depth: &ones[..1],
    };
    let g = backward(&s, &bins, bg, &out, &grads);
    // Clamped: no opacity, conic or xy gradient; colour and depth see the weight 0.999.
    assert_eq!(g.opacity, vec![0.0; 3]);
    assert_eq!(g.xy, vec![0.0; 6]);
    assert_eq!(g.conic, vec![0.0; 9]);
    assert!(g.color[..3].iter().all(|v| (v - 0.999).abs() < 1e-12));
    assert_eq!(&g.color[3..], &[0.0; 6]);
    assert!((g.depth[0] - 0.999).abs() < 1e-12);
    assert_eq!(&g.depth[1..], &[0.0; 2]);
}

#[test]
fn deterministic_across_runs_and_thread_counts() {
    let mut rng = fresh_rng("raster deterministic_across_runs_and_thread_counts");
    let (width, height) = (100u32, 70u32);
    let s = random_splats(&mut rng, 300, width, height).to_f32();
    let pixels = (width * height) as usize;
    let to32 = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect::<Vec<f32>>();
    let v_rgb = to32(uniform(&mut rng, 3 * pixels, -1.0, 1.0));
    let v_alpha = to32(uniform(&mut rng, pixels, -1.0, 1.0));
    let v_depth = to32(uniform(&mut rng, pixels, -1.0, 1.0));
    let run = || {
        let bins = bin(&s, width, height);
        let bg = [0.3f32, 0.6, 0.9];
        let out = forward(&s, &bins, bg);
        let grads = RasterOutputGrads {
            rgb: &v_rgb,
            alpha: &v_alpha,
            depth: &v_depth,
        };
        let g = backward(&s, &bins, bg, &out, &grads);
        (bins, out, g)
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let reference = run();
    assert!(reference.2.opacity.iter().any(|v| *v != 0.0));
    for threads in [1, 3, 0] {
        let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(p) => p,
            Err(e) => panic!("thread pool: {e}"),
        };
        let (bins, out, g) = pool.install(run);
        assert_eq!(bins, reference.0, "{threads} threads: bins");
        assert_eq!(
            bits(&out.rgb),
            bits(&reference.1.rgb),
            "{threads} threads: rgb"
        );
        assert_eq!(out.last, reference.1.last);
        assert_eq!(bits(&out.transmittance), bits(&reference.1.transmittance));
        for (name, got, want) in [
            ("xy", &g.xy, &reference.2.xy),
            ("conic", &g.conic, &reference.2.conic),
            ("color", &g.color, &reference.2.color),
            ("opacity", &g.opacity, &reference.2.opacity),
            ("depth", &g.depth, &reference.2.depth),
            ("xy_abs", &g.xy_abs, &reference.2.xy_abs),
        ] {
            assert_eq!(bits(got), bits(want), "{threads} threads: v_{name}");
        }
    }
}

#[test]
fn bad_shapes_are_errors() {
    let s = Splats {
        xy: vec![1.0, 1.0],
        depth: vec![1.0],
        conic: vec![1.0, 0.0, 1.0],
        color: vec![1.0; 3],
        opacity: vec![0.5],
        radius: vec![1, 1],
    };
    assert!(matches!(
        cpu::bin(&s.xy, &s.depth, &s.radius, 0, 4),
        Err(RasterError::EmptyImage { .. })
    ));
    assert!(matches!(
        cpu::bin(&s.xy[..1], &s.depth, &s.radius, 4, 4),
        Err(RasterError::Length { name: "xy", .. })
    ));
    let bins = bin(&s, 4, 4);
    let mut short = s.clone();
    short.conic.pop();
    assert!(matches!(
        cpu::forward(&short.arrays(), &bins, [0.0; 3]),
        Err(RasterError::Length { name: "conic", .. })
    ));
    let other = bin(
        &Splats::<f64> {
            xy: vec![],
            depth: vec![],
            conic: vec![],
            color: vec![],
            opacity: vec![],
            radius: vec![],
        },
        4,
        4,
    );
    assert!(matches!(
        cpu::forward(&s.arrays(), &other, [0.0; 3]),
        Err(RasterError::BinsMismatch { .. })
    ));
    let out = forward(&s, &bins, [0.0; 3]);
    let z = [0.0; 16];
    let grads = RasterOutputGrads {
        rgb: &z,
        alpha: &z,
        depth: &z,
    };
    assert!(matches!(
        cpu::backward(&s.arrays(), &bins, [0.0; 3], &out.replay(), &grads),
        Err(RasterError::Length {
            name: "grad rgb",
            ..
        })
    ));
}

/// The batched tensor ops refuse batches that do not add up, with errors that say so.
#[test]
fn bad_batches_are_errors() {
    use crate::{
        CameraParams, PACKED_WIDTH, ProjectError, RasterSetup, project_views, rasterize,
        rasterize_views,
    };
        use burn::tensor::{Int, Tensor};
    type B = crate::backend::Cpu;
    let device = Default::default();
    let rows = |n: usize| {
        (
            Tensor::<B, 2>::zeros([n, PACKED_WIDTH], &device),
            Tensor::<B, 2, Int>::zeros([n, 3], &device),
        )
    };
    let (packed, extents) = rows(3);
    assert!(matches!(
        rasterize_views(
            packed.clone(),
            extents.clone(),
            &RasterSetup::new(8, 8).with_views(2)
        ),
        Err(RasterError::Views { views: 2, rows: 3 })
    ));
    assert!(matches!(
        rasterize_views(
            packed.clone(),
            extents.clone(),
            &RasterSetup::new(8, 8).with_views(0)
        ),
        Err(RasterError::Views { views: 0, .. })
    ));
    // `rasterize` draws one view; a batch goes through `rasterize_views`.
    assert!(matches!(
        rasterize(
            packed.clone(),
            extents.clone(),
            &RasterSetup::new(8, 8).with_views(3)
        ),
        Err(RasterError::Views { views: 3, rows: 3 })
    ));
    let out = rasterize_views(packed, extents, &RasterSetup::new(8, 4).with_views(3))
        .expect("three views of one row each");
    assert_eq!(out.rgb.dims(), [3, 4, 8, 3]);
    assert_eq!(out.screen_grads.dims(), [3, 3]);

    let n = 2;
    let none: &[CameraParams] = &[];
    let projected = project_views(
        Tensor::<B, 2>::zeros([n, 3], &device),
        Tensor::<B, 2>::ones([n, 4], &device),
        Tensor::<B, 2>::zeros([n, 3], &device),
        Tensor::<B, 1>::zeros([n], &device),
        Tensor::<B, 3>::zeros([n, 1, 3], &device),
        Tensor::<B, 3>::zeros([n, 0, 3], &device),
        none,
        &ProjectOptions::default(),
    );
    assert!(matches!(projected, Err(ProjectError::NoCameras)));
}
