//! The projection's gradient with respect to the camera's pose, for camera pose refinement.
//!
//! # The correction
//! A pose correction `(tau, omega)` (scene units, radians) moves a camera of pose `(R, t)` so
//! that a point it sees at `p = R mu + t` is seen at
//!
//! ```text
//! p' = exp([omega]x) p + tau
//! ```
//!
//! (`[omega]x` the cross-product matrix): a turn of the camera about its own centre, then a shift
//! in its own axes. [`CameraParams::corrected`] applies one.
//!
//! # Its gradient, from the Gaussians' gradients
//! The picture a camera draws is unchanged when the camera and the whole scene move together,
//! with one exception: the SH colours are looked up in world directions. So the correction draws
//! the same picture as leaving the camera where it is and moving every Gaussian by
//!
//! ```text
//! mu' = Rw (mu - c) + c + R^T tau,   Rw = exp([R^T omega]x),   c = -R^T t (the camera centre)
//! q'  = qw (x) q                      (qw the quaternion of Rw; the Gaussian turns with the scene)
//! f'(d) = f(Rw^T d)                    (each SH function turned with it: f = sum_k sh_k Y_k)
//! ```
//!
//! and at zero correction the loss's gradient is a sum over the Gaussians of what the
//! projection's backward already gives (`g_mu`, `g_q`, `g_sh`, for one camera):
//!
//! ```text
//! dL/dtau   = R sum_i g_mu_i
//! dL/domega = R ( sum_i (mu_i - c) x g_mu_i + sum_i 1/2 [(0, e_a) (x) q_i] . g_q_i
//!                 + sum_i sum_channels g_sh_i . (G_a sh_i) )_a
//! ```
//!
//! with `G_a` the generator of the SH coefficients' rotation about axis `a` (`f(Rw^T d)` for
//! `Rw = exp(eps [e_a]x)` has coefficients `sh + eps G_a sh + O(eps^2)`; band 0 does not turn).
//! [`sh_rotation_generators`] computes them once from [`sh_basis`](super::cpu::sh_basis) itself,
//! so they follow its conventions exactly. The colour's view direction enters through
//! `g_mu` (with [`ProjectOptions::view_dir_grad`](super::ProjectOptions::view_dir_grad)) and the
//! SH term: without `view_dir_grad` the means' gradient leaves the direction out, and so does
//! this one (the SH term is dropped with it): the gradient of the loss with the colours' view
//! directions held fixed, which is what the field's own gradient is then too.
//!
//! Nothing new runs per Gaussian: the sums are four small matrix products of the backward's
//! gradients with the inputs ([`PoseMoments`]), read back as a few hundred numbers, and the rest
//! is host arithmetic. It holds for every backend alike (the products are Burn tensor ops),
//! and is checked against f64 central differences of the projection with the camera moved.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::CameraParams;
use super::cpu::{sh_basis, sh_basis_vjp};

/// SH coefficients per colour channel at degree 3.
const SH_MAX: usize = 16;

/// The sums over the Gaussians that the pose gradient needs, from one camera's gradients (see
/// the [module docs](self)). All f64, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct PoseMoments {
    /// `sum_i g_mu_i`.
    pub grad_means: [f64; 3],
    /// `sum_i g_mu_i (mu_i - c)^T`, 3x3: entry `(a, b)` is `sum_i g_mu_i[a] (mu_i - c)[b]`.
    pub means: [f64; 9],
    /// `sum_i g_q_i q_i^T`, 4x4 over `(w, x, y, z)`.
    pub quats: [f64; 16],
    /// `W[j][k] = sum_i sum_channels g_sh_i[j] sh_i[k]` over the coefficients `j, k >= 1`,
    /// `(K - 1) x (K - 1)` (empty for `K = 1`).
    pub sh: Vec<f64>,
    /// `K`, the SH coefficients per channel.
    pub sh_coeffs: usize,
}

impl PoseMoments {
    /// The moments from host arrays: `means [N, 3]`, `quats [N, 4]`, `sh_rest [N, K - 1, 3]`,
    /// their gradients alike, and the camera centre `center` (the CPU reference of
    /// [`PoseMoments::from_tensors`]).
    #[allow(clippy::too_many_arguments)]
    pub fn from_slices(
        means: &[f64],
        quats: &[f64],
        sh_rest: &[f64],
        grad_means: &[f64],
        grad_quats: &[f64],
        grad_sh_rest: &[f64],
        sh_coeffs: usize,
        center: [f64; 3],
    ) -> PoseMoments {
        let rest = sh_coeffs - 1;
        let mut m = PoseMoments {
            grad_means: [0.0; 3],
            means: [0.0; 9],
            quats: [0.0; 16],
            sh: vec![0.0; rest * rest],
            sh_coeffs,
        };
        // `out[a * width + b] += u[a] v[b]`.
        let outer = |out: &mut [f64], u: &[f64], v: &[f64]| {
            for (row, ua) in out.chunks_exact_mut(v.len()).zip(u) {
                for (o, vb) in row.iter_mut().zip(v) {
                    *o += ua * vb;
                }
            }
        };
        for (i, (mu, g)) in means.chunks_exact(3).zip(grad_means.chunks_exact(3)).enumerate() {
            for (sum, ga) in m.grad_means.iter_mut().zip(g) {
                *sum += ga;
            }
            let relative: Vec<f64> = mu.iter().zip(center).map(|(x, c)| x - c).collect();
            outer(&mut m.means, g, &relative);
            outer(
                &mut m.quats,
                &grad_quats[4 * i..4 * i + 4],
                &quats[4 * i..4 * i + 4],
            );
            let (sh, gsh) = (
                &sh_rest[3 * rest * i..3 * rest * (i + 1)],
                &grad_sh_rest[3 * rest * i..3 * rest * (i + 1)],
            );
            for j in 0..rest {
                for k in 0..rest {
                    m.sh[rest * j + k] +=
                        (0..3).map(|c| gsh[3 * j + c] * sh[3 * k + c]).sum::<f64>();
                }
            }
        }
        m
    }

    /// The moments on the device, read back: `means [N, 3]`, `quats [N, 4]`, `sh_rest
    /// [N, K - 1, 3]` and their gradients for one camera, `center` the camera centre. Four
    /// matrix products, then one read (which waits for the device).
    pub fn from_tensors<B: Backend>(
        means: Tensor<B, 2>,
        quats: Tensor<B, 2>,
        sh_rest: Tensor<B, 3>,
        grad_means: Tensor<B, 2>,
        grad_quats: Tensor<B, 2>,
        grad_sh_rest: Tensor<B, 3>,
        center: [f64; 3],
    ) -> PoseMoments {
        let [n, rest, _] = sh_rest.dims();
        let device = means.device();
        let center = Tensor::<B, 2>::from_data(
            TensorData::new(center.to_vec(), [1, 3]),
            (&device, means.dtype()),
        );
        let relative = means - center;
        let sums = grad_means.clone().sum_dim(0);
        let means = grad_means.transpose().matmul(relative).reshape([1, 9]);
        let quats = grad_quats.transpose().matmul(quats).reshape([1, 16]);
        let mut parts = vec![sums, means, quats];
        if rest > 0 {
            // One product over `[N, 3 (K - 1)]` rows; the channels' diagonal is summed on the
            // host.
            let flat = |t: Tensor<B, 3>| t.reshape([n, 3 * rest]);
            let product = flat(grad_sh_rest).transpose().matmul(flat(sh_rest));
            parts.push(product.reshape([1, 9 * rest * rest]));
        }
        let values: Vec<f64> = Tensor::cat(parts, 1)
            .into_data()
            .convert::<f64>()
            .to_vec()
            .expect("a float tensor reads back as f64");
        let mut sh = vec![0.0; rest * rest];
        let product = &values[28..];
        for j in 0..rest {
            for k in 0..rest {
                sh[rest * j + k] = (0..3)
                    .map(|c| product[(3 * j + c) * 3 * rest + 3 * k + c])
                    .sum();
            }
        }
        PoseMoments {
            grad_means: core::array::from_fn(|a| values[a]),
            means: core::array::from_fn(|a| values[3 + a]),
            quats: core::array::from_fn(|a| values[12 + a]),
            sh,
            sh_coeffs: rest + 1,
        }
    }

    /// The loss's gradient with respect to a correction of `camera` (the camera the moments
    /// were taken through): `[dL/dtau (3), dL/domega (3)]`, per scene unit and per radian.
    /// `view_dir_grad` as the projection's: with `false` the SH term is left out (see the
    /// [module docs](self)).
    pub fn gradient(&self, camera: &CameraParams, view_dir_grad: bool) -> [f64; 6] {
        let r = &camera.rotation;
        let m = &self.means;
        // sum_i (mu_i - c) x g_i: entry (a, b) of `means` is sum g[a] (mu - c)[b].
        let mut world = [m[7] - m[5], m[2] - m[6], m[3] - m[1]];
        // 1/2 [(0, e_a) (x) q] . g_q, with (0, e_x) (x) q = (-x, w, -z, y), (0, e_y) (x) q =
        // (-y, z, w, -x), (0, e_z) (x) q = (-z, -y, x, w); `quats` (a, b) is sum g_q[a] q[b].
        let s = |a: usize, b: usize| self.quats[4 * a + b];
        let (w, x, y, z) = (0, 1, 2, 3);
        let quat_term = [
            -s(w, x) + s(x, w) - s(y, z) + s(z, y),
            -s(w, y) + s(x, z) + s(y, w) - s(z, x),
            -s(w, z) - s(x, y) + s(y, x) + s(z, w),
        ];
        for (w, q) in world.iter_mut().zip(quat_term) {
            *w += 0.5 * q;
        }
        if view_dir_grad && self.sh_coeffs > 1 {
            let rest = self.sh_coeffs - 1;
            let generators = sh_rotation_generators();
            for (a, g) in generators.iter().enumerate() {
                for j in 0..rest {
                    for k in 0..rest {
                        world[a] += g[j + 1][k + 1] * self.sh[rest * j + k];
                    }
                }
            }
        }
        let turn =
            |v: [f64; 3]| [0, 1, 2].map(|a| r[3 * a] * v[0] + r[3 * a + 1] * v[1] + r[3 * a + 2] * v[2]);
        let tau = turn(self.grad_means);
        let omega = turn(world);
        [tau[0], tau[1], tau[2], omega[0], omega[1], omega[2]]
    }
}

/// The generators of the SH coefficients' rotation, one per world axis `a`: the coefficients
/// `G_a sh` are those of `d -> grad f(d) . (d x e_a)`, the first-order change of
/// `f(exp(-eps [e_a]x) d)` (see the [module docs](self)). `16 x 16`, row `j` the output
/// coefficient; block-diagonal by band, band 0 zero.
///
/// Fitted by least squares on 128 directions spread over the sphere: each band's functions are
/// harmonic polynomials, closed under rotation, so the fit is exact to rounding.
pub fn sh_rotation_generators() -> [[[f64; SH_MAX]; SH_MAX]; 3] {
    let directions = sphere_directions(128);
    let basis: Vec<[f64; SH_MAX]> = directions.iter().map(|d| sh_basis(3, *d)).collect();
    // Normal equations B^T B, shared by the three axes.
    let mut normal = [[0.0; SH_MAX]; SH_MAX];
    for b in &basis {
        for j in 0..SH_MAX {
            for k in 0..SH_MAX {
                normal[j][k] += b[j] * b[k];
            }
        }
    }
    core::array::from_fn(|a| {
        let mut axis = [0.0; 3];
        axis[a] = 1.0;
        // rhs[j][k] = sum_m B_j(d_m) h_k(d_m), h_k(d) = grad Y_k(d) . (d x e_a).
        let mut rhs = [[0.0; SH_MAX]; SH_MAX];
        for (d, b) in directions.iter().zip(&basis) {
            let tangent = cross(*d, axis);
            for k in 0..SH_MAX {
                let mut one_hot = [0.0; SH_MAX];
                one_hot[k] = 1.0;
                let grad = sh_basis_vjp(3, *d, &one_hot);
                let h = grad[0] * tangent[0] + grad[1] * tangent[1] + grad[2] * tangent[2];
                for j in 0..SH_MAX {
                    rhs[j][k] += b[j] * h;
                }
            }
        }
        solve(normal, rhs)
    })
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// `count` unit vectors on a Fibonacci spiral: evenly spread, deterministic.
fn sphere_directions(count: usize) -> Vec<[f64; 3]> {
    let golden = core::f64::consts::PI * (3.0 - 5.0f64.sqrt());
    (0..count)
        .map(|i| {
            let z = 1.0 - (2.0 * i as f64 + 1.0) / count as f64;
            let radius = (1.0 - z * z).sqrt();
            let angle = golden * i as f64;
            [radius * angle.cos(), radius * angle.sin(), z]
        })
        .collect()
}

/// `A X = B` for symmetric positive definite `A` (Gaussian elimination with partial pivoting).
fn solve(
    mut a: [[f64; SH_MAX]; SH_MAX],
    mut b: [[f64; SH_MAX]; SH_MAX],
) -> [[f64; SH_MAX]; SH_MAX] {
    for col in 0..SH_MAX {
        let pivot = (col..SH_MAX)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .expect("a non-empty range");
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (pivot_a, pivot_b) = (a[col], b[col]);
        for row in col + 1..SH_MAX {
            let f = a[row][col] / pivot_a[col];
            for (x, p) in a[row].iter_mut().zip(pivot_a).skip(col) {
                *x -= f * p;
            }
            for (x, p) in b[row].iter_mut().zip(pivot_b) {
                *x -= f * p;
            }
        }
    }
    let mut x = [[0.0; SH_MAX]; SH_MAX];
    for row in (0..SH_MAX).rev() {
        for k in 0..SH_MAX {
            let tail: f64 = (row + 1..SH_MAX).map(|j| a[row][j] * x[j][k]).sum();
            x[row][k] = (b[row][k] - tail) / a[row][row];
        }
    }
    x
}

impl CameraParams {
    /// The camera moved by the pose correction `(tau, omega)` (see the [module docs](self)):
    /// rotation `exp([omega]x) R`, translation `exp([omega]x) t + tau`. Intrinsics unchanged.
    pub fn corrected(&self, tau: [f64; 3], omega: [f64; 3]) -> CameraParams {
        self.moved_by(&rotation_matrix(omega), &tau)
    }

    /// The camera moved by the correction of rotation matrix `rotation` (row-major) and
    /// translation `translation`: a point it saw at `p` it sees at `rotation p + translation`.
    pub fn moved_by(&self, rotation: &[f64; 9], translation: &[f64; 3]) -> CameraParams {
        let mut out = *self;
        (out.rotation, out.translation) =
            compose(rotation, translation, &self.rotation, &self.translation);
        out
    }
}

/// The rigid map `p -> Ra (Rb p + tb) + ta` as `(Ra Rb, Ra tb + ta)`, row-major.
pub fn compose(
    ra: &[f64; 9],
    ta: &[f64; 3],
    rb: &[f64; 9],
    tb: &[f64; 3],
) -> ([f64; 9], [f64; 3]) {
    let rotation = core::array::from_fn(|e| {
        let (i, j) = (e / 3, e % 3);
        (0..3).map(|k| ra[3 * i + k] * rb[3 * k + j]).sum()
    });
    let translation =
        core::array::from_fn(|i| (0..3).map(|k| ra[3 * i + k] * tb[k]).sum::<f64>() + ta[i]);
    (rotation, translation)
}

/// The rigid map inverse to `p -> R p + t`: `(R^T, -R^T t)`, row-major.
pub fn invert(r: &[f64; 9], t: &[f64; 3]) -> ([f64; 9], [f64; 3]) {
    let rotation = core::array::from_fn(|e| r[3 * (e % 3) + e / 3]);
    let translation = core::array::from_fn(|i| -(0..3).map(|k| r[3 * k + i] * t[k]).sum::<f64>());
    (rotation, translation)
}

/// The rotation vector of an orthonormal `r` (row-major): the `omega` with angle in `[0, pi]`
/// whose [`rotation_matrix`] is `r`. Its axis comes from the antisymmetric part of `r`, or
/// near a half turn (where that part vanishes) from the symmetric part `I + (1 - cos) [a]x^2`.
pub fn rotation_vector(r: &[f64; 9]) -> [f64; 3] {
    let cos = ((r[0] + r[4] + r[8] - 1.0) / 2.0).clamp(-1.0, 1.0);
    let theta = cos.acos();
    // `r - r^T = 2 sin(theta) [a]x`: this is `2 sin(theta) a`.
    let twice_sin_axis = [r[7] - r[5], r[2] - r[6], r[3] - r[1]];
    if theta < 1e-4 {
        // theta / (2 sin theta) by its series.
        return twice_sin_axis.map(|v| v * 0.5 * (1.0 + theta * theta / 6.0));
    }
    if core::f64::consts::PI - theta > 1e-3 {
        let scale = theta / (2.0 * theta.sin());
        return twice_sin_axis.map(|v| v * scale);
    }
    // a a^T = ((r + r^T) / 2 - cos I) / (1 - cos): the axis from its largest diagonal's column,
    // signed so that it agrees with the (small) antisymmetric part.
    let outer = |i: usize, j: usize| {
        let symmetric = (r[3 * i + j] + r[3 * j + i]) / 2.0 - if i == j { cos } else { 0.0 };
        symmetric / (1.0 - cos)
    };
    let i = (0..3)
        .max_by(|&a, &b| outer(a, a).total_cmp(&outer(b, b)))
        .expect("three axes");
    let norm = outer(i, i).max(0.0).sqrt();
    let mut axis = [0, 1, 2].map(|j| outer(i, j) / norm);
    if (0..3).map(|k| axis[k] * twice_sin_axis[k]).sum::<f64>() < 0.0 {
        axis = axis.map(|v| -v);
    }
    axis.map(|v| v * theta)
}

/// `exp([omega]x)`, row-major (Rodrigues' formula; its series near zero).
pub fn rotation_matrix(omega: [f64; 3]) -> [f64; 9] {
    let theta2 = omega.iter().map(|v| v * v).sum::<f64>();
    let theta = theta2.sqrt();
    let (a, b) = if theta < 1e-4 {
        (1.0 - theta2 / 6.0, 0.5 - theta2 / 24.0)
    } else {
        (theta.sin() / theta, (1.0 - theta.cos()) / theta2)
    };
    let [x, y, z] = omega;
    let k = [0.0, -z, y, z, 0.0, -x, -y, x, 0.0];
    let mut m = [0.0; 9];
    for i in 0..3 {
        for j in 0..3 {
            let kk: f64 = (0..3).map(|l| k[3 * i + l] * k[3 * l + j]).sum();
            m[3 * i + j] = f64::from(u8::from(i == j)) + a * k[3 * i + j] + b * kk;
        }
    }
    m
}
