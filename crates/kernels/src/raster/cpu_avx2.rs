//! The forward and backward segment walks for `f32` in explicit AVX2 + FMA intrinsics.
//!
//! The portable bodies (`forward_segment_body`, `backward_segment_body`) compile to vector code
//! whose per-lane state (transmittance, colour, depth, `last`; the backward's transmittance and
//! what lies behind) stays on the stack: LLVM's loop vectoriser stores and reloads it at every
//! step, and turns the `last` update into a scatter. Here the state lives in eight-lane
//! registers (the backward's per-entry lane sums stay in memory, as they must). The arithmetic is the portable body's, operation for operation
//! (the same fused multiply-adds, the same unfused products and sums, the same NaN handling), so
//! the images and gradients are bit-identical to it (`tests::avx2_walks_match_the_portable_ones`).

use core::arch::x86_64::*;

use super::{
    Footprint, LanePartial, MAX_ALPHA, MIN_ALPHA, MIN_TRANSMITTANCE, Pixel, SEGMENT,
    SegmentBackward, lane_centres,
};

/// `exp_f32_fused` (see `real.rs`) on eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_fused(x: __m256) -> __m256 {
    use crate::real::exp_f32_consts::*;
    // `max`/`min` return their second operand when either is NaN: NaN passes, as `clamp`.
    let clamped = _mm256_min_ps(
        _mm256_set1_ps(HIGHEST),
        _mm256_max_ps(_mm256_set1_ps(LOWEST), x),
    );
    let magic = _mm256_set1_ps(MAGIC);
    let shifted = _mm256_fmadd_ps(clamped, _mm256_set1_ps(core::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(shifted, magic);
    let minus_n = _mm256_xor_ps(n, _mm256_set1_ps(-0.0));
    let u = _mm256_fmadd_ps(
        minus_n,
        _mm256_set1_ps(LN2_LO),
        _mm256_fmadd_ps(minus_n, _mm256_set1_ps(LN2_HI), clamped),
    );
    let mut p = _mm256_set1_ps(TAYLOR[7]);
    for c in TAYLOR[..7].iter().rev() {
        p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(*c));
    }
    let exponent = _mm256_sub_epi32(
        _mm256_castps_si256(shifted),
        _mm256_set1_epi32(MAGIC.to_bits() as i32),
    );
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        exponent,
        _mm256_set1_epi32(127),
    )));
    let value = _mm256_mul_ps(p, scale);
    let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(UNDERFLOW));
    _mm256_andnot_ps(underflow, value)
}

/// `forward_segment_body::<f32>` with the state in registers (same contract).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn forward_segment(
    entries: &[Footprint<f32>],
    list: &[u32],
    px: usize,
    py: usize,
    out: &mut [Pixel<f32>],
) {
    let centres = lane_centres::<f32>(px);
    // SAFETY: `centres` holds `SEGMENT = 8` floats.
    let cx = unsafe { _mm256_loadu_ps(centres.as_ptr()) };
    let cy = (py as f64 + 0.5) as f32;
    // A tile list is at most `N <= u32::MAX` long.
    let open = entries.len() as u32;
    let lanes: [u32; SEGMENT] = core::array::from_fn(|l| if l < out.len() { open } else { 0 });
    // SAFETY: `lanes` holds 8 `u32`.
    let mut last = unsafe { _mm256_loadu_si256(lanes.as_ptr().cast()) };
    let open_v = _mm256_set1_epi32(open as i32);
    let one = _mm256_set1_ps(1.0);
    let zero = _mm256_setzero_ps();
    let (max_alpha, min_alpha) = (
        _mm256_set1_ps(MAX_ALPHA as f32),
        _mm256_set1_ps(MIN_ALPHA as f32),
    );
    let min_t = _mm256_set1_ps(MIN_TRANSMITTANCE as f32);
    let mut t = one;
    let (mut r, mut g, mut b, mut depth) = (zero, zero, zero, zero);
    for &j in list {
        let f = &entries[j as usize];
        // The row's terms, as `RowSplat::new` computes them.
        let dy = cy - f.y;
        let half_a = _mm256_set1_ps(0.5 * f.a);
        let b_dy = _mm256_set1_ps(f.b * dy);
        let half_c_dy2 = _mm256_set1_ps(0.5 * f.c * dy * dy);
        let dx = _mm256_sub_ps(cx, _mm256_set1_ps(f.x));
        let sigma = _mm256_fmadd_ps(dx, _mm256_fmadd_ps(half_a, dx, b_dy), half_c_dy2);
        let vis = exp_fused(_mm256_xor_ps(sigma, _mm256_set1_ps(-0.0)));
        let raw = _mm256_mul_ps(_mm256_set1_ps(f.opacity), vis);
        let clamp = _mm256_cmp_ps::<_CMP_GT_OQ>(raw, max_alpha);
        let alpha = _mm256_blendv_ps(raw, max_alpha, clamp);
        let drawn = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(sigma, zero),
            _mm256_cmp_ps::<_CMP_GE_OQ>(alpha, min_alpha),
        );
        let live = _mm256_castsi256_ps(_mm256_cmpeq_epi32(last, open_v));
        let ok = _mm256_and_ps(drawn, live);
        let next = _mm256_mul_ps(t, _mm256_sub_ps(one, alpha));
        let stop = _mm256_and_ps(ok, _mm256_cmp_ps::<_CMP_LE_OQ>(next, min_t));
        let draw = _mm256_andnot_ps(stop, ok);
        let w = _mm256_and_ps(draw, _mm256_mul_ps(alpha, t));
        r = _mm256_add_ps(r, _mm256_mul_ps(w, _mm256_set1_ps(f.color[0])));
        g = _mm256_add_ps(g, _mm256_mul_ps(w, _mm256_set1_ps(f.color[1])));
        b = _mm256_add_ps(b, _mm256_mul_ps(w, _mm256_set1_ps(f.color[2])));
        depth = _mm256_add_ps(depth, _mm256_mul_ps(w, _mm256_set1_ps(f.depth)));
        t = _mm256_blendv_ps(t, next, draw);
        last = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(last),
            _mm256_castsi256_ps(_mm256_set1_epi32(j as i32)),
            stop,
        ));
        if _mm256_movemask_ps(_mm256_andnot_ps(stop, live)) == 0 {
            break;
        }
    }
    let mut lanes_f = [[0.0f32; SEGMENT]; 5];
    let mut lanes_last = [0u32; SEGMENT];
    // SAFETY: every array holds 8 values of 4 bytes.
    unsafe {
        for (dst, v) in lanes_f.iter_mut().zip([r, g, b, depth, t]) {
            _mm256_storeu_ps(dst.as_mut_ptr(), v);
        }
        _mm256_storeu_si256(lanes_last.as_mut_ptr().cast(), last);
    }
    for (l, p) in out.iter_mut().enumerate() {
        *p = Pixel {
            rgb: [lanes_f[0][l], lanes_f[1][l], lanes_f[2][l]],
            depth: lanes_f[3][l],
            transmittance: lanes_f[4][l],
            last: lanes_last[l],
        };
    }
}

/// `backward_segment_body::<f32>` with the segment's state in registers (same contract; the
/// per-entry lane sums stay in `partial`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn backward_segment(
    entries: &[Footprint<f32>],
    list: &[u32],
    px: usize,
    py: usize,
    s: SegmentBackward<f32>,
    partial: &mut [LanePartial<f32>],
) {
    let centres = lane_centres::<f32>(px);
    let load = |v: &[f32; SEGMENT]| {
        // SAFETY: `v` holds 8 floats.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    };
    let cx = load(&centres);
    let cy = (py as f64 + 0.5) as f32;
    let (v_r, v_g, v_b, v_depth) = (
        load(&s.v_rgb[0]),
        load(&s.v_rgb[1]),
        load(&s.v_rgb[2]),
        load(&s.v_depth),
    );
    let mut t_state = load(&s.t);
    let mut behind = load(&s.behind);
    // SAFETY: `last` holds 8 `u32`.
    let last = unsafe { _mm256_loadu_si256(s.last.as_ptr().cast()) };
    let bias = _mm256_set1_epi32(i32::MIN);
    let one = _mm256_set1_ps(1.0);
    let zero = _mm256_setzero_ps();
    let half = _mm256_set1_ps(0.5);
    let sign = _mm256_set1_ps(-0.0);
    let (max_alpha, min_alpha) = (
        _mm256_set1_ps(MAX_ALPHA as f32),
        _mm256_set1_ps(MIN_ALPHA as f32),
    );
    // Entries at or past every lane's `last` were not drawn here.
    let longest = s.last.iter().copied().max().unwrap_or(0);
    let end = list.partition_point(|&j| j < longest);
    for &j in list[..end].iter().rev() {
        let f = &entries[j as usize];
        let dy_s = cy - f.y;
        let dy = _mm256_set1_ps(dy_s);
        let half_a = _mm256_set1_ps(0.5 * f.a);
        let b_dy = _mm256_set1_ps(f.b * dy_s);
        let half_c_dy2 = _mm256_set1_ps(0.5 * f.c * dy_s * dy_s);
        let (a, b, c) = (
            _mm256_set1_ps(f.a),
            _mm256_set1_ps(f.b),
            _mm256_set1_ps(f.c),
        );
        let dx = _mm256_sub_ps(cx, _mm256_set1_ps(f.x));
        let sigma = _mm256_fmadd_ps(dx, _mm256_fmadd_ps(half_a, dx, b_dy), half_c_dy2);
        let vis = exp_fused(_mm256_xor_ps(sigma, sign));
        let raw = _mm256_mul_ps(_mm256_set1_ps(f.opacity), vis);
        let clamped = _mm256_cmp_ps::<_CMP_GT_OQ>(raw, max_alpha);
        let alpha = _mm256_blendv_ps(raw, max_alpha, clamped);
        let drawn = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(sigma, zero),
            _mm256_cmp_ps::<_CMP_GE_OQ>(alpha, min_alpha),
        );
        // `j < last`, unsigned: both offset by 2^31 for the signed comparison AVX2 has.
        let before = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
            _mm256_xor_si256(last, bias),
            _mm256_set1_epi32((j ^ 0x8000_0000) as i32),
        ));
        let ok = _mm256_and_ps(drawn, before);
        let inv_one_minus = _mm256_div_ps(one, _mm256_sub_ps(one, alpha));
        let t = _mm256_mul_ps(t_state, inv_one_minus);
        let w = _mm256_and_ps(ok, _mm256_mul_ps(alpha, t));
        let own = _mm256_add_ps(
            _mm256_add_ps(
                _mm256_add_ps(
                    _mm256_mul_ps(_mm256_set1_ps(f.color[0]), v_r),
                    _mm256_mul_ps(_mm256_set1_ps(f.color[1]), v_g),
                ),
                _mm256_mul_ps(_mm256_set1_ps(f.color[2]), v_b),
            ),
            _mm256_mul_ps(_mm256_set1_ps(f.depth), v_depth),
        );
        let v_alpha = _mm256_and_ps(
            ok,
            _mm256_sub_ps(_mm256_mul_ps(t, own), _mm256_mul_ps(behind, inv_one_minus)),
        );
        behind = _mm256_add_ps(behind, _mm256_mul_ps(w, own));
        t_state = _mm256_blendv_ps(t_state, t, ok);
        let free = _mm256_andnot_ps(clamped, one);
        let v_sigma = _mm256_mul_ps(_mm256_xor_ps(_mm256_mul_ps(free, v_alpha), sign), alpha);
        let gx = _mm256_mul_ps(
            _mm256_xor_ps(v_sigma, sign),
            _mm256_add_ps(_mm256_mul_ps(a, dx), _mm256_mul_ps(b, dy)),
        );
        let gy = _mm256_mul_ps(
            _mm256_xor_ps(v_sigma, sign),
            _mm256_add_ps(_mm256_mul_ps(b, dx), _mm256_mul_ps(c, dy)),
        );
        let half_v_sigma = _mm256_mul_ps(half, v_sigma);
        let e = &mut partial[j as usize];
        let add = |acc: &mut [f32; SEGMENT], v: __m256| {
            // SAFETY: `acc` holds 8 floats.
            unsafe {
                _mm256_storeu_ps(
                    acc.as_mut_ptr(),
                    _mm256_add_ps(_mm256_loadu_ps(acc.as_ptr()), v),
                )
            }
        };
        add(&mut e.color[0], _mm256_mul_ps(w, v_r));
        add(&mut e.color[1], _mm256_mul_ps(w, v_g));
        add(&mut e.color[2], _mm256_mul_ps(w, v_b));
        add(&mut e.depth, _mm256_mul_ps(w, v_depth));
        add(
            &mut e.opacity,
            _mm256_mul_ps(_mm256_mul_ps(free, vis), v_alpha),
        );
        add(
            &mut e.conic[0],
            _mm256_mul_ps(_mm256_mul_ps(half_v_sigma, dx), dx),
        );
        add(
            &mut e.conic[1],
            _mm256_mul_ps(_mm256_mul_ps(v_sigma, dx), dy),
        );
        add(
            &mut e.conic[2],
            _mm256_mul_ps(_mm256_mul_ps(half_v_sigma, dy), dy),
        );
        add(&mut e.xy[0], gx);
        add(&mut e.xy[1], gy);
        add(
            &mut e.xy_abs,
            _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(gx, gx), _mm256_mul_ps(gy, gy))),
        );
    }
}
