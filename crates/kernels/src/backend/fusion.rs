//! `SplatBackend` for `Fusion<B>` (burn's default `Wgpu` and `Cuda`): every op is recorded as
//! a custom fusion operation that runs `B`'s implementation.

use crate::field::{FieldGrads, FieldInputs, FieldOptions};
use crate::loss::{LossOptions, LossPrimitives};
use crate::project::{
    CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::raster::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};
use crate::transform::{Similarity, TransformInputs, TransformPrimitives};
use crate::{SplatBackend, field, loss, project, raster, transform};
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn_fusion::{Fusion, FusionBackend};

impl<B: FusionBackend + SplatBackend> SplatBackend for Fusion<B> {
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        field::fusion::forward(inputs, options)
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        field::fusion::backward(inputs, grad_values, options, points_grad)
    }

    fn project_forward(
        inputs: ProjectInputs<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        project::fusion::forward(inputs, camera, options)
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        project::fusion::backward(inputs, grad_packed, camera, options)
    }

    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        raster::fusion::forward(packed, extents, screen_grads, setup)
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        raster::fusion::backward(packed, state, grad_image, setup)
    }

    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        transform::fusion::forward(inputs, similarities)
    }

    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        with_grad: bool,
    ) -> LossPrimitives<Self> {
        loss::fusion::forward(rendered, target, options, with_grad)
    }
}
