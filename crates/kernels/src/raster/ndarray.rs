//! The rasterizer on the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use core::ops::Range;

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Element, Shape, TensorMetadata};

use super::cpu::{self, Bins, RasterArrays, RasterOutputGrads, ReplayState};
use super::{
    IMAGE_ALPHA, IMAGE_CHANNELS, IMAGE_DEPTH, IMAGE_RGB, RasterGradPrimitives, RasterImages,
    RasterPrimitives, RasterSetup, RasterState,
};
use super::{RasterError, RasterOps};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, int_tensor, int_to_host};
use crate::project::PACKED_WIDTH;
use crate::project::packed::{PackedColumns, ROWS_PER_TASK};
use crate::real::Real;
use rayon::prelude::*;

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

/// Rasterizes the views of `packed` one after another with `raster` (`cpu::forward` or
/// `cpu::forward_images`), each parallel over its tiles, and hands `each` the view's index, its
/// block of rows, its bins and its outputs: a view's results are those of a single-view
/// rasterization of its rows, bit for bit.
fn forward_views<T: Real, O>(
    packed: &[T],
    extents: &[i64],
    setup: &RasterSetup,
    raster: impl Fn(&RasterArrays<'_, T>, &Bins, [T; 3]) -> Result<O, RasterError>,
    mut each: impl FnMut(usize, Range<usize>, Bins, O),
) {
    let views = setup.views as usize;
    let n = packed.len() / PACKED_WIDTH / views;
    for view in 0..views {
        let rows = view * n..(view + 1) * n;
        let columns =
            PackedColumns::split(&packed[rows.start * PACKED_WIDTH..rows.end * PACKED_WIDTH]);
        let mut radius = vec![0u32; 2 * n];
        radius
            .par_chunks_mut(2 * ROWS_PER_TASK)
            .zip(extents[3 * rows.start..3 * rows.end].par_chunks(3 * ROWS_PER_TASK))
            .for_each(|(radius, extents)| {
                for (r, e) in radius.chunks_exact_mut(2).zip(extents.chunks_exact(3)) {
                    r.copy_from_slice(&[to_u32(e[0]), to_u32(e[1])]);
                }
            });
        // `rasterize_views` validated the shapes and the image size.
        let bins = cpu::bin(
            &columns.xy,
            &columns.depth,
            &radius,
            setup.width,
            setup.height,
        )
        .expect("shapes validated by rasterize_views");
        let out = raster(&raster_arrays(&columns), &bins, background(setup))
            .expect("shapes validated by rasterize_views");
        each(view, rows, bins, out);
    }
}

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    packed: FloatTensor<B>,
    extents: IntTensor<B>,
    setup: RasterSetup,
) -> RasterPrimitives<B> {
    let packed = host_slice::<T, B>(&packed);
    let extents_host = int_to_host::<B>(extents.clone());
    let views = setup.views as usize;
    let rows = packed.len() / PACKED_WIDTH;
    let (h, w) = (setup.height as usize, setup.width as usize);
    let mut image = Vec::with_capacity(views * h * w * IMAGE_CHANNELS);
    let mut offsets: Vec<i64> = Vec::new();
    let mut ids: Vec<i64> = Vec::new();
    let mut last: Vec<i64> = Vec::with_capacity(views * h * w);
    let mut transmittance = Vec::with_capacity(views * h * w);
    // The views' bins are joined into one CSR over `C tiles` tiles, with the ids made row
    // indices of the whole batch.
    forward_views(
        &packed,
        &extents_host,
        &setup,
        cpu::forward,
        |view, rows, bins, out| {
            image.extend_from_slice(&out.rgb);
            image.extend_from_slice(&out.alpha);
            image.extend_from_slice(&out.depth);
            let base = ids.len() as i64;
            let first = if view == 0 { 0 } else { 1 };
            offsets.extend(bins.offsets()[first..].iter().map(|&o| base + o as i64));
            ids.extend(bins.ids().iter().map(|&i| (rows.start + i as usize) as i64));
            last.extend(out.last.iter().map(|&l| i64::from(l)));
            transmittance.extend_from_slice(&out.transmittance);
        },
    );
    // The CPU's lists are exact: every row is listed.
    let pairs = vec![ids.len() as i64, rows as i64];
    if ids.is_empty() {
        // The state holds at least one entry (a zero-size buffer is not portable).
        ids.push(0);
    }
    RasterPrimitives {
        image: float_tensor::<T, B>(image, Shape::new([views * IMAGE_CHANNELS * h * w])),
        state: RasterState {
            tile_offsets: int_tensor::<B>(offsets.clone(), Shape::new([offsets.len()])),
            ids: int_tensor::<B>(ids.clone(), Shape::new([ids.len()])),
            last: int_tensor::<B>(last, Shape::new([views * h, w])),
            transmittance: float_tensor::<T, B>(transmittance, Shape::new([views * h, w])),
            order: int_tensor::<B>(vec![0], Shape::new([1])),
            pairs: int_tensor::<B>(pairs, Shape::new([2])),
            extents,
        },
    }
}

/// The images alone, each built in its final shape: no replay state, no flat image to split.
fn images_in<T: Real + Element, B: NdArrayBackend>(
    packed: FloatTensor<B>,
    extents: IntTensor<B>,
    setup: RasterSetup,
) -> RasterImages<B> {
    let packed = host_slice::<T, B>(&packed);
    let extents = int_to_host::<B>(extents);
    let views = setup.views as usize;
    let (h, w) = (setup.height as usize, setup.width as usize);
    if views == 1 {
        // One view: its buffers become the tensors as they are.
        let mut single = None;
        forward_views(
            &packed,
            &extents,
            &setup,
            cpu::forward_images,
            |_, _, _, out| {
                single = Some(out);
            },
        );
        let out = single.expect("one view rasterized");
        return RasterImages {
            rgb: float_tensor::<T, B>(out.rgb, Shape::new([1, h, w, 3])),
            alpha: float_tensor::<T, B>(out.alpha, Shape::new([1, h, w])),
            weighted_depth: float_tensor::<T, B>(out.depth, Shape::new([1, h, w])),
        };
    }
    let mut rgb = Vec::with_capacity(views * h * w * 3);
    let mut alpha = Vec::with_capacity(views * h * w);
    let mut depth = Vec::with_capacity(views * h * w);
    forward_views(
        &packed,
        &extents,
        &setup,
        cpu::forward_images,
        |_, _, _, out| {
            rgb.extend_from_slice(&out.rgb);
            alpha.extend_from_slice(&out.alpha);
            depth.extend_from_slice(&out.depth);
        },
    );
    RasterImages {
        rgb: float_tensor::<T, B>(rgb, Shape::new([views, h, w, 3])),
        alpha: float_tensor::<T, B>(alpha, Shape::new([views, h, w])),
        weighted_depth: float_tensor::<T, B>(depth, Shape::new([views, h, w])),
    }
}

fn backward_in<T: Real + Element, B: NdArrayBackend>(
    packed: FloatTensor<B>,
    state: RasterState<B>,
    grad_image: FloatTensor<B>,
    setup: RasterSetup,
) -> RasterGradPrimitives<B> {
    let packed = host_slice::<T, B>(&packed);
    let views = setup.views as usize;
    let n = packed.len() / PACKED_WIDTH / views;
    let offsets: Vec<usize> = int_to_host::<B>(state.tile_offsets)
        .into_iter()
        .map(|o| to_u32(o) as usize)
        .collect();
    let ids: Vec<u32> = int_to_host::<B>(state.ids)
        .into_iter()
        .map(to_u32)
        .collect();
    let last: Vec<u32> = int_to_host::<B>(state.last)
        .into_iter()
        .map(to_u32)
        .collect();
    let transmittance = host_slice::<T, B>(&state.transmittance);
    let g = host_slice::<T, B>(&grad_image);
    let pixels = setup.width as usize * setup.height as usize;
    // A gradient of the colour alone leaves alpha and depth with zero gradients.
    let rgb_only = g.len() == views * 3 * pixels;
    let zeros = if rgb_only {
        vec![T::from_f64(0.0); pixels]
    } else {
        Vec::new()
    };
    let (tiles_x, tiles_y) = setup.tiles();
    let tiles = tiles_x as usize * tiles_y as usize;
    let mut grad_packed = Vec::with_capacity(views * n * PACKED_WIDTH);
    let mut screen = Vec::with_capacity(views * n * 3);
    for view in 0..views {
        let rows = view * n..(view + 1) * n;
        let columns =
            PackedColumns::split(&packed[rows.start * PACKED_WIDTH..rows.end * PACKED_WIDTH]);
        // This view's CSR, rebased to its own rows and entries.
        let view_offsets = &offsets[view * tiles..=(view + 1) * tiles];
        let first = view_offsets[0];
        let local_offsets: Vec<usize> = view_offsets.iter().map(|&o| o - first).collect();
        let local_ids: Vec<u32> = ids[first..view_offsets[tiles]]
            .iter()
            .map(|&i| i - rows.start as u32)
            .collect();
        let bins = Bins::from_csr(setup.width, setup.height, n, local_offsets, local_ids)
            .expect("the state comes from the forward of the same splats");
        let grads = if rgb_only {
            RasterOutputGrads {
                rgb: &g[view * 3 * pixels..(view + 1) * 3 * pixels],
                alpha: &zeros,
                depth: &zeros,
            }
        } else {
            let image = &g[view * IMAGE_CHANNELS * pixels..(view + 1) * IMAGE_CHANNELS * pixels];
            let plane =
                |start: usize, planes: usize| &image[start * pixels..(start + planes) * pixels];
            RasterOutputGrads {
                rgb: plane(IMAGE_RGB, 3),
                alpha: plane(IMAGE_ALPHA, 1),
                depth: plane(IMAGE_DEPTH, 1),
            }
        };
        let replay = ReplayState {
            last: &last[view * pixels..(view + 1) * pixels],
            transmittance: &transmittance[view * pixels..(view + 1) * pixels],
        };
        let d = cpu::backward(
            &raster_arrays(&columns),
            &bins,
            background(&setup),
            &replay,
            &grads,
        )
        .expect("shapes validated by rasterize_views");
        screen.extend((0..n).flat_map(|i| [d.xy[2 * i], d.xy[2 * i + 1], d.xy_abs[i]]));
        grad_packed.extend(
            PackedColumns {
                xy: d.xy,
                depth: d.depth,
                conic: d.conic,
                color: d.color,
                opacity: d.opacity,
            }
            .pack(),
        );
    }
    RasterGradPrimitives {
        packed: float_tensor::<T, B>(grad_packed, Shape::new([views * n, PACKED_WIDTH])),
        screen_grads: float_tensor::<T, B>(screen, Shape::new([views * n, 3])),
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

    fn rasterize_images(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        setup: RasterSetup,
    ) -> RasterImages<Self> {
        if packed.dtype() == DType::F64 {
            images_in::<f64, B>(packed, extents, setup)
        } else {
            images_in::<f32, B>(packed, extents, setup)
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
