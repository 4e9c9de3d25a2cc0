//! The scalar type of the CPU kernels: `f32` for speed, `f64` for the gradient-check oracle.

use core::fmt::Debug;
use core::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// A floating-point scalar the CPU kernels are generic over.
pub trait Real:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    /// `0`
    const ZERO: Self;
    /// `1`
    const ONE: Self;
    /// Conversion from an `f64` constant.
    fn from_f64(x: f64) -> Self;
    /// Widening conversion.
    fn to_f64(self) -> f64;
    /// `e^x`. For `f32` this is a branch-free polynomial that the compiler vectorises (relative
    /// error below 2e-7 on the range the kernels use, `x <= 0`); `f64` uses the libm exponential.
    fn exp(self) -> Self;
    /// `e^x` as [`Real::exp`], its polynomial evaluated with fused multiply-adds. For code
    /// inside `simd::variants!`, whose wide builds enable FMA (one instruction each); in a build
    /// without FMA each one is a libm call.
    fn exp_fused(self) -> Self;
    /// `self * a + b` with one rounding (see [`Real::exp_fused`] on where it is fast).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// `self` when `keep`, else zero, without a branch.
    fn select(keep: bool, value: Self) -> Self;
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn exp_fused(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn select(keep: bool, value: Self) -> Self {
        if keep { value } else { 0.0 }
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn exp(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn exp_fused(self) -> Self {
        exp_f32_fused(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn select(keep: bool, value: Self) -> Self {
        if keep { value } else { 0.0 }
    }
}

/// The constants of the `f32` exponential (`exp_f32`, `exp_f32_fused`, and the AVX2 lanes of
/// `raster/cpu_avx2.rs`, which must round exactly as they do).
pub(crate) mod exp_f32_consts {
    /// `1.5 * 2^23`: adding it rounds to an integer in the low bits.
    pub(crate) const MAGIC: f32 = 12_582_912.0;
    /// Below this, `2^n` would be subnormal.
    pub(crate) const LOWEST: f32 = -126.0 * core::f32::consts::LN_2;
    /// Clamping above keeps the exponent bits from wrapping: from `x = 88.38` on, `n = 128`
    /// makes the scale infinite (the top 0.35 of the f32 range overflows early, which no kernel
    /// reaches).
    pub(crate) const HIGHEST: f32 = 88.5;
    /// `ln 2` split in two (Cody-Waite): the high part exactly representable with few
    /// significant bits, the low part `ln 2 - LN2_HI`.
    pub(crate) const LN2_HI: f32 = 0.693_359_4;
    pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
    /// Inputs below this give `0` (the true value is subnormal).
    pub(crate) const UNDERFLOW: f32 = -87.3;
    /// The degree-7 Taylor coefficients of `e^u`, constant term first (reciprocals written
    /// out: a division would stay a division).
    pub(crate) const TAYLOR: [f32; 8] = [
        1.0,
        1.0,
        0.5,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
    ];
}

/// `e^x` for `f32` as `2^n e^u`: `n = round(x / ln 2)` by the magic-number trick (no `floor`
/// call, which SSE2 cannot vectorise), `u = x - n ln 2` with `ln 2` split in two (Cody-Waite) so
/// the reduction stays exact for large `|x|`, and `e^u` for `|u| <= ln(2) / 2` by its degree-7
/// Taylor polynomial. Inputs below `-87.3` give `0` (the true value is subnormal), above
/// `88.38` infinity; NaN propagates.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    use exp_f32_consts::*;
    // `clamp` (unlike `f32::max`) keeps NaN, so that NaN propagates.
    let clamped = x.clamp(LOWEST, HIGHEST);
    let shifted = clamped * core::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let u = clamped - n * LN2_HI - n * LN2_LO;
    let mut p = TAYLOR[7];
    for c in TAYLOR[..7].iter().rev() {
        p = *c + u * p;
    }
    let value = p * two_to_the(shifted);
    if x < UNDERFLOW { 0.0 } else { value }
}

/// `2^n` from `shifted = n + MAGIC` (the integer `n` sits in the low mantissa bits).
#[inline(always)]
fn two_to_the(shifted: f32) -> f32 {
    let exponent = (shifted.to_bits() as i32).wrapping_sub(exp_f32_consts::MAGIC.to_bits() as i32);
    f32::from_bits((exponent.wrapping_add(127) as u32) << 23)
}

/// [`exp_f32`] with its reduction and polynomial as fused multiply-adds: 10 of them instead of
/// 10 multiplications and 9 additions, and one rounding each.
#[inline(always)]
fn exp_f32_fused(x: f32) -> f32 {
    use exp_f32_consts::*;
    let clamped = x.clamp(LOWEST, HIGHEST);
    let shifted = clamped.mul_add(core::f32::consts::LOG2_E, MAGIC);
    let n = shifted - MAGIC;
    let u = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, clamped));
    let mut p = TAYLOR[7];
    for c in TAYLOR[..7].iter().rev() {
        p = p.mul_add(u, *c);
    }
    let value = p * two_to_the(shifted);
    if x < UNDERFLOW { 0.0 } else { value }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exp` against libm over the kernels' range, and its edge cases.
    fn check_against_libm(exp: fn(f32) -> f32) {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 2.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.000_731;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!((exp(88.3) as f64 / (88.3f32 as f64).exp() - 1.0).abs() < 1e-6);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn exp_f32_matches_libm() {
        check_against_libm(exp_f32);
    }

    #[test]
    fn exp_f32_fused_matches_libm() {
        check_against_libm(exp_f32_fused);
    }
}
