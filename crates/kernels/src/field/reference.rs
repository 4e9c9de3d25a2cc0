//! The field query written with plain Burn tensor ops (the "vectorised formulation").
//!
//! It materialises `[N, P, 3]` and `[N, P]` intermediates, which is exactly what the fused
//! kernels avoid: it exists as an independent oracle for the tests (autodiff through ordinary
//! ops) and as the baseline of the `field` benchmark. Degenerate (zero) quaternions are not
//! special-cased here.

use burn::tensor::{Tensor, backend::Backend};

use super::{Covariance, FieldOptions};

/// `values [P, C]` from `points [P, 3]`, `means [N, 3]`, `quats [N, 4]`, `log_scales [N, 3]`,
/// `features [N, C]`, with ordinary tensor ops.
pub fn field_query_reference<B: Backend>(
    points: Tensor<B, 2>,
    means: Tensor<B, 2>,
    quats: Tensor<B, 2>,
    log_scales: Tensor<B, 2>,
    features: Tensor<B, 2>,
    options: FieldOptions,
) -> Tensor<B, 2> {
    let [p, _] = points.dims();
    let [n, _] = means.dims();
    // v[i, p, :] = x_p - mu_i
    let v = points.unsqueeze_dim::<3>(0).expand([n, p, 3]) - means.unsqueeze_dim::<3>(1);
    let scales = log_scales.exp();
    let z = match options.covariance {
        Covariance::Diagonal => v / scales.unsqueeze_dim::<3>(1),
        Covariance::Full => {
            let q = quats.clone() / (quats.powi_scalar(2).sum_dim(1).sqrt());
            let c = |k: usize| q.clone().narrow(1, k, 1);
            let (w, x, y, zq) = (c(0), c(1), c(2), c(3));
            let one = || w.clone().ones_like();
            let two = 2.0;
            // Rows of R, each [N, 3].
            let r0 = Tensor::cat(
                vec![
                    one() - (y.clone() * y.clone() + zq.clone() * zq.clone()) * two,
                    (x.clone() * y.clone() - w.clone() * zq.clone()) * two,
                    (x.clone() * zq.clone() + w.clone() * y.clone()) * two,
                ],
                1,
            );
            let r1 = Tensor::cat(
                vec![
                    (x.clone() * y.clone() + w.clone() * zq.clone()) * two,
                    one() - (x.clone() * x.clone() + zq.clone() * zq.clone()) * two,
                    (y.clone() * zq.clone() - w.clone() * x.clone()) * two,
                ],
                1,
            );
            let r2 = Tensor::cat(
                vec![
                    (x.clone() * zq.clone() - w.clone() * y.clone()) * two,
                    (y.clone() * zq.clone() + w.clone() * x.clone()) * two,
                    one() - (x.clone() * x + y.clone() * y) * two,
                ],
                1,
            );
            // R [N, 3, 3]; z = (R^T v) / s, i.e. z[i, p, a] = sum_b v[i, p, b] R[i, b, a] / s[i, a].
            let r = Tensor::stack::<3>(vec![r0, r1, r2], 1);
            v.matmul(r) / scales.unsqueeze_dim::<3>(1)
        }
    };
    let d2 = z.powi_scalar(2).sum_dim(2).squeeze_dim::<2>(2); // [N, P]
    let mut e = (d2.clone() * -0.5).exp();
    if let Some(k) = options.cutoff {
        e = e.mask_fill(d2.greater_elem(k * k), 0.0);
    }
    e.transpose().matmul(features)
}
