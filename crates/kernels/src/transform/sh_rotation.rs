//! Rotating spherical-harmonic coefficients: the per-band matrices of a 3D rotation.
//!
//! A Gaussian's colour seen from direction `d` is `sum_k c_k Y_k(d)`. After rotating the scene
//! by `R`, the same surface is seen from `R d`, so the new coefficients `c'` must satisfy
//! `sum_k c'_k Y_k(R d) = sum_k c_k Y_k(d)` for every `d`, i.e. `f'(e) = f(R^T e)`. Rotations
//! do not mix bands, so `c' = D_l c` band by band, with `D_l` a `(2l+1) x (2l+1)` matrix (the
//! real Wigner matrix in the basis of the projection kernel, signs included).
//!
//! `D_l` is computed here, once per rotation, by evaluating the band's basis functions at a
//! fixed set of directions: with `A[s][j] = Y_j(d_s)` and `B[s][j] = Y_j(R^T d_s)`, the exact
//! relation `A D_l = B` holds at every sample, and `D_l = (A^T A)^-1 A^T B` recovers it in
//! `f64` to about `1e-14`. Evaluating the very basis the renderer uses (rather than a textbook
//! recursion) means the sign and ordering conventions cannot disagree.

use crate::project::cpu::sh_basis;

/// Number of sample directions; well above the 7 unknowns per row of band 3, so `A^T A` is
/// well conditioned.
const SAMPLES: usize = 64;

/// Distance from 0 or +-1 below which a matrix entry is taken to be exactly that.
const SNAP: f64 = 1e-12;

/// The SH rotation matrices of bands 1-3, row-major, acting on the coefficients of
/// `sh_rest` (band 1 = `sh_rest[0..3]`, band 2 = `[3..8]`, band 3 = `[8..15]`):
/// `new[k] = sum_j band[k][j] old[j]`, per colour channel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShRotation {
    /// Band 1, `3 x 3`.
    pub band1: [f64; 9],
    /// Band 2, `5 x 5`.
    pub band2: [f64; 25],
    /// Band 3, `7 x 7`.
    pub band3: [f64; 49],
}

impl ShRotation {
    /// The matrices of the rotation `r` (row-major, orthonormal).
    pub fn new(r: &[f64; 9]) -> Self {
        let directions = sample_directions();
        let rotated_back: Vec<[f64; 3]> = directions
            .iter()
            .map(|d| {
                // R^T d
                std::array::from_fn(|k| r[k] * d[0] + r[3 + k] * d[1] + r[6 + k] * d[2])
            })
            .collect();
        let basis_at = |dirs: &[[f64; 3]]| -> Vec<[f64; 16]> {
            dirs.iter().map(|&d| sh_basis::<f64>(3, d)).collect()
        };
        let a = basis_at(&directions);
        let b = basis_at(&rotated_back);
        let mut band1 = [0.0; 9];
        let mut band2 = [0.0; 25];
        let mut band3 = [0.0; 49];
        solve_band(&a, &b, 1, &mut band1);
        solve_band(&a, &b, 2, &mut band2);
        solve_band(&a, &b, 3, &mut band3);
        // Entries that are 0 or +-1 up to the solve's rounding are made exact, so that the
        // identity and axis-aligned rotations (quarter turns) leave coefficients bit-exact.
        for v in band1.iter_mut().chain(&mut band2).chain(&mut band3) {
            if v.abs() < SNAP {
                *v = 0.0;
            } else if (v.abs() - 1.0).abs() < SNAP {
                *v = v.signum();
            }
        }
        ShRotation {
            band1,
            band2,
            band3,
        }
    }
}

/// Points spread evenly over the unit sphere (a Fibonacci lattice).
fn sample_directions() -> Vec<[f64; 3]> {
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    (0..SAMPLES)
        .map(|s| {
            let z = 1.0 - 2.0 * (s as f64 + 0.5) / SAMPLES as f64;
            let r = (1.0 - z * z).sqrt();
            let phi = golden * s as f64;
            [r * phi.cos(), r * phi.sin(), z]
        })
        .collect()
}

/// `D_l = (A^T A)^-1 A^T B` for band `l`, written row-major into `out` (`(2l+1)^2` values).
fn solve_band(a: &[[f64; 16]], b: &[[f64; 16]], l: usize, out: &mut [f64]) {
    let n = 2 * l + 1;
    let offset = l * l;
    // Every sample gives `sum_k A[s][k] c'_k = sum_j B[s][j] c_j` for all `c`, so `A D = B`;
    // solve the normal equations `(A^T A) D = A^T B`.
    let mut ata = vec![0.0; n * n];
    let mut atb = vec![0.0; n * n];
    for (row_a, row_b) in a.iter().zip(b) {
        for i in 0..n {
            for j in 0..n {
                ata[i * n + j] += row_a[offset + i] * row_a[offset + j];
                atb[i * n + j] += row_a[offset + i] * row_b[offset + j];
            }
        }
    }
    // Gauss-Jordan elimination with partial pivoting on [ata | atb].
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&p, &q| ata[p * n + col].abs().total_cmp(&ata[q * n + col].abs()))
            .unwrap_or(col);
        if pivot != col {
            for j in 0..n {
                ata.swap(pivot * n + j, col * n + j);
                atb.swap(pivot * n + j, col * n + j);
            }
        }
        let inv = 1.0 / ata[col * n + col];
        for j in 0..n {
            ata[col * n + j] *= inv;
            atb[col * n + j] *= inv;
        }
        for row in 0..n {
            if row != col {
                let factor = ata[row * n + col];
                if factor != 0.0 {
                    for j in 0..n {
                        ata[row * n + j] -= factor * ata[col * n + j];
                        atb[row * n + j] -= factor * atb[col * n + j];
                    }
                }
            }
        }
    }
    out.copy_from_slice(&atb);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::Similarity;

    fn apply(m: &[f64], v: &[f64]) -> Vec<f64> {
        let n = v.len();
        (0..n)
            .map(|k| (0..n).map(|j| m[k * n + j] * v[j]).sum())
            .collect()
    }

    #[test]
    fn identity_rotation_gives_identity_matrices() {
        let m = ShRotation::new(&Similarity::identity().rotation_matrix());
        for (band, n) in [(&m.band1[..], 3), (&m.band2[..], 5), (&m.band3[..], 7)] {
            for i in 0..n {
                for j in 0..n {
                    let expected = if i == j { 1.0 } else { 0.0 };
                    assert!((band[i * n + j] - expected).abs() < 1e-12, "{band:?}");
                }
            }
        }
    }

    #[test]
    fn rotated_coefficients_give_the_same_value_from_the_rotated_direction() {
        let rotation = Similarity::axis_angle([0.3, -1.0, 0.5], 1.1);
        let r = rotation.rotation_matrix();
        let m = ShRotation::new(&r);
        let coeffs: Vec<f64> = (0..15)
            .map(|k| ((k * 7 + 3) % 11) as f64 / 5.0 - 1.0)
            .collect();
        let mut rotated = apply(&m.band1, &coeffs[0..3]);
        rotated.extend(apply(&m.band2, &coeffs[3..8]));
        rotated.extend(apply(&m.band3, &coeffs[8..15]));
        for d in [[0.0, 0.0, 1.0], [0.6, 0.0, 0.8], [-0.48, 0.6, 0.64]] {
            let value = |c: &[f64], dir: [f64; 3]| {
                let basis = sh_basis::<f64>(3, dir);
                (0..15).map(|k| c[k] * basis[k + 1]).sum::<f64>()
            };
            let before = value(&coeffs, d);
            let after = value(&rotated, rotation.apply_direction(d));
            assert!((before - after).abs() < 1e-12, "{before} vs {after}");
        }
    }
}
