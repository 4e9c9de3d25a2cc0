//! The forward segment walk for `f32` in explicit AVX2 + FMA intrinsics.
//!
//! The portable body (`forward_segment_body`) compiles to vector code whose per-lane state
//! (transmittance, colour, depth, `last`) stays on the stack: LLVM's loop vectoriser stores and
//! reloads it at every step, and turns the `last` update into a scatter. Here the state lives
//! in eight-lane registers. The arithmetic is the portable body's, operation for operation
//! (the same fused multiply-adds, the same unfused products and sums, the same NaN handling), so
//! the images are bit-identical to it (`tests::avx2_walk_matches_the_portable_one`).

use core::arch::x86_64::*;

use super::{Footprint, MAX_ALPHA, MIN_ALPHA, MIN_TRANSMITTANCE, Pixel, SEGMENT, lane_centres};

/// `exp_f32_fused` (see `real.rs`) on eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_fused(x: __m256) -> __m256 {
    const MAGIC: f32 = 12_582_912.0;
    const LOWEST: f32 = -126.0 * core::f32::consts::LN_2;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const HIGHEST: f32 = 88.5;
    const C: [f32; 8] = [
        1.0,
        1.0,
        0.5,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
    ];
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
    let mut p = _mm256_set1_ps(C[7]);
    for c in C[..7].iter().rev() {
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
    let underflow = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.3));
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
