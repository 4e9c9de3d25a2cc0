//! Between splat files and fields: a [`Splats`] (host vectors, as `ember-data` reads and
//! writes them) to a [`GaussianField`] on a device and back. The two crates do not know each
//! other (`data` knows files, `field` knows tensors); the facade joins them.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_data::Splats;
use ember_field::{GaussianField, ModelError};

/// A field holding `splats` on `device` (no features). The parameters are copied as they are:
/// quaternions stay unnormalised, opacities stay logits, scales stay logs.
pub fn field_from_splats<B: Backend>(
    splats: &Splats,
    device: &B::Device,
) -> Result<GaussianField<B>, ModelError> {
    let n = splats.len();
    let k = splats.sh_rest_coefficients();
    if splats.sh_rest.len() != n * k * 3 {
        return Err(ModelError::Invalid(format!(
            "sh_rest holds {} values, expected {n} x {k} x 3",
            splats.sh_rest.len()
        )));
    }
    // Explicit dtype: Burn's default float dtype is a per-device setting that an `f64`
    // backend on the same device changes.
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    let on = (device, dtype);
    let flat2 = |values: Vec<f32>, width: usize| {
        Tensor::<B, 2>::from_data(TensorData::new(values, [n, width]), on)
    };
    GaussianField::from_tensors(
        flat2(splats.means.as_flattened().to_vec(), 3),
        flat2(splats.quats.as_flattened().to_vec(), 4),
        flat2(splats.log_scales.as_flattened().to_vec(), 3),
        Tensor::from_data(TensorData::new(splats.opacity_logits.clone(), [n]), on),
        Tensor::from_data(
            TensorData::new(splats.sh_dc.as_flattened().to_vec(), [n, 1, 3]),
            on,
        ),
        Tensor::from_data(TensorData::new(splats.sh_rest.clone(), [n, k, 3]), on),
        None,
    )
}

/// The parameters of `field` as host vectors (read back from the device, as `f32`).
pub fn splats_from_field<B: Backend>(field: &GaussianField<B>) -> Splats {
    fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data()
            .convert::<f32>()
            .into_vec()
            .expect("converted to f32")
    }
    fn rows<const W: usize>(flat: Vec<f32>) -> Vec<[f32; W]> {
        flat.chunks_exact(W)
            .map(|c| std::array::from_fn(|i| c[i]))
            .collect()
    }
    Splats {
        means: rows(host(field.means.val())),
        quats: rows(host(field.quats.val())),
        log_scales: rows(host(field.log_scales.val())),
        opacity_logits: host(field.opacity_logits.val()),
        sh_dc: rows(host(field.sh_dc.val())),
        sh_rest: host(field.sh_rest.val()),
        sh_degree: field.sh_degree(),
    }
}
