//! The projection as CubeCL kernels, generic over the CubeCL runtime (one source for wgpu and
//! cuda) and over the float type (each launch takes the tensors' runtime dtype).
//!
//! Two kernels, one unit per (camera, Gaussian) pair, the same math as the CPU version
//! (`cpu.rs`); a batch of `C` cameras is one launch of `C N` units, unit `v N + i` being
//! Gaussian `i` seen by camera `v`:
//! - `forward_kernel` writes the Gaussian's packed row and its three extents (zeros when culled);
//! - `backward_kernel` recomputes the forward state (so its culling decisions are the forward's)
//!   and applies the chain rule from its `grad_packed` row to every input.
//!
//! Every output element is owned by one unit: no atomics, bit-reproducible results. The
//! backward writes one gradient row per pair, summed over the cameras afterwards (in camera
//! order, when there are several). The cameras are a small `[C, CAM_WIDTH]` `f32` tensor, the
//! options comptime flags and launch scalars. The radii
//! and tile counts are computed in the kernel's float type (the CPU uses `f64`), so a radius may
//! differ by one where `k sqrt(C'_xx)` lies within rounding of an integer.

use burn::tensor::ops::FloatTensor;
use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{DType, Shape, TensorData, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::ProjectOps;
use super::cpu::TILE_SIZE;
use super::{CameraParams, PACKED_WIDTH, ProjectGrads, ProjectInputs, ProjectOptions};
use super::{ProjectPrimitives, check_setup};
use crate::cube_math::{
    Vec3, apply, apply_t, combine, dot, finite, load3, rotation_rows, scaled, store3, vec3,
};

/// Units per cube.
const BLOCK: u32 = 128;

/// Below this opacity no pixel reaches the rasterizer's `alpha >= 1/255`.
pub(crate) const MIN_ALPHA: f32 = 1.0 / 255.0;

/// Cap of the box half-extent in standard deviations (its value at opacity 1).
pub(crate) const MAX_EXTENT_SIGMAS: f32 = 3.33;

/// Below this quaternion norm the rotation is the identity and gets no gradient.
const MIN_QUAT_NORM: f32 = crate::quat::MIN_QUAT_NORM as f32;

/// The largest `f32` below `2^31`: radii and tile counts saturate there (the int output is i32).
const INT_MAX: f32 = 2_147_483_520.0;

/// The standard real SH basis constants of 3DGS, bands 0 to 3 (as in `cpu.rs`).
const SH_C0: f32 = super::SH_C0 as f32;
const SH_C1: f32 = 0.488_602_511_902_919_9_f64 as f32;
const SH_C2_0: f32 = 1.092_548_430_592_079_2_f64 as f32;
const SH_C2_2: f32 = 0.315_391_565_252_520_05_f64 as f32;
const SH_C2_4: f32 = 0.546_274_215_296_039_6_f64 as f32;
const SH_C3_0: f32 = -0.590_043_589_926_643_5_f64 as f32;
const SH_C3_1: f32 = 2.890_611_442_640_554_f64 as f32;
const SH_C3_2: f32 = -0.457_045_799_464_465_8_f64 as f32;
const SH_C3_3: f32 = 0.373_176_332_590_115_4_f64 as f32;
const SH_C3_5: f32 = 1.445_305_721_320_277_f64 as f32;

/// Positions in a camera's row of the camera tensor handed to the kernels (see
/// [`camera_rows`]).
const CAM_T: usize = 9;
const CAM_CENTRE: usize = 12;
const CAM_FX: usize = 15;
const CAM_FY: usize = 16;
const CAM_CX: usize = 17;
const CAM_CY: usize = 18;
const CAM_LIM_X: usize = 19;
const CAM_LIM_Y: usize = 21;
const CAM_NEAR: usize = 23;
const CAM_EPS2D: usize = 24;
const CAM_WIDTH_PX: usize = 25;
const CAM_HEIGHT: usize = 26;
const CAM_TILES_X: usize = 27;
const CAM_TILES_Y: usize = 28;
/// Floats per camera row.
const CAM_WIDTH: usize = 29;

/// The camera of one launch in the kernel's float type.
#[derive(CubeType, Clone, Copy)]
struct Cam<F: Float> {
    /// Rows of the world-to-camera rotation `W`.
    w0: Vec3<F>,
    w1: Vec3<F>,
    w2: Vec3<F>,
    t: Vec3<F>,
    centre: Vec3<F>,
    fx: F,
    fy: F,
    cx: F,
    cy: F,
    lim_x0: F,
    lim_x1: F,
    lim_y0: F,
    lim_y1: F,
    near: F,
    eps2d: F,
    width: F,
    height: F,
    tiles_x: F,
    tiles_y: F,
}

/// One Gaussian's forward state: its outputs and what the backward needs (as in `cpu.rs`).
#[derive(CubeType, Clone, Copy)]
struct State<F: Float> {
    kept: bool,
    p: Vec3<F>,
    inv_z: F,
    uc: F,
    vc: F,
    clamped_x: bool,
    clamped_y: bool,
    /// Rows of `A = J W`.
    a0: Vec3<F>,
    a1: Vec3<F>,
    /// The normalised quaternion and the raw norm (0 for a degenerate one).
    qw: F,
    q: Vec3<F>,
    norm: F,
    /// Rows of `Rq` and of `M = Rq S`.
    r0: Vec3<F>,
    r1: Vec3<F>,
    r2: Vec3<F>,
    scale: Vec3<F>,
    m0: Vec3<F>,
    m1: Vec3<F>,
    m2: Vec3<F>,
    /// Rows of `B = A M`.
    b0: Vec3<F>,
    b1: Vec3<F>,
    /// Un-dilated and dilated covariance `(xx, xy, yy)`.
    cov: Vec3<F>,
    cov_d: Vec3<F>,
    det: F,
    conic: Vec3<F>,
    sigmoid: F,
    comp: F,
    opacity: F,
    dir: Vec3<F>,
    dist: F,
    /// `SH(dir) + 0.5` before the clamp.
    raw_color: Vec3<F>,
    x: F,
    y: F,
    rx: F,
    ry: F,
    tiles: F,
}

#[cube]
fn cam_vec<F: Float>(cams: &Tensor<f32>, row: usize, #[comptime] at: usize) -> Vec3<F> {
    vec3::<F>(
        F::cast_from(cams[row + at]),
        F::cast_from(cams[row + at + 1]),
        F::cast_from(cams[row + at + 2]),
    )
}

#[cube]
fn cam_scalar<F: Float>(cams: &Tensor<f32>, row: usize, #[comptime] at: usize) -> F {
    F::cast_from(cams[row + at])
}

/// Camera `view` of the camera tensor.
#[cube]
fn load_camera<F: Float>(cams: &Tensor<f32>, view: usize) -> Cam<F> {
    let row = view * CAM_WIDTH;
    Cam::<F> {
        w0: cam_vec::<F>(cams, row, 0usize),
        w1: cam_vec::<F>(cams, row, 3usize),
        w2: cam_vec::<F>(cams, row, 6usize),
        t: cam_vec::<F>(cams, row, CAM_T),
        centre: cam_vec::<F>(cams, row, CAM_CENTRE),
        fx: cam_scalar::<F>(cams, row, CAM_FX),
        fy: cam_scalar::<F>(cams, row, CAM_FY),
        cx: cam_scalar::<F>(cams, row, CAM_CX),
        cy: cam_scalar::<F>(cams, row, CAM_CY),
        lim_x0: cam_scalar::<F>(cams, row, CAM_LIM_X),
        lim_x1: cam_scalar::<F>(cams, row, CAM_LIM_X + 1),
        lim_y0: cam_scalar::<F>(cams, row, CAM_LIM_Y),
        lim_y1: cam_scalar::<F>(cams, row, CAM_LIM_Y + 1),
        near: cam_scalar::<F>(cams, row, CAM_NEAR),
        eps2d: cam_scalar::<F>(cams, row, CAM_EPS2D),
        width: cam_scalar::<F>(cams, row, CAM_WIDTH_PX),
        height: cam_scalar::<F>(cams, row, CAM_HEIGHT),
        tiles_x: cam_scalar::<F>(cams, row, CAM_TILES_X),
        tiles_y: cam_scalar::<F>(cams, row, CAM_TILES_Y),
    }
}

/// The SH basis at the unit direction `d`, bands `0..=degree`, into `basis[0..16]` (the rest 0).
#[cube]
fn sh_basis<F: Float>(d: Vec3<F>, basis: &mut Array<F>, #[comptime] degree: u32) {
    for j in 0..16usize {
        basis[j] = F::new(0.0);
    }
    let x = d.x;
    let y = d.y;
    let z = d.z;
    basis[0usize] = F::new(SH_C0);
    if comptime![degree >= 1] {
        basis[1usize] = -F::new(SH_C1) * y;
        basis[2usize] = F::new(SH_C1) * z;
        basis[3usize] = -F::new(SH_C1) * x;
    }
    if comptime![degree >= 2] {
        let xx = x * x;
        let yy = y * y;
        let zz = z * z;
        basis[4usize] = F::new(SH_C2_0) * x * y;
        basis[5usize] = -F::new(SH_C2_0) * y * z;
        basis[6usize] = F::new(SH_C2_2) * (F::new(2.0) * zz - xx - yy);
        basis[7usize] = -F::new(SH_C2_0) * x * z;
        basis[8usize] = F::new(SH_C2_4) * (xx - yy);
        if comptime![degree >= 3] {
            basis[9usize] = F::new(SH_C3_0) * y * (F::new(3.0) * xx - yy);
            basis[10usize] = F::new(SH_C3_1) * x * y * z;
            basis[11usize] = F::new(SH_C3_2) * y * (F::new(4.0) * zz - xx - yy);
            basis[12usize] =
                F::new(SH_C3_3) * z * (F::new(2.0) * zz - F::new(3.0) * xx - F::new(3.0) * yy);
            basis[13usize] = F::new(SH_C3_2) * x * (F::new(4.0) * zz - xx - yy);
            basis[14usize] = F::new(SH_C3_5) * z * (xx - yy);
            basis[15usize] = F::new(SH_C3_0) * x * (xx - F::new(3.0) * yy);
        }
    }
}

/// `sum_k s_k grad B_k(d)` with `(x, y, z)` free (the caller projects onto the tangent plane).
#[cube]
fn sh_basis_vjp<F: Float>(d: Vec3<F>, s: &Array<F>, #[comptime] degree: u32) -> Vec3<F> {
    let x = d.x;
    let y = d.y;
    let z = d.z;
    let two = F::new(2.0);
    let three = F::new(3.0);
    let c1 = F::new(SH_C1);
    let mut gx = -c1 * s[3usize];
    let mut gy = -c1 * s[1usize];
    let mut gz = c1 * s[2usize];
    if comptime![degree >= 2] {
        let s4 = F::new(SH_C2_0) * s[4usize];
        let s5 = -F::new(SH_C2_0) * s[5usize];
        let s6 = F::new(SH_C2_2) * s[6usize];
        let s7 = -F::new(SH_C2_0) * s[7usize];
        let s8 = F::new(SH_C2_4) * s[8usize];
        gx += s4 * y + s7 * z - two * s6 * x + two * s8 * x;
        gy += s4 * x + s5 * z - two * s6 * y - two * s8 * y;
        gz += s5 * y + s7 * x + F::new(4.0) * s6 * z;
        if comptime![degree >= 3] {
            let xx = x * x;
            let yy = y * y;
            let zz = z * z;
            let six = F::new(6.0);
            let s9 = F::new(SH_C3_0) * s[9usize];
            let s10 = F::new(SH_C3_1) * s[10usize];
            let s11 = F::new(SH_C3_2) * s[11usize];
            let s12 = F::new(SH_C3_3) * s[12usize];
            let s13 = F::new(SH_C3_2) * s[13usize];
            let s14 = F::new(SH_C3_5) * s[14usize];
            let s15 = F::new(SH_C3_0) * s[15usize];
            gx += six * s9 * x * y + s10 * y * z - two * s11 * x * y - six * s12 * x * z
                + s13 * (F::new(4.0) * zz - three * xx - yy)
                + two * s14 * x * z
                + three * s15 * (xx - yy);
            gy += three * s9 * (xx - yy) + s10 * x * z + s11 * (F::new(4.0) * zz - xx - three * yy)
                - six * s12 * y * z
                - two * s13 * x * y
                - two * s14 * y * z
                - six * s15 * x * y;
            gz += s10 * x * y
                + F::new(8.0) * s11 * y * z
                + s12 * (six * zz - three * xx - three * yy)
                + F::new(8.0) * s13 * x * z
                + s14 * (xx - yy);
        }
    }
    vec3::<F>(gx, gy, gz)
}

/// Tiles of the half-open index range `floor(lo / 16) .. ceil(hi / 16)`, clipped to `0..tiles`.
#[cube]
fn tile_span<F: Float>(lo: F, hi: F, tiles: F) -> F {
    let tile = F::new(TILE_SIZE as f32);
    F::min(F::ceil(hi / tile), tiles) - F::max(F::floor(lo / tile), F::new(0.0))
}

/// Projects Gaussian `i` (see `project_one` in `cpu.rs`); `kept` is false when it is culled.
#[cube]
fn project_one<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    opacity_logits: &Tensor<F>,
    sh_dc: &Tensor<F>,
    sh_rest: &Tensor<F>,
    cam: Cam<F>,
    basis: &mut Array<F>,
    i: usize,
    #[comptime] degree: u32,
    #[comptime] coeffs: usize,
    #[comptime] antialiased: bool,
) -> State<F> {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let two = F::new(2.0);
    let used = comptime![((degree + 1) * (degree + 1)) as usize];
    let mean = load3::<F>(means, 3 * i);
    let qw_raw = quats[4 * i];
    let q_raw = load3::<F>(quats, 4 * i + 1);
    let log_scale = load3::<F>(log_scales, 3 * i);
    let logit = opacity_logits[i];
    let mut ok = finite::<F>(mean.x) && finite::<F>(mean.y) && finite::<F>(mean.z);
    ok = ok && finite::<F>(qw_raw) && finite::<F>(q_raw.x);
    ok = ok && finite::<F>(q_raw.y) && finite::<F>(q_raw.z);
    ok = ok && finite::<F>(log_scale.x) && finite::<F>(log_scale.y);
    ok = ok && finite::<F>(log_scale.z) && finite::<F>(logit);
    let rest_base = 3 * comptime![coeffs - 1] * i;
    #[unroll]
    for j in 0..3usize {
        ok = ok && finite::<F>(sh_dc[3 * i + j]);
    }
    #[unroll]
    for j in 0..comptime![3 * (used - 1)] {
        ok = ok && finite::<F>(sh_rest[rest_base + j]);
    }

    let p = vec3::<F>(
        dot::<F>(cam.w0, mean) + cam.t.x,
        dot::<F>(cam.w1, mean) + cam.t.y,
        dot::<F>(cam.w2, mean) + cam.t.z,
    );
    ok = ok && p.z >= cam.near;
    let inv_z = one / p.z;
    let u = p.x * inv_z;
    let v = p.y * inv_z;
    let clamped_x = u < cam.lim_x0 || u > cam.lim_x1;
    let clamped_y = v < cam.lim_y0 || v > cam.lim_y1;
    let uc = F::min(F::max(u, cam.lim_x0), cam.lim_x1);
    let vc = F::min(F::max(v, cam.lim_y0), cam.lim_y1);
    // Row r of A = J W is f_r / z (W_r - c_r W_2).
    let a0 = scaled::<F>(combine::<F>(cam.w0, one, cam.w2, -uc), cam.fx * inv_z);
    let a1 = scaled::<F>(combine::<F>(cam.w1, one, cam.w2, -vc), cam.fy * inv_z);

    let norm = F::sqrt(qw_raw * qw_raw + dot::<F>(q_raw, q_raw));
    let degenerate = norm < F::new(MIN_QUAT_NORM);
    let inv_norm = one / norm;
    let qw = select(degenerate, one, qw_raw * inv_norm);
    let q = vec3::<F>(
        select(degenerate, zero, q_raw.x * inv_norm),
        select(degenerate, zero, q_raw.y * inv_norm),
        select(degenerate, zero, q_raw.z * inv_norm),
    );
    let norm = select(degenerate, zero, norm);
    let (r0, r1, r2) = rotation_rows::<F>(qw, q.x, q.y, q.z);
    let scale = vec3::<F>(
        F::exp(log_scale.x),
        F::exp(log_scale.y),
        F::exp(log_scale.z),
    );
    let m0 = vec3::<F>(r0.x * scale.x, r0.y * scale.y, r0.z * scale.z);
    let m1 = vec3::<F>(r1.x * scale.x, r1.y * scale.y, r1.z * scale.z);
    let m2 = vec3::<F>(r2.x * scale.x, r2.y * scale.y, r2.z * scale.z);
    // B_r = (A M)_r = M^T A_r, C = B B^T.
    let b0 = apply_t::<F>(m0, m1, m2, a0);
    let b1 = apply_t::<F>(m0, m1, m2, a1);
    let cov = vec3::<F>(dot::<F>(b0, b0), dot::<F>(b0, b1), dot::<F>(b1, b1));
    let cov_d = vec3::<F>(cov.x + cam.eps2d, cov.y, cov.z + cam.eps2d);
    let det = cov_d.x * cov_d.z - cov_d.y * cov_d.y;
    ok = ok && det > zero;
    let inv_det = one / det;
    let conic = vec3::<F>(cov_d.z * inv_det, -cov_d.y * inv_det, cov_d.x * inv_det);

    let e = F::exp(-F::abs(logit));
    let sigmoid = select(logit >= zero, one / (one + e), e / (one + e));
    let mut comp = one;
    if antialiased {
        let det_c = F::max(cov.x * cov.z - cov.y * cov.y, zero);
        comp = F::sqrt(det_c * inv_det);
    }
    let opacity = sigmoid * comp;
    ok = ok && opacity >= F::new(MIN_ALPHA);

    let px = cam.fx * u + cam.cx;
    let py = cam.fy * v + cam.cy;
    let k = F::min(
        F::sqrt(two * F::ln(F::max(opacity / F::new(MIN_ALPHA), one))),
        F::new(MAX_EXTENT_SIGMAS),
    );
    let rx = F::ceil(k * F::sqrt(cov_d.x));
    let ry = F::ceil(k * F::sqrt(cov_d.z));
    ok = ok && rx >= one && ry >= one;
    ok = ok && px + rx > zero && px - rx < cam.width;
    ok = ok && py + ry > zero && py - ry < cam.height;
    let tiles = tile_span::<F>(px - rx, px + rx, cam.tiles_x)
        * tile_span::<F>(py - ry, py + ry, cam.tiles_y);

    let view = combine::<F>(mean, one, cam.centre, -one);
    let dist = F::sqrt(dot::<F>(view, view));
    let dir = scaled::<F>(view, one / dist);
    sh_basis::<F>(dir, basis, degree);
    let half = F::new(0.5);
    let dc_basis = basis[0];
    let mut red = half + dc_basis * sh_dc[3 * i];
    let mut green = half + dc_basis * sh_dc[3 * i + 1];
    let mut blue = half + dc_basis * sh_dc[3 * i + 2];
    #[unroll]
    for kk in 1..used {
        let bk = basis[kk];
        let c = rest_base + 3 * (kk - 1);
        red += bk * sh_rest[c];
        green += bk * sh_rest[c + 1];
        blue += bk * sh_rest[c + 2];
    }
    State::<F> {
        kept: ok,
        p,
        inv_z,
        uc,
        vc,
        clamped_x,
        clamped_y,
        a0,
        a1,
        qw,
        q,
        norm,
        r0,
        r1,
        r2,
        scale,
        m0,
        m1,
        m2,
        b0,
        b1,
        cov,
        cov_d,
        det,
        conic,
        sigmoid,
        comp,
        opacity,
        dir,
        dist,
        raw_color: vec3::<F>(red, green, blue),
        x: px,
        y: py,
        rx,
        ry,
        tiles,
    }
}

/// One unit per (camera, Gaussian) pair: its packed row and extents, zeros when culled.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn forward_kernel<F: Float, I: Int>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    opacity_logits: &Tensor<F>,
    sh_dc: &Tensor<F>,
    sh_rest: &Tensor<F>,
    packed: &mut Tensor<F>,
    extents: &mut Tensor<I>,
    cameras: &Tensor<f32>,
    #[comptime] degree: u32,
    #[comptime] coeffs: usize,
    #[comptime] antialiased: bool,
    #[define(F, I)] _dtypes: [StorageType; 2],
) {
    let r = ABSOLUTE_POS;
    let n = means.shape(0);
    if r >= n * (cameras.len() / CAM_WIDTH) {
        terminate!();
    }
    let i = r % n;
    let cam = load_camera::<F>(cameras, r / n);
    let mut basis = Array::<F>::new(16usize);
    let g = project_one::<F>(
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
        cam,
        &mut basis,
        i,
        degree,
        coeffs,
        antialiased,
    );
    let zero = F::new(0.0);
    let kept = g.kept;
    let o = r * PACKED_WIDTH;
    packed[o] = select(kept, g.x, zero);
    packed[o + 1] = select(kept, g.y, zero);
    packed[o + 2] = select(kept, g.p.z, zero);
    packed[o + 3] = select(kept, g.conic.x, zero);
    packed[o + 4] = select(kept, g.conic.y, zero);
    packed[o + 5] = select(kept, g.conic.z, zero);
    packed[o + 6] = select(kept, F::max(g.raw_color.x, zero), zero);
    packed[o + 7] = select(kept, F::max(g.raw_color.y, zero), zero);
    packed[o + 8] = select(kept, F::max(g.raw_color.z, zero), zero);
    packed[o + 9] = select(kept, g.opacity, zero);
    let cap = F::new(INT_MAX);
    let rx = select(kept, F::min(g.rx, cap), zero);
    let ry = select(kept, F::min(g.ry, cap), zero);
    let tiles = select(kept, F::min(g.tiles, cap), zero);
    extents[3 * r] = I::cast_from(rx);
    extents[3 * r + 1] = I::cast_from(ry);
    extents[3 * r + 2] = I::cast_from(tiles);
}

/// Writes a 3-vector at `base`.
/// One unit per Gaussian: recomputes its forward state and writes the gradients of all its
/// inputs (zeros when culled).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_kernel<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    opacity_logits: &Tensor<F>,
    sh_dc: &Tensor<F>,
    sh_rest: &Tensor<F>,
    grad_packed: &Tensor<F>,
    v_means: &mut Tensor<F>,
    v_quats: &mut Tensor<F>,
    v_log_scales: &mut Tensor<F>,
    v_logits: &mut Tensor<F>,
    v_sh_dc: &mut Tensor<F>,
    v_sh_rest: &mut Tensor<F>,
    cameras: &Tensor<f32>,
    #[comptime] degree: u32,
    #[comptime] coeffs: usize,
    #[comptime] antialiased: bool,
    #[comptime] view_dir_grad: bool,
    #[define(F)] _dtype: StorageType,
) {
    let r = ABSOLUTE_POS;
    let n = means.shape(0);
    if r >= n * (cameras.len() / CAM_WIDTH) {
        terminate!();
    }
    let i = r % n;
    let zero = F::new(0.0);
    let one = F::new(1.0);
    let two = F::new(2.0);
    let half = F::new(0.5);
    let used = comptime![((degree + 1) * (degree + 1)) as usize];
    let rest_in = 3 * comptime![coeffs - 1] * i;
    let rest_out = 3 * comptime![coeffs - 1] * r;
    let cam = load_camera::<F>(cameras, r / n);
    let mut basis = Array::<F>::new(16usize);
    let g = project_one::<F>(
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
        cam,
        &mut basis,
        i,
        degree,
        coeffs,
        antialiased,
    );
    if !g.kept {
        store3::<F>(v_means, 3 * r, vec3::<F>(zero, zero, zero));
        store3::<F>(v_log_scales, 3 * r, vec3::<F>(zero, zero, zero));
        for j in 0..4usize {
            v_quats[4 * r + j] = zero;
        }
        v_logits[r] = zero;
        store3::<F>(v_sh_dc, 3 * r, vec3::<F>(zero, zero, zero));
        #[unroll]
        for j in 0..comptime![3 * (coeffs - 1)] {
            v_sh_rest[rest_out + j] = zero;
        }
        terminate!();
    }
    let o = r * PACKED_WIDTH;
    let up_x = grad_packed[o];
    let up_y = grad_packed[o + 1];
    let up_depth = grad_packed[o + 2];
    let up_conic = load3::<F>(grad_packed, o + 3);
    let up_color = load3::<F>(grad_packed, o + 6);
    let up_opacity = grad_packed[o + 9];

    // Opacity = sigmoid(logit) * comp.
    v_logits[r] = up_opacity * g.comp * g.sigmoid * (one - g.sigmoid);

    // Conic = inverse of the dilated covariance [[a, b], [b, c]].
    let ca = g.cov_d.x;
    let cb = g.cov_d.y;
    let cc = g.cov_d.z;
    let inv_det2 = one / (g.det * g.det);
    let mut ga = (-cc * cc * up_conic.x + cb * cc * up_conic.y - cb * cb * up_conic.z) * inv_det2;
    let mut gb = (two * cb * cc * up_conic.x - (ca * cc + cb * cb) * up_conic.y
        + two * ca * cb * up_conic.z)
        * inv_det2;
    let mut gc = (-cb * cb * up_conic.x + ca * cb * up_conic.y - ca * ca * up_conic.z) * inv_det2;
    if antialiased {
        let g_comp = up_opacity * g.sigmoid;
        let g_det_c = half * g_comp / (g.comp * g.det);
        let g_det_d = -half * g_comp * g.comp / g.det;
        ga += g_det_c * g.cov.z + g_det_d * cc;
        gc += g_det_c * g.cov.x + g_det_d * ca;
        gb -= two * (g_det_c * g.cov.y + g_det_d * cb);
    }

    // C = B B^T.
    let gb0 = combine::<F>(g.b0, two * ga, g.b1, gb);
    let gb1 = combine::<F>(g.b0, gb, g.b1, two * gc);
    // B = A M: dA_r = M dB_r, dM = A^T dB (row k: a0_k dB_0 + a1_k dB_1).
    let ga0 = apply::<F>(g.m0, g.m1, g.m2, gb0);
    let ga1 = apply::<F>(g.m0, g.m1, g.m2, gb1);
    let gm0 = combine::<F>(gb0, g.a0.x, gb1, g.a1.x);
    let gm1 = combine::<F>(gb0, g.a0.y, gb1, g.a1.y);
    let gm2 = combine::<F>(gb0, g.a0.z, gb1, g.a1.z);
    // M = Rq diag(s): dRq_kj = dM_kj s_j, d log s_j = s_j sum_k dM_kj Rq_kj.
    let s = g.scale;
    let gr0 = vec3::<F>(gm0.x * s.x, gm0.y * s.y, gm0.z * s.z);
    let gr1 = vec3::<F>(gm1.x * s.x, gm1.y * s.y, gm1.z * s.z);
    let gr2 = vec3::<F>(gm2.x * s.x, gm2.y * s.y, gm2.z * s.z);
    let v_log_scale = vec3::<F>(
        (gm0.x * g.r0.x + gm1.x * g.r1.x + gm2.x * g.r2.x) * s.x,
        (gm0.y * g.r0.y + gm1.y * g.r1.y + gm2.y * g.r2.y) * s.y,
        (gm0.z * g.r0.z + gm1.z * g.r1.z + gm2.z * g.r2.z) * s.z,
    );
    store3::<F>(v_log_scales, 3 * r, v_log_scale);

    // Through R(q / |q|) to the raw quaternion; zero for a degenerate one.
    let w = g.qw;
    let x = g.q.x;
    let y = g.q.y;
    let z = g.q.z;
    let gw = two * (-z * gr0.y + y * gr0.z + z * gr1.x - x * gr1.z - y * gr2.x + x * gr2.y);
    let gx = two
        * (y * gr0.y + z * gr0.z + y * gr1.x - two * x * gr1.y - w * gr1.z + z * gr2.x + w * gr2.y
            - two * x * gr2.z);
    let gy = two
        * (-two * y * gr0.x + x * gr0.y + w * gr0.z + x * gr1.x + z * gr1.z - w * gr2.x
            + z * gr2.y
            - two * y * gr2.z);
    let gz = two
        * (-two * z * gr0.x - w * gr0.y + x * gr0.z + w * gr1.x - two * z * gr1.y
            + y * gr1.z
            + x * gr2.x
            + y * gr2.y);
    let qdot = gw * w + gx * x + gy * y + gz * z;
    let degenerate = g.norm == zero;
    let inv_norm = select(degenerate, zero, one / g.norm);
    v_quats[4 * r] = (gw - w * qdot) * inv_norm;
    v_quats[4 * r + 1] = (gx - x * qdot) * inv_norm;
    v_quats[4 * r + 2] = (gy - y * qdot) * inv_norm;
    v_quats[4 * r + 3] = (gz - z * qdot) * inv_norm;

    // A_r = f_r / z (W_r - c_r W_2): dA/dz = -A/z at fixed c, dA_r/dc_r = -f_r W_2 / z.
    let inv_z = g.inv_z;
    let mut gpx = zero;
    let mut gpy = zero;
    let mut gpz = -(dot::<F>(ga0, g.a0) + dot::<F>(ga1, g.a1)) * inv_z;
    if !g.clamped_x {
        let g_c = -cam.fx * inv_z * dot::<F>(ga0, cam.w2);
        gpx += g_c * inv_z;
        gpz -= g_c * g.uc * inv_z;
    }
    if !g.clamped_y {
        let g_c = -cam.fy * inv_z * dot::<F>(ga1, cam.w2);
        gpy += g_c * inv_z;
        gpz -= g_c * g.vc * inv_z;
    }
    // xy = f (p_r / z) + c with the unclamped ratio; depth = z.
    let g_ratio_x = up_x * cam.fx;
    let g_ratio_y = up_y * cam.fy;
    gpx += g_ratio_x * inv_z;
    gpy += g_ratio_y * inv_z;
    gpz -= (g_ratio_x * g.p.x + g_ratio_y * g.p.y) * inv_z * inv_z;
    gpz += up_depth;
    let v_mean = apply_t::<F>(cam.w0, cam.w1, cam.w2, vec3::<F>(gpx, gpy, gpz));
    let mut v_mean_x = v_mean.x;
    let mut v_mean_y = v_mean.y;
    let mut v_mean_z = v_mean.z;

    // Colour = max(SH(dir) + 0.5, 0): no gradient where it clamps.
    let g_raw = vec3::<F>(
        select(g.raw_color.x > zero, up_color.x, zero),
        select(g.raw_color.y > zero, up_color.y, zero),
        select(g.raw_color.z > zero, up_color.z, zero),
    );
    let mut s_dir = Array::<F>::new(16usize);
    store3::<F>(v_sh_dc, 3 * r, scaled::<F>(g_raw, basis[0]));
    s_dir[0] = dot::<F>(load3::<F>(sh_dc, 3 * i), g_raw);
    #[unroll]
    for kk in 1..used {
        let c = 3 * (kk - 1);
        store3::<F>(v_sh_rest, rest_out + c, scaled::<F>(g_raw, basis[kk]));
        s_dir[kk] = dot::<F>(load3::<F>(sh_rest, rest_in + c), g_raw);
    }
    #[unroll]
    for kk in used..coeffs {
        store3::<F>(
            v_sh_rest,
            rest_out + 3 * (kk - 1),
            vec3::<F>(zero, zero, zero),
        );
    }
    if comptime![view_dir_grad && degree > 0] {
        let gd = sh_basis_vjp::<F>(g.dir, &s_dir, degree);
        // dir = view / |view|, view = mu - centre.
        let along = dot::<F>(gd, g.dir);
        let tangent = combine::<F>(gd, one, g.dir, -along);
        let inv_dist = one / g.dist;
        v_mean_x += tangent.x * inv_dist;
        v_mean_y += tangent.y * inv_dist;
        v_mean_z += tangent.z * inv_dist;
    }
    store3::<F>(v_means, 3 * r, vec3::<F>(v_mean_x, v_mean_y, v_mean_z));
}

/// One camera and the derived values the kernels read, as its `CAM_WIDTH` `f32` values
/// (positions in the `CAM_*` constants; the rotation first).
fn camera_row(c: &CameraParams, o: &ProjectOptions) -> impl Iterator<Item = f32> {
    let (width, height) = (f64::from(c.width), f64::from(c.height));
    let r = c.rotation;
    let t = c.translation;
    let centre: [f64; 3] =
        core::array::from_fn(|k| -(r[k] * t[0] + r[3 + k] * t[1] + r[6 + k] * t[2]));
    // The frustum plus 30% of the half-FOV on each side, measured from the principal point.
    let margin_x = 0.3 * 0.5 * width / c.fx;
    let margin_y = 0.3 * 0.5 * height / c.fy;
    let values = r.into_iter().chain(t).chain(centre).chain([
        c.fx,
        c.fy,
        c.cx,
        c.cy,
        -(c.cx / c.fx + margin_x),
        (width - c.cx) / c.fx + margin_x,
        -(c.cy / c.fy + margin_y),
        (height - c.cy) / c.fy + margin_y,
        o.near,
        o.eps2d,
        width,
        height,
        f64::from(c.width.div_ceil(TILE_SIZE)),
        f64::from(c.height.div_ceil(TILE_SIZE)),
    ]);
    values.map(|v| v as f32)
}

/// The cameras as the `[C, CAM_WIDTH]` `f32` tensor the kernels read, on `like`'s device.
fn camera_rows<R, F, I, BT>(
    like: &CubeTensor<R>,
    cameras: &[CameraParams],
    options: &ProjectOptions,
) -> CubeTensor<R>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    let host: Vec<f32> = cameras
        .iter()
        .flat_map(|c| camera_row(c, options))
        .collect();
    let len = host.len();
    debug_assert_eq!(len, cameras.len() * CAM_WIDTH);
    CubeBackend::<R, F, I, BT>::float_from_data(TensorData::new(host, [len]), &like.device)
}

/// The launch shape, the cameras and the comptime settings shared by both kernels.
struct Setup<R: CubeRuntime> {
    means: CubeTensor<R>,
    quats: CubeTensor<R>,
    log_scales: CubeTensor<R>,
    opacity_logits: CubeTensor<R>,
    sh_dc: CubeTensor<R>,
    /// `sh_rest`, or `sh_dc` standing in for an empty one (a zero-size binding is not
    /// portable; the kernels read no rest coefficient when `coeffs == 1`).
    sh_rest: CubeTensor<R>,
    /// `[C, CAM_WIDTH]` `f32`: the cameras (see [`camera_rows`]).
    cameras: CubeTensor<R>,
    /// `C`.
    views: usize,
    n: usize,
    coeffs: usize,
    degree: u32,
    dtype: DType,
    count: CubeCount,
    dim: CubeDim,
}

impl<R: CubeRuntime> Setup<R> {
    fn new<F: FloatElement, I: IntElement, BT: BoolElement>(
        inputs: ProjectInputs<CubeBackend<R, F, I, BT>>,
        cameras: &[CameraParams],
        options: &ProjectOptions,
    ) -> Self {
        let means = into_contiguous(inputs.means);
        let sh_dc = into_contiguous(inputs.sh_dc);
        let n = means.shape()[0];
        let coeffs = inputs.sh_rest.shape()[1] + 1;
        let sh_rest = if coeffs == 1 {
            sh_dc.clone()
        } else {
            into_contiguous(inputs.sh_rest)
        };
        // `project_views` has checked the setup; an unchecked call uses every stored band.
        let degree = check_setup(coeffs, &cameras[0], options).unwrap_or(match coeffs {
            1 => 0,
            4 => 1,
            9 => 2,
            _ => 3,
        });
        let dim = CubeDim::new_1d(BLOCK);
        let views = cameras.len();
        let count = calculate_cube_count_elemwise(&means.client, views * n, dim);
        Setup {
            cameras: camera_rows::<R, F, I, BT>(&means, cameras, options),
            views,
            dtype: means.dtype,
            means,
            quats: into_contiguous(inputs.quats),
            log_scales: into_contiguous(inputs.log_scales),
            opacity_logits: into_contiguous(inputs.opacity_logits),
            sh_dc,
            sh_rest,
            n,
            coeffs,
            degree,
            count,
            dim,
        }
    }

    fn output<const D: usize>(&self, shape: [usize; D], dtype: DType) -> CubeTensor<R> {
        crate::cube_alloc::output(&self.means, shape, dtype)
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> ProjectOps
    for CubeBackend<R, F, I, BT>
{
    fn project_forward(
        inputs: ProjectInputs<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        let s = Setup::new(inputs, cameras, &options);
        let rows = s.views * s.n;
        let packed = s.output([rows, PACKED_WIDTH], s.dtype);
        let extents = s.output([rows, 3], I::dtype());
        forward_kernel::launch::<R>(
            &s.means.client,
            s.count.clone(),
            s.dim,
            s.means.clone().into_tensor_arg(),
            s.quats.clone().into_tensor_arg(),
            s.log_scales.clone().into_tensor_arg(),
            s.opacity_logits.clone().into_tensor_arg(),
            s.sh_dc.clone().into_tensor_arg(),
            s.sh_rest.clone().into_tensor_arg(),
            packed.clone().into_tensor_arg(),
            extents.clone().into_tensor_arg(),
            s.cameras.clone().into_tensor_arg(),
            s.degree,
            s.coeffs,
            options.antialiased,
            [s.dtype.into(), I::dtype().into()],
        );
        ProjectPrimitives { packed, extents }
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        // An empty `sh_rest` is its own (empty) gradient; the kernel then writes no rest
        // coefficient, into a one-element stand-in.
        let empty_rest = (inputs.sh_rest.shape()[1] == 0).then(|| inputs.sh_rest.clone());
        let s = Setup::new(inputs, cameras, &options);
        let grad_packed = into_contiguous(grad_packed);
        // One gradient row per (camera, Gaussian) pair: `[C N, ...]`, summed over the cameras
        // below.
        let rows = s.views * s.n;
        let v_sh_rest = match &empty_rest {
            Some(_) => s.output([1], s.dtype),
            None => s.output([rows, s.coeffs - 1, 3], s.dtype),
        };
        let grads: ProjectGrads<CubeBackend<R, F, I, BT>> = ProjectGrads {
            means: s.output([rows, 3], s.dtype),
            quats: s.output([rows, 4], s.dtype),
            log_scales: s.output([rows, 3], s.dtype),
            opacity_logits: s.output([rows], s.dtype),
            sh_dc: s.output([rows, 1, 3], s.dtype),
            sh_rest: empty_rest.clone().unwrap_or_else(|| v_sh_rest.clone()),
        };
        backward_kernel::launch::<R>(
            &s.means.client,
            s.count.clone(),
            s.dim,
            s.means.clone().into_tensor_arg(),
            s.quats.clone().into_tensor_arg(),
            s.log_scales.clone().into_tensor_arg(),
            s.opacity_logits.clone().into_tensor_arg(),
            s.sh_dc.clone().into_tensor_arg(),
            s.sh_rest.clone().into_tensor_arg(),
            grad_packed.into_tensor_arg(),
            grads.means.clone().into_tensor_arg(),
            grads.quats.clone().into_tensor_arg(),
            grads.log_scales.clone().into_tensor_arg(),
            grads.opacity_logits.clone().into_tensor_arg(),
            grads.sh_dc.clone().into_tensor_arg(),
            v_sh_rest.into_tensor_arg(),
            s.cameras.clone().into_tensor_arg(),
            s.degree,
            s.coeffs,
            options.antialiased,
            options.view_dir_grad,
            s.dtype.into(),
        );
        if s.views == 1 {
            return grads;
        }
        let (views, n) = (s.views, s.n);
        // Deterministic: a reduction over the leading camera axis, no atomics.
        let sum_views = |g: CubeTensor<R>| {
            let mut shape = g.shape().to_vec();
            shape[0] = n;
            let mut split = vec![views];
            split.extend_from_slice(&shape);
            let split = Self::float_reshape(g, Shape::from(split));
            Self::float_reshape(Self::float_sum_dim(split, 0), Shape::from(shape))
        };
        ProjectGrads {
            means: sum_views(grads.means),
            quats: sum_views(grads.quats),
            log_scales: sum_views(grads.log_scales),
            opacity_logits: sum_views(grads.opacity_logits),
            sh_dc: sum_views(grads.sh_dc),
            sh_rest: match empty_rest {
                Some(rest) => rest,
                None => sum_views(grads.sh_rest),
            },
        }
    }
}
