//! Between splat files and fields: [`Splats`] (host vectors, as `ember-data` reads and writes
//! every splat format) to a [`GaussianField`] on a device and back. This is the one bridge
//! between the two crates (`data` knows the formats, `field` the tensors); training, the
//! viewer and the splat commands load and save through it, and the facade re-exports it as
//! `ember::splats`.

use std::path::Path;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use ember_data::{Splats, write_splats};

use crate::gaussian_field::GaussianField;
use crate::{ModelError, to_host};

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

/// The parameters of `field` as host vectors (read back from the device, as `f32`); its
/// features, if any, are not part of a splat file and are dropped.
pub fn splats_from_field<B: Backend>(field: &GaussianField<B>) -> Result<Splats, ModelError> {
    fn rows<const W: usize>(flat: Vec<f32>) -> Vec<[f32; W]> {
        flat.chunks_exact(W)
            .map(|c| std::array::from_fn(|i| c[i]))
            .collect()
    }
    Ok(Splats {
        means: rows(to_host(field.means.val(), "means")?),
        quats: rows(to_host(field.quats.val(), "quats")?),
        log_scales: rows(to_host(field.log_scales.val(), "log_scales")?),
        opacity_logits: to_host(field.opacity_logits.val(), "opacity_logits")?,
        sh_dc: rows(to_host(field.sh_dc.val(), "sh_dc")?),
        sh_rest: to_host(field.sh_rest.val(), "sh_rest")?,
        sh_degree: field.sh_degree(),
    })
}

/// Writes `field` as a splat file at `path` in the format its extension names (a `.ply` is the
/// standard 3DGS PLY: see [`ember_data::write_splats`]), atomically.
pub fn write_field(
    field: &GaussianField<impl Backend>,
    path: &Path,
) -> Result<(), WriteFieldError> {
    Ok(write_splats(path, &splats_from_field(field)?)?)
}

/// Why [`write_field`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum WriteFieldError {
    /// The parameters could not be read back.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The file could not be written.
    #[error(transparent)]
    File(#[from] ember_data::DataError),
}

#[cfg(test)]
mod tests {
    use super::*;

    type B = ember_kernels::backend::Cpu;

    #[test]
    fn ply_export_has_the_3dgs_layout_and_reads_back() {
        let device = Default::default();
        let n = 2;
        let k = 3; // degree 1
        let rest: Vec<f32> = (0..n * k * 3).map(|v| v as f32).collect();
        let field = GaussianField::<B>::from_tensors(
            Tensor::from_data(
                TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]),
                &device,
            ),
            Tensor::from_data(
                TensorData::new(vec![1.0f32, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5], [2, 4]),
                &device,
            ),
            Tensor::full([2, 3], -2.0, &device),
            Tensor::from_data(TensorData::new(vec![0.25f32, -0.25], [2]), &device),
            Tensor::full([2, 1, 3], 0.1, &device),
            Tensor::from_data(TensorData::new(rest, [n, k, 3]), &device),
            None,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("ember-splat-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("field.ply");
        write_field(&field, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let end = text.find("end_header\n").unwrap() + "end_header\n".len();
        assert!(text[..end].contains("element vertex 2\n"));
        assert!(text[..end].contains("property float f_rest_8\n"));
        assert!(!text[..end].contains("f_rest_9"));
        let floats: Vec<f32> = bytes[end..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let stride = 6 + 3 + 9 + 1 + 3 + 4;
        assert_eq!(floats.len(), 2 * stride);
        let second = &floats[stride..];
        assert_eq!(&second[0..3], &[4.0, 5.0, 6.0]);
        // Gaussian 1's red coefficients are sh_rest[1, j, 0] = (3 + j) * 3.
        assert_eq!(&second[9..12], &[9.0, 12.0, 15.0]);
        // ... then green: (3 + j) * 3 + 1.
        assert_eq!(&second[12..15], &[10.0, 13.0, 16.0]);
        assert_eq!(second[18], -0.25);
        assert_eq!(&second[19..22], &[-2.0, -2.0, -2.0]);
        assert_eq!(&second[22..26], &[0.5, 0.5, 0.5, 0.5]);
        // Back through the reader and the bridge: the same parameters.
        let splats = ember_data::read_splats(&path).unwrap();
        assert_eq!(splats, splats_from_field(&field).unwrap());
        let back = field_from_splats::<B>(&splats, &device).unwrap();
        assert_eq!(splats_from_field(&back).unwrap(), splats);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
