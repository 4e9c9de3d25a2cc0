//! The bilateral grid on the ndarray backend: the rayon kernels of [`cpu`](super::cpu) on host
//! buffers, in `f64` when the tensors are `f64` and in `f32` otherwise.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, TensorMetadata};

use super::{BilateralGridGrads, BilateralGridOps, cpu};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice};
use crate::real::Real;

fn layout<B: NdArrayBackend>(rgb: &FloatTensor<B>, grid: &FloatTensor<B>) -> cpu::Layout {
    let [h, w, _] = rgb.shape().dims::<3>();
    let [_, levels, gh, gw] = grid.shape().dims::<4>();
    cpu::Layout {
        cells: [levels, gh, gw],
        image: [h, w],
    }
}

fn forward_in<T: Real + Element, B: NdArrayBackend>(
    rgb: FloatTensor<B>,
    grid: FloatTensor<B>,
) -> FloatTensor<B> {
    let layout = layout::<B>(&rgb, &grid);
    let shape = rgb.shape();
    let colours = host_slice::<T, B>(&rgb);
    let mut out = vec![T::ZERO; colours.len()];
    cpu::slice(&colours, &host_slice::<T, B>(&grid), layout, &mut out);
    float_tensor::<T, B>(out, shape)
}

fn backward_in<T: Real + Element, B: NdArrayBackend>(
    rgb: FloatTensor<B>,
    grid: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> BilateralGridGrads<B> {
    let layout = layout::<B>(&rgb, &grid);
    let (rgb_shape, grid_shape) = (rgb.shape(), grid.shape());
    let colours = host_slice::<T, B>(&rgb);
    let cells = host_slice::<T, B>(&grid);
    let mut grad_rgb = vec![T::ZERO; colours.len()];
    let mut grad_grid = vec![T::ZERO; cells.len()];
    cpu::slice_backward(
        &colours,
        &cells,
        &host_slice::<T, B>(&grad),
        layout,
        &mut grad_rgb,
        &mut grad_grid,
    );
    BilateralGridGrads {
        rgb: float_tensor::<T, B>(grad_rgb, rgb_shape),
        grid: float_tensor::<T, B>(grad_grid, grid_shape),
    }
}

impl<B: NdArrayBackend> BilateralGridOps for B {
    fn bilateral_grid_forward(rgb: FloatTensor<Self>, grid: FloatTensor<Self>) -> FloatTensor<Self> {
        if rgb.dtype() == DType::F64 {
            forward_in::<f64, B>(rgb, grid)
        } else {
            forward_in::<f32, B>(rgb, grid)
        }
    }

    fn bilateral_grid_backward(
        rgb: FloatTensor<Self>,
        grid: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> BilateralGridGrads<Self> {
        if rgb.dtype() == DType::F64 {
            backward_in::<f64, B>(rgb, grid, grad)
        } else {
            backward_in::<f32, B>(rgb, grid, grad)
        }
    }
}
