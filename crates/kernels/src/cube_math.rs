//! The small CubeCL helpers every op's kernels share: a 3-vector in registers and its
//! arithmetic, finite checks that WGSL compiles reliably, `[_, 3]` loads and stores, a unit
//! quaternion's rotation matrix, and Burn's sigmoid. One definition each, so that the ops compute them the same way.

use cubecl::prelude::*;

/// Floats at or below this magnitude count as finite (comparisons with NaN are false).
const FINITE_MAX: f32 = f32::MAX;

/// A 3-vector in registers.
#[derive(CubeType, Clone, Copy)]
pub(crate) struct Vec3<F: Float> {
    pub(crate) x: F,
    pub(crate) y: F,
    pub(crate) z: F,
}

#[cube]
pub(crate) fn vec3<F: Float>(x: F, y: F, z: F) -> Vec3<F> {
    Vec3::<F> { x, y, z }
}

#[cube]
pub(crate) fn dot<F: Float>(a: Vec3<F>, b: Vec3<F>) -> F {
    a.x * b.x + a.y * b.y + a.z * b.z
}

#[cube]
pub(crate) fn scaled<F: Float>(a: Vec3<F>, s: F) -> Vec3<F> {
    vec3::<F>(a.x * s, a.y * s, a.z * s)
}

/// `a s + b t`.
#[cube]
pub(crate) fn combine<F: Float>(a: Vec3<F>, s: F, b: Vec3<F>, t: F) -> Vec3<F> {
    vec3::<F>(a.x * s + b.x * t, a.y * s + b.y * t, a.z * s + b.z * t)
}

/// `M^T v` for `M` given by its rows.
#[cube]
pub(crate) fn apply_t<F: Float>(m0: Vec3<F>, m1: Vec3<F>, m2: Vec3<F>, v: Vec3<F>) -> Vec3<F> {
    combine::<F>(combine::<F>(m0, v.x, m1, v.y), F::new(1.0), m2, v.z)
}

/// `M v` for `M` given by its rows.
#[cube]
pub(crate) fn apply<F: Float>(m0: Vec3<F>, m1: Vec3<F>, m2: Vec3<F>, v: Vec3<F>) -> Vec3<F> {
    vec3::<F>(dot::<F>(m0, v), dot::<F>(m1, v), dot::<F>(m2, v))
}

/// Whether `x` is finite: a comparison, false for a NaN (WGSL has no reliable `isnan`).
#[cube]
pub(crate) fn finite<F: Float>(x: F) -> bool {
    F::abs(x) <= F::new(FINITE_MAX)
}

/// The three values of `t` from `base`.
#[cube]
pub(crate) fn load3<F: Float>(t: &Tensor<F>, base: usize) -> Vec3<F> {
    vec3::<F>(t[base], t[base + 1], t[base + 2])
}

/// `v` into the three values of `t` from `base`.
#[cube]
pub(crate) fn store3<F: Float>(t: &mut Tensor<F>, base: usize, v: Vec3<F>) {
    t[base] = v.x;
    t[base + 1] = v.y;
    t[base + 2] = v.z;
}

/// The rows of the rotation matrix of the unit quaternion `(w, x, y, z)`.
#[cube]
pub(crate) fn rotation_rows<F: Float>(w: F, x: F, y: F, z: F) -> (Vec3<F>, Vec3<F>, Vec3<F>) {
    let one = F::new(1.0);
    let two = F::new(2.0);
    (
        vec3::<F>(
            one - two * (y * y + z * z),
            two * (x * y - w * z),
            two * (x * z + w * y),
        ),
        vec3::<F>(
            two * (x * y + w * z),
            one - two * (x * x + z * z),
            two * (y * z - w * x),
        ),
        vec3::<F>(
            two * (x * z - w * y),
            two * (y * z + w * x),
            one - two * (x * x + y * y),
        ),
    )
}

/// Burn's sigmoid, `exp(-ln(exp(-x) + 1))` (the same rounding as its tensor op).
#[cube]
pub(crate) fn sigmoid<F: Float>(x: F) -> F {
    F::exp(-F::ln(F::exp(-x) + F::new(1.0)))
}
