//! `SplatBackend` for `Autodiff<B>`: hand-written backward passes over `B`'s ops.

use crate::field::{FieldGrads, FieldInputs, FieldOptions};
use crate::loss::{LossOptions, LossPrimitives};
use crate::project::{
    CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::raster::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};
use crate::transform::{Similarity, TransformInputs, TransformPrimitives};
use crate::{SplatBackend, field, loss, project, raster, transform};
use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::ops::{FloatTensor, IntTensor};

impl<B: SplatBackend, C: CheckpointStrategy> SplatBackend for Autodiff<B, C> {
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        field::autodiff::forward(inputs, options)
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        field::autodiff::backward(inputs, grad_values, options, points_grad)
    }

    fn project_forward(
        inputs: ProjectInputs<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        project::autodiff::forward(inputs, camera, options)
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        project::autodiff::backward(inputs, grad_packed, camera, options)
    }

    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        raster::autodiff::forward(packed, extents, screen_grads, setup)
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        raster::autodiff::backward(packed, state, grad_image, setup)
    }

    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        transform::autodiff::forward(inputs, similarities)
    }

    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        with_grad: bool,
    ) -> LossPrimitives<Self> {
        loss::autodiff::forward(rendered, target, options, with_grad)
    }
}
