//! Each photo's exposure from the capture's own keypoints, before any training.
//!
//! A triangulated point looks the same from every photo that sees it, up to each photo's
//! exposure and white balance. Per colour channel, photo `i` shows point `k` as
//!
//! ```text
//! ln y_ik = g_i + c_k
//! ```
//!
//! (`y_ik`: the mean of the 3x3 pixels at the keypoint, of the photo at COLMAP's size; `g_i`: the photo's log-gain; `c_k`: the
//! point's log-colour). The gains are fitted by least squares over every observation that is
//! neither near black nor saturated, in a panorama stitcher's way: eliminating each point's
//! colour (the mean of its observations less their photos' gains) leaves the system
//!
//! ```text
//! sum_k sum_{i in k} e_i (g_i - mean_{j in k} g_j) + (1/V) sum_j g_j = sum_k sum_{i in k} e_i (ln y_ik - mean_{j in k} ln y_jk)
//! ```
//!
//! in the photos' gains alone (`e_i`: photo `i`'s unit vector). Its one free direction, a gain
//! that every photo and the points' colours share, is fixed by the centring term, so the gains
//! come out averaging zero. It is solved by conjugate gradients (each iteration one pass over
//! the observations), twice: the second fit leaves out the observations the first one misses by
//! over three times the median miss (a keypoint on an edge, a highlight that moves with the
//! view).
//!
//! Keypoints are read where COLMAP put them, scaled to the decoded photo's size. A photo
//! undistorted when decoded moves its pixels a little from COLMAP's keypoints near its edges;
//! the 3x3 mean and the refit absorb that.

use std::collections::HashMap;

use super::ColmapModel;
use crate::images::DecodedImage;

/// 8-bit values an observation may take: a darker one is mostly noise and quantisation, a
/// brighter one may be clipped.
const DARKEST: f64 = 8.0;
const BRIGHTEST: f64 = 247.0;
/// The refit leaves out observations missed by more than this many median misses.
const OUTLIER_FACTOR: f64 = 3.0;

/// What [`keypoint_exposures`] fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct KeypointExposures {
    /// Per photo (in the order given) and channel (R, G, B), the natural log of its gain,
    /// averaging zero over the photos.
    pub log_gains: Vec<[f64; 3]>,
    /// Observations each photo contributed to the fit (after the refit, summed over
    /// channels); a photo with none keeps a gain of 1 before centring.
    pub observations: Vec<usize>,
}

/// Fits the exposure of each of `photos` (name in `model`, and the photo decoded at any size)
/// from the colours its keypoints show of `model`'s 3D points (see the module docs). A photo the
/// model does not register, or that shares no point with the others, contributes nothing.
pub fn keypoint_exposures(
    model: &ColmapModel,
    photos: &[(&str, &DecodedImage)],
) -> KeypointExposures {
    let by_name: HashMap<&str, usize> = model
        .images
        .iter()
        .enumerate()
        .map(|(i, im)| (im.name.as_str(), i))
        .collect();
    // Per channel: point id -> (photo, ln y) observations.
    let mut tracks: [HashMap<u64, Vec<(usize, f64)>>; 3] = Default::default();
    for (p, (name, photo)) in photos.iter().enumerate() {
        let Some(image) = by_name.get(name).map(|&i| &model.images[i]) else {
            continue;
        };
        let Some(camera) = model.cameras.get(&image.camera_id) else {
            continue;
        };
        let scale = [
            f64::from(photo.width) / camera.width as f64,
            f64::from(photo.height) / camera.height as f64,
        ];
        // A 3x3 patch of the photo as COLMAP saw it: one pixel of a photo decoded at half that
        // size or less (a wider patch there mixes in the keypoint's surroundings: on cup_colmap
        // at half size the fit's blue moved 3.4% from the applied gains, against 1.6% at full).
        let radius = if scale[0] >= 0.75 { 1 } else { 0 };
        for point in &image.points2d {
            let Some(id) = point.point3d_id else {
                continue;
            };
            let xy = [point.xy[0] * scale[0], point.xy[1] * scale[1]];
            let Some(rgb) = patch_mean(photo, xy, radius) else {
                continue;
            };
            for (c, &value) in rgb.iter().enumerate() {
                if value > DARKEST && value < BRIGHTEST {
                    tracks[c].entry(id).or_default().push((p, value.ln()));
                }
            }
        }
    }
    let mut log_gains = vec![[0.0; 3]; photos.len()];
    let mut observations = vec![0; photos.len()];
    for (c, channel) in tracks.iter_mut().enumerate() {
        channel.retain(|_, track| track.len() >= 2);
        let first = fit(photos.len(), channel);
        keep_close(channel, &first);
        for (p, g) in fit(photos.len(), channel).into_iter().enumerate() {
            log_gains[p][c] = g;
        }
        for track in channel.values() {
            for &(p, _) in track {
                observations[p] += 1;
            }
        }
    }
    KeypointExposures {
        log_gains,
        observations,
    }
}

/// The mean colour of the `(2 radius + 1)^2` pixels about `xy` (COLMAP's coordinates: a
/// pixel's centre at `+0.5`), or `None` where the patch leaves the photo or touches a
/// masked-out pixel.
fn patch_mean(photo: &DecodedImage, xy: [f64; 2], radius: i64) -> Option<[f64; 3]> {
    let (w, h) = (photo.width as i64, photo.height as i64);
    let (x, y) = (xy[0].floor() as i64, xy[1].floor() as i64);
    if x < radius || y < radius || x >= w - radius || y >= h - radius {
        return None;
    }
    let mut sum = [0.0; 3];
    for py in y - radius..=y + radius {
        for px in x - radius..=x + radius {
            let i = (py * w + px) as usize;
            if photo.mask.as_ref().is_some_and(|m| m[i] < 255) {
                return None;
            }
            for (c, s) in sum.iter_mut().enumerate() {
                *s += f64::from(photo.data[3 * i + c]);
            }
        }
    }
    let count = ((2 * radius + 1) * (2 * radius + 1)) as f64;
    Some(sum.map(|s| s / count))
}

/// The centred log-gains of `photos` photos from one channel's `tracks` (module docs).
fn fit(photos: usize, tracks: &HashMap<u64, Vec<(usize, f64)>>) -> Vec<f64> {
    // Sorted by point id: the sums below run in one order on every run.
    let mut ordered: Vec<&Vec<(usize, f64)>> = Vec::with_capacity(tracks.len());
    let mut ids: Vec<&u64> = tracks.keys().collect();
    ids.sort_unstable();
    ordered.extend(ids.into_iter().map(|id| &tracks[id]));
    let apply = |g: &[f64]| -> Vec<f64> {
        let mut out = vec![g.iter().sum::<f64>() / photos as f64; photos];
        for track in &ordered {
            let mean = track.iter().map(|&(p, _)| g[p]).sum::<f64>() / track.len() as f64;
            for &(p, _) in track.iter() {
                out[p] += g[p] - mean;
            }
        }
        out
    };
    let mut b = vec![0.0; photos];
    for track in &ordered {
        let mean = track.iter().map(|&(_, v)| v).sum::<f64>() / track.len() as f64;
        for &(p, v) in track.iter() {
            b[p] += v - mean;
        }
    }
    let g = conjugate_gradients(apply, &b);
    let shift = g.iter().sum::<f64>() / photos.max(1) as f64;
    g.into_iter().map(|v| v - shift).collect()
}

/// Keeps the observations `gains` miss by at most [`OUTLIER_FACTOR`] median misses (and the
/// tracks that keep two).
fn keep_close(tracks: &mut HashMap<u64, Vec<(usize, f64)>>, gains: &[f64]) {
    let miss = |track: &Vec<(usize, f64)>| -> Vec<f64> {
        let colour = track.iter().map(|&(p, v)| v - gains[p]).sum::<f64>() / track.len() as f64;
        track
            .iter()
            .map(|&(p, v)| (v - gains[p] - colour).abs())
            .collect()
    };
    let mut all: Vec<f64> = tracks.values().flat_map(miss).collect();
    if all.is_empty() {
        return;
    }
    let middle = all.len() / 2;
    let median = *all.select_nth_unstable_by(middle, f64::total_cmp).1;
    let bound = OUTLIER_FACTOR * median;
    for track in tracks.values_mut() {
        let misses = miss(track);
        let mut k = 0;
        track.retain(|_| {
            k += 1;
            misses[k - 1] <= bound
        });
    }
    tracks.retain(|_, track| track.len() >= 2);
}

/// Solves `A x = b` for a symmetric positive definite `A` given as its product.
fn conjugate_gradients(apply: impl Fn(&[f64]) -> Vec<f64>, b: &[f64]) -> Vec<f64> {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let n = b.len();
    let mut x = vec![0.0; n];
    let mut r = b.to_vec();
    let mut p = r.clone();
    let mut rr = dot(&r, &r);
    let tolerance = 1e-24 * dot(b, b).max(f64::MIN_POSITIVE);
    for _ in 0..4 * n.max(16) {
        if rr <= tolerance {
            break;
        }
        let ap = apply(&p);
        let alpha = rr / dot(&p, &ap);
        for i in 0..n {
            x[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
        }
        let next = dot(&r, &r);
        let beta = next / rr;
        rr = next;
        for i in 0..n {
            p[i] = r[i] + beta * p[i];
        }
    }
    x
}
