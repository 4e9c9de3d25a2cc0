//! Moving a whole field: [`GaussianField::transformed`] and its batched form, and the camera
//! that sees a transformed field as the original camera saw the original.

use burn::tensor::Tensor;
use ember_kernels::transform::{Similarity, TransformError, transform_gaussians};

use crate::{Camera, GaussianField, SplatBackend};

impl<B: SplatBackend> GaussianField<B> {
    /// The field moved by `similarity`: means, rotations, log-scales and SH bands 1-3 (see
    /// [`ember_kernels::transform`]); opacities, DC colours and features are shared. One fused
    /// kernel; the result is a new, untracked field (not differentiable with respect to `self`).
    pub fn transformed(&self, similarity: &Similarity) -> Result<Self, TransformError> {
        let mut frames = self.transformed_batch(std::slice::from_ref(similarity))?;
        Ok(frames.remove(0))
    }

    /// One moved copy of the field per entry of `similarities` (animation frames, an orbit),
    /// from a single kernel launch over all frames.
    pub fn transformed_batch(
        &self,
        similarities: &[Similarity],
    ) -> Result<Vec<Self>, TransformError> {
        let out = transform_gaussians(
            self.means.val(),
            self.quats.val(),
            self.log_scales.val(),
            self.sh_rest.val(),
            similarities,
        )?;
        let [frames, n, _] = out.means.dims();
        let k = self.sh_rest.dims()[1];
        let frame = |t: &Tensor<B, 3>, f: usize, width: usize| -> Tensor<B, 2> {
            t.clone()
                .slice([f..f + 1, 0..n, 0..width])
                .reshape([n, width])
        };
        (0..frames)
            .map(|f| {
                // Zero-size slices trip the cube backends: without SH bands the empty
                // `[N, 0, 3]` is shared.
                let sh_rest: Tensor<B, 3> = if k == 0 {
                    self.sh_rest.val()
                } else {
                    out.sh_rest
                        .clone()
                        .slice([f..f + 1, 0..n, 0..k, 0..3])
                        .reshape([n, k, 3])
                };
                GaussianField::from_tensors(
                    frame(&out.means, f, 3),
                    frame(&out.quats, f, 4),
                    frame(&out.log_scales, f, 3),
                    self.opacity_logits.val(),
                    self.sh_dc.val(),
                    sh_rest,
                    self.features.as_ref().map(|p| p.val()),
                )
                .map_err(|e| TransformError::Shape(e.to_string()))
            })
            .collect()
    }
}

/// The camera that sees the field moved by `similarity` exactly as `camera` sees the original:
/// rotation `W R^T`, translation `s t - W R^T o` (`x' = s R x + o`), so camera-space points are
/// scaled by `s` and images (colour, alpha) are unchanged; depths are multiplied by `s`.
pub fn transform_camera(camera: &Camera, similarity: &Similarity) -> Camera {
    let w = camera.rotation;
    let r = similarity.rotation_matrix();
    // W R^T, row-major.
    let rotation: [f64; 9] = std::array::from_fn(|k| {
        let (i, j) = (k / 3, k % 3);
        (0..3).map(|m| w[3 * i + m] * r[3 * j + m]).sum()
    });
    let o = similarity.offset();
    let translation = std::array::from_fn(|i| {
        similarity.scale * camera.translation[i]
            - (0..3).map(|j| rotation[3 * i + j] * o[j]).sum::<f64>()
    });
    Camera {
        rotation,
        translation,
        ..*camera
    }
}
