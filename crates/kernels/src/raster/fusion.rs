//! The rasterizer on `Fusion<B>` (burn's `Wgpu` and `Cuda`).
//!
//! With [`RasterSetup::tile_pairs`] the size of every output is known on the host, so the
//! forward and the backward are each recorded in the fusion stream as one custom operation that,
//! when the stream runs, calls `B`'s kernels on the real handles: the host records on while
//! the device works. Without it the lists are sized by the count of pairs, known only on the
//! device, and a recorded operation must declare its output shapes up front: the forward then
//! runs eagerly (it drains the inputs' streams, runs `B`'s kernels, reads the count back and
//! registers the results as new fusion tensors). Custom operations are fusion barriers anyway,
//! so nothing that could fuse is lost either way.

use core::marker::PhantomData;

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Client, Fusion, FusionBackend, FusionRuntime, FusionTensor, NoOp};
use burn_ir::{CustomOpIr, HandleContainer, InitOperationIr, OperationIr, OperationOutput};

use super::RasterOps;
use super::{IMAGE_CHANNELS, RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};
use crate::cube_alloc::{fusion_output, fusion_output_like};
use crate::project::PACKED_WIDTH;

/// Registers a tensor of `B` computed outside the stream (its handle, shape and dtype) as a
/// fusion tensor.
fn register<B: FusionBackend>(
    client: &Client<B::FusionRuntime>,
    (handle, shape, dtype): (B::Handle, Shape, DType),
) -> FusionTensor<B::FusionRuntime> {
    let desc = InitOperationIr::create(shape, dtype, || client.register_tensor_handle(handle));
    client
        .register(
            OperationStreams::default(),
            OperationIr::Init(desc),
            NoOp::<B>::new(),
        )
        .output()
}

fn wrap_float<B: FusionBackend>(
    client: &Client<B::FusionRuntime>,
    tensor: FloatTensor<B>,
) -> FusionTensor<B::FusionRuntime> {
    let (shape, dtype) = (tensor.shape(), tensor.dtype());
    register::<B>(client, (B::float_tensor_handle(tensor), shape, dtype))
}

fn wrap_int<B: FusionBackend>(
    client: &Client<B::FusionRuntime>,
    tensor: IntTensor<B>,
) -> FusionTensor<B::FusionRuntime> {
    let (shape, dtype) = (tensor.shape(), tensor.dtype());
    register::<B>(client, (B::int_tensor_handle(tensor), shape, dtype))
}

/// The recorded forward: inputs `[packed, extents]`, outputs `[image, tile_offsets, ids, last,
/// transmittance, order, pairs]`.
#[derive(Debug)]
struct ForwardOp<B> {
    desc: CustomOpIr,
    setup: RasterSetup,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + RasterOps> Operation<B::FusionRuntime> for ForwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([packed, extents], outputs) = self.desc.as_fixed::<2, 7>();
        let packed = h.get_float_tensor::<B>(packed);
        // The probe's value is never read; without autodiff nothing tracks it.
        let probe = packed.clone();
        let out = B::rasterize_forward(packed, h.get_int_tensor::<B>(extents), probe, self.setup);
        let [image, offsets, ids, last, transmittance, order, pairs] = outputs.each_ref();
        h.register_float_tensor::<B>(&image.id, out.image);
        h.register_int_tensor::<B>(&offsets.id, out.state.tile_offsets);
        h.register_int_tensor::<B>(&ids.id, out.state.ids);
        h.register_int_tensor::<B>(&last.id, out.state.last);
        h.register_float_tensor::<B>(&transmittance.id, out.state.transmittance);
        h.register_int_tensor::<B>(&order.id, out.state.order);
        h.register_int_tensor::<B>(&pairs.id, out.state.pairs);
    }
}

/// The recorded backward: inputs `[packed, tile_offsets, ids, last, transmittance, order,
/// pairs, extents, grad_image]`, outputs `[grad_packed, screen_grads]`.
#[derive(Debug)]
struct BackwardOp<B> {
    desc: CustomOpIr,
    setup: RasterSetup,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + RasterOps> Operation<B::FusionRuntime> for BackwardOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let (inputs, [grad_packed, screen_grads]) = self.desc.as_fixed::<9, 2>();
        let [
            packed,
            offsets,
            ids,
            last,
            transmittance,
            order,
            pairs,
            extents,
            grad_image,
        ] = inputs.each_ref();
        let state = RasterState {
            tile_offsets: h.get_int_tensor::<B>(offsets),
            ids: h.get_int_tensor::<B>(ids),
            last: h.get_int_tensor::<B>(last),
            transmittance: h.get_float_tensor::<B>(transmittance),
            order: h.get_int_tensor::<B>(order),
            pairs: h.get_int_tensor::<B>(pairs),
            extents: h.get_int_tensor::<B>(extents),
        };
        let g = B::rasterize_backward(
            h.get_float_tensor::<B>(packed),
            state,
            h.get_float_tensor::<B>(grad_image),
            self.setup,
        );
        h.register_float_tensor::<B>(&grad_packed.id, g.packed);
        h.register_float_tensor::<B>(&screen_grads.id, g.screen_grads);
    }
}

impl<B: FusionBackend + RasterOps> RasterOps for Fusion<B> {
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        match setup.tile_pairs {
            Some(capacity) => record_forward::<B>(packed, extents, setup, capacity),
            None => eager_forward::<B>(packed, extents, screen_grads, setup),
        }
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        let client = packed.client.clone();
        let rows = packed.shape[0];
        let dtype = packed.dtype;
        let inputs = [
            packed,
            state.tile_offsets,
            state.ids,
            state.last,
            state.transmittance,
            state.order,
            state.pairs,
            state.extents,
            grad_image,
        ];
        let streams = OperationStreams::with_inputs(&inputs);
        let outputs = [
            fusion_output_like(&inputs[0]),
            fusion_output(&inputs[0], [rows, 3], dtype),
        ];
        let desc = CustomOpIr::new(
            "ember_rasterize_backward",
            &inputs.map(|t| t.into_ir()),
            &outputs,
        );
        let op = BackwardOp::<B> {
            desc: desc.clone(),
            setup,
            _backend: PhantomData,
        };
        let [packed, screen_grads] = client
            .register(streams, OperationIr::Custom(desc), op)
            .outputs();
        RasterGradPrimitives {
            packed,
            screen_grads,
        }
    }
}

/// The forward recorded as one operation, its lists `capacity` entries long.
fn record_forward<B: FusionBackend + RasterOps>(
    packed: FloatTensor<Fusion<B>>,
    extents: IntTensor<Fusion<B>>,
    setup: RasterSetup,
    capacity: u32,
) -> RasterPrimitives<Fusion<B>> {
    let client = packed.client.clone();
    let rows = packed.shape[0];
    let (w, h, views) = (
        setup.width as usize,
        setup.height as usize,
        setup.views as usize,
    );
    let (tiles_x, tiles_y) = setup.tiles();
    let tiles = tiles_x as usize * tiles_y as usize * views;
    let dtype = packed.dtype;
    // The shapes `B`'s kernels allocate (a buffer holds at least one entry).
    let outputs = [
        fusion_output(&packed, [views * IMAGE_CHANNELS * h * w], dtype),
        fusion_output(&packed, [tiles + 1], DType::U32),
        fusion_output(&packed, [(capacity as usize).max(1)], DType::U32),
        fusion_output(&packed, [views * h, w], DType::U32),
        fusion_output(&packed, [views * h, w], dtype),
        fusion_output(&packed, [rows.max(1)], DType::U32),
        fusion_output(&packed, [2], DType::U32),
    ];
    debug_assert_eq!(packed.shape[1], PACKED_WIDTH);
    let streams = OperationStreams::with_inputs([&packed, &extents]);
    let desc = CustomOpIr::new(
        "ember_rasterize_forward",
        &[packed.into_ir(), extents.clone().into_ir()],
        &outputs,
    );
    let op = ForwardOp::<B> {
        desc: desc.clone(),
        setup,
        _backend: PhantomData,
    };
    let [image, tile_offsets, ids, last, transmittance, order, pairs] = client
        .register(streams, OperationIr::Custom(desc), op)
        .outputs();
    RasterPrimitives {
        image,
        state: RasterState {
            tile_offsets,
            ids,
            last,
            transmittance,
            order,
            pairs,
            extents,
        },
    }
}

/// The forward run at once on `B` (see the module docs).
fn eager_forward<B: FusionBackend + RasterOps>(
    packed: FloatTensor<Fusion<B>>,
    extents: IntTensor<Fusion<B>>,
    screen_grads: FloatTensor<Fusion<B>>,
    setup: RasterSetup,
) -> RasterPrimitives<Fusion<B>> {
    let client = packed.client.clone();
    let out = B::rasterize_forward(
        client.resolve_tensor_float::<B>(packed),
        client.resolve_tensor_int::<B>(extents.clone()),
        client.resolve_tensor_float::<B>(screen_grads),
        setup,
    );
    RasterPrimitives {
        image: wrap_float::<B>(&client, out.image),
        state: RasterState {
            tile_offsets: wrap_int::<B>(&client, out.state.tile_offsets),
            ids: wrap_int::<B>(&client, out.state.ids),
            last: wrap_int::<B>(&client, out.state.last),
            transmittance: wrap_float::<B>(&client, out.state.transmittance),
            order: wrap_int::<B>(&client, out.state.order),
            pairs: wrap_int::<B>(&client, out.state.pairs),
            extents,
        },
    }
}
