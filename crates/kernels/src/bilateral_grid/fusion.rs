//! The bilateral grid on `Fusion<B>` (burn's `Wgpu` and `Cuda`): the slice and its backward
//! recorded in the fusion stream as custom operations (their output shapes are those of their
//! inputs) that run `B`'s kernels on the real tensor handles.

use core::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr};

use super::{BilateralGridGrads, BilateralGridOps};
use crate::cube_alloc::fusion_output_like;

/// A recorded slice (inputs `[rgb, grid]`, output `[out]`) or backward (inputs `[rgb, grid,
/// grad]`, outputs `[grad_rgb, grad_grid]`).
#[derive(Debug)]
struct SliceOp<B> {
    desc: CustomOpIr,
    backward: bool,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + BilateralGridOps> Operation<B::FusionRuntime> for SliceOp<B> {
    fn execute(&self, h: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let inputs = &self.desc.inputs;
        let rgb = h.get_float_tensor::<B>(&inputs[0]);
        let grid = h.get_float_tensor::<B>(&inputs[1]);
        let outputs = &self.desc.outputs;
        if self.backward {
            let grad = h.get_float_tensor::<B>(&inputs[2]);
            let grads = B::bilateral_grid_backward(rgb, grid, grad);
            h.register_float_tensor::<B>(&outputs[0].id, grads.rgb);
            h.register_float_tensor::<B>(&outputs[1].id, grads.grid);
        } else {
            h.register_float_tensor::<B>(&outputs[0].id, B::bilateral_grid_forward(rgb, grid));
        }
    }
}

impl<B: FusionBackend + BilateralGridOps> BilateralGridOps for Fusion<B> {
    fn bilateral_grid_forward(rgb: FloatTensor<Self>, grid: FloatTensor<Self>) -> FloatTensor<Self> {
        let client = rgb.client.clone();
        let streams = OperationStreams::with_inputs([&rgb, &grid]);
        let out = fusion_output_like(&rgb);
        let desc = CustomOpIr::new(
            "ember_bilateral_grid",
            &[rgb.into_ir(), grid.into_ir()],
            &[out],
        );
        let op = SliceOp::<B> {
            desc: desc.clone(),
            backward: false,
            _backend: PhantomData,
        };
        let [out] = client
            .register(streams, OperationIr::Custom(desc), op)
            .try_into()
            .expect("one output");
        out
    }

    fn bilateral_grid_backward(
        rgb: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> BilateralGridGrads<Self> {
        let client = rgb.client.clone();
        let streams = OperationStreams::with_inputs([&rgb, &grid, &grad]);
        let outputs = [fusion_output_like(&rgb), fusion_output_like(&grid)];
        let desc = CustomOpIr::new(
            "ember_bilateral_grid_backward",
            &[rgb.into_ir(), grid.into_ir(), grad.into_ir()],
            &outputs,
        );
        let op = SliceOp::<B> {
            desc: desc.clone(),
            backward: true,
            _backend: PhantomData,
        };
        let [rgb, grid] = client
            .register(streams, OperationIr::Custom(desc), op)
            .try_into()
            .expect("two outputs");
        BilateralGridGrads { rgb, grid }
    }
}
