//! The rasterizer on the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::RasterOps;
use super::cpu::{self, Bins, RasterArrays, RasterOutputGrads, ReplayState};
use super::{
    IMAGE_ALPHA, IMAGE_CHANNELS, IMAGE_DEPTH, IMAGE_RGB, RasterGradPrimitives, RasterPrimitives,
    RasterSetup, RasterState,
};
use crate::ndarray_host::{NdArrayBackend, float_tensor, int_tensor, int_to_host, to_host};
use crate::project::PACKED_WIDTH;
use crate::project::ndarray::PackedColumns;
use crate::real::Real;

/// The packed columns as the rasterizer's input arrays.
fn raster_arrays<T>(c: &PackedColumns<T>) -> RasterArrays<'_, T> {
    RasterArrays {
        xy: &c.xy,
        depth: &c.depth,
        conic: &c.conic,
        color: &c.color,
        opacity: &c.opacity,
    }
}

fn background<T: Real>(setup: &RasterSetup) -> [T; 3] {
    setup.background.map(|c| T::from_f64(f64::from(c)))
}

/// A non-negative integer from a tensor this module wrote (or the projection's extents, which
/// are non-negative), as `u32`, saturating.
fn to_u32(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    packed: FloatTensor<B>,
    extents: IntTensor<B>,
    setup: RasterSetup,
) -> RasterPrimitives<B> {
    let columns = PackedColumns::split(&to_host::<T, B>(packed));
    let radius: Vec<u32> = int_to_host::<B>(extents)
        .chunks_exact(3)
        .flat_map(|e| [to_u32(e[0]), to_u32(e[1])])
        .collect();
    // `rasterize` validated the shapes and the image size.
    let bins = cpu::bin(
        &columns.xy,
        &columns.depth,
        &radius,
        setup.width,
        setup.height,
    )
    .expect("shapes validated by rasterize");
    let out = cpu::forward(&raster_arrays(&columns), &bins, background(&setup))
        .expect("shapes validated by rasterize");
    let (h, w) = (setup.height as usize, setup.width as usize);
    let mut image = Vec::with_capacity(h * w * IMAGE_CHANNELS);
    image.extend_from_slice(&out.rgb);
    image.extend_from_slice(&out.alpha);
    image.extend_from_slice(&out.depth);
    let offsets: Vec<i64> = bins.offsets().iter().map(|&o| o as i64).collect();
    let mut ids: Vec<i64> = bins.ids().iter().map(|&i| i64::from(i)).collect();
    if ids.is_empty() {
        // The state holds at least one entry (a zero-size buffer is not portable).
        ids.push(0);
    }
    let last: Vec<i64> = out.last.iter().map(|&l| i64::from(l)).collect();
    RasterPrimitives {
        image: float_tensor::<T, B>(image, Shape::new([IMAGE_CHANNELS * h * w])),
        state: RasterState {
            tile_offsets: int_tensor::<B>(offsets.clone(), Shape::new([offsets.len()])),
            ids: int_tensor::<B>(ids.clone(), Shape::new([ids.len()])),
            last: int_tensor::<B>(last, Shape::new([h, w])),
            transmittance: float_tensor::<T, B>(out.transmittance, Shape::new([h, w])),
        },
    }
}

fn backward_in<T: Real + Element, B: NdArrayBackend>(
    packed: FloatTensor<B>,
    state: RasterState<B>,
    grad_image: FloatTensor<B>,
    setup: RasterSetup,
) -> RasterGradPrimitives<B> {
    let columns = PackedColumns::split(&to_host::<T, B>(packed));
    let n = columns.opacity.len();
    let offsets: Vec<usize> = int_to_host::<B>(state.tile_offsets)
        .into_iter()
        .map(|o| to_u32(o) as usize)
        .collect();
    let mut ids: Vec<u32> = int_to_host::<B>(state.ids)
        .into_iter()
        .map(to_u32)
        .collect();
    ids.truncate(offsets.last().copied().unwrap_or(0));
    let bins = Bins::from_csr(setup.width, setup.height, n, offsets, ids)
        .expect("the state comes from the forward of the same splats");
    let last: Vec<u32> = int_to_host::<B>(state.last)
        .into_iter()
        .map(to_u32)
        .collect();
    let transmittance = to_host::<T, B>(state.transmittance);
    let g = to_host::<T, B>(grad_image);
    let pixels = setup.width as usize * setup.height as usize;
    let plane = |start: usize, planes: usize| &g[start * pixels..(start + planes) * pixels];
    let (rgb, alpha, depth) = (
        plane(IMAGE_RGB, 3),
        plane(IMAGE_ALPHA, 1),
        plane(IMAGE_DEPTH, 1),
    );
    let grads = RasterOutputGrads { rgb, alpha, depth };
    let replay = ReplayState {
        last: &last,
        transmittance: &transmittance,
    };
    let d = cpu::backward(
        &raster_arrays(&columns),
        &bins,
        background(&setup),
        &replay,
        &grads,
    )
    .expect("shapes validated by rasterize");
    let screen: Vec<T> = (0..n)
        .flat_map(|i| [d.xy[2 * i], d.xy[2 * i + 1], d.xy_abs[i]])
        .collect();
    let packed = PackedColumns {
        xy: d.xy,
        depth: d.depth,
        conic: d.conic,
        color: d.color,
        opacity: d.opacity,
    }
    .pack();
    RasterGradPrimitives {
        packed: float_tensor::<T, B>(packed, Shape::new([n, PACKED_WIDTH])),
        screen_grads: float_tensor::<T, B>(screen, Shape::new([n, 3])),
    }
}

impl<B: NdArrayBackend> RasterOps for B {
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        _screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        if packed.dtype() == DType::F64 {
            forward_in::<f64, B>(packed, extents, setup)
        } else {
            forward_in::<f32, B>(packed, extents, setup)
        }
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        if packed.dtype() == DType::F64 {
            backward_in::<f64, B>(packed, state, grad_image, setup)
        } else {
            backward_in::<f32, B>(packed, state, grad_image, setup)
        }
    }
}
