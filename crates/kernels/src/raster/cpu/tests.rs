//! The CPU rasterizer's own tests.

use super::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The explicit walks (AVX-512 and AVX2, whichever this CPU runs; `forward` and `backward`
/// pick one for `f32`) against the portable bodies, bit for bit, on random scenes with thin
/// rotated splats, clamped alphas, transmittance stops, a NaN splat and an image size that
/// is not a multiple of 8 (nor of 2).
#[cfg(target_arch = "x86_64")]
#[test]
fn explicit_walks_match_the_portable_ones() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64);
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (width, height) = (61u32, 45u32);
    let n = 400;
    let mut xy = Vec::new();
    let mut conic = Vec::new();
    for _ in 0..n {
        xy.extend([
            rng.random::<f32>() * 70.0 - 5.0,
            rng.random::<f32>() * 55.0 - 5.0,
        ]);
        let (s0, s1) = (
            0.3 + 6.0 * rng.random::<f32>(),
            0.3 + 6.0 * rng.random::<f32>(),
        );
        let theta = std::f32::consts::PI * rng.random::<f32>();
        let (sin, cos) = theta.sin_cos();
        let (v0, v1) = (s0 * s0, s1 * s1);
        let (xx, xyc, yy) = (
            cos * cos * v0 + sin * sin * v1,
            cos * sin * (v0 - v1),
            sin * sin * v0 + cos * cos * v1,
        );
        let det = xx * yy - xyc * xyc;
        conic.extend([yy / det, -xyc / det, xx / det]);
    }
    let depth: Vec<f32> = (0..n).map(|_| 1.0 + rng.random::<f32>()).collect();
    let color: Vec<f32> = (0..3 * n).map(|_| rng.random::<f32>()).collect();
    let mut opacity: Vec<f32> = (0..n).map(|_| rng.random::<f32>()).collect();
    for o in opacity.iter_mut().step_by(5) {
        *o = 1.0;
    }
    opacity[7] = f32::NAN;
    let radius = vec![1000u32; 2 * n];
    let bins = bin(&xy, &depth, &radius, width, height).unwrap();
    let a = RasterArrays {
        xy: &xy,
        depth: &depth,
        conic: &conic,
        color: &color,
        opacity: &opacity,
    };
    let mut walks: Vec<(&str, SegmentWalk<f32>, SegmentReplay<f32>)> = Vec::new();
    if explicit::avx512_available() {
        walks.push((
            "avx512",
            explicit::forward_avx512,
            explicit::backward_avx512,
        ));
    }
    if explicit::avx2_available() {
        walks.push(("avx2", explicit::forward_avx2, explicit::backward_avx2));
    }
    let bg = [0.1, 0.2, 0.3];
    let portable = forward_with(&a, &bins, bg, forward_segment::<f32>(), true).unwrap();
    assert!(
        portable.alpha.iter().any(|&x| x > 0.5),
        "the scene covers pixels"
    );
    let pixels = (width * height) as usize;
    let v_rgb: Vec<f32> = (0..3 * pixels).map(|_| rng.random::<f32>() - 0.5).collect();
    let v_alpha: Vec<f32> = (0..pixels).map(|_| rng.random::<f32>() - 0.5).collect();
    let v_depth: Vec<f32> = (0..pixels).map(|_| rng.random::<f32>() - 0.5).collect();
    let grads = RasterOutputGrads {
        rgb: &v_rgb,
        alpha: &v_alpha,
        depth: &v_depth,
    };
    let replay = portable.replay();
    let portable_grads =
        backward_with(&a, &bins, bg, &replay, &grads, backward_segment::<f32>()).unwrap();
    assert!(
        portable_grads.color.iter().any(|&g| g != 0.0),
        "the backward reaches splats"
    );
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (walk, forward_fn, backward_fn) in walks {
        let image = forward_with(&a, &bins, bg, forward_fn, true).unwrap();
        assert_eq!(bits(&image.rgb), bits(&portable.rgb), "{walk} rgb");
        assert_eq!(bits(&image.depth), bits(&portable.depth), "{walk} depth");
        assert_eq!(
            bits(&image.transmittance),
            bits(&portable.transmittance),
            "{walk} transmittance"
        );
        assert_eq!(image.last, portable.last, "{walk} last");
        let g = backward_with(&a, &bins, bg, &replay, &grads, backward_fn).unwrap();
        for (name, x, y) in [
            ("xy", &g.xy, &portable_grads.xy),
            ("conic", &g.conic, &portable_grads.conic),
            ("color", &g.color, &portable_grads.color),
            ("opacity", &g.opacity, &portable_grads.opacity),
            ("depth", &g.depth, &portable_grads.depth),
            ("xy_abs", &g.xy_abs, &portable_grads.xy_abs),
        ] {
            assert_eq!(bits(x), bits(y), "{walk} {name}");
        }
    }
}

/// The AVX-512 segment masks and lists against the portable ones, on random footprints
/// around random tiles (thin and wide splats, `a <= 0`, NaN and infinite fields, negative
/// reach) and every `present` pattern of a tile cut by the image border.
#[cfg(target_arch = "x86_64")]
#[test]
fn explicit_segment_lists_match_the_portable_ones() {
    if !explicit::avx512_available() {
        println!("skipped: no AVX-512 on this CPU");
        return;
    }
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(11, |d| d.as_nanos() as u64);
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.0, 1e-30];
    let mut reached = 0;
    for _ in 0..50 {
        let (x0, y0) = (
            16 * rng.random_range(0..8usize),
            16 * rng.random_range(0..8usize),
        );
        let n = rng.random_range(1..200usize);
        let entries: Vec<Footprint<f32>> = (0..n)
            .map(|_| {
                let mut v: [f32; 6] = [
                    x0 as f32 + rng.random::<f32>() * 40.0 - 12.0,
                    y0 as f32 + rng.random::<f32>() * 40.0 - 12.0,
                    rng.random::<f32>() * 2.0,
                    rng.random::<f32>() - 0.5,
                    rng.random::<f32>() * 2.0,
                    rng.random::<f32>(),
                ];
                if rng.random::<f32>() < 0.1 {
                    v[rng.random_range(0..6usize)] = specials[rng.random_range(0..6usize)];
                }
                let arrays = RasterArrays {
                    xy: &v[..2],
                    depth: &[1.0],
                    conic: &v[2..5],
                    color: &[0.5; 3],
                    opacity: &v[5..6],
                };
                Footprint::new(&arrays, 0)
            })
            .collect();
        let grid = SegmentGrid::new(x0, y0);
        let present = present_segments(rng.random_range(1..=16), rng.random_range(1..=16));
        let mut portable = vec![0; n];
        segment_masks_body(&entries, &grid, present, &mut portable);
        let mut masks = vec![0; n];
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { explicit::segment_masks_avx512(&entries, &grid, present, &mut masks) };
        assert_eq!(masks, portable);
        reached += masks.iter().filter(|&&m| m != 0).count();
        let stride = n + 16;
        let (mut lists, mut lens) = (vec![u32::MAX; SEGMENTS * stride], [0; SEGMENTS]);
        segment_lists(&masks, &mut lists, stride, &mut lens);
        let (mut wide, mut wide_lens) = (vec![7; SEGMENTS * stride], [3; SEGMENTS]);
        // SAFETY: as above; `wide` holds `SEGMENTS * stride`.
        unsafe { explicit::segment_lists_avx512(&masks, &mut wide, stride, &mut wide_lens) };
        assert_eq!(wide_lens, lens);
        for (s, &len) in lens.iter().enumerate() {
            let range = s * stride..s * stride + len;
            assert_eq!(wide[range.clone()], lists[range], "segment {s}");
        }
    }
    assert!(
        reached > 100,
        "the footprints reach segments ({reached} masks)"
    );
}
