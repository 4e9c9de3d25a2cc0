//! The fused loss as CubeCL kernels, generic over the runtime and the float type. One unit per
//! value of the `[H, W, C]` image (`N` values), four launches:
//!
//! 1. `row_stats_kernel`: the row blur of `x, y, x^2, y^2, xy` into `[5, N]`;
//! 2. `ssim_map_kernel`: the column blur, the per-value loss term
//!    `lambda (1 - S) / N + (1 - lambda) |x - y| / N` into `[N]` (summed by the backend's
//!    reduction), and with the gradient the three maps `dloss/d(mu_x, E[x^2], E[xy])` `[3, N]`;
//! 3. `row_blur3_kernel`: the row blur of the three maps;
//! 4. `grad_kernel`: their column blur combined into `dloss/dx`.
//!
//! The window's taps come from the host as an 11-value tensor (the same `f64` numbers the CPU
//! path rounds).

use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{TensorData, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::LossOps;
use super::{LossOptions, LossOutputs, LossPrimitives, SSIM_C1, SSIM_C2, SSIM_WINDOW, ssim_taps};
use crate::cube_alloc::output;

/// Units per cube.
const BLOCK: u32 = 256;
/// Half the window, pixels.
const HALF: usize = SSIM_WINDOW / 2;

/// Row blur of the five statistics: `stats[s N + p]` for `s` in `x, y, x^2, y^2, xy`.
#[cube(launch)]
fn row_stats_kernel<F: Float>(
    x: &Tensor<F>,
    y: &Tensor<F>,
    taps: &Tensor<F>,
    stats: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    let (width, channels) = (x.shape(1), x.shape(2));
    let n = x.shape(0) * width * channels;
    if p >= n {
        terminate!();
    }
    let j = (p / channels) % width;
    let mut sx = F::new(0.0);
    let mut sy = F::new(0.0);
    let mut sxx = F::new(0.0);
    let mut syy = F::new(0.0);
    let mut sxy = F::new(0.0);
    for t in 0..SSIM_WINDOW {
        // Column `j + t - HALF`, kept in unsigned arithmetic.
        if j + t >= HALF && j + t < width + HALF {
            let q = p + t * channels - HALF * channels;
            let w = taps[t];
            let (a, b) = (x[q], y[q]);
            sx += w * a;
            sy += w * b;
            sxx += w * a * a;
            syy += w * b * b;
            sxy += w * a * b;
        }
    }
    stats[p] = sx;
    stats[n + p] = sy;
    stats[2 * n + p] = sxx;
    stats[3 * n + p] = syy;
    stats[4 * n + p] = sxy;
}

/// Column blur of plane `plane` (of `N` values) of `src` at value `p` in row `i`.
#[cube]
fn column_blur<F: Float>(
    src: &Tensor<F>,
    taps: &Tensor<F>,
    plane: usize,
    p: usize,
    i: usize,
    height: usize,
    row_len: usize,
    n: usize,
) -> F {
    let mut sum = F::new(0.0);
    for t in 0..SSIM_WINDOW {
        if i + t >= HALF && i + t < height + HALF {
            sum += taps[t] * src[plane * n + p + t * row_len - HALF * row_len];
        }
    }
    sum
}

/// The loss term per value and, with `grad`, the three gradient maps.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn ssim_map_kernel<F: Float>(
    x: &Tensor<F>,
    y: &Tensor<F>,
    taps: &Tensor<F>,
    stats: &Tensor<F>,
    terms: &mut Tensor<F>,
    maps: &mut Tensor<F>,
    ssim_weight: f32,
    l1_weight: f32,
    #[comptime] grad: bool,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    let height = x.shape(0);
    let row_len = x.shape(1) * x.shape(2);
    let n = height * row_len;
    if p >= n {
        terminate!();
    }
    let i = p / row_len;
    let mx = column_blur::<F>(stats, taps, 0, p, i, height, row_len, n);
    let my = column_blur::<F>(stats, taps, 1, p, i, height, row_len, n);
    let exx = column_blur::<F>(stats, taps, 2, p, i, height, row_len, n);
    let eyy = column_blur::<F>(stats, taps, 3, p, i, height, row_len, n);
    let exy = column_blur::<F>(stats, taps, 4, p, i, height, row_len, n);
    let c1 = F::new(SSIM_C1 as f32);
    let c2 = F::new(SSIM_C2 as f32);
    let two = F::new(2.0);
    let a = two * mx * my + c1;
    let b = two * (exy - mx * my) + c2;
    let c = mx * mx + my * my + c1;
    let d = (exx - mx * mx) + (eyy - my * my) + c2;
    let cd = c * d;
    let s = a * b / cd;
    let w_ssim = F::cast_from(ssim_weight);
    terms[p] = w_ssim * (F::new(1.0) - s) + F::cast_from(l1_weight) * F::abs(x[p] - y[p]);
    if comptime![grad] {
        // dloss/dS = -ssim_weight.
        let g_mu = two * my * (b - a) / cd + two * mx * s * (F::new(1.0) / d - F::new(1.0) / c);
        maps[p] = -w_ssim * g_mu;
        maps[n + p] = w_ssim * s / d;
        maps[2 * n + p] = -w_ssim * two * a / cd;
    }
}

/// Row blur of the three gradient maps.
#[cube(launch)]
fn row_blur3_kernel<F: Float>(
    x: &Tensor<F>,
    maps: &Tensor<F>,
    taps: &Tensor<F>,
    out: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    let (width, channels) = (x.shape(1), x.shape(2));
    let n = x.shape(0) * width * channels;
    if p >= n {
        terminate!();
    }
    let j = (p / channels) % width;
    #[unroll]
    for m in 0..3usize {
        let mut sum = F::new(0.0);
        for t in 0..SSIM_WINDOW {
            if j + t >= HALF && j + t < width + HALF {
                sum += taps[t] * maps[m * n + p + t * channels - HALF * channels];
            }
        }
        out[m * n + p] = sum;
    }
}

/// Column blur of the row-blurred maps, combined into `dloss/dx`.
#[cube(launch)]
fn grad_kernel<F: Float>(
    x: &Tensor<F>,
    y: &Tensor<F>,
    taps: &Tensor<F>,
    blurred: &Tensor<F>,
    grad: &mut Tensor<F>,
    l1_weight: f32,
    #[define(F)] _dtype: StorageType,
) {
    let p = ABSOLUTE_POS;
    let height = x.shape(0);
    let row_len = x.shape(1) * x.shape(2);
    let n = height * row_len;
    if p >= n {
        terminate!();
    }
    let i = p / row_len;
    let g_mu = column_blur::<F>(blurred, taps, 0, p, i, height, row_len, n);
    let g_xx = column_blur::<F>(blurred, taps, 1, p, i, height, row_len, n);
    let g_xy = column_blur::<F>(blurred, taps, 2, p, i, height, row_len, n);
    let (xv, yv) = (x[p], y[p]);
    let diff = xv - yv;
    let zero = F::new(0.0);
    let sign = select(
        diff > zero,
        F::new(1.0),
        select(diff < zero, F::new(-1.0), zero),
    );
    grad[p] = g_mu + F::new(2.0) * xv * g_xx + yv * g_xy + F::cast_from(l1_weight) * sign;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> LossOps
    for CubeBackend<R, F, I, BT>
{
    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        outputs: LossOutputs,
    ) -> LossPrimitives<Self> {
        let with_grad = outputs.gradient();
        let x = into_contiguous(rendered);
        let y = into_contiguous(target);
        let n = x.shape().num_elements();
        let dtype = x.dtype;
        let client = x.client.clone();
        let taps = CubeBackend::<R, F, I, BT>::float_from_data(
            TensorData::new(ssim_taps().map(|t| t as f32).to_vec(), [SSIM_WINDOW])
                .convert_dtype(dtype),
            &x.device,
        );
        let lambda = options.ssim_lambda;
        let ssim_weight = (lambda / n as f64) as f32;
        let l1_weight = ((1.0 - lambda) / n as f64) as f32;
        let dim = CubeDim::new_1d(BLOCK);
        let count = calculate_cube_count_elemwise(&client, n, dim);

        let stats = output(&x, vec![5 * n], dtype);
        row_stats_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            x.clone().into_tensor_arg(),
            y.clone().into_tensor_arg(),
            taps.clone().into_tensor_arg(),
            stats.clone().into_tensor_arg(),
            dtype.into(),
        );
        let terms = output(&x, vec![n], dtype);
        // Without the gradient the maps are not written; a one-value buffer stands in.
        let maps = output(&x, vec![if with_grad { 3 * n } else { 1 }], dtype);
        ssim_map_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            x.clone().into_tensor_arg(),
            y.clone().into_tensor_arg(),
            taps.clone().into_tensor_arg(),
            stats.into_tensor_arg(),
            terms.clone().into_tensor_arg(),
            maps.clone().into_tensor_arg(),
            ssim_weight,
            l1_weight,
            with_grad,
            dtype.into(),
        );
        let loss = outputs
            .value()
            .then(|| CubeBackend::<R, F, I, BT>::float_sum(terms));
        if !with_grad {
            return LossPrimitives { loss, grad: None };
        }
        let blurred = output(&x, vec![3 * n], dtype);
        row_blur3_kernel::launch::<R>(
            &client,
            count.clone(),
            dim,
            x.clone().into_tensor_arg(),
            maps.into_tensor_arg(),
            taps.clone().into_tensor_arg(),
            blurred.clone().into_tensor_arg(),
            dtype.into(),
        );
        let grad = output(&x, x.shape().dims::<3>().to_vec(), dtype);
        grad_kernel::launch::<R>(
            &client,
            count,
            dim,
            x.into_tensor_arg(),
            y.into_tensor_arg(),
            taps.into_tensor_arg(),
            blurred.into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            l1_weight,
            dtype.into(),
        );
        LossPrimitives {
            loss,
            grad: Some(grad),
        }
    }
}
