//! `SplatBackend` for `Fusion<B>` (burn's default `Wgpu` and `Cuda`): every op is recorded as
//! a custom fusion operation that runs `B`'s implementation.

use crate::field::{FieldGrads, FieldInputs, FieldOptions};
use crate::project::{
    CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::{SplatBackend, field, project};
use burn::tensor::ops::FloatTensor;
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
}
