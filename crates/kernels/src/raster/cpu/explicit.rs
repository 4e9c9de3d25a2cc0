//! The forward and backward segment walks for `f32` in explicit x86-64 intrinsics: one source,
//! written over [`Lanes`], built for AVX-512 (a segment's 16 lanes in one 512-bit vector, with
//! mask registers) and for AVX2 + FMA (the segment as two halves of eight lanes, one pixel row
//! each, walked one after the other).
//!
//! The portable bodies (`forward_segment_body`, `backward_segment_body`) compile to vector code
//! whose per-lane state (transmittance, colour, depth, `last`; the backward's transmittance and
//! what lies behind) stays on the stack: LLVM's loop vectoriser stores and reloads it at every
//! step, and turns the `last` update into a scatter. Here the state lives in registers (the
//! backward's per-entry lane sums stay in memory, as they must). The arithmetic is the portable
//! body's, operation for operation (the same fused multiply-adds, the same unfused products and
//! sums, the same NaN handling), and every lane adds into its own accumulators, so the images
//! and gradients are bit-identical to it at either width
//! (`tests::explicit_walks_match_the_portable_ones`).

use core::any::TypeId;
use core::arch::x86_64::*;

use super::{
    Footprint, LANES, LanePartial, MAX_ALPHA, MIN_ALPHA, MIN_TRANSMITTANCE, SEGMENT_W, SEGMENTS,
    SegmentBackward, SegmentForward, SegmentGrid, SegmentPlace,
};
use crate::real::Real;

/// Whether this CPU runs the AVX-512 walks.
pub(super) fn avx512_available() -> bool {
    crate::simd::level() == crate::simd::Level::Avx512
}

/// Whether this CPU runs the AVX2 walks.
pub(super) fn avx2_available() -> bool {
    crate::simd::level() >= crate::simd::Level::Avx2
}

/// A vector of `WIDTH` `f32` lanes and what the walks do with it. Every method is
/// `#[inline(always)]` and only ever called from a function built with the instruction set it
/// needs (`forward_avx512`, ...), where the intrinsics inline.
trait Lanes: Copy {
    /// Lanes per vector: a divisor of [`LANES`].
    const WIDTH: usize;
    /// One flag per lane.
    type Mask: Copy;
    /// One `u32` per lane.
    type Index: Copy;

    fn splat(x: f32) -> Self;
    /// `v[..WIDTH]`; `v` must hold at least `WIDTH` values.
    fn load(v: &[f32]) -> Self;
    /// Into `v[..WIDTH]`.
    fn store(self, v: &mut [f32]);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// `self * a + b`, one rounding.
    fn fmadd(self, a: Self, b: Self) -> Self;
    fn sqrt(self) -> Self;
    /// `-self` (the sign bit flipped, as `f32`'s `-`).
    fn neg(self) -> Self;
    /// The second operand where either is NaN (`minps`).
    fn min(self, o: Self) -> Self;
    /// The second operand where either is NaN (`maxps`).
    fn max(self, o: Self) -> Self;
    /// `2^n` from `shifted = n + MAGIC` lane by lane (`two_to_the` in `real.rs`).
    fn two_to_the(shifted: Self) -> Self;
    /// Ordered comparisons: false where either is NaN.
    fn gt(self, o: Self) -> Self::Mask;
    fn ge(self, o: Self) -> Self::Mask;
    fn le(self, o: Self) -> Self::Mask;
    fn lt(self, o: Self) -> Self::Mask;
    /// `yes` where `m`, else `no`.
    fn select(m: Self::Mask, yes: Self, no: Self) -> Self;
    /// `self` where `m`, else `0`.
    fn keep(self, m: Self::Mask) -> Self;
    fn and(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// `a && !b`.
    fn and_not(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    fn any(m: Self::Mask) -> bool;
    fn splat_index(x: u32) -> Self::Index;
    fn load_index(v: &[u32]) -> Self::Index;
    fn store_index(i: Self::Index, v: &mut [u32]);
    fn index_eq(a: Self::Index, b: Self::Index) -> Self::Mask;
    /// `a > b`, unsigned.
    fn index_gt(a: Self::Index, b: Self::Index) -> Self::Mask;
    /// `yes` where `m`, else `no`.
    fn select_index(m: Self::Mask, yes: Self::Index, no: Self::Index) -> Self::Index;

    /// `*acc += v` lane by lane.
    #[inline(always)]
    fn add_to(self, acc: &mut [f32]) {
        Self::load(acc).add(self).store(acc);
    }

    /// `exp_f32_fused` (see `real.rs`) lane by lane.
    #[inline(always)]
    fn exp_fused(self) -> Self {
        use crate::real::exp_f32_consts::*;
        // `max`/`min` return their second operand when either is NaN: NaN passes, as `clamp`.
        let clamped = Self::splat(HIGHEST).min(Self::splat(LOWEST).max(self));
        let magic = Self::splat(MAGIC);
        let shifted = clamped.fmadd(Self::splat(core::f32::consts::LOG2_E), magic);
        let minus_n = shifted.sub(magic).neg();
        let u = minus_n.fmadd(
            Self::splat(LN2_LO),
            minus_n.fmadd(Self::splat(LN2_HI), clamped),
        );
        let mut p = Self::splat(TAYLOR[7]);
        for c in TAYLOR[..7].iter().rev() {
            p = p.fmadd(u, Self::splat(*c));
        }
        let value = p.mul(Self::two_to_the(shifted));
        // `x < UNDERFLOW` gives 0; NaN is not below it and stays NaN.
        Self::select(self.lt(Self::splat(UNDERFLOW)), Self::splat(0.0), value)
    }
}

/// Eight lanes in a 256-bit register (AVX2 + FMA); masks are all-ones lanes.
#[derive(Clone, Copy)]
struct Avx2(__m256);

// SAFETY (every `unsafe` block of this impl): these methods run only inlined into functions
// built with `avx2,fma`, and the loads and stores check their slices' lengths first.
impl Lanes for Avx2 {
    const WIDTH: usize = 8;
    type Mask = __m256;
    type Index = __m256i;

    #[inline(always)]
    fn splat(x: f32) -> Self {
        Avx2(unsafe { _mm256_set1_ps(x) })
    }
    #[inline(always)]
    fn load(v: &[f32]) -> Self {
        let v = &v[..8];
        Avx2(unsafe { _mm256_loadu_ps(v.as_ptr()) })
    }
    #[inline(always)]
    fn store(self, v: &mut [f32]) {
        let v = &mut v[..8];
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_add_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_sub_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_mul_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_div_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn fmadd(self, a: Self, b: Self) -> Self {
        Avx2(unsafe { _mm256_fmadd_ps(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Avx2(unsafe { _mm256_sqrt_ps(self.0) })
    }
    #[inline(always)]
    fn neg(self) -> Self {
        Avx2(unsafe { _mm256_xor_ps(self.0, _mm256_set1_ps(-0.0)) })
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_min_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        Avx2(unsafe { _mm256_max_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn two_to_the(shifted: Self) -> Self {
        use crate::real::exp_f32_consts::MAGIC;
        unsafe {
            let exponent = _mm256_sub_epi32(
                _mm256_castps_si256(shifted.0),
                _mm256_set1_epi32(MAGIC.to_bits() as i32),
            );
            Avx2(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(
                _mm256_add_epi32(exponent, _mm256_set1_epi32(127)),
            )))
        }
    }
    #[inline(always)]
    fn gt(self, o: Self) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_GT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn ge(self, o: Self) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_GE_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn le(self, o: Self) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn lt(self, o: Self) -> __m256 {
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn select(m: __m256, yes: Self, no: Self) -> Self {
        Avx2(unsafe { _mm256_blendv_ps(no.0, yes.0, m) })
    }
    #[inline(always)]
    fn keep(self, m: __m256) -> Self {
        Avx2(unsafe { _mm256_and_ps(m, self.0) })
    }
    #[inline(always)]
    fn and(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn and_not(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_andnot_ps(b, a) }
    }
    #[inline(always)]
    fn any(m: __m256) -> bool {
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn splat_index(x: u32) -> __m256i {
        unsafe { _mm256_set1_epi32(x as i32) }
    }
    #[inline(always)]
    fn load_index(v: &[u32]) -> __m256i {
        let v = &v[..8];
        unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
    }
    #[inline(always)]
    fn store_index(i: __m256i, v: &mut [u32]) {
        let v = &mut v[..8];
        unsafe { _mm256_storeu_si256(v.as_mut_ptr().cast(), i) }
    }
    #[inline(always)]
    fn index_eq(a: __m256i, b: __m256i) -> __m256 {
        unsafe { _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)) }
    }
    #[inline(always)]
    fn index_gt(a: __m256i, b: __m256i) -> __m256 {
        // Unsigned: both offset by 2^31 for the signed comparison AVX2 has.
        unsafe {
            let bias = _mm256_set1_epi32(i32::MIN);
            _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                _mm256_xor_si256(a, bias),
                _mm256_xor_si256(b, bias),
            ))
        }
    }
    #[inline(always)]
    fn select_index(m: __m256, yes: __m256i, no: __m256i) -> __m256i {
        unsafe {
            _mm256_castps_si256(_mm256_blendv_ps(
                _mm256_castsi256_ps(no),
                _mm256_castsi256_ps(yes),
                m,
            ))
        }
    }
}

/// Sixteen lanes in a 512-bit register (AVX-512F); masks are mask registers.
#[derive(Clone, Copy)]
struct Avx512(__m512);

// SAFETY (every `unsafe` block of this impl): these methods run only inlined into functions
// built with `avx512f`, and the loads and stores check their slices' lengths first.
impl Lanes for Avx512 {
    const WIDTH: usize = 16;
    type Mask = __mmask16;
    type Index = __m512i;

    #[inline(always)]
    fn splat(x: f32) -> Self {
        Avx512(unsafe { _mm512_set1_ps(x) })
    }
    #[inline(always)]
    fn load(v: &[f32]) -> Self {
        let v = &v[..16];
        Avx512(unsafe { _mm512_loadu_ps(v.as_ptr()) })
    }
    #[inline(always)]
    fn store(self, v: &mut [f32]) {
        let v = &mut v[..16];
        unsafe { _mm512_storeu_ps(v.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_add_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_sub_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_mul_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_div_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn fmadd(self, a: Self, b: Self) -> Self {
        Avx512(unsafe { _mm512_fmadd_ps(self.0, a.0, b.0) })
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Avx512(unsafe { _mm512_sqrt_ps(self.0) })
    }
    #[inline(always)]
    fn neg(self) -> Self {
        // AVX-512F has no floating-point xor (that is AVX-512DQ): through the integer one.
        Avx512(unsafe {
            _mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(self.0),
                _mm512_set1_epi32(i32::MIN),
            ))
        })
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_min_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        Avx512(unsafe { _mm512_max_ps(self.0, o.0) })
    }
    #[inline(always)]
    fn two_to_the(shifted: Self) -> Self {
        use crate::real::exp_f32_consts::MAGIC;
        unsafe {
            let exponent = _mm512_sub_epi32(
                _mm512_castps_si512(shifted.0),
                _mm512_set1_epi32(MAGIC.to_bits() as i32),
            );
            Avx512(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(
                _mm512_add_epi32(exponent, _mm512_set1_epi32(127)),
            )))
        }
    }
    #[inline(always)]
    fn gt(self, o: Self) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn ge(self, o: Self) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn le(self, o: Self) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn lt(self, o: Self) -> __mmask16 {
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn select(m: __mmask16, yes: Self, no: Self) -> Self {
        Avx512(unsafe { _mm512_mask_blend_ps(m, no.0, yes.0) })
    }
    #[inline(always)]
    fn keep(self, m: __mmask16) -> Self {
        Avx512(unsafe { _mm512_maskz_mov_ps(m, self.0) })
    }
    #[inline(always)]
    fn and(a: __mmask16, b: __mmask16) -> __mmask16 {
        a & b
    }
    #[inline(always)]
    fn and_not(a: __mmask16, b: __mmask16) -> __mmask16 {
        a & !b
    }
    #[inline(always)]
    fn any(m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn splat_index(x: u32) -> __m512i {
        unsafe { _mm512_set1_epi32(x as i32) }
    }
    #[inline(always)]
    fn load_index(v: &[u32]) -> __m512i {
        let v = &v[..16];
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    }
    #[inline(always)]
    fn store_index(i: __m512i, v: &mut [u32]) {
        let v = &mut v[..16];
        unsafe { _mm512_storeu_si512(v.as_mut_ptr().cast(), i) }
    }
    #[inline(always)]
    fn index_eq(a: __m512i, b: __m512i) -> __mmask16 {
        unsafe { _mm512_cmpeq_epi32_mask(a, b) }
    }
    #[inline(always)]
    fn index_gt(a: __m512i, b: __m512i) -> __mmask16 {
        unsafe { _mm512_cmpgt_epu32_mask(a, b) }
    }
    #[inline(always)]
    fn select_index(m: __mmask16, yes: __m512i, no: __m512i) -> __m512i {
        unsafe { _mm512_mask_blend_epi32(m, no, yes) }
    }
}

/// `sigma` and the alpha of Gaussian `f` at the lanes' pixel centres `(cx, cy)`, as `lane_hit`
/// computes them: `(dx, dy, vis, alpha, clamped, drawn)`.
#[inline(always)]
fn lane_hit<V: Lanes>(f: &Footprint<f32>, cx: V, cy: V) -> (V, V, V, V, V::Mask, V::Mask) {
    let dx = cx.sub(V::splat(f.x));
    let dy = cy.sub(V::splat(f.y));
    let half_c_dy2 = V::splat(0.5 * f.c).mul(dy).mul(dy);
    let sigma = dx.fmadd(
        V::splat(0.5 * f.a).fmadd(dx, V::splat(f.b).mul(dy)),
        half_c_dy2,
    );
    let vis = sigma.neg().exp_fused();
    let raw = V::splat(f.opacity).mul(vis);
    let max_alpha = V::splat(MAX_ALPHA as f32);
    let clamped = raw.gt(max_alpha);
    let alpha = V::select(clamped, max_alpha, raw);
    let drawn = V::and(
        sigma.ge(V::splat(0.0)),
        alpha.ge(V::splat(MIN_ALPHA as f32)),
    );
    (dx, dy, vis, alpha, clamped, drawn)
}

/// `forward_segment_body` on the lanes `first..first + V::WIDTH` of the segment.
#[inline(always)]
fn forward_lanes<V: Lanes>(
    entries: &[Footprint<f32>],
    list: &[u32],
    (cx, cy): (&[f32; LANES], &[f32; LANES]),
    first: usize,
    s: &mut SegmentForward<f32>,
) {
    let lanes = first..first + V::WIDTH;
    let (cx, cy) = (V::load(&cx[lanes.clone()]), V::load(&cy[lanes.clone()]));
    // A tile list is at most `N <= u32::MAX` long.
    let open = V::splat_index(entries.len() as u32);
    let mut last = V::load_index(&s.last[lanes.clone()]);
    let one = V::splat(1.0);
    let min_t = V::splat(MIN_TRANSMITTANCE as f32);
    let mut t = V::load(&s.t[lanes.clone()]);
    let mut r = V::load(&s.rgb[0][lanes.clone()]);
    let mut g = V::load(&s.rgb[1][lanes.clone()]);
    let mut b = V::load(&s.rgb[2][lanes.clone()]);
    let mut depth = V::load(&s.depth[lanes.clone()]);
    for &j in list {
        let f = &entries[j as usize];
        let (_, _, _, alpha, _, drawn) = lane_hit::<V>(f, cx, cy);
        let live = V::index_eq(last, open);
        let ok = V::and(drawn, live);
        let next = t.mul(one.sub(alpha));
        let stop = V::and(ok, next.le(min_t));
        let draw = V::and_not(ok, stop);
        let w = alpha.mul(t).keep(draw);
        r = r.add(w.mul(V::splat(f.color[0])));
        g = g.add(w.mul(V::splat(f.color[1])));
        b = b.add(w.mul(V::splat(f.color[2])));
        depth = depth.add(w.mul(V::splat(f.depth)));
        t = V::select(draw, next, t);
        last = V::select_index(stop, V::splat_index(j), last);
        if !V::any(V::and_not(live, stop)) {
            break;
        }
    }
    t.store(&mut s.t[lanes.clone()]);
    r.store(&mut s.rgb[0][lanes.clone()]);
    g.store(&mut s.rgb[1][lanes.clone()]);
    b.store(&mut s.rgb[2][lanes.clone()]);
    depth.store(&mut s.depth[lanes.clone()]);
    V::store_index(last, &mut s.last[lanes]);
}

/// `backward_segment_body` on the lanes `first..first + V::WIDTH` of the segment.
#[inline(always)]
fn backward_lanes<V: Lanes>(
    entries: &[Footprint<f32>],
    list: &[u32],
    (cx, cy): (&[f32; LANES], &[f32; LANES]),
    first: usize,
    s: &SegmentBackward<f32>,
    partial: &mut [LanePartial<f32>],
) {
    let lanes = first..first + V::WIDTH;
    let (cx, cy) = (V::load(&cx[lanes.clone()]), V::load(&cy[lanes.clone()]));
    let (v_r, v_g, v_b, v_depth) = (
        V::load(&s.v_rgb[0][lanes.clone()]),
        V::load(&s.v_rgb[1][lanes.clone()]),
        V::load(&s.v_rgb[2][lanes.clone()]),
        V::load(&s.v_depth[lanes.clone()]),
    );
    let mut t_state = V::load(&s.t[lanes.clone()]);
    let mut behind = V::load(&s.behind[lanes.clone()]);
    let last = V::load_index(&s.last[lanes.clone()]);
    let one = V::splat(1.0);
    let half = V::splat(0.5);
    // Entries at or past every lane's `last` were not drawn here (over the whole segment, as
    // the portable body: a NaN splat past one half's `last` adds NaN to that half too).
    let longest = s.last.iter().copied().max().unwrap_or(0);
    let end = list.partition_point(|&j| j < longest);
    for &j in list[..end].iter().rev() {
        let f = &entries[j as usize];
        let (dx, dy, vis, alpha, clamped, drawn) = lane_hit::<V>(f, cx, cy);
        let ok = V::and(drawn, V::index_gt(last, V::splat_index(j)));
        let inv_one_minus = one.div(one.sub(alpha));
        let t = t_state.mul(inv_one_minus);
        let w = alpha.mul(t).keep(ok);
        let own = V::splat(f.color[0])
            .mul(v_r)
            .add(V::splat(f.color[1]).mul(v_g))
            .add(V::splat(f.color[2]).mul(v_b))
            .add(V::splat(f.depth).mul(v_depth));
        let v_alpha = t.mul(own).sub(behind.mul(inv_one_minus)).keep(ok);
        behind = behind.add(w.mul(own));
        t_state = V::select(ok, t, t_state);
        let free = V::select(clamped, V::splat(0.0), one);
        let v_sigma = free.mul(v_alpha).neg().mul(alpha);
        let (a, b, c) = (V::splat(f.a), V::splat(f.b), V::splat(f.c));
        let gx = v_sigma.neg().mul(a.mul(dx).add(b.mul(dy)));
        let gy = v_sigma.neg().mul(b.mul(dx).add(c.mul(dy)));
        let half_v_sigma = half.mul(v_sigma);
        let e = &mut partial[j as usize];
        w.mul(v_r).add_to(&mut e.color[0][lanes.clone()]);
        w.mul(v_g).add_to(&mut e.color[1][lanes.clone()]);
        w.mul(v_b).add_to(&mut e.color[2][lanes.clone()]);
        w.mul(v_depth).add_to(&mut e.depth[lanes.clone()]);
        free.mul(vis)
            .mul(v_alpha)
            .add_to(&mut e.opacity[lanes.clone()]);
        half_v_sigma
            .mul(dx)
            .mul(dx)
            .add_to(&mut e.conic[0][lanes.clone()]);
        v_sigma
            .mul(dx)
            .mul(dy)
            .add_to(&mut e.conic[1][lanes.clone()]);
        half_v_sigma
            .mul(dy)
            .mul(dy)
            .add_to(&mut e.conic[2][lanes.clone()]);
        gx.add_to(&mut e.xy[0][lanes.clone()]);
        gy.add_to(&mut e.xy[1][lanes.clone()]);
        gx.mul(gx)
            .add(gy.mul(gy))
            .sqrt()
            .add_to(&mut e.xy_abs[lanes.clone()]);
    }
}

/// `forward_segment_body::<f32>` with the state in 512-bit registers (same contract).
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA ([`avx512_available`]).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn forward_avx512(
    entries: &[Footprint<f32>],
    list: &[u32],
    place: SegmentPlace,
    s: &mut SegmentForward<f32>,
) {
    let (cx, cy) = place.centres::<f32>();
    forward_lanes::<Avx512>(entries, list, (&cx, &cy), 0, s);
}

/// `forward_segment_body::<f32>` with the state in 256-bit registers, one half of the segment
/// after the other (same contract).
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`avx2_available`]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn forward_avx2(
    entries: &[Footprint<f32>],
    list: &[u32],
    place: SegmentPlace,
    s: &mut SegmentForward<f32>,
) {
    let (cx, cy) = place.centres::<f32>();
    for first in (0..LANES).step_by(Avx2::WIDTH) {
        forward_lanes::<Avx2>(entries, list, (&cx, &cy), first, s);
    }
}

/// `backward_segment_body::<f32>` with the segment's state in 512-bit registers (same
/// contract; the per-entry lane sums stay in `partial`).
///
/// # Safety
/// The CPU must have AVX-512F, AVX2 and FMA ([`avx512_available`]).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn backward_avx512(
    entries: &[Footprint<f32>],
    list: &[u32],
    place: SegmentPlace,
    s: SegmentBackward<f32>,
    partial: &mut [LanePartial<f32>],
) {
    let (cx, cy) = place.centres::<f32>();
    backward_lanes::<Avx512>(entries, list, (&cx, &cy), 0, &s, partial);
}

/// `backward_segment_body::<f32>` with the state in 256-bit registers, one half of the segment
/// after the other (same contract).
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`avx2_available`]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn backward_avx2(
    entries: &[Footprint<f32>],
    list: &[u32],
    place: SegmentPlace,
    s: SegmentBackward<f32>,
    partial: &mut [LanePartial<f32>],
) {
    let (cx, cy) = place.centres::<f32>();
    for first in (0..LANES).step_by(Avx2::WIDTH) {
        backward_lanes::<Avx2>(entries, list, (&cx, &cy), first, &s, partial);
    }
}

/// `entries` as `f32` footprints, when `T` is `f32`.
pub(super) fn as_f32<T: Real>(entries: &[Footprint<T>]) -> Option<&[Footprint<f32>]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| {
        // SAFETY: `T` is `f32` (same `TypeId`), so both slices have the same type.
        unsafe { &*(core::ptr::from_ref(entries) as *const [Footprint<f32>]) }
    })
}

/// `segment_masks_body` (`masks[j] = reached_segments(entries[j], grid) & present`) with each
/// entry's 16 segments, two rows each, in four 8-lane `f64` vectors; the comparisons land in
/// mask registers, which are the bits.
///
/// # Safety
/// The CPU must have AVX-512F ([`avx512_available`]).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn segment_masks_avx512(
    entries: &[Footprint<f32>],
    grid: &SegmentGrid,
    present: u32,
    masks: &mut [u32],
) {
    const _: () = assert!(SEGMENTS == 16 && SEGMENT_W == 8);
    let half = SEGMENTS / 2;
    // SAFETY: `grid.cx` and `grid.cy` hold 16 values each.
    let (cx, cy) = unsafe {
        (
            [
                _mm512_loadu_pd(grid.cx.as_ptr()),
                _mm512_loadu_pd(grid.cx[half..].as_ptr()),
            ],
            [
                _mm512_loadu_pd(grid.cy.as_ptr()),
                _mm512_loadu_pd(grid.cy[half..].as_ptr()),
            ],
        )
    };
    let one = _mm512_set1_pd(1.0);
    let width = _mm512_set1_pd((SEGMENT_W - 1) as f64);
    for (f, m) in entries.iter().zip(masks) {
        if f.reach < 0.0 {
            *m = 0;
            continue;
        }
        let (x, y) = (f64::from(f.x), f64::from(f.y));
        let (a, b, c) = (f64::from(f.a), f64::from(f.b), f64::from(f.c));
        if !(a > 0.0) || x.is_nan() {
            *m = present;
            continue;
        }
        let slope = _mm512_set1_pd(-b / a);
        let (half_a, b, half_c) = (
            _mm512_set1_pd(0.5 * a),
            _mm512_set1_pd(b),
            _mm512_set1_pd(0.5 * c),
        );
        let reach = _mm512_set1_pd(f.reach);
        let (x, y) = (_mm512_set1_pd(x), _mm512_set1_pd(y));
        // `reached_segments`' `row_reached`, operation for operation: `max_pd` returns its
        // second operand when either is NaN, as `f64::max` drops a NaN `slope * dy`.
        let row_reached = |first: __m512d, dy: __m512d| {
            let d = _mm512_min_pd(_mm512_max_pd(_mm512_mul_pd(slope, dy), first), {
                _mm512_add_pd(first, width)
            });
            let sigma = _mm512_add_pd(
                _mm512_mul_pd(
                    _mm512_add_pd(_mm512_mul_pd(half_a, d), _mm512_mul_pd(b, dy)),
                    d,
                ),
                _mm512_mul_pd(_mm512_mul_pd(half_c, dy), dy),
            );
            _mm512_cmp_pd_mask::<_CMP_NGT_UQ>(sigma, reach)
        };
        let mut bits = 0u32;
        for (v, (&cx, &cy)) in cx.iter().zip(&cy).enumerate() {
            let (first, dy) = (_mm512_sub_pd(cx, x), _mm512_sub_pd(cy, y));
            let kept = row_reached(first, dy) | row_reached(first, _mm512_add_pd(dy, one));
            bits |= u32::from(kept) << (v * half);
        }
        *m = bits & present;
    }
}

/// Segment `s`'s list (`lists[s * stride..][..lens[s]]`): the indices `j` with bit `s` of
/// `masks[j]`, ascending, for every `s`. Sixteen entries at a time: per segment, one test of
/// the sixteen masks, one compress of the indices, one 16-wide store (the lists' room past
/// `masks.len()` takes the overhang).
///
/// # Safety
/// The CPU must have AVX-512F ([`avx512_available`]); `stride >= masks.len() + 16` and
/// `lists.len() >= SEGMENTS * stride`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn segment_lists_avx512(
    masks: &[u32],
    lists: &mut [u32],
    stride: usize,
    lens: &mut [usize; SEGMENTS],
) {
    assert!(stride >= masks.len() + 16 && lists.len() >= SEGMENTS * stride);
    *lens = [0; SEGMENTS];
    let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (chunk, group) in masks.chunks(16).enumerate() {
        // The tail's missing masks read as 0: no segment takes them.
        let valid = (1u32 << group.len()).wrapping_sub(1) as __mmask16;
        // SAFETY: the masked load reads `group.len()` values of `group`.
        let m = unsafe { _mm512_maskz_loadu_epi32(valid, group.as_ptr().cast()) };
        // A tile list is at most `N <= u32::MAX` long.
        let ids = _mm512_add_epi32(lanes, _mm512_set1_epi32((chunk * 16) as i32));
        for (s, len) in lens.iter_mut().enumerate() {
            let k = _mm512_test_epi32_mask(m, _mm512_set1_epi32(1 << s));
            if k == 0 {
                continue;
            }
            let at = s * stride + *len;
            // `*len <= 16 * chunk <= masks.len() - group.len()`, so the 16 slots from `at`
            // lie in segment `s`'s room (checked by the slice).
            let dst = &mut lists[at..at + 16];
            // SAFETY: `dst` holds 16 `u32`.
            unsafe {
                _mm512_storeu_si512(dst.as_mut_ptr().cast(), _mm512_maskz_compress_epi32(k, ids))
            };
            *len += k.count_ones() as usize;
        }
    }
}
