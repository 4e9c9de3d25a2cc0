//! The GPU rasterizer's own tests (wgpu): its ways of adding, and its binning against the
//! CPU's.
use burn::backend::wgpu::{CubeBackend, WgpuDevice, WgpuRuntime};
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{backward_with, bin, native_float_atomics, plane_operations};
use crate::project::{
    CameraParams, PACKED_CONIC, PACKED_DEPTH, PACKED_OPACITY, PACKED_WIDTH, PACKED_XY,
    ProjectOptions, project_gaussians,
};
use crate::raster::RasterOps;
use crate::raster::RasterSetup;

type B = CubeBackend<WgpuRuntime, f32, i32, u32>;

/// The backward's ways of adding (native float atomics and plane sums where the runtime has
/// them, per-unit compare-and-swap everywhere) give the same gradients.
#[test]
fn backward_accumulations_agree() {
    let device = WgpuDevice::default();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(5);
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let n = 300;
    let mut u = |len: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..len)
            .map(|_| lo + (hi - lo) * rng.random::<f32>())
            .collect()
    };
    let z = u(n, 2.0, 5.0);
    let xy = u(2 * n, -0.5, 0.5);
    let means: Vec<f32> = (0..n)
        .flat_map(|i| [xy[2 * i] * z[i], xy[2 * i + 1] * z[i], z[i]])
        .collect();
    let t = |v: Vec<f32>| {
        Tensor::<B, 1>::from_data(TensorData::new(v.clone(), [v.len()]), (&device, DType::F32))
    };
    let camera = CameraParams {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0; 3],
        fx: 60.0,
        fy: 60.0,
        cx: 30.0,
        cy: 22.0,
        width: 61,
        height: 45,
    };
    let projected = project_gaussians::<B>(
        t(means).reshape([n, 3]),
        t(u(4 * n, -1.0, 1.0)).reshape([n, 4]),
        t(u(3 * n, -3.5, -1.5)).reshape([n, 3]),
        t(u(n, -1.0, 3.0)).reshape([n]),
        t(u(3 * n, -1.0, 1.0)).reshape([n, 1, 3]),
        t(u(9 * n, -0.3, 0.3)).reshape([n, 3, 3]),
        &camera,
        &ProjectOptions::default(),
    )
    .expect("a valid scene");
    let setup = RasterSetup::new(camera.width, camera.height).with_background([0.3; 3]);
    let packed = projected.packed.into_primitive().tensor();
    let out = B::rasterize_forward(
        packed.clone(),
        projected.extents.into_primitive(),
        Tensor::<B, 2>::zeros([n, 3], &device)
            .into_primitive()
            .tensor(),
        setup,
    );
    let grad_image = t(u(61 * 45 * 5, -1.0, 1.0)).into_primitive().tensor();
    let host = |p| {
        Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p))
            .into_data()
            .to_vec::<f32>()
            .expect("f32")
    };
    // The reference: per-unit compare-and-swap adds, which every runtime has.
    let swap = backward_with::<_, f32, i32, u32, u32>(
        packed.clone(),
        out.state.clone(),
        grad_image.clone(),
        setup,
        DType::U32,
        false,
    );
    let swap = host(swap.packed);
    assert!(swap.iter().any(|g| *g != 0.0), "the scene draws nothing");
    let scale = swap.iter().fold(0.0f32, |m, g| m.max(g.abs()));
    let (native, plane) = (
        native_float_atomics(&packed.client),
        plane_operations(&packed.client),
    );
    let variants = [
        ("native", true, false),
        ("compare-and-swap, plane sums", false, true),
        ("native, plane sums", true, true),
    ];
    if !native && !plane {
        println!("no native f32 atomics and no plane sums here: only the reference ran");
    }
    for (name, native_adds, plane_sums) in variants {
        if (native_adds && !native) || (plane_sums && !plane) {
            continue;
        }
        let grads = if native_adds {
            backward_with::<_, f32, i32, u32, f32>(
                packed.clone(),
                out.state.clone(),
                grad_image.clone(),
                setup,
                DType::F32,
                plane_sums,
            )
        } else {
            backward_with::<_, f32, i32, u32, u32>(
                packed.clone(),
                out.state.clone(),
                grad_image.clone(),
                setup,
                DType::U32,
                plane_sums,
            )
        };
        let grads = host(grads.packed);
        let worst = swap
            .iter()
            .zip(&grads)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= 1e-5 * scale,
            "{name} vs per-unit compare-and-swap: {worst} (scale {scale})"
        );
    }
}

/// The least `q(d) = a dx^2 + 2 b dx dy + c dy^2` over the rectangle `[lx, hx] x [ly, hy]`
/// of offsets from a splat's centre: zero when it holds the centre, else the least over its
/// four edges of the quadratic along the edge, minimised in closed form.
fn least_over_rect([a, b, c]: [f64; 3], [lx, hx, ly, hy]: [f64; 4]) -> f64 {
    if lx <= 0.0 && 0.0 <= hx && ly <= 0.0 && 0.0 <= hy {
        return 0.0;
    }
    let q = |dx: f64, dy: f64| a * dx * dx + 2.0 * b * dx * dy + c * dy * dy;
    let edge = |(px, py): (f64, f64), (ex, ey): (f64, f64)| {
        let s = -(a * px * ex + b * (px * ey + py * ex) + c * py * ey) / q(ex, ey);
        let s = s.clamp(0.0, 1.0);
        q(px + s * ex, py + s * ey)
    };
    [
        edge((lx, ly), (hx - lx, 0.0)),
        edge((lx, hy), (hx - lx, 0.0)),
        edge((lx, ly), (0.0, hy - ly)),
        edge((hx, ly), (0.0, hy - ly)),
    ]
    .into_iter()
    .fold(f64::INFINITY, f64::min)
}

/// The GPU binning against an `f64` brute force on thin, tilted ellipses of all sizes: each
/// tile lists, front to back, the Gaussians whose box covers it, less (for boxes of at least
/// 2x2 tiles) those whose ellipse misses it; only tiles within rounding of the ellipse's
/// bound may go either way.
#[test]
fn binning_trims_boxes_to_their_ellipses() {
    let device = WgpuDevice::default();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(9);
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (width, height, n) = (200u32, 150u32, 400usize);
    let setup = RasterSetup::new(width, height);
    let (tiles_x, tiles_y) = setup.tiles();
    let mut packed = vec![0.0f32; n * PACKED_WIDTH];
    let mut extents = vec![0i32; 3 * n];
    for i in 0..n {
        let long: f32 = rng.random_range(1.0..30.0);
        let short = long / rng.random_range(1.0..20.0f32);
        let (sin, cos) = rng.random_range(0.0..std::f32::consts::PI).sin_cos();
        let (l2, s2) = (long * long, short * short);
        let cov = [
            cos * cos * l2 + sin * sin * s2,
            sin * cos * (l2 - s2),
            sin * sin * l2 + cos * cos * s2,
        ];
        let det = cov[0] * cov[2] - cov[1] * cov[1];
        let opacity: f32 = rng.random_range(0.01..1.0);
        let k = (2.0 * (255.0 * opacity).ln()).sqrt();
        let row = &mut packed[i * PACKED_WIDTH..(i + 1) * PACKED_WIDTH];
        row[PACKED_XY] = rng.random_range(-20.0..220.0);
        row[PACKED_XY + 1] = rng.random_range(-20.0..170.0);
        row[PACKED_DEPTH] = rng.random_range(1.0..5.0);
        row[PACKED_CONIC..PACKED_CONIC + 3].copy_from_slice(&[
            cov[2] / det,
            -cov[1] / det,
            cov[0] / det,
        ]);
        row[PACKED_OPACITY] = opacity;
        let radius = [cov[0], cov[2]].map(|v| (k * v.sqrt()).ceil() as i32);
        let overlaps = (row[PACKED_XY] + radius[0] as f32) > 0.0
            && (row[PACKED_XY] - radius[0] as f32) < width as f32
            && (row[PACKED_XY + 1] + radius[1] as f32) > 0.0
            && (row[PACKED_XY + 1] - radius[1] as f32) < height as f32;
        if !overlaps {
            row.fill(0.0);
            continue;
        }
        let span = |c: f32, r: i32, tiles: u32| {
            let lo = ((c - r as f32) / 16.0).floor().max(0.0) as i32;
            let hi = ((c + r as f32) / 16.0).ceil().min(tiles as f32) as i32;
            hi - lo
        };
        let count =
            span(row[PACKED_XY], radius[0], tiles_x) * span(row[PACKED_XY + 1], radius[1], tiles_y);
        extents[3 * i..3 * i + 3].copy_from_slice(&[radius[0], radius[1], count]);
    }
    let boxed: i32 = (0..n).map(|i| extents[3 * i + 2]).sum();
    let packed_t = Tensor::<B, 2>::from_data(
        TensorData::new(packed.clone(), [n, PACKED_WIDTH]),
        (&device, DType::F32),
    )
    .into_primitive()
    .tensor();
    let extents_t = Tensor::<B, 2, burn::tensor::Int>::from_data(
        TensorData::new(extents.clone(), [n, 3]),
        (&device, DType::I32),
    )
    .into_primitive();
    let binned = bin(&packed_t, &extents_t, &setup);
    let read = |t| {
        let data = burn_cubecl::ops::into_data_sync::<WgpuRuntime>(t);
        data.as_slice::<u32>().expect("u32").to_vec()
    };
    let (offsets, ids) = (read(binned.offsets), read(binned.ids));
    let tiles = (tiles_x * tiles_y) as usize;
    let mut listed = 0;
    for t in 0..tiles {
        let (tx, ty) = ((t % tiles_x as usize) as f64, (t / tiles_x as usize) as f64);
        let list = &ids[offsets[t] as usize..offsets[t + 1] as usize];
        listed += list.len();
        let depth = |g: u32| packed[g as usize * PACKED_WIDTH + PACKED_DEPTH];
        assert!(
            list.windows(2).all(|w| depth(w[0]) <= depth(w[1])),
            "tile {t}: order"
        );
        for i in 0..n {
            let (rx, ry) = (extents[3 * i], extents[3 * i + 1]);
            if extents[3 * i + 2] == 0 {
                assert!(!list.contains(&(i as u32)), "culled {i} in tile {t}");
                continue;
            }
            let row = &packed[i * PACKED_WIDTH..(i + 1) * PACKED_WIDTH];
            let (x, y) = (f64::from(row[PACKED_XY]), f64::from(row[PACKED_XY + 1]));
            let (rx, ry) = (f64::from(rx), f64::from(ry));
            let axis = |c: f64, r: f64, tiles: u32| {
                ((c - r) / 16.0).floor().max(0.0)..((c + r) / 16.0).ceil().min(f64::from(tiles))
            };
            let (columns, rows) = (axis(x, rx, tiles_x), axis(y, ry, tiles_y));
            let in_box = columns.contains(&tx) && rows.contains(&ty);
            let trims = columns.end - columns.start >= 2.0 && rows.end - rows.start >= 2.0;
            let conic = [0, 1, 2].map(|c| f64::from(row[PACKED_CONIC + c]));
            let rect = [
                16.0 * tx - x,
                16.0 * tx + 16.0 - x,
                16.0 * ty - y,
                16.0 * ty + 16.0 - y,
            ];
            let bound = 2.0 * (255.0 * f64::from(row[PACKED_OPACITY])).ln() + 2e-3;
            let least = if trims {
                least_over_rect(conic, rect)
            } else {
                0.0
            };
            let has = list.contains(&(i as u32));
            if in_box && least <= bound * (1.0 - 1e-4) {
                assert!(
                    has,
                    "Gaussian {i} missing from tile {t} (least {least}, bound {bound})"
                );
            }
            if !in_box || least >= bound * (1.0 + 1e-4) {
                assert!(
                    !has,
                    "Gaussian {i} listed in tile {t} (least {least}, bound {bound})"
                );
            }
        }
    }
    assert!(
        (listed as i32) * 10 < boxed * 9,
        "{listed} entries listed of {boxed} box tiles"
    );
}
