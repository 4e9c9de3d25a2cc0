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

/// The eigenvalues of the symmetric `m`, ascending, and their unit eigenvectors (cyclic Jacobi
/// rotations).
pub fn symmetric_eigen(mut m: [[f64; 3]; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let mut v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    for _ in 0..50 {
        let off = m[0][1].abs() + m[0][2].abs() + m[1][2].abs();
        if off < 1e-15 * (m[0][0].abs() + m[1][1].abs() + m[2][2].abs()).max(1e-300) {
            break;
        }
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            if m[p][q] == 0.0 {
                continue;
            }
            let theta = (m[q][q] - m[p][p]) / (2.0 * m[p][q]);
            let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
            let t = if theta == 0.0 { 1.0 } else { t };
            let (c, s) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
            // m <- J^T m J, v <- v J, with J the rotation in the (p, q) plane.
            for row in &mut m {
                let (a, b) = (row[p], row[q]);
                row[p] = c * a - s * b;
                row[q] = s * a + c * b;
            }
            let (row_p, row_q) = (m[p], m[q]);
            m[p] = [0, 1, 2].map(|k| c * row_p[k] - s * row_q[k]);
            m[q] = [0, 1, 2].map(|k| s * row_p[k] + c * row_q[k]);
            for row in &mut v {
                let (a, b) = (row[p], row[q]);
                row[p] = c * a - s * b;
                row[q] = s * a + c * b;
            }
        }
    }
    let mut order = [0, 1, 2];
    order.sort_by(|&a, &b| m[a][a].total_cmp(&m[b][b]));
    let values = order.map(|i| m[i][i]);
    let vectors = order.map(|i| [v[0][i], v[1][i], v[2][i]]);
    (values, vectors)
}

/// The unit quaternion `(w, x, y, z)`, `w >= 0`, of the rotation matrix `m` (row-major, proper:
/// orthonormal with determinant `+1`), by Shepperd's method (the largest of the four diagonal
/// combinations is the divisor, so no branch divides by a small number).
pub fn quat_from_rotation(m: [f64; 9]) -> [f64; 4] {
    let trace = m[0] + m[4] + m[8];
    let q = if trace > m[0].max(m[4]).max(m[8]) {
        let s = 2.0 * (1.0 + trace).sqrt();
        [
            s / 4.0,
            (m[7] - m[5]) / s,
            (m[2] - m[6]) / s,
            (m[3] - m[1]) / s,
        ]
    } else if m[0] >= m[4] && m[0] >= m[8] {
        let s = 2.0 * (1.0 + m[0] - m[4] - m[8]).sqrt();
        [
            (m[7] - m[5]) / s,
            s / 4.0,
            (m[1] + m[3]) / s,
            (m[2] + m[6]) / s,
        ]
    } else if m[4] >= m[8] {
        let s = 2.0 * (1.0 + m[4] - m[0] - m[8]).sqrt();
        [
            (m[2] - m[6]) / s,
            (m[1] + m[3]) / s,
            s / 4.0,
            (m[5] + m[7]) / s,
        ]
    } else {
        let s = 2.0 * (1.0 + m[8] - m[0] - m[4]).sqrt();
        [
            (m[3] - m[1]) / s,
            (m[2] + m[6]) / s,
            (m[5] + m[7]) / s,
            s / 4.0,
        ]
    };
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
    q.map(|v| sign * v / norm)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_decomposition_of_a_symmetric_matrix() {
        let m = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 1.0]];
        let (values, vectors) = symmetric_eigen(m);
        assert!(values[0] <= values[1] && values[1] <= values[2]);
        for (value, vector) in values.iter().zip(vectors) {
            for i in 0..3 {
                let mv: f64 = (0..3).map(|j| m[i][j] * vector[j]).sum();
                assert!(
                    (mv - value * vector[i]).abs() < 1e-12,
                    "{values:?} {vectors:?}"
                );
            }
        }
    }

    #[test]
    fn quaternion_of_a_rotation_matrix_round_trips() {
        for q in [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.3, -0.5, 0.7, 0.1],
            [-0.2, 0.1, 0.05, 0.97],
        ] {
            let n = q.iter().map(|v: &f64| v * v).sum::<f64>().sqrt();
            let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
            let unit = q.map(|v| sign * v / n);
            let back = quat_from_rotation(rotation_matrix(unit));
            for k in 0..4 {
                assert!((back[k] - unit[k]).abs() < 1e-12, "{q:?}: {back:?}");
            }
        }
        // Turns near each of Shepperd's four branches and the half turns about each axis
        // (where `w = 0` and the sign is free): the matrix comes back.
        let pi = std::f64::consts::PI;
        for axis in [
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
            [0.6, -0.48, 0.64],
        ] {
            for angle in [0.0, 0.3, 1.5, 2.9, pi] {
                let (s, c) = (angle / 2.0f64).sin_cos();
                let r = rotation_matrix([c, axis[0] * s, axis[1] * s, axis[2] * s]);
                let back = rotation_matrix(quat_from_rotation(r));
                let worst = r
                    .iter()
                    .zip(&back)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                assert!(worst < 1e-12, "{axis:?} {angle}");
            }
        }
    }
}
