//! The transform on the CPU: one fused rayon loop over Gaussians, reading each Gaussian's
//! mean, quaternion, log-scales and SH coefficients once and writing their transformed values
//! into caller-provided buffers. Generic over `f32` and `f64`.
//!
//! Why fused: the op moves 80 bytes per Gaussian without SH (memory bound), 440 with
//! degree-3 SH. Separate tensor ops (a matmul for the means, a quaternion product, an add,
//! per-band matmuls) each stream the whole set through memory again and allocate their
//! results; here every byte is read once and written once.
//!
//! In `f32` on x86-64 CPUs with AVX2 the loop runs eight Gaussians at a time in explicit
//! vector code (`x86.rs`, bit-identical to the portable loop), and for outputs larger than the
//! caches it streams the means, quaternions and log-scales past them (`STREAM_FROM_BYTES`):
//! then it moves fewer bytes than a plain copy of the same buffers, which reads every output
//! line before overwriting it. `f64`, other CPUs and the rows outside whole blocks of eight
//! take the portable loop.

use std::any::TypeId;

use rayon::prelude::*;

use super::{
    PARAM_LINEAR, PARAM_LOG_SCALE, PARAM_OFFSET, PARAM_QUAT, PARAM_SH1, PARAM_SH2, PARAM_SH3,
    PARAMS_WIDTH, Similarity, TransformError, frame_params,
};
use crate::real::Real;

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(target_arch = "x86_64")]
use x86::Lanes;

/// The constants of the vector loops: none off x86-64.
#[cfg(not(target_arch = "x86_64"))]
enum Lanes {}

/// Gaussians per rayon task: long runs for the prefetchers (a chunk's means are 192 KiB), few
/// tasks to schedule, and still 60 per thread at 1M.
const CHUNK: usize = 16384;

/// The size of a frame's means, quaternions and log-scales (bytes) from which the vector loops stream
/// their stores past the caches: beyond what the caches hold, a plain store first reads the
/// line it overwrites (a third more memory traffic); below it, the caller finds the output
/// in the cache.
const STREAM_FROM_BYTES: usize = 16 << 20;

/// A Gaussian set on the host, flat row-major (shapes as in the [module docs](super)).
#[derive(Debug, Clone, Copy)]
pub struct GaussianSlices<'a, T> {
    /// `[N, 3]`
    pub means: &'a [T],
    /// `[N, 4]`
    pub quats: &'a [T],
    /// `[N, 3]`
    pub log_scales: &'a [T],
    /// `[N, K, 3]` (empty for `K = 0`)
    pub sh_rest: &'a [T],
}

/// Output buffers for `F` transformed copies of a set of `N` Gaussians, frame-major.
#[derive(Debug)]
pub struct GaussianSlicesMut<'a, T> {
    /// `[F, N, 3]`
    pub means: &'a mut [T],
    /// `[F, N, 4]`
    pub quats: &'a mut [T],
    /// `[F, N, 3]`
    pub log_scales: &'a mut [T],
    /// `[F, N, K, 3]`
    pub sh_rest: &'a mut [T],
}

/// The constants of one frame in the kernel's float type.
#[derive(Clone, Copy)]
struct Frame<T> {
    linear: [T; 9],
    offset: [T; 3],
    quat: [T; 4],
    log_scale: T,
    sh1: [T; 9],
    sh2: [T; 25],
    sh3: [T; 49],
}

impl<T: Real> Frame<T> {
    fn new(p: &[f64; PARAMS_WIDTH]) -> Self {
        let take = |at: usize| T::from_f64(p[at]);
        Frame {
            linear: std::array::from_fn(|k| take(PARAM_LINEAR + k)),
            offset: std::array::from_fn(|k| take(PARAM_OFFSET + k)),
            quat: std::array::from_fn(|k| take(PARAM_QUAT + k)),
            log_scale: take(PARAM_LOG_SCALE),
            sh1: std::array::from_fn(|k| take(PARAM_SH1 + k)),
            sh2: std::array::from_fn(|k| take(PARAM_SH2 + k)),
            sh3: std::array::from_fn(|k| take(PARAM_SH3 + k)),
        }
    }

    #[inline(always)]
    fn mean(&self, m: &[T; 3]) -> [T; 3] {
        let l = &self.linear;
        std::array::from_fn(|r| {
            l[3 * r] * m[0] + l[3 * r + 1] * m[1] + l[3 * r + 2] * m[2] + self.offset[r]
        })
    }

    /// `q_R * q`, Hamilton product of `(w, x, y, z)` quaternions.
    #[inline(always)]
    fn quat(&self, q: &[T; 4]) -> [T; 4] {
        let [aw, ax, ay, az] = self.quat;
        let [bw, bx, by, bz] = *q;
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    }

    #[inline(always)]
    fn log_scales(&self, s: &[T; 3]) -> [T; 3] {
        s.map(|v| v + self.log_scale)
    }

    /// One Gaussian's `[K, 3]` coefficients, band by band, channel by channel.
    #[inline(always)]
    fn sh(&self, src: &[T], dst: &mut [T]) {
        let bands: [(&[T], usize, usize); 3] =
            [(&self.sh1, 0, 3), (&self.sh2, 3, 5), (&self.sh3, 8, 7)];
        let k = src.len() / 3;
        for (matrix, first, n) in bands {
            if first + n > k {
                break;
            }
            for row in 0..n {
                let mut acc = [T::ZERO; 3];
                for col in 0..n {
                    let w = matrix[row * n + col];
                    let at = 3 * (first + col);
                    acc[0] += w * src[at];
                    acc[1] += w * src[at + 1];
                    acc[2] += w * src[at + 2];
                }
                dst[3 * (first + row)..3 * (first + row) + 3].copy_from_slice(&acc);
            }
        }
    }
}

/// Checks the buffer sizes against `N` (from `means`) and `frames`; returns `(N, K)`.
fn check(
    src: &GaussianSlices<'_, impl Copy>,
    dst: &GaussianSlicesMut<'_, impl Copy>,
    frames: usize,
) -> Result<(usize, usize), TransformError> {
    let n = src.means.len() / 3;
    let k = if n == 0 {
        0
    } else {
        src.sh_rest.len() / (3 * n)
    };
    let fits = src.means.len() == 3 * n
        && src.quats.len() == 4 * n
        && src.log_scales.len() == 3 * n
        && src.sh_rest.len() == 3 * k * n
        && matches!(k, 0 | 3 | 8 | 15)
        && dst.means.len() == frames * 3 * n
        && dst.quats.len() == frames * 4 * n
        && dst.log_scales.len() == frames * 3 * n
        && dst.sh_rest.len() == frames * 3 * k * n;
    if fits {
        Ok((n, k))
    } else {
        Err(TransformError::Shape(format!(
            "{frames} frame(s): source means {}, quats {}, log_scales {}, sh_rest {}; \
             destination means {}, quats {}, log_scales {}, sh_rest {} values",
            src.means.len(),
            src.quats.len(),
            src.log_scales.len(),
            src.sh_rest.len(),
            dst.means.len(),
            dst.quats.len(),
            dst.log_scales.len(),
            dst.sh_rest.len()
        )))
    }
}

/// Writes `similarity` applied to `src` into `dst` (one frame: `dst` has the sizes of `src`).
/// Allocates nothing; parallel over Gaussians.
pub fn transform_into<T: Real>(
    similarity: &Similarity,
    src: GaussianSlices<'_, T>,
    dst: GaussianSlicesMut<'_, T>,
) -> Result<(), TransformError> {
    transform_batch_into(std::slice::from_ref(similarity), src, dst)
}

/// Writes one transformed copy of `src` per entry of `similarities` into `dst`, frame-major
/// (`dst` is `F` times the size of `src`). Allocates nothing; parallel over Gaussians.
pub fn transform_batch_into<T: Real>(
    similarities: &[Similarity],
    src: GaussianSlices<'_, T>,
    dst: GaussianSlicesMut<'_, T>,
) -> Result<(), TransformError> {
    if similarities.is_empty() {
        return Err(TransformError::NoTransforms);
    }
    let (n, k) = check(&src, &dst, similarities.len())?;
    // Every transform is checked before anything is written.
    for s in similarities {
        frame_params(s)?;
    }
    if n == 0 {
        return Ok(());
    }
    let GaussianSlicesMut {
        means,
        quats,
        log_scales,
        sh_rest,
    } = dst;
    let coeffs = 3 * k;
    let stream = 4 * 10 * n >= STREAM_FROM_BYTES;
    for (f, similarity) in similarities.iter().enumerate() {
        let params = frame_params(similarity)?;
        let frame = &Frame::<T>::new(&params);
        let lanes = &vector_lanes::<T>(&params);
        let means = &mut means[f * 3 * n..(f + 1) * 3 * n];
        let quats = &mut quats[f * 4 * n..(f + 1) * 4 * n];
        let log_scales = &mut log_scales[f * 3 * n..(f + 1) * 3 * n];
        let (means, _) = means.as_chunks_mut::<3>();
        let (quats, _) = quats.as_chunks_mut::<4>();
        let (log_scales, _) = log_scales.as_chunks_mut::<3>();
        let outputs = means
            .par_chunks_mut(CHUNK)
            .zip(quats.par_chunks_mut(CHUNK))
            .zip(log_scales.par_chunks_mut(CHUNK));
        let (src_means, _) = src.means.as_chunks::<3>();
        let (src_quats, _) = src.quats.as_chunks::<4>();
        let (src_scales, _) = src.log_scales.as_chunks::<3>();
        let inputs = src_means
            .par_chunks(CHUNK)
            .zip(src_quats.par_chunks(CHUNK))
            .zip(src_scales.par_chunks(CHUNK));
        if k == 0 {
            outputs
                .zip(inputs)
                .for_each(|(((m, q), s), ((sm, sq), ss))| {
                    geometry_chunk(frame, lanes.as_ref(), stream, m, q, s, sm, sq, ss);
                });
        } else {
            let sh = &mut sh_rest[f * coeffs * n..(f + 1) * coeffs * n];
            outputs
                .zip(sh.par_chunks_mut(CHUNK * coeffs))
                .zip(inputs.zip(src.sh_rest.par_chunks(CHUNK * coeffs)))
                .for_each(|((((m, q), s), sh), (((sm, sq), ss), src_sh))| {
                    geometry_chunk(frame, lanes.as_ref(), stream, m, q, s, sm, sq, ss);
                    sh_chunk(frame, lanes.as_ref(), sh, src_sh, coeffs);
                });
        }
    }
    Ok(())
}

/// The vector loops' constants for a frame, when they run: `T` is `f32` and the CPU has them.
fn vector_lanes<T: Real>(params: &[f64; PARAMS_WIDTH]) -> Option<Lanes> {
    if TypeId::of::<T>() != TypeId::of::<f32>() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return Some(Lanes::new(Frame::<f32>::new(params)));
    }
    let _ = params;
    None
}

/// `values` as a slice of `U`; `Some` exactly when `T` is `U` (`[T; 3]` is `[f32; 3]`).
fn same<T: 'static, U: 'static>(values: &[T]) -> Option<&[U]> {
    (TypeId::of::<T>() == TypeId::of::<U>()).then(|| {
        // SAFETY: `T` is `U` (same `TypeId`), so both slices have the same type.
        unsafe { &*(core::ptr::from_ref(values) as *const [U]) }
    })
}

/// `values` as a slice of `U`; `Some` exactly when `T` is `U`.
fn same_mut<T: 'static, U: 'static>(values: &mut [T]) -> Option<&mut [U]> {
    (TypeId::of::<T>() == TypeId::of::<U>()).then(|| {
        // SAFETY: `T` is `U` (same `TypeId`), so both slices have the same type.
        unsafe { &mut *(core::ptr::from_mut(values) as *mut [U]) }
    })
}

/// The SH coefficients of one chunk of Gaussians (`coeffs` floats each), in the vector loops
/// where they run (`lanes`).
#[inline(always)]
fn sh_chunk<T: Real>(
    frame: &Frame<T>,
    lanes: Option<&Lanes>,
    dst: &mut [T],
    src: &[T],
    coeffs: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(lanes), Some(d), Some(s)) = (lanes, same_mut(dst), same(src)) {
        // SAFETY: `lanes` exist only where `x86::available()`.
        unsafe { x86::sh(lanes, d, s, coeffs) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    if let Some(lanes) = lanes {
        match *lanes {}
    }
    for (d, v) in dst.chunks_exact_mut(coeffs).zip(src.chunks_exact(coeffs)) {
        frame.sh(v, d);
    }
}

/// Means, quaternions and log-scales of one chunk of Gaussians (80 bytes each in `f32`), in
/// the vector loops where they run (`lanes`), streaming their stores with `stream`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn geometry_chunk<T: Real>(
    frame: &Frame<T>,
    lanes: Option<&Lanes>,
    stream: bool,
    means: &mut [[T; 3]],
    quats: &mut [[T; 4]],
    log_scales: &mut [[T; 3]],
    src_means: &[[T; 3]],
    src_quats: &[[T; 4]],
    src_scales: &[[T; 3]],
) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(lanes), Some(m), Some(q), Some(s), Some(sm), Some(sq), Some(ss)) = (
        lanes,
        same_mut(means),
        same_mut(quats),
        same_mut(log_scales),
        same(src_means),
        same(src_quats),
        same(src_scales),
    ) {
        // SAFETY: `lanes` exist only where `x86::available()`.
        unsafe { x86::geometry(lanes, stream, m, q, s, sm, sq, ss) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    if let Some(lanes) = lanes {
        match *lanes {}
    }
    let _ = stream;
    for (d, v) in means.iter_mut().zip(src_means) {
        *d = frame.mean(v);
    }
    for (d, v) in quats.iter_mut().zip(src_quats) {
        *d = frame.quat(v);
    }
    for (d, v) in log_scales.iter_mut().zip(src_scales) {
        *d = frame.log_scales(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize, k: usize) -> [Vec<f64>; 4] {
        let values = |len: usize, salt: usize| -> Vec<f64> {
            (0..len)
                .map(|i| (((i * 37 + salt * 11) % 101) as f64 / 50.0) - 1.0)
                .collect()
        };
        [
            values(3 * n, 1),
            values(4 * n, 2),
            values(3 * n, 3),
            values(3 * k * n, 4),
        ]
    }

    /// `len` values in [-2, 2) with zeros of both signs, infinities and a NaN mixed in.
    fn f32_values(len: usize, salt: u64) -> Vec<f32> {
        (0..len as u64)
            .map(|i| {
                let h = (i ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9)
                    .rotate_left(31)
                    .wrapping_mul(0x94d0_49bb_1331_11eb);
                match h % 97 {
                    0 => -0.0,
                    1 => 0.0,
                    2 => f32::INFINITY,
                    3 => f32::NAN,
                    _ => (h >> 40) as f32 / (1u64 << 22) as f32 - 2.0,
                }
            })
            .collect()
    }

    #[test]
    fn vector_loops_match_the_portable_loop_bit_for_bit() {
        let s = Similarity {
            rotation: [0.8, 0.2, -0.4, 0.1],
            scale: 2.5,
            translation: [1.0, -2.0, 0.5],
            centre: [0.3, 0.3, -1.0],
        };
        let params = frame_params(&s).unwrap();
        let frame = Frame::<f32>::new(&params);
        // 8 blocks of eight and a tail of 5.
        let n = 69;
        for k in [0, 3, 8, 15] {
            let Some(lanes) = vector_lanes::<f32>(&params) else {
                eprintln!("skipped: this CPU runs no vector loops");
                return;
            };
            let src: [Vec<f32>; 4] =
                [3, 4, 3, 3 * k].map(|width| f32_values(width * n, (width * 7 + k) as u64));
            let run = |lanes: Option<&Lanes>, stream: bool| {
                let mut out = src.each_ref().map(|v| vec![7.0f32; v.len()]);
                let [m, q, l, sh] = &mut out;
                geometry_chunk(
                    &frame,
                    lanes,
                    stream,
                    m.as_chunks_mut().0,
                    q.as_chunks_mut().0,
                    l.as_chunks_mut().0,
                    src[0].as_chunks().0,
                    src[1].as_chunks().0,
                    src[2].as_chunks().0,
                );
                if k > 0 {
                    sh_chunk(&frame, lanes, sh, &src[3], 3 * k);
                }
                out
            };
            let portable = run(None, false);
            let runs = [run(Some(&lanes), false), run(Some(&lanes), true)];
            for (name, p, v) in runs.iter().flat_map(|vector| {
                ["means", "quats", "log_scales", "sh_rest"]
                    .into_iter()
                    .zip(&portable)
                    .zip(vector)
                    .map(|((n, p), v)| (n, p, v))
            }) {
                for (i, (a, b)) in p.iter().zip(v).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                        "K = {k}, {name}[{i}]: portable {a:e}, vector {b:e}"
                    );
                }
            }
        }
    }

    #[test]
    fn matches_the_similarity_point_map_and_rejects_bad_sizes() {
        let s = Similarity {
            rotation: [0.8, 0.2, -0.4, 0.1],
            scale: 2.5,
            translation: [1.0, -2.0, 0.5],
            centre: [0.3, 0.3, -1.0],
        };
        let [m, q, ls, sh] = set(5, 8);
        let src = GaussianSlices {
            means: &m,
            quats: &q,
            log_scales: &ls,
            sh_rest: &sh,
        };
        let mut out = [vec![0.0; 15], vec![0.0; 20], vec![0.0; 15], vec![0.0; 120]];
        let [om, oq, os, osh] = &mut out;
        let dst = GaussianSlicesMut {
            means: om,
            quats: oq,
            log_scales: os,
            sh_rest: osh,
        };
        transform_into(&s, src, dst).unwrap();
        for i in 0..5 {
            let expected = s.apply_point([m[3 * i], m[3 * i + 1], m[3 * i + 2]]);
            for c in 0..3 {
                assert!((out[0][3 * i + c] - expected[c]).abs() < 1e-12);
                assert!((out[2][3 * i + c] - ls[3 * i + c] - s.scale.ln()).abs() < 1e-12);
            }
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!((norm(&out[1][4 * i..4 * i + 4]) - norm(&q[4 * i..4 * i + 4])).abs() < 1e-12);
        }
        let mut short = vec![0.0; 14];
        let [_, oq, os, osh] = &mut out;
        let bad = GaussianSlicesMut {
            means: &mut short,
            quats: oq,
            log_scales: os,
            sh_rest: osh,
        };
        assert!(matches!(
            transform_into(&s, src, bad),
            Err(TransformError::Shape(_))
        ));
    }
}
