//! The panorama map and its two resamplings: a rig view cut from a panorama ([`cut_view`]) and a
//! panorama stitched from pinhole images ([`stitch`]), both footprint-filtered.

use std::f64::consts::{PI, TAU};

use rayon::prelude::*;

use super::pyramid::{FootprintTaps, Pyramid, footprint_taps};
use super::rig::RigCamera;

/// The unit direction (panorama camera's axes) of the continuous panorama position `(u, v)` on
/// a panorama of `width x height` pixels.
pub fn direction(u: f64, v: f64, width: f64, height: f64) -> [f64; 3] {
    let lon = TAU * (u / width - 0.5);
    let lat = PI * (0.5 - v / height);
    let (sl, cl) = lon.sin_cos();
    let (sp, cp) = lat.sin_cos();
    [cp * sl, -sp, cp * cl]
}

/// The continuous panorama position `(u, v)` of direction `d` (any length but zero), `u` in
/// `[0, width)` up to rounding.
pub fn panorama_position(d: [f64; 3], width: f64, height: f64) -> (f64, f64) {
    let lon = d[0].atan2(d[2]);
    let lat = (-d[1]).atan2(d[0].hypot(d[2]));
    (width * (lon / TAU + 0.5), height * (0.5 - lat / PI))
}

fn to_u8(value: f32) -> u8 {
    (value + 0.5).clamp(0.0, 255.0) as u8
}

/// Where every pixel of one rig view samples a panorama of one size: its centre's position
/// and its footprint's taps ([`FootprintTaps`]), computed once (two `atan2` and the
/// footprint's principal axes a pixel) and used for every frame of a walk; 24 bytes a view
/// pixel.
#[derive(Debug, Clone)]
pub struct CutPlan {
    camera: RigCamera,
    panorama: (usize, usize),
    /// Per view pixel, row-major: `(u, v)` and its taps.
    pixels: Vec<([f32; 2], FootprintTaps)>,
}

impl CutPlan {
    /// The plan of `camera` on a panorama `width x height` (2:1) pixels.
    pub fn new(camera: &RigCamera, width: usize, height: usize) -> CutPlan {
        let (pw, ph) = (width as f32, height as f32);
        let k = &camera.intrinsics;
        let (w, h) = (k.width as usize, k.height as usize);
        let r = camera.rotation.map(|v| v as f32);
        // p = Rᵀ (x', y', 1) = x' r0 + y' r1 + r2 with r0, r1, r2 the rows of R.
        let rows = [0, 1, 2].map(|row| [r[3 * row], r[3 * row + 1], r[3 * row + 2]]);
        let (fx, fy, cx, cy) = (k.fx as f32, k.fy as f32, k.cx as f32, k.cy as f32);
        let steps = [rows[0].map(|v| v / fx), rows[1].map(|v| v / fy)];
        let (lon_scale, lat_scale) = (pw / std::f32::consts::TAU, ph / std::f32::consts::PI);
        let mut pixels = vec![
            (
                [0.0; 2],
                footprint_taps([1.0, 0.0], [0.0, 1.0], width, height)
            );
            w * h
        ];
        pixels.par_chunks_mut(w).enumerate().for_each(|(j, row)| {
            let yp = (j as f32 + 0.5 - cy) / fy;
            for (i, pixel) in row.iter_mut().enumerate() {
                let xp = (i as f32 + 0.5 - cx) / fx;
                let p = [0, 1, 2].map(|c| xp * rows[0][c] + yp * rows[1][c] + rows[2][c]);
                let rho2 = (p[0] * p[0] + p[2] * p[2]).max(1e-20);
                let rho = rho2.sqrt();
                let u = lon_scale * p[0].atan2(p[2]) + 0.5 * pw;
                let v = 0.5 * ph - lat_scale * (-p[1]).atan2(rho);
                let jacobian = steps.map(|e| {
                    let dlon = (p[2] * e[0] - p[0] * e[2]) / rho2;
                    let drho = (p[0] * e[0] + p[2] * e[2]) / rho;
                    let dlat = (p[1] * drho - rho * e[1]) / (rho2 + p[1] * p[1]);
                    [lon_scale * dlon, -lat_scale * dlat]
                });
                *pixel = (
                    [u, v],
                    footprint_taps(jacobian[0], jacobian[1], width, height),
                );
            }
        });
        CutPlan {
            camera: *camera,
            panorama: (width, height),
            pixels,
        }
    }

    /// Whether it cuts `camera` from a panorama of `size`.
    pub fn fits(&self, camera: &RigCamera, size: (usize, usize)) -> bool {
        self.camera == *camera && self.panorama == size
    }
}

/// The view `camera` cut from `panorama` (its pyramid, wrapping in x): `height * width * 3`
/// bytes of RGB at the camera's size, every pixel the footprint-filtered mean of the panorama
/// over the pixel's own footprint.
pub fn cut_view(panorama: &Pyramid, camera: &RigCamera) -> Vec<u8> {
    cut_planned(
        panorama,
        &CutPlan::new(camera, panorama.width(), panorama.height()),
    )
}

/// [`cut_view`] through a plan made for this panorama's size.
///
/// # Panics
/// When the plan was made for another size (callers check [`CutPlan::fits`]).
pub fn cut_planned(panorama: &Pyramid, plan: &CutPlan) -> Vec<u8> {
    assert_eq!(plan.panorama, (panorama.width(), panorama.height()));
    let w = plan.camera.intrinsics.width as usize;
    let mut out = vec![0u8; plan.pixels.len() * 3];
    out.par_chunks_mut(w * 3)
        .zip(plan.pixels.par_chunks(w))
        .for_each(|(row, pixels)| {
            for (rgb, ([u, v], taps)) in row.chunks_exact_mut(3).zip(pixels) {
                let s = panorama.sample_taps(*u, *v, taps);
                for c in 0..3 {
                    rgb[c] = to_u8(s[c]);
                }
            }
        });
    out
}

/// A `width x height` panorama (RGB, `height * width * 3` bytes) stitched from pinhole images
/// that share its centre: each pixel from the image whose forward axis is nearest its direction
/// among those that see it (pyramids that stop at their edges), footprint-filtered; black where
/// none does.
pub fn stitch(views: &[(RigCamera, &Pyramid)], width: usize, height: usize) -> Vec<u8> {
    let (pw, ph) = (width as f64, height as f64);
    let mut out = vec![0u8; width * height * 3];
    out.par_chunks_mut(width * 3)
        .enumerate()
        .for_each(|(j, row)| {
            let v = j as f64 + 0.5;
            let lat = PI * (0.5 - v / ph);
            let (sp, cp) = lat.sin_cos();
            for i in 0..width {
                let u = i as f64 + 0.5;
                let d = direction(u, v, pw, ph);
                let best =
                    views
                        .iter()
                        .filter(|(camera, _)| camera.sees(d))
                        .max_by(|(a, _), (b, _)| {
                            let dot = |c: &RigCamera| {
                                let f = c.forward();
                                f[0] * d[0] + f[1] * d[1] + f[2] * d[2]
                            };
                            dot(a).total_cmp(&dot(b))
                        });
                let Some((camera, image)) = best else {
                    continue;
                };
                let lon = TAU * (u / pw - 0.5);
                let (sl, cl) = lon.sin_cos();
                // ∂d/∂u and ∂d/∂v.
                let du = [cp * cl, 0.0, -cp * sl].map(|x| x * TAU / pw);
                let dv = [-sp * sl, -cp, -sp * cl].map(|x| x * -PI / ph);
                let rotate = |x: [f64; 3]| {
                    let r = &camera.rotation;
                    [0, 1, 2].map(|k| r[3 * k] * x[0] + r[3 * k + 1] * x[1] + r[3 * k + 2] * x[2])
                };
                let q = rotate(d);
                let k = &camera.intrinsics;
                let x = k.fx * q[0] / q[2] + k.cx;
                let y = k.fy * q[1] / q[2] + k.cy;
                let footprint = |dd: [f64; 3]| {
                    let dq = rotate(dd);
                    [
                        (k.fx * (dq[0] * q[2] - q[0] * dq[2]) / (q[2] * q[2])) as f32,
                        (k.fy * (dq[1] * q[2] - q[1] * dq[2]) / (q[2] * q[2])) as f32,
                    ]
                };
                let s = image.sample_footprint(x as f32, y as f32, footprint(du), footprint(dv));
                for c in 0..3 {
                    row[3 * i + c] = to_u8(s[c]);
                }
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::equirect::EquirectRig;

    #[test]
    fn positions_and_directions_invert_each_other() {
        let (w, h) = (512.0, 256.0);
        for (u, v) in [(256.0, 128.0), (10.5, 3.25), (500.0, 250.0), (128.0, 64.0)] {
            let d = direction(u, v, w, h);
            let (u2, v2) = panorama_position(d, w, h);
            assert!(
                (u - u2).abs() < 1e-9 && (v - v2).abs() < 1e-9,
                "{u},{v} -> {u2},{v2}"
            );
        }
        // The centre looks forward, a quarter turn right looks along +x, the top row up.
        let forward = direction(256.0, 128.0, w, h);
        assert!((forward[2] - 1.0).abs() < 1e-12);
        let right = direction(384.0, 128.0, w, h);
        assert!((right[0] - 1.0).abs() < 1e-12);
        let up = direction(256.0, 0.0, w, h);
        assert!((up[1] + 1.0).abs() < 1e-12);
    }

    /// A smooth panorama: colour from the direction, so every view of it is smooth too.
    fn smooth_panorama(w: usize, h: usize) -> Vec<u8> {
        let mut data = Vec::with_capacity(w * h * 3);
        for j in 0..h {
            for i in 0..w {
                let d = direction(i as f64 + 0.5, j as f64 + 0.5, w as f64, h as f64);
                data.extend(d.map(|x| (127.5 + 120.0 * x).round() as u8));
            }
        }
        data
    }

    #[test]
    fn a_view_shows_the_directions_its_pixels_look_along() {
        let (w, h) = (1024, 512);
        let panorama = Pyramid::new(w, h, smooth_panorama(w, h), true);
        for camera in EquirectRig::default().cameras(96) {
            let view = cut_view(&panorama, &camera);
            let k = camera.intrinsics;
            let r = &camera.rotation;
            for (x, y) in [(0usize, 0usize), (47, 47), (95, 10), (30, 90)] {
                let q = [
                    (x as f64 + 0.5 - k.cx) / k.fx,
                    (y as f64 + 0.5 - k.cy) / k.fy,
                    1.0,
                ];
                let p = [0, 1, 2].map(|c| q[0] * r[c] + q[1] * r[3 + c] + q[2] * r[6 + c]);
                let norm = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
                let expected = p.map(|x| 127.5 + 120.0 * x / norm);
                let got = &view[3 * (y * 96 + x)..3 * (y * 96 + x) + 3];
                for c in 0..3 {
                    assert!(
                        (f64::from(got[c]) - expected[c]).abs() < 3.0,
                        "view {} pixel ({x}, {y}): {got:?} vs {expected:?}",
                        camera.index
                    );
                }
            }
        }
    }

    #[test]
    fn the_views_of_a_rig_stitch_back_into_the_panorama() {
        let (w, h) = (512, 256);
        let source = smooth_panorama(w, h);
        let panorama = Pyramid::new(w, h, source.clone(), true);
        let rig = EquirectRig::default();
        let size = rig.native_size(w as u32);
        let faces: Vec<(RigCamera, Pyramid)> = rig
            .cameras(size)
            .into_iter()
            .map(|c| {
                let s = c.intrinsics.width as usize;
                (c, Pyramid::new(s, s, cut_view(&panorama, &c), false))
            })
            .collect();
        let views: Vec<(RigCamera, &Pyramid)> = faces.iter().map(|(c, p)| (*c, p)).collect();
        let back = stitch(&views, w, h);
        let mse = back
            .iter()
            .zip(&source)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum::<f64>()
            / source.len() as f64;
        let psnr = 10.0 * (255.0f64.powi(2) / mse).log10();
        assert!(psnr > 40.0, "round trip at {psnr:.1} dB");
    }
}
