//! The field query's exact kernels and the per-pair math every field kernel shares: the
//! prepared per-Gaussian buffer (`prepare_kernel`), and the point-major (`point_tiles_kernel`)
//! and Gaussian-major (`gaussian_tiles_kernel`) sweeps over all pairs, staged through shared
//! memory a cube-sized tile at a time. See [`cube`](super::cube) for the design.

use cubecl::prelude::*;

pub(super) use crate::cube_math::Vec3;
use crate::cube_math::rotation_rows;

/// Units per cube, and the number of Gaussians (or points) staged per shared-memory tile.
pub(super) const BLOCK: usize = 128;

/// Values per Gaussian in the prepared buffer: `W` row-major (9), then the mean (3).
pub(super) const PARAMS: usize = 12;

/// Below this quaternion norm the rotation is the identity and gets no gradient.
pub(super) const MIN_QUAT_NORM: f32 = 1e-12;

/// A row-major 3x3 matrix in registers.
#[derive(CubeType, Clone, Copy)]
pub(super) struct Mat3<F: Float> {
    pub(super) m00: F,
    pub(super) m01: F,
    pub(super) m02: F,
    pub(super) m10: F,
    pub(super) m11: F,
    pub(super) m12: F,
    pub(super) m20: F,
    pub(super) m21: F,
    pub(super) m22: F,
}

#[cube]
impl<F: Float> Mat3<F> {
    /// `M v`; with `diagonal` only the diagonal of `M` is read (the rest is zero).
    pub(super) fn apply(&self, v: Vec3<F>, #[comptime] diagonal: bool) -> Vec3<F> {
        if diagonal {
            Vec3::<F> {
                x: self.m00 * v.x,
                y: self.m11 * v.y,
                z: self.m22 * v.z,
            }
        } else {
            Vec3::<F> {
                x: self.m00 * v.x + self.m01 * v.y + self.m02 * v.z,
                y: self.m10 * v.x + self.m11 * v.y + self.m12 * v.z,
                z: self.m20 * v.x + self.m21 * v.y + self.m22 * v.z,
            }
        }
    }

    /// `M^T v`; with `diagonal` only the diagonal of `M` is read.
    pub(super) fn apply_transposed(&self, v: Vec3<F>, #[comptime] diagonal: bool) -> Vec3<F> {
        if diagonal {
            Vec3::<F> {
                x: self.m00 * v.x,
                y: self.m11 * v.y,
                z: self.m22 * v.z,
            }
        } else {
            Vec3::<F> {
                x: self.m00 * v.x + self.m10 * v.y + self.m20 * v.z,
                y: self.m01 * v.x + self.m11 * v.y + self.m21 * v.z,
                z: self.m02 * v.x + self.m12 * v.y + self.m22 * v.z,
            }
        }
    }
}

/// `W` and the mean of the Gaussian whose 12 prepared values start at `base` of a shared tile.
#[cube]
pub(super) fn gaussian_from_tile<F: Float>(
    tile: &SharedMemory<F>,
    base: usize,
) -> (Mat3<F>, Vec3<F>) {
    (
        Mat3::<F> {
            m00: tile[base],
            m01: tile[base + 1],
            m02: tile[base + 2],
            m10: tile[base + 3],
            m11: tile[base + 4],
            m12: tile[base + 5],
            m20: tile[base + 6],
            m21: tile[base + 7],
            m22: tile[base + 8],
        },
        Vec3::<F> {
            x: tile[base + 9],
            y: tile[base + 10],
            z: tile[base + 11],
        },
    )
}

/// `W` and the mean of Gaussian `i` from the prepared `[N, 12]` buffer.
#[cube]
pub(super) fn gaussian_from_params<F: Float>(params: &Tensor<F>, i: usize) -> (Mat3<F>, Vec3<F>) {
    let base = i * PARAMS;
    (
        Mat3::<F> {
            m00: params[base],
            m01: params[base + 1],
            m02: params[base + 2],
            m10: params[base + 3],
            m11: params[base + 4],
            m12: params[base + 5],
            m20: params[base + 6],
            m21: params[base + 7],
            m22: params[base + 8],
        },
        Vec3::<F> {
            x: params[base + 9],
            y: params[base + 10],
            z: params[base + 11],
        },
    )
}

/// Row `row` of a `[_, 3]` tensor.
#[cube]
pub(super) fn load_vec3<F: Float>(t: &Tensor<F>, row: usize) -> Vec3<F> {
    Vec3::<F> {
        x: t[3 * row],
        y: t[3 * row + 1],
        z: t[3 * row + 2],
    }
}

/// The mean of Gaussian `i` from the prepared `[N, 12]` buffer.
#[cube]
pub(super) fn gaussian_mean<F: Float>(params: &Tensor<F>, i: usize) -> Vec3<F> {
    let base = i * PARAMS + 9;
    Vec3::<F> {
        x: params[base],
        y: params[base + 1],
        z: params[base + 2],
    }
}

/// `a - b`.
#[cube]
pub(super) fn sub3<F: Float>(a: Vec3<F>, b: Vec3<F>) -> Vec3<F> {
    Vec3::<F> {
        x: a.x - b.x,
        y: a.y - b.y,
        z: a.z - b.z,
    }
}

/// Copies `len` consecutive values of `src` from `offset` into the start of `tile`, spread over
/// the cube's units (coalesced reads).
#[cube]
pub(super) fn stage<F: Float>(
    src: &Tensor<F>,
    tile: &mut SharedMemory<F>,
    offset: usize,
    len: usize,
) {
    let mut k = UNIT_POS as usize;
    while k < len {
        tile[k] = src[offset + k];
        k += CUBE_DIM as usize;
    }
}

/// The normalised quaternion of Gaussian `i` as `((x, y, z), w, |q|)`, or the identity and a zero
/// norm when `|q|` is below [`MIN_QUAT_NORM`] (a NaN norm propagates).
#[cube]
pub(super) fn unit_quat<F: Float>(quats: &Tensor<F>, i: usize) -> (Vec3<F>, F, F) {
    let qw = quats[4 * i];
    let qx = quats[4 * i + 1];
    let qy = quats[4 * i + 2];
    let qz = quats[4 * i + 3];
    let norm = (qw * qw + qx * qx + qy * qy + qz * qz).sqrt();
    let degenerate = norm < F::new(MIN_QUAT_NORM);
    let inv = F::new(1.0) / norm;
    let zero = F::new(0.0);
    (
        Vec3::<F> {
            x: select(degenerate, zero, qx * inv),
            y: select(degenerate, zero, qy * inv),
            z: select(degenerate, zero, qz * inv),
        },
        select(degenerate, F::new(1.0), qw * inv),
        select(degenerate, zero, norm),
    )
}

/// The rotation matrix of Gaussian `i`'s normalised quaternion.
#[cube]
pub(super) fn rotation<F: Float>(quats: &Tensor<F>, i: usize) -> Mat3<F> {
    let (v, w, _) = unit_quat::<F>(quats, i);
    let (r0, r1, r2) = rotation_rows::<F>(w, v.x, v.y, v.z);
    Mat3::<F> {
        m00: r0.x,
        m01: r0.y,
        m02: r0.z,
        m10: r1.x,
        m11: r1.y,
        m12: r1.z,
        m20: r2.x,
        m21: r2.y,
        m22: r2.z,
    }
}

/// Writes `W = S^-1 R^T` and the mean of every Gaussian into `params` `[N, 12]`.
#[cube(launch)]
pub(super) fn prepare_kernel<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    params: &mut Tensor<F>,
    #[comptime] diagonal: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if i < means.shape(0) {
        let one = F::new(1.0);
        let zero = F::new(0.0);
        // 1 / exp(log_scale), as the CPU computes it.
        let inv0 = one / log_scales[3 * i].exp();
        let inv1 = one / log_scales[3 * i + 1].exp();
        let inv2 = one / log_scales[3 * i + 2].exp();
        let o = i * PARAMS;
        if diagonal {
            params[o] = inv0;
            params[o + 1] = zero;
            params[o + 2] = zero;
            params[o + 3] = zero;
            params[o + 4] = inv1;
            params[o + 5] = zero;
            params[o + 6] = zero;
            params[o + 7] = zero;
            params[o + 8] = inv2;
        } else {
            // W[a][b] = R[b][a] / s_a.
            let r = rotation::<F>(quats, i);
            params[o] = r.m00 * inv0;
            params[o + 1] = r.m10 * inv0;
            params[o + 2] = r.m20 * inv0;
            params[o + 3] = r.m01 * inv1;
            params[o + 4] = r.m11 * inv1;
            params[o + 5] = r.m21 * inv1;
            params[o + 6] = r.m02 * inv2;
            params[o + 7] = r.m12 * inv2;
            params[o + 8] = r.m22 * inv2;
        }
        params[o + 9] = means[3 * i];
        params[o + 10] = means[3 * i + 1];
        params[o + 11] = means[3 * i + 2];
    }
}

/// What a point-major sweep adds for one pair with weight `e = exp(-d^2 / 2)`: the chunk
/// `c0..c0 + chunk` of `f[i] e` (the forward), or with `grad` the pair's `dL/dx = W^T gz` with
/// `gz = -s e z`, `s = g[p] . f[i]` (into `acc[0..3]`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn point_pair<F: Float>(
    acc: &mut Array<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    p: usize,
    i: usize,
    c0: usize,
    w: Mat3<F>,
    z: Vec3<F>,
    e: F,
    #[comptime] grad: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = features.shape(1);
    if grad {
        let mut s = F::new(0.0);
        for c in 0..channels {
            s += grad_values[p * channels + c] * features[i * channels + c];
        }
        let coef = -s * e;
        let gz = Vec3::<F> {
            x: coef * z.x,
            y: coef * z.y,
            z: coef * z.z,
        };
        let gv = w.apply_transposed(gz, diagonal);
        acc[0] += gv.x;
        acc[1] += gv.y;
        acc[2] += gv.z;
    } else {
        #[unroll]
        for j in 0..chunk {
            if c0 + j < channels {
                acc[j] += features[i * channels + c0 + j] * e;
            }
        }
    }
}

/// Writes a point-major sweep's accumulators: `acc[0..chunk]` into channels `c0..` of `out`
/// `[P, C]`, or with `grad` `acc[0..3]` into `out` `[P, 3]`.
#[cube]
pub(super) fn write_point<F: Float>(
    out: &mut Tensor<F>,
    acc: &Array<F>,
    p: usize,
    c0: usize,
    #[comptime] chunk: usize,
) {
    let width = out.shape(1);
    #[unroll]
    for j in 0..chunk {
        if c0 + j < width {
            out[p * width + c0 + j] = acc[j];
        }
    }
}

/// Sweeps of a point-major kernel: the forward runs one per chunk of channels; the points'
/// gradient needs one (of three accumulators).
#[cube]
pub(super) fn point_passes(
    channels: usize,
    #[comptime] grad: bool,
    #[comptime] chunk: usize,
) -> usize {
    if grad {
        1usize.runtime()
    } else {
        channels.div_ceil(chunk)
    }
}

/// Exact mode, one unit per point over all Gaussians: `out = values` `[P, C]`, or with `grad`
/// `out = dL/dpoints` `[P, 3]` (then `chunk` is 3). `grad_values` `[P, C]` is read only with
/// `grad` (the forward passes `features` in its place).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn point_tiles_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] grad: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let num_points = points.shape(0);
    let num_gaussians = params.shape(0);
    let p = ABSOLUTE_POS;
    let active = p < num_points;
    // Units past the last point still stage tiles and reach every barrier; they read point 0.
    let row = select(active, p, 0);
    let x = load_vec3::<F>(points, row);
    let mut tile = SharedMemory::<F>::new(BLOCK * PARAMS);
    let mut acc = Array::<F>::new(chunk);

    for pass in 0..point_passes(features.shape(1), grad, chunk) {
        let c0 = pass * chunk;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        let mut start = 0;
        while start < num_gaussians {
            let count = select(num_gaussians - start < BLOCK, num_gaussians - start, BLOCK);
            stage::<F>(params, &mut tile, start * PARAMS, count * PARAMS);
            sync_cube();
            for t in 0..count {
                let (w, mu) = gaussian_from_tile::<F>(&tile, t * PARAMS);
                let z = w.apply(sub3::<F>(x, mu), diagonal);
                let e = (F::new(-0.5) * (z.x * z.x + z.y * z.y + z.z * z.z)).exp();
                point_pair::<F>(
                    &mut acc,
                    features,
                    grad_values,
                    row,
                    start + t,
                    c0,
                    w,
                    z,
                    e,
                    grad,
                    diagonal,
                    chunk,
                );
            }
            // The next tile overwrites this one only once every unit is done with it.
            sync_cube();
            start += BLOCK;
        }
        if active {
            write_point::<F>(out, &acc, p, c0, chunk);
        }
    }
}

/// What a Gaussian-major sweep adds for one pair `(p, i)` with `z = W (x_p - mu_i)` and weight
/// `e`: the chunk `c0..c0 + chunk` of `g[p] e` into `acc`, and on the first chunk (`geo`) the
/// whitened-frame sums `h z` into `geom[0..3]` and the symmetric `h z z^T` into `geom[3..9]`
/// (`[00, 01, 02, 11, 12, 22]`), with `h = 2 dL/d(d^2) = -s e`, `s = g[p] . f[i]`. The
/// parameter gradients follow from these sums in `write_gaussian` (the CPU implementation
/// explains why this frame keeps elongated Gaussians accurate).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn gaussian_pair<F: Float>(
    acc: &mut Array<F>,
    geom: &mut Array<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    p: usize,
    i: usize,
    c0: usize,
    geo: bool,
    z: Vec3<F>,
    e: F,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = features.shape(1);
    let g_row = p * channels;
    #[unroll]
    for j in 0..chunk {
        if c0 + j < channels {
            acc[j] += grad_values[g_row + c0 + j] * e;
        }
    }
    if geo {
        let mut s = F::new(0.0);
        for c in 0..channels {
            s += grad_values[g_row + c] * features[i * channels + c];
        }
        let h = -s * e;
        let hz = Vec3::<F> {
            x: h * z.x,
            y: h * z.y,
            z: h * z.z,
        };
        geom[0] += hz.x;
        geom[1] += hz.y;
        geom[2] += hz.z;
        geom[3] += hz.x * z.x;
        geom[6] += hz.y * z.y;
        geom[8] += hz.z * z.z;
        if !diagonal {
            geom[4] += hz.x * z.y;
            geom[5] += hz.x * z.z;
            geom[7] += hz.y * z.z;
        }
    }
}

/// Writes Gaussian `i`'s feature-gradient chunk and, on the first chunk (`geo`), its mean,
/// log-scale and quaternion gradients from the whitened sums of `gaussian_pair`:
/// `dL/dmu = -W^T sum(h z)`, `dlog_s_a = -sum(h z_a^2)`, `G = dL/dW = sum(h z z^T) S R^T`
/// (as `x - mu = R S z`), `dR[b][a] = G[a][b] / s_a`, then through `R(q)` and the normalisation
/// `q / |q|` (zero for a degenerate quaternion and in diagonal mode).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn write_gaussian<F: Float>(
    acc: &Array<F>,
    geom: &Array<F>,
    w: Mat3<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    grad_means: &mut Tensor<F>,
    grad_quats: &mut Tensor<F>,
    grad_log_scales: &mut Tensor<F>,
    grad_features: &mut Tensor<F>,
    i: usize,
    c0: usize,
    geo: bool,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
) {
    let channels = grad_features.shape(1);
    #[unroll]
    for j in 0..chunk {
        if c0 + j < channels {
            grad_features[i * channels + c0 + j] = acc[j];
        }
    }
    if geo {
        let zero = F::new(0.0);
        let d_mean = w.apply_transposed(
            Vec3::<F> {
                x: geom[0],
                y: geom[1],
                z: geom[2],
            },
            diagonal,
        );
        grad_means[3 * i] = -d_mean.x;
        grad_means[3 * i + 1] = -d_mean.y;
        grad_means[3 * i + 2] = -d_mean.z;
        grad_log_scales[3 * i] = -geom[3];
        grad_log_scales[3 * i + 1] = -geom[6];
        grad_log_scales[3 * i + 2] = -geom[8];
        if diagonal {
            grad_quats[4 * i] = zero;
            grad_quats[4 * i + 1] = zero;
            grad_quats[4 * i + 2] = zero;
            grad_quats[4 * i + 3] = zero;
        } else {
            // dL/dR[b][a] = G[a][b] / s_a = sum_c K[a][c] (s_c / s_a) R[b][c], with
            // K = sum(h z z^T) and the ratio as exp(log_s_c - log_s_a), finite even when a
            // scale overflows. `kr` is K with those ratios, `d` = kr R^T: d[a][b] = dL/dR[b][a].
            let l0 = log_scales[3 * i];
            let l1 = log_scales[3 * i + 1];
            let l2 = log_scales[3 * i + 2];
            let kr = Mat3::<F> {
                m00: geom[3],
                m01: geom[4] * (l1 - l0).exp(),
                m02: geom[5] * (l2 - l0).exp(),
                m10: geom[4] * (l0 - l1).exp(),
                m11: geom[6],
                m12: geom[7] * (l2 - l1).exp(),
                m20: geom[5] * (l0 - l2).exp(),
                m21: geom[7] * (l1 - l2).exp(),
                m22: geom[8],
            };
            let r = rotation::<F>(quats, i);
            let d = Mat3::<F> {
                m00: kr.m00 * r.m00 + kr.m01 * r.m01 + kr.m02 * r.m02,
                m01: kr.m00 * r.m10 + kr.m01 * r.m11 + kr.m02 * r.m12,
                m02: kr.m00 * r.m20 + kr.m01 * r.m21 + kr.m02 * r.m22,
                m10: kr.m10 * r.m00 + kr.m11 * r.m01 + kr.m12 * r.m02,
                m11: kr.m10 * r.m10 + kr.m11 * r.m11 + kr.m12 * r.m12,
                m12: kr.m10 * r.m20 + kr.m11 * r.m21 + kr.m12 * r.m22,
                m20: kr.m20 * r.m00 + kr.m21 * r.m01 + kr.m22 * r.m02,
                m21: kr.m20 * r.m10 + kr.m21 * r.m11 + kr.m22 * r.m12,
                m22: kr.m20 * r.m20 + kr.m21 * r.m21 + kr.m22 * r.m22,
            };
            let one = F::new(1.0);
            let two = F::new(2.0);
            let (q, qw, norm) = unit_quat::<F>(quats, i);
            let x = q.x;
            let y = q.y;
            let z = q.z;
            // r_ba = dL/dR[b][a] = d[a][b].
            let r00 = d.m00;
            let r01 = d.m10;
            let r02 = d.m20;
            let r10 = d.m01;
            let r11 = d.m11;
            let r12 = d.m21;
            let r20 = d.m02;
            let r21 = d.m12;
            let r22 = d.m22;
            let gw = two * (-z * r01 + y * r02 + z * r10 - x * r12 - y * r20 + x * r21);
            let gx = two
                * (y * r01 + z * r02 + y * r10 - two * x * r11 - qw * r12 + z * r20 + qw * r21
                    - two * x * r22);
            let gy = two
                * (-two * y * r00 + x * r01 + qw * r02 + x * r10 + z * r12 - qw * r20 + z * r21
                    - two * y * r22);
            let gz = two
                * (-two * z * r00 - qw * r01 + x * r02 + qw * r10 - two * z * r11
                    + y * r12
                    + x * r20
                    + y * r21);
            let dot = gw * qw + gx * x + gy * y + gz * z;
            // The norm is zero only for a degenerate quaternion, whose gradient is zero.
            let degenerate = norm == zero;
            let inv = one / select(degenerate, one, norm);
            grad_quats[4 * i] = select(degenerate, zero, (gw - qw * dot) * inv);
            grad_quats[4 * i + 1] = select(degenerate, zero, (gx - x * dot) * inv);
            grad_quats[4 * i + 2] = select(degenerate, zero, (gy - y * dot) * inv);
            grad_quats[4 * i + 3] = select(degenerate, zero, (gz - z * dot) * inv);
        }
    }
}

/// Exact mode, one unit per Gaussian over all points: `dL/dmu`, `dL/dquat`, `dL/dlog_scale`
/// and `dL/df` of its own Gaussian.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn gaussian_tiles_kernel<F: Float>(
    points: &Tensor<F>,
    params: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    features: &Tensor<F>,
    grad_values: &Tensor<F>,
    grad_means: &mut Tensor<F>,
    grad_quats: &mut Tensor<F>,
    grad_log_scales: &mut Tensor<F>,
    grad_features: &mut Tensor<F>,
    #[comptime] diagonal: bool,
    #[comptime] chunk: usize,
    #[define(F)] _dtype: StorageType,
) {
    let num_points = points.shape(0);
    let num_gaussians = params.shape(0);
    let i = ABSOLUTE_POS;
    let active = i < num_gaussians;
    // Units past the last Gaussian still stage tiles and reach every barrier.
    let gi = select(active, i, 0);
    let (w, mu) = gaussian_from_params::<F>(params, gi);
    let mut tile = SharedMemory::<F>::new(BLOCK * 3);
    let mut acc = Array::<F>::new(chunk);
    let mut geom = Array::<F>::new(12usize);

    for pass in 0..features.shape(1).div_ceil(chunk) {
        let c0 = pass * chunk;
        // The geometric gradients need every channel of s: the first chunk's sweep accumulates
        // them, later chunks only their feature gradients.
        let geo = pass == 0;
        #[unroll]
        for j in 0..chunk {
            acc[j] = F::new(0.0);
        }
        #[unroll]
        for j in 0..12usize {
            geom[j] = F::new(0.0);
        }
        let mut start = 0;
        while start < num_points {
            let count = select(num_points - start < BLOCK, num_points - start, BLOCK);
            stage::<F>(points, &mut tile, start * 3, count * 3);
            sync_cube();
            for t in 0..count {
                let x = Vec3::<F> {
                    x: tile[3 * t],
                    y: tile[3 * t + 1],
                    z: tile[3 * t + 2],
                };
                let z = w.apply(sub3::<F>(x, mu), diagonal);
                let e = (F::new(-0.5) * (z.x * z.x + z.y * z.y + z.z * z.z)).exp();
                gaussian_pair::<F>(
                    &mut acc,
                    &mut geom,
                    features,
                    grad_values,
                    start + t,
                    gi,
                    c0,
                    geo,
                    z,
                    e,
                    diagonal,
                    chunk,
                );
            }
            sync_cube();
            start += BLOCK;
        }
        if active {
            write_gaussian::<F>(
                &acc,
                &geom,
                w,
                quats,
                log_scales,
                grad_means,
                grad_quats,
                grad_log_scales,
                grad_features,
                i,
                c0,
                geo,
                diagonal,
                chunk,
            );
        }
    }
}
