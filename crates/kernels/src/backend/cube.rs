//! `SplatBackend` for the CubeCL backend, generic over its runtime (wgpu and cuda).

use crate::field::{FieldGrads, FieldInputs, FieldOptions};
use crate::loss::{LossOptions, LossPrimitives};
use crate::project::{
    CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::raster::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};
use crate::transform::{Similarity, TransformInputs, TransformPrimitives};
use crate::{SplatBackend, field, loss, project, raster, transform};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> SplatBackend
    for CubeBackend<R, F, I, BT>
{
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        field::cube::forward(inputs, options)
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        field::cube::backward(inputs, grad_values, options, points_grad)
    }

    fn project_forward(
        inputs: ProjectInputs<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        project::cube::forward(inputs, camera, options)
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        project::cube::backward(inputs, grad_packed, camera, options)
    }

    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        _screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        raster::cube::forward(packed, extents, setup)
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        raster::cube::backward(packed, state, grad_image, setup)
    }

    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        transform::cube::forward(inputs, similarities)
    }

    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        with_grad: bool,
    ) -> LossPrimitives<Self> {
        loss::cube::forward(rendered, target, options, with_grad)
    }
}
