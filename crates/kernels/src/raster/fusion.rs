//! The rasterizer on `Fusion<B>` (burn's `Wgpu` and `Cuda`). Unlike the other ops it runs
//! eagerly: the binning's size (the number of tile entries) is only known on the device, and a
//! recorded operation must declare its output shapes up front. So the call drains the inputs'
//! streams, runs `B`'s kernels on the real handles, and registers the results as new fusion
//! tensors. Custom operations are fusion barriers anyway, so nothing that could fuse is lost.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Shape, TensorMetadata};
use burn_fusion::stream::OperationStreams;
use burn_fusion::{Client, Fusion, FusionBackend, FusionTensor, NoOp};
use burn_ir::{InitOperationIr, OperationIr, OperationOutput};

use super::RasterOps;
use super::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};

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

impl<B: FusionBackend + RasterOps> RasterOps for Fusion<B> {
    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        let client = packed.client.clone();
        let out = B::rasterize_forward(
            client.resolve_tensor_float::<B>(packed),
            client.resolve_tensor_int::<B>(extents),
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
            },
        }
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        let client = packed.client.clone();
        let inner = RasterState {
            tile_offsets: client.resolve_tensor_int::<B>(state.tile_offsets),
            ids: client.resolve_tensor_int::<B>(state.ids),
            last: client.resolve_tensor_int::<B>(state.last),
            transmittance: client.resolve_tensor_float::<B>(state.transmittance),
        };
        let g = B::rasterize_backward(
            client.resolve_tensor_float::<B>(packed),
            inner,
            client.resolve_tensor_float::<B>(grad_image),
            setup,
        );
        RasterGradPrimitives {
            packed: wrap_float::<B>(&client, g.packed),
            screen_grads: wrap_float::<B>(&client, g.screen_grads),
        }
    }
}
