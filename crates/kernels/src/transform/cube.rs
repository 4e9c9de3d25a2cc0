//! The transform as a CubeCL kernel, generic over the runtime (one source for wgpu and cuda)
//! and over the float type (the launch takes the tensors' runtime dtype).
//!
//! One unit per (frame, Gaussian), the arithmetic of `cpu.rs`. The per-frame constants
//! ([`frame_params`](super::frame_params), computed on the host in `f64`) are uploaded as one
//! flat `[F * PARAMS_WIDTH]` tensor: CUDA's allocator pads the rows of a 2-D upload to an
//! aligned pitch (400 bytes become 512), so a `[F, PARAMS_WIDTH]` tensor indexed densely reads
//! the wrong constants for every frame after the first. Without SH (`K = 0`) a second kernel, without the SH arguments,
//! runs: zero-sized buffers are not bound.

use burn::tensor::ops::FloatTensorOps;
use burn::tensor::{TensorData, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;

use super::TransformOps;
use super::{
    PARAM_LINEAR, PARAM_LOG_SCALE, PARAM_OFFSET, PARAM_QUAT, PARAM_SH1, PARAM_SH2, PARAM_SH3,
    PARAMS_WIDTH, Similarity, TransformInputs, TransformPrimitives, frame_params,
};

/// Units per cube.
const BLOCK: u32 = 256;

/// Mean, quaternion and log-scales of Gaussian `g` under the frame whose parameters start at
/// `p`, written at output row `o`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn transform_geometry<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    params: &Tensor<F>,
    out_means: &mut Tensor<F>,
    out_quats: &mut Tensor<F>,
    out_scales: &mut Tensor<F>,
    g: usize,
    o: usize,
    p: usize,
) {
    let mx = means[3 * g];
    let my = means[3 * g + 1];
    let mz = means[3 * g + 2];
    let l = p + PARAM_LINEAR;
    let t = p + PARAM_OFFSET;
    #[unroll]
    for r in 0..3usize {
        out_means[3 * o + r] = params[l + 3 * r] * mx
            + params[l + 3 * r + 1] * my
            + params[l + 3 * r + 2] * mz
            + params[t + r];
    }
    let aw = params[p + PARAM_QUAT];
    let ax = params[p + PARAM_QUAT + 1];
    let ay = params[p + PARAM_QUAT + 2];
    let az = params[p + PARAM_QUAT + 3];
    let bw = quats[4 * g];
    let bx = quats[4 * g + 1];
    let by = quats[4 * g + 2];
    let bz = quats[4 * g + 3];
    out_quats[4 * o] = aw * bw - ax * bx - ay * by - az * bz;
    out_quats[4 * o + 1] = aw * bx + ax * bw + ay * bz - az * by;
    out_quats[4 * o + 2] = aw * by - ax * bz + ay * bw + az * bx;
    out_quats[4 * o + 3] = aw * bz + ax * by - ay * bx + az * bw;
    let ls = params[p + PARAM_LOG_SCALE];
    #[unroll]
    for r in 0..3usize {
        out_scales[3 * o + r] = log_scales[3 * g + r] + ls;
    }
}

/// One SH band (`n` coefficients from `first`) of one Gaussian, per channel.
#[cube]
fn rotate_band<F: Float>(
    src: &Tensor<F>,
    params: &Tensor<F>,
    dst: &mut Tensor<F>,
    src_base: usize,
    dst_base: usize,
    matrix: usize,
    #[comptime] first: usize,
    #[comptime] n: usize,
) {
    #[unroll]
    for row in 0..n {
        let mut r = F::new(0.0);
        let mut gr = F::new(0.0);
        let mut b = F::new(0.0);
        #[unroll]
        for col in 0..n {
            let w = params[matrix + row * n + col];
            let at = src_base + 3 * (first + col);
            r += w * src[at];
            gr += w * src[at + 1];
            b += w * src[at + 2];
        }
        let at = dst_base + 3 * (first + row);
        dst[at] = r;
        dst[at + 1] = gr;
        dst[at + 2] = b;
    }
}

/// One unit per (frame, Gaussian), with SH coefficients (`coeffs` = `K` in `{3, 8, 15}`).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn transform_kernel<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    sh_rest: &Tensor<F>,
    params: &Tensor<F>,
    out_means: &mut Tensor<F>,
    out_quats: &mut Tensor<F>,
    out_scales: &mut Tensor<F>,
    out_sh: &mut Tensor<F>,
    #[comptime] coeffs: usize,
    #[define(F)] _dtype: StorageType,
) {
    let o = ABSOLUTE_POS;
    let n = means.shape(0);
    if o >= n * (params.len() / PARAMS_WIDTH) {
        terminate!();
    }
    let g = o % n;
    let p = (o / n) * PARAMS_WIDTH;
    transform_geometry::<F>(
        means, quats, log_scales, params, out_means, out_quats, out_scales, g, o, p,
    );
    let src_base = g * coeffs * 3;
    let dst_base = o * coeffs * 3;
    rotate_band::<F>(
        sh_rest,
        params,
        out_sh,
        src_base,
        dst_base,
        p + PARAM_SH1,
        0usize,
        3usize,
    );
    if comptime![coeffs >= 8] {
        rotate_band::<F>(
            sh_rest,
            params,
            out_sh,
            src_base,
            dst_base,
            p + PARAM_SH2,
            3usize,
            5usize,
        );
    }
    if comptime![coeffs >= 15] {
        rotate_band::<F>(
            sh_rest,
            params,
            out_sh,
            src_base,
            dst_base,
            p + PARAM_SH3,
            8usize,
            7usize,
        );
    }
}

/// One unit per (frame, Gaussian), no SH coefficients.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn transform_kernel_no_sh<F: Float>(
    means: &Tensor<F>,
    quats: &Tensor<F>,
    log_scales: &Tensor<F>,
    params: &Tensor<F>,
    out_means: &mut Tensor<F>,
    out_quats: &mut Tensor<F>,
    out_scales: &mut Tensor<F>,
    #[define(F)] _dtype: StorageType,
) {
    let o = ABSOLUTE_POS;
    let n = means.shape(0);
    if o >= n * (params.len() / PARAMS_WIDTH) {
        terminate!();
    }
    let g = o % n;
    let p = (o / n) * PARAMS_WIDTH;
    transform_geometry::<F>(
        means, quats, log_scales, params, out_means, out_quats, out_scales, g, o, p,
    );
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> TransformOps
    for CubeBackend<R, F, I, BT>
{
    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        let means = into_contiguous(inputs.means);
        let quats = into_contiguous(inputs.quats);
        let log_scales = into_contiguous(inputs.log_scales);
        let [n, k, _] = inputs.sh_rest.shape().dims::<3>();
        let frames = similarities.len();
        let dtype = means.dtype;
        // `transform_gaussians` validated the transforms.
        let host: Vec<f32> = similarities
            .iter()
            .flat_map(|s| frame_params(s).expect("validated by transform_gaussians"))
            .map(|v| v as f32)
            .collect();
        let params = CubeBackend::<R, F, I, BT>::float_from_data(
            TensorData::new(host, [frames * PARAMS_WIDTH]).convert_dtype(dtype),
            &means.device,
        );
        let output = |shape: Vec<usize>| crate::cube_alloc::output(&means, shape, dtype);
        let out = TransformPrimitives::<CubeBackend<R, F, I, BT>> {
            means: output(vec![frames, n, 3]),
            quats: output(vec![frames, n, 4]),
            log_scales: output(vec![frames, n, 3]),
            sh_rest: output(vec![frames, n, k, 3]),
        };
        let units = frames * n;
        if units == 0 {
            return out;
        }
        let dim = CubeDim::new_1d(BLOCK);
        let count = calculate_cube_count_elemwise(&means.client, units, dim);
        if k == 0 {
            transform_kernel_no_sh::launch::<R>(
                &means.client,
                count,
                dim,
                means.clone().into_tensor_arg(),
                quats.into_tensor_arg(),
                log_scales.into_tensor_arg(),
                params.into_tensor_arg(),
                out.means.clone().into_tensor_arg(),
                out.quats.clone().into_tensor_arg(),
                out.log_scales.clone().into_tensor_arg(),
                dtype.into(),
            );
        } else {
            let sh_rest = into_contiguous(inputs.sh_rest);
            transform_kernel::launch::<R>(
                &means.client,
                count,
                dim,
                means.clone().into_tensor_arg(),
                quats.into_tensor_arg(),
                log_scales.into_tensor_arg(),
                sh_rest.into_tensor_arg(),
                params.into_tensor_arg(),
                out.means.clone().into_tensor_arg(),
                out.quats.clone().into_tensor_arg(),
                out.log_scales.clone().into_tensor_arg(),
                out.sh_rest.clone().into_tensor_arg(),
                k,
                dtype.into(),
            );
        }
        out
    }
}
