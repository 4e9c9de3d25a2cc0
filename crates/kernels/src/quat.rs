//! Quaternions `(w, x, y, z)` on the CPU: normalisation, rotation matrix, and the chain rule back
//! through both. Shared by every CPU kernel that rotates Gaussians, and by the crates that turn a
//! quaternion into a matrix ([`rotation_matrix`]).

use crate::real::Real;

/// Below this norm a quaternion is degenerate: it acts as the identity rotation and receives a
/// zero gradient (its direction is undefined).
pub const MIN_QUAT_NORM: f64 = 1e-12;

/// The rotation matrix, row-major, of the unit quaternion `q = (w, x, y, z)` (already
/// normalised: the formula is the polynomial one, exact only for `|q| = 1`).
#[inline(always)]
pub fn rotation_matrix<T: Real>(q: [T; 4]) -> [T; 9] {
    let [w, x, y, z] = q;
    let one = T::ONE;
    let two = T::from_f64(2.0);
    [
        one - two * (y * y + z * z),
        two * (x * y - w * z),
        two * (x * z + w * y),
        two * (x * y + w * z),
        one - two * (x * x + z * z),
        two * (y * z - w * x),
        two * (x * z - w * y),
        two * (y * z + w * x),
        one - two * (x * x + y * y),
    ]
}

/// A normalised quaternion `(w, x, y, z)` and the norm of the raw one it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnitQuat<T> {
    /// `q / |q|`, or the identity for a degenerate `q`.
    pub q: [T; 4],
    /// `|q|`, or `0` for a degenerate `q` (NaN propagates).
    pub norm: T,
}

impl<T: Real> UnitQuat<T> {
    /// Normalises the raw quaternion `raw` (4 values).
    #[inline(always)]
    pub fn new(raw: &[T]) -> Self {
        let norm = (raw[0] * raw[0] + raw[1] * raw[1] + raw[2] * raw[2] + raw[3] * raw[3]).sqrt();
        if norm.to_f64() < MIN_QUAT_NORM {
            Self::identity()
        } else {
            let inv = T::ONE / norm;
            UnitQuat {
                q: core::array::from_fn(|k| raw[k] * inv),
                norm,
            }
        }
    }

    /// The identity rotation, which receives no gradient.
    pub fn identity() -> Self {
        UnitQuat {
            q: [T::ONE, T::ZERO, T::ZERO, T::ZERO],
            norm: T::ZERO,
        }
    }

    /// The rotation matrix, row-major.
    #[inline(always)]
    pub fn rotation(&self) -> [T; 9] {
        rotation_matrix(self.q)
    }

    /// Chain rule from `dL/dR` (row-major) through `R(q / |q|)` to the raw quaternion; zero for
    /// a degenerate one.
    #[inline(always)]
    pub fn backward(&self, dr: &[T; 9]) -> [T; 4] {
        if self.norm == T::ZERO {
            return [T::ZERO; 4];
        }
        let two = T::from_f64(2.0);
        let [w, x, y, z] = self.q;
        // dR / d(w, x, y, z), entry by entry, from the polynomial form in `rotation_matrix`.
        let gw = two * (-z * dr[1] + y * dr[2] + z * dr[3] - x * dr[5] - y * dr[6] + x * dr[7]);
        let gx = two
            * (y * dr[1] + z * dr[2] + y * dr[3] - two * x * dr[4] - w * dr[5]
                + z * dr[6]
                + w * dr[7]
                - two * x * dr[8]);
        let gy = two
            * (-two * y * dr[0] + x * dr[1] + w * dr[2] + x * dr[3] + z * dr[5] - w * dr[6]
                + z * dr[7]
                - two * y * dr[8]);
        let gz = two
            * (-two * z * dr[0] - w * dr[1] + x * dr[2] + w * dr[3] - two * z * dr[4]
                + y * dr[5]
                + x * dr[6]
                + y * dr[7]);
        let g = [gw, gx, gy, gz];
        // Through the normalisation: d(q / |q|)^T g = (g - q (q . g)) / |q|.
        let dot = g[0] * w + g[1] * x + g[2] * y + g[3] * z;
        let inv = T::ONE / self.norm;
        core::array::from_fn(|k| (g[k] - self.q[k] * dot) * inv)
    }
}
