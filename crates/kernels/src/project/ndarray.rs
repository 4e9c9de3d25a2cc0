//! The projection on the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use std::borrow::Cow;

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::ProjectOps;
use super::cpu::{self, ProjectArrays, ProjectOutputGrads};
use super::packed::{PackedColumns, ROWS_PER_TASK};
use super::{
    CameraParams, PACKED_WIDTH, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, int_tensor, to_host};
use crate::real::Real;
use rayon::prelude::*;

/// The projection's inputs on the host: the tensors' own memory where they are contiguous and
/// of the kernel's type (a render copies no parameter), and the SH coefficients interleaved.
struct HostInputs<'a, T: Clone> {
    means: Cow<'a, [T]>,
    quats: Cow<'a, [T]>,
    log_scales: Cow<'a, [T]>,
    opacity_logits: Cow<'a, [T]>,
    sh: Cow<'a, [T]>,
    sh_coeffs: usize,
}

impl<'a, T: Real + Element> HostInputs<'a, T> {
    fn read<B: NdArrayBackend>(inputs: &'a ProjectInputs<B>) -> Self {
        let rest_coeffs = inputs.sh_rest.shape().dims::<3>()[1];
        let dc = host_slice::<T, B>(&inputs.sh_dc);
        // The CPU kernels read one `[N, K, 3]` array: interleaved here, on the host, in one
        // pass of contiguous copies on all threads, into memory nothing zeroed first.
        let sh = if rest_coeffs == 0 {
            dc
        } else {
            let rest = host_slice::<T, B>(&inputs.sh_rest);
            let k = rest_coeffs + 1;
            // The op contract's shapes; the writes below cover the buffer only if they hold.
            assert!(
                dc.len().is_multiple_of(3) && rest.len() == dc.len() * rest_coeffs,
                "sh_dc [N, 1, 3] and sh_rest [N, K - 1, 3] disagree on N"
            );
            let mut sh = Vec::with_capacity(dc.len() + rest.len());
            let per = ROWS_PER_TASK;
            (
                sh.spare_capacity_mut()[..dc.len() + rest.len()].par_chunks_mut(3 * k * per),
                dc.par_chunks(3 * per),
                rest.par_chunks(3 * rest_coeffs * per),
            )
                .into_par_iter()
                .for_each(|(sh, dc, rest)| {
                    for ((row, dc), rest) in sh
                        .chunks_exact_mut(3 * k)
                        .zip(dc.chunks_exact(3))
                        .zip(rest.chunks_exact(3 * rest_coeffs))
                    {
                        let (head, tail) = row.split_at_mut(3);
                        for (slot, &v) in head.iter_mut().zip(dc) {
                            slot.write(v);
                        }
                        for (slot, &v) in tail.iter_mut().zip(rest) {
                            slot.write(v);
                        }
                    }
                });
            // SAFETY: the rows above wrote every one of the `N K 3` elements (`dc` holds `N`
            // rows of 3 and `rest` `N` rows of `3 (K - 1)`, as asserted above).
            unsafe { sh.set_len(dc.len() + rest.len()) };
            Cow::Owned(sh)
        };
        HostInputs {
            means: host_slice::<T, B>(&inputs.means),
            quats: host_slice::<T, B>(&inputs.quats),
            log_scales: host_slice::<T, B>(&inputs.log_scales),
            opacity_logits: host_slice::<T, B>(&inputs.opacity_logits),
            sh,
            sh_coeffs: rest_coeffs + 1,
        }
    }

    fn arrays(&self) -> ProjectArrays<'_, T> {
        ProjectArrays {
            means: &self.means,
            quats: &self.quats,
            log_scales: &self.log_scales,
            opacity_logits: &self.opacity_logits,
            sh: &self.sh,
            sh_coeffs: self.sh_coeffs,
        }
    }
}

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    inputs: ProjectInputs<B>,
    cameras: &[CameraParams],
    options: ProjectOptions,
) -> ProjectPrimitives<B> {
    let host = HostInputs::<T>::read(&inputs);
    let n = host.means.len() / 3;
    let rows = cameras.len() * n;
    let mut packed = Vec::new();
    let mut extents = Vec::new();
    // One view after another, each parallel over its Gaussians: the rows of a view are those
    // of a single-camera projection, bit for bit.
    for camera in cameras {
        // The tensor-level entry point validated everything this checks again.
        let out = cpu::forward(&host.arrays(), camera, &options)
            .expect("inputs validated by project_gaussians");
        let (view_packed, view_extents) = out.into_rows();
        // The first view's buffers are kept as they are (one view: no copy).
        if packed.is_empty() {
            (packed, extents) = (view_packed, view_extents);
        } else {
            packed.extend_from_slice(&view_packed);
            extents.extend_from_slice(&view_extents);
        }
    }
    ProjectPrimitives {
        packed: float_tensor::<T, B>(packed, Shape::new([rows, PACKED_WIDTH])),
        extents: int_tensor::<B>(extents, Shape::new([rows, 3])),
    }
}

fn backward_in<T: Real + Element, B: NdArrayBackend>(
    inputs: ProjectInputs<B>,
    grad_packed: FloatTensor<B>,
    cameras: &[CameraParams],
    options: ProjectOptions,
) -> ProjectGrads<B> {
    let host = HostInputs::<T>::read(&inputs);
    let (n, k) = (host.means.len() / 3, host.sh_coeffs);
    let grad_packed = to_host::<T, B>(grad_packed);
    let mut total: Option<cpu::ProjectGrads<T>> = None;
    // The views' gradients are summed in view order, so the result does not depend on the
    // thread count.
    for (view, camera) in cameras.iter().enumerate() {
        let rows = &grad_packed[view * n * PACKED_WIDTH..(view + 1) * n * PACKED_WIDTH];
        let g = PackedColumns::split(rows);
        let grads = ProjectOutputGrads {
            xy: &g.xy,
            depth: &g.depth,
            conic: &g.conic,
            color: &g.color,
            opacity: &g.opacity,
        };
        let d = cpu::backward(&host.arrays(), camera, &options, &grads)
            .expect("inputs validated by project_gaussians");
        total = Some(match total {
            None => d,
            Some(mut sum) => {
                for (acc, part) in [
                    (&mut sum.means, &d.means),
                    (&mut sum.quats, &d.quats),
                    (&mut sum.log_scales, &d.log_scales),
                    (&mut sum.opacity_logits, &d.opacity_logits),
                    (&mut sum.sh, &d.sh),
                ] {
                    acc.iter_mut().zip(part).for_each(|(a, p)| *a += *p);
                }
                sum
            }
        });
    }
    let d = total.expect("project_views refuses an empty camera list");
    let mut sh_dc = Vec::with_capacity(3 * n);
    let mut sh_rest = Vec::with_capacity(3 * (k - 1) * n);
    for v in d.sh.chunks_exact(3 * k) {
        sh_dc.extend_from_slice(&v[..3]);
        sh_rest.extend_from_slice(&v[3..]);
    }
    ProjectGrads {
        means: float_tensor::<T, B>(d.means, Shape::new([n, 3])),
        quats: float_tensor::<T, B>(d.quats, Shape::new([n, 4])),
        log_scales: float_tensor::<T, B>(d.log_scales, Shape::new([n, 3])),
        opacity_logits: float_tensor::<T, B>(d.opacity_logits, Shape::new([n])),
        sh_dc: float_tensor::<T, B>(sh_dc, Shape::new([n, 1, 3])),
        sh_rest: float_tensor::<T, B>(sh_rest, Shape::new([n, k - 1, 3])),
    }
}

impl<B: NdArrayBackend> ProjectOps for B {
    fn project_forward(
        inputs: ProjectInputs<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        if inputs.means.dtype() == DType::F64 {
            forward_in::<f64, B>(inputs, cameras, options)
        } else {
            forward_in::<f32, B>(inputs, cameras, options)
        }
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        cameras: &[CameraParams],
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        if inputs.means.dtype() == DType::F64 {
            backward_in::<f64, B>(inputs, grad_packed, cameras, options)
        } else {
            backward_in::<f32, B>(inputs, grad_packed, cameras, options)
        }
    }
}
