//! `SplatBackend` for the ndarray backend (the rayon CPU kernels).

use burn::backend::NdArray;
use burn::backend::ndarray::{
    FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray,
};
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::field::{FieldGrads, FieldInputs, FieldOptions};
use crate::loss::{LossOptions, LossPrimitives};
use crate::optim::{AdamPrimitives, AdamStep};
use crate::project::{
    CameraParams, ProjectGrads, ProjectInputs, ProjectOptions, ProjectPrimitives,
};
use crate::raster::{RasterGradPrimitives, RasterPrimitives, RasterSetup, RasterState};
use crate::transform::{Similarity, TransformInputs, TransformPrimitives};
use crate::{SplatBackend, field, loss, optim, project, raster, transform};

impl<E, I, Q> SplatBackend for NdArray<E, I, Q>
where
    E: FloatNdArrayElement,
    I: IntNdArrayElement,
    Q: QuantElement,
    NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
{
    fn field_forward(inputs: FieldInputs<Self>, options: FieldOptions) -> FloatTensor<Self> {
        field::ndarray::forward(inputs, options)
    }

    fn field_backward(
        inputs: FieldInputs<Self>,
        grad_values: FloatTensor<Self>,
        options: FieldOptions,
        points_grad: bool,
    ) -> FieldGrads<Self> {
        field::ndarray::backward(inputs, grad_values, options, points_grad)
    }

    fn project_forward(
        inputs: ProjectInputs<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectPrimitives<Self> {
        project::ndarray::forward(inputs, camera, options)
    }

    fn project_backward(
        inputs: ProjectInputs<Self>,
        grad_packed: FloatTensor<Self>,
        camera: CameraParams,
        options: ProjectOptions,
    ) -> ProjectGrads<Self> {
        project::ndarray::backward(inputs, grad_packed, camera, options)
    }

    fn rasterize_forward(
        packed: FloatTensor<Self>,
        extents: IntTensor<Self>,
        _screen_grads: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterPrimitives<Self> {
        raster::ndarray::forward(packed, extents, setup)
    }

    fn rasterize_backward(
        packed: FloatTensor<Self>,
        state: RasterState<Self>,
        grad_image: FloatTensor<Self>,
        setup: RasterSetup,
    ) -> RasterGradPrimitives<Self> {
        raster::ndarray::backward(packed, state, grad_image, setup)
    }

    fn transform_forward(
        inputs: TransformInputs<Self>,
        similarities: &[Similarity],
    ) -> TransformPrimitives<Self> {
        transform::ndarray::forward(inputs, similarities)
    }

    fn photometric_loss_forward(
        rendered: FloatTensor<Self>,
        target: FloatTensor<Self>,
        options: LossOptions,
        with_grad: bool,
    ) -> LossPrimitives<Self> {
        loss::ndarray::forward(rendered, target, options, with_grad)
    }

    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        optim::ndarray::adam_step(state, grad, step)
    }
}
