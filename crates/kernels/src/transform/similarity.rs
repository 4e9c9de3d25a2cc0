//! [`Similarity`]: a rotation, a uniform scale and a translation, about an optional centre.

use super::TransformError;

/// The similarity transform `x' = s R (x - c) + c + t` of 3D space.
///
/// `R` is the rotation of the unit quaternion [`rotation`](Self::rotation) `(w, x, y, z)`, `s`
/// the uniform [`scale`](Self::scale) (positive), `t` the [`translation`](Self::translation) and
/// `c` the [`centre`](Self::centre) the rotation and scale act about (world units). Stored in
/// `f64` so that composing many transforms does not accumulate `f32` rounding; the kernels
/// apply it in the Gaussians' own float type.
///
/// Applied to a Gaussian: `mean' = s R (mean - c) + c + t`, `quat' = q_R * quat` (Hamilton
/// product, so a quaternion's norm is kept), `log_scales' = log_scales + ln s`, and the SH
/// coefficients of bands 1-3 are rotated by `R` (see [`sh_rotation`](super::sh_rotation)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Similarity {
    /// Unit quaternion `(w, x, y, z)` of the rotation.
    pub rotation: [f64; 4],
    /// Uniform scale factor, `> 0`.
    pub scale: f64,
    /// Translation, world units.
    pub translation: [f64; 3],
    /// The fixed point of the rotation and scale, world units.
    pub centre: [f64; 3],
}

impl Default for Similarity {
    fn default() -> Self {
        Self::identity()
    }
}

impl Similarity {
    /// The identity.
    pub fn identity() -> Self {
        Similarity {
            rotation: [1.0, 0.0, 0.0, 0.0],
            scale: 1.0,
            translation: [0.0; 3],
            centre: [0.0; 3],
        }
    }

    /// A translation by `t`.
    pub fn translation(t: [f64; 3]) -> Self {
        Similarity {
            translation: t,
            ..Self::identity()
        }
    }

    /// A rotation about the origin by the quaternion `q` `(w, x, y, z)`, normalised here.
    pub fn rotation(q: [f64; 4]) -> Self {
        Similarity {
            rotation: normalize_quat(q),
            ..Self::identity()
        }
    }

    /// A rotation about the origin by `angle` radians around `axis` (need not be unit length).
    pub fn axis_angle(axis: [f64; 3], angle: f64) -> Self {
        let norm = (axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]).sqrt();
        if norm == 0.0 {
            return Self::identity();
        }
        let (sin, cos) = (0.5 * angle).sin_cos();
        let k = sin / norm;
        Self::rotation([cos, axis[0] * k, axis[1] * k, axis[2] * k])
    }

    /// A uniform scaling about the origin by `s`.
    pub fn scaling(s: f64) -> Self {
        Similarity {
            scale: s,
            ..Self::identity()
        }
    }

    /// The same rotation and scale acting about `centre` instead.
    pub fn about(self, centre: [f64; 3]) -> Self {
        Similarity { centre, ..self }
    }

    /// Checks that the transform can be applied: finite values, `scale > 0`, a non-zero
    /// rotation quaternion.
    pub fn validate(&self) -> Result<(), TransformError> {
        let values = self
            .rotation
            .iter()
            .chain(&self.translation)
            .chain(&self.centre)
            .chain(std::iter::once(&self.scale));
        if values.clone().any(|v| !v.is_finite()) {
            return Err(TransformError::NotFinite);
        }
        if self.scale <= 0.0 {
            return Err(TransformError::NonPositiveScale(self.scale));
        }
        if quat_norm(self.rotation) < 1e-12 {
            return Err(TransformError::ZeroRotation);
        }
        Ok(())
    }

    /// The unit rotation quaternion (the stored one, renormalised).
    pub fn unit_rotation(&self) -> [f64; 4] {
        normalize_quat(self.rotation)
    }

    /// The rotation matrix `R`, row-major.
    pub fn rotation_matrix(&self) -> [f64; 9] {
        quat_to_matrix(self.unit_rotation())
    }

    /// The translation `o` of the same map written without a centre: `x' = s R x + o`,
    /// `o = c - s R c + t`.
    pub fn offset(&self) -> [f64; 3] {
        let r = self.rotation_matrix();
        let rc = mat_vec(&r, self.centre);
        std::array::from_fn(|k| self.centre[k] - self.scale * rc[k] + self.translation[k])
    }

    /// The image of the point `x`.
    pub fn apply_point(&self, x: [f64; 3]) -> [f64; 3] {
        let rx = mat_vec(&self.rotation_matrix(), x);
        let o = self.offset();
        std::array::from_fn(|k| self.scale * rx[k] + o[k])
    }

    /// The image of the direction `d` (rotated only).
    pub fn apply_direction(&self, d: [f64; 3]) -> [f64; 3] {
        mat_vec(&self.rotation_matrix(), d)
    }

    /// `self` followed by `next`: `(self.then(next)).apply_point(x) ==
    /// next.apply_point(self.apply_point(x))`. The result has its centre at the origin.
    pub fn then(&self, next: &Similarity) -> Similarity {
        let o_self = self.offset();
        let o_next = next.offset();
        let r_next_o = mat_vec(&next.rotation_matrix(), o_self);
        Similarity {
            rotation: normalize_quat(quat_mul(next.unit_rotation(), self.unit_rotation())),
            scale: next.scale * self.scale,
            translation: std::array::from_fn(|k| next.scale * r_next_o[k] + o_next[k]),
            centre: [0.0; 3],
        }
    }

    /// The inverse map, centre at the origin: `x = R^T (x' - o) / s`.
    pub fn inverse(&self) -> Similarity {
        let [w, x, y, z] = self.unit_rotation();
        let conjugate = [w, -x, -y, -z];
        let o = self.offset();
        let rt_o = mat_vec(&quat_to_matrix(conjugate), o);
        Similarity {
            rotation: conjugate,
            scale: 1.0 / self.scale,
            translation: rt_o.map(|v| -v / self.scale),
            centre: [0.0; 3],
        }
    }
}

fn quat_norm(q: [f64; 4]) -> f64 {
    (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt()
}

/// `q / |q|`; the zero quaternion stays zero (and fails [`Similarity::validate`]).
fn normalize_quat(q: [f64; 4]) -> [f64; 4] {
    let n = quat_norm(q);
    if n == 0.0 { q } else { q.map(|v| v / n) }
}

/// The Hamilton product `a * b` of `(w, x, y, z)` quaternions: rotating by `b`, then by `a`.
pub(crate) fn quat_mul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    let [aw, ax, ay, az] = a;
    let [bw, bx, by, bz] = b;
    [
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ]
}

/// Rotation matrix (row-major) of a unit quaternion `(w, x, y, z)`.
pub(crate) fn quat_to_matrix(q: [f64; 4]) -> [f64; 9] {
    crate::quat::rotation_matrix(q)
}

/// `m v` for a row-major 3x3 `m`.
pub(crate) fn mat_vec(m: &[f64; 9], v: [f64; 3]) -> [f64; 3] {
    std::array::from_fn(|r| m[3 * r] * v[0] + m[3 * r + 1] * v[1] + m[3 * r + 2] * v[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [f64; 3], b: [f64; 3]) -> bool {
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    fn sample() -> Similarity {
        Similarity {
            rotation: [0.9, 0.1, -0.3, 0.2],
            scale: 1.7,
            translation: [0.5, -2.0, 3.0],
            centre: [1.0, 2.0, -0.5],
        }
    }

    #[test]
    fn centre_is_fixed_by_rotation_and_scale() {
        let s = Similarity {
            translation: [0.0; 3],
            ..sample()
        };
        assert!(close(s.apply_point(s.centre), s.centre));
    }

    #[test]
    fn then_and_inverse_agree_with_point_maps() {
        let a = sample();
        let b = Similarity::axis_angle([0.0, 1.0, 1.0], 0.7).about([3.0, 0.0, 1.0]);
        let x = [0.3, -1.2, 2.5];
        assert!(close(
            a.then(&b).apply_point(x),
            b.apply_point(a.apply_point(x))
        ));
        assert!(close(a.inverse().apply_point(a.apply_point(x)), x));
        assert!(close(a.then(&a.inverse()).apply_point(x), x));
    }

    #[test]
    fn validate_rejects_bad_transforms() {
        assert!(Similarity::scaling(0.0).validate().is_err());
        assert!(Similarity::scaling(f64::NAN).validate().is_err());
        assert!(
            Similarity {
                rotation: [0.0; 4],
                ..Similarity::identity()
            }
            .validate()
            .is_err()
        );
        assert!(sample().validate().is_ok());
    }
}
