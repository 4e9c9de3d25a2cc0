//! The backward of one kept splat, in the three parts every map shares the first and last of:
//! the splat's shape (opacity, conic, `C = A M M^T A^T`) back to the map's Jacobian `A` and the
//! Gaussian's rotation, scales and opacity ([`shape_backward`]); the map itself, here the
//! pinhole's ([`backward_one`]; the sphere's is in [`super::equirect`]); and the colour back to
//! the SH coefficients and the view direction ([`colour_backward`]).

use super::{Camera, Projected, SplatShape, ViewColour, sh_basis_vjp};
use crate::real::Real;

/// The loss gradient with respect to one Gaussian's outputs.
pub(super) struct Upstream<T> {
    pub xy: [T; 2],
    pub depth: T,
    pub conic: [T; 3],
    pub color: [T; 3],
    pub opacity: T,
}

/// One Gaussian's input gradients (the SH part is written in place).
pub(super) struct InputGrads<T> {
    pub mean: [T; 3],
    pub quat: [T; 4],
    pub log_scale: [T; 3],
    pub logit: T,
}

/// What the splat's shape hands back: the gradient with respect to the map's `A` (2x3,
/// row-major) and the Gaussian's own shape inputs.
pub(super) struct ShapeGrads<T> {
    pub a: [T; 6],
    pub quat: [T; 4],
    pub log_scale: [T; 3],
    pub logit: T,
}

/// The backward of [`super::splat_shape`] through `A = am`, from the conic's and the opacity's
/// upstream gradients.
#[inline(always)]
pub(super) fn shape_backward<T: Real>(
    s: &SplatShape<T>,
    am: &[T; 6],
    conic: [T; 3],
    opacity: T,
    antialiased: bool,
) -> ShapeGrads<T> {
    let two = T::from_f64(2.0);
    let half = T::from_f64(0.5);

    // Opacity = sigmoid(logit) * comp.
    let logit = opacity * s.comp * s.sigmoid * (T::ONE - s.sigmoid);

    // Conic = inverse of the dilated covariance [[a, b], [b, c]] (b one scalar): the
    // gradient with respect to (a, b, c).
    let [ca, cb, cc] = s.cov_d;
    let inv_det2 = T::ONE / (s.det * s.det);
    let [g0, g1, g2] = conic;
    let mut ga = (-cc * cc * g0 + cb * cc * g1 - cb * cb * g2) * inv_det2;
    let mut gb = (two * cb * cc * g0 - (ca * cc + cb * cb) * g1 + two * ca * cb * g2) * inv_det2;
    let mut gc = (-cb * cb * g0 + ca * cb * g1 - ca * ca * g2) * inv_det2;
    if antialiased {
        // comp = sqrt(det C / det C'): d comp = comp/2 (d det C / det C - d det C' / det C').
        // comp >= 1/255 here (the Gaussian was kept), so det C > 0.
        let g_comp = opacity * s.sigmoid;
        let g_det_c = half * g_comp / (s.comp * s.det);
        let g_det_d = -half * g_comp * s.comp / s.det;
        let [c0, c1, c2] = s.cov;
        ga += g_det_c * c2 + g_det_d * cc;
        gc += g_det_c * c0 + g_det_d * ca;
        gb -= two * (g_det_c * c1 + g_det_d * cb);
    }

    // C = B B^T: C_xx = |B_0|^2, C_xy = B_0 . B_1, C_yy = |B_1|^2.
    let b = &s.b;
    let gbm: [T; 6] = core::array::from_fn(|e| {
        let col = e % 3;
        if e < 3 {
            two * ga * b[col] + gb * b[3 + col]
        } else {
            gb * b[col] + two * gc * b[3 + col]
        }
    });
    // B = A M: dA = dB M^T, dM = A^T dB.
    let m = &s.m;
    let ga_m: [T; 6] = core::array::from_fn(|e| {
        let (r, k) = (e / 3, e % 3);
        gbm[3 * r] * m[3 * k] + gbm[3 * r + 1] * m[3 * k + 1] + gbm[3 * r + 2] * m[3 * k + 2]
    });
    let gm: [T; 9] = core::array::from_fn(|e| {
        let (k, j) = (e / 3, e % 3);
        am[k] * gbm[j] + am[3 + k] * gbm[3 + j]
    });
    // M = Rq diag(s): dRq_kj = dM_kj s_j, ds_j = sum_k dM_kj Rq_kj, d log s = s ds.
    let g_rq: [T; 9] = core::array::from_fn(|e| gm[e] * s.scale[e % 3]);
    let log_scale: [T; 3] = core::array::from_fn(|j| {
        let ds = gm[j] * s.rq[j] + gm[3 + j] * s.rq[3 + j] + gm[6 + j] * s.rq[6 + j];
        ds * s.scale[j]
    });
    ShapeGrads {
        a: ga_m,
        quat: s.quat.backward(&g_rq),
        log_scale,
        logit,
    }
}

/// The backward of [`super::view_colour`] and the clamp at zero: writes `v_sh` (`[K, 3]`) and,
/// when the view direction is differentiated, returns the gradient it passes to the mean.
#[inline(always)]
pub(super) fn colour_backward<T: Real>(
    c: &ViewColour<T>,
    degree: usize,
    sh: &[T],
    color: [T; 3],
    view_dir_grad: bool,
    v_sh: &mut [T],
) -> Option<[T; 3]> {
    // Colour = max(SH(dir) + 0.5, 0): no gradient where it clamps.
    let g_raw: [T; 3] = core::array::from_fn(|ch| T::select(c.raw[ch] > T::ZERO, color[ch]));
    let used = (degree + 1) * (degree + 1);
    let mut s = [T::ZERO; 16];
    for kk in 0..used {
        for ch in 0..3 {
            v_sh[3 * kk + ch] = c.basis[kk] * g_raw[ch];
            s[kk] += sh[3 * kk + ch] * g_raw[ch];
        }
    }
    if !(view_dir_grad && degree > 0) {
        return None;
    }
    let gd = sh_basis_vjp(degree, c.dir, &s);
    // dir = view / |view|, view = mu - centre.
    let d = c.dir;
    let along = gd[0] * d[0] + gd[1] * d[1] + gd[2] * d[2];
    Some(core::array::from_fn(|j| (gd[j] - d[j] * along) / c.dist))
}

/// The backward of the pinhole's [`super::project_one`] for a kept Gaussian; writes `v_sh`
/// (`[K, 3]`).
#[inline(always)]
pub(super) fn backward_one<T: Real>(
    g: &Projected<T>,
    cam: &Camera<T>,
    degree: usize,
    sh: &[T],
    up: &Upstream<T>,
    v_sh: &mut [T],
) -> InputGrads<T> {
    let shape = shape_backward(&g.shape, &g.a, up.conic, up.opacity, cam.antialiased);
    let ga_m = shape.a;
    let am = &g.a;

    // A row r = f_r / z (W_r - c_r W_2), c = the clamped (u, v): dA/dz = -A/z at fixed c, and
    // dA_r/dc_r = -f_r W_2 / z.
    let w = &cam.w;
    let inv_z = g.inv_z;
    let mut gp = [T::ZERO; 3];
    let mut dot_aa = T::ZERO;
    for e in 0..6 {
        dot_aa += ga_m[e] * am[e];
    }
    gp[2] -= dot_aa * inv_z;
    let focal = [cam.fx, cam.fy];
    for r in 0..2 {
        if !g.clamped[r] {
            // c_r = p_r / z; when the clamp is active c_r is a constant.
            let g_c = -focal[r]
                * inv_z
                * (ga_m[3 * r] * w[6] + ga_m[3 * r + 1] * w[7] + ga_m[3 * r + 2] * w[8]);
            gp[r] += g_c * inv_z;
            gp[2] -= g_c * g.uv[r] * inv_z;
        }
    }
    // xy = f (p_r / z) + c, with the unclamped ratio; depth = z.
    for r in 0..2 {
        let g_ratio = up.xy[r] * focal[r];
        gp[r] += g_ratio * inv_z;
        gp[2] -= g_ratio * g.p[r] * inv_z * inv_z;
    }
    gp[2] += up.depth;
    // p = W mu + t.
    let mut mean: [T; 3] =
        core::array::from_fn(|j| w[j] * gp[0] + w[3 + j] * gp[1] + w[6 + j] * gp[2]);
    if let Some(from_dir) = colour_backward(&g.colour, degree, sh, up.color, cam.view_dir_grad, v_sh)
    {
        for j in 0..3 {
            mean[j] += from_dir[j];
        }
    }
    InputGrads {
        mean,
        quat: shape.quat,
        log_scale: shape.log_scale,
        logit: shape.logit,
    }
}
