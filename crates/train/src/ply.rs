//! Export of a field as a standard 3DGS PLY (the layout the reference implementation and the
//! common viewers read): binary little-endian, one `vertex` element with float properties
//! `x y z nx ny nz f_dc_0..2 f_rest_0..(3K-1) opacity scale_0..2 rot_0..3`. Opacity is the
//! logit, scales are logs, the quaternion is `(w, x, y, z)` as stored, normals are zero, and
//! `f_rest` is channel-major (all K red coefficients, then green, then blue).

use std::path::Path;

use burn::tensor::backend::Backend;
use ember_field::GaussianField;

use crate::error::{TrainError, write_atomically};
use crate::splats::to_host;

/// The PLY file's bytes for `field`.
pub fn ply_bytes<B: Backend>(field: &GaussianField<B>) -> Result<Vec<u8>, TrainError> {
    let n = field.num_gaussians();
    let k = field.sh_rest.dims()[1];
    let means = to_host(field.means.val(), "means")?;
    let quats = to_host(field.quats.val(), "quats")?;
    let log_scales = to_host(field.log_scales.val(), "log_scales")?;
    let opacity = to_host(field.opacity_logits.val(), "opacity_logits")?;
    let dc = to_host(field.sh_dc.val(), "sh_dc")?;
    let rest = to_host(field.sh_rest.val(), "sh_rest")?;

    let mut header = String::from("ply\nformat binary_little_endian 1.0\n");
    header += "comment written by ember-train\n";
    header += &format!("element vertex {n}\n");
    let mut names: Vec<String> = ["x", "y", "z", "nx", "ny", "nz"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.extend((0..3).map(|i| format!("f_dc_{i}")));
    names.extend((0..3 * k).map(|i| format!("f_rest_{i}")));
    names.push("opacity".to_string());
    names.extend((0..3).map(|i| format!("scale_{i}")));
    names.extend((0..4).map(|i| format!("rot_{i}")));
    for name in &names {
        header += &format!("property float {name}\n");
    }
    header += "end_header\n";

    let mut bytes = header.into_bytes();
    bytes.reserve(n * names.len() * 4);
    let mut push = |v: f32| bytes.extend_from_slice(&v.to_le_bytes());
    for i in 0..n {
        (0..3).for_each(|a| push(means[3 * i + a]));
        (0..3).for_each(|_| push(0.0));
        (0..3).for_each(|c| push(dc[3 * i + c]));
        // sh_rest is [N, K, 3]; the file wants channel-major [3, K] per Gaussian.
        for c in 0..3 {
            for j in 0..k {
                push(rest[(i * k + j) * 3 + c]);
            }
        }
        push(opacity[i]);
        (0..3).for_each(|a| push(log_scales[3 * i + a]));
        (0..4).for_each(|a| push(quats[4 * i + a]));
    }
    Ok(bytes)
}

/// Writes `field` as a 3DGS PLY at `path` (atomically).
pub fn write_ply<B: Backend>(field: &GaussianField<B>, path: &Path) -> Result<(), TrainError> {
    write_atomically(path, &ply_bytes(field)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::{Tensor, TensorData};

    type B = NdArray<f32>;

    #[test]
    fn layout_matches_the_3dgs_convention() {
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
        let bytes = ply_bytes(&field).unwrap();
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
    }
}
