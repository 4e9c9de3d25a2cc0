//! Coarse to fine ([`ResolutionConfig`](crate::config::ResolutionConfig)): a training photo
//! and its camera shrunk by an integer factor `k`.
//!
//! Pixel `(i, j)` of the shrunk photo is the mean of the `k x k` block of pixels
//! `k i .. k i + k` (rows) by `k j .. k j + k` (columns); the rows and columns past the last
//! whole block are dropped (`H / k` by `W / k` pixels, rounded down). The block's centre in
//! the photo's pixels is `k (j + 1/2)`, so the camera that draws the shrunk pixel grid onto
//! the same rays divides the focal lengths and the principal point by `k` and keeps its pose:
//! a splat lands on the same block at either size. The mean of a block is what the render of
//! a smooth scene at the coarse size converges to, and the box is exact for any `k` (no
//! kernel to truncate), so a coarse step compares like with like.

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;
use ember_field::Camera;

/// `image` `[H, W, C]` shrunk by `k` (see the module docs): `[H / k, W / k, C]`. `k = 1`
/// returns it as it is.
pub fn shrink_image<B: Backend>(image: Tensor<B, 3>, k: usize) -> Tensor<B, 3> {
    if k <= 1 {
        return image;
    }
    let [h, w, c] = image.dims();
    let (rows, cols) = (h / k, w / k);
    image
        .slice([0..rows * k, 0..cols * k, 0..c])
        .reshape([rows, k, cols, k, c])
        .mean_dim(3)
        .mean_dim(1)
        .reshape([rows, cols, c])
}

/// `camera` for its photo shrunk by `k` ([`shrink_image`]): the same pose, focal lengths and
/// principal point divided by `k`, the size divided by `k` and rounded down.
pub fn shrink_camera(camera: Camera, k: u32) -> Camera {
    if k <= 1 {
        return camera;
    }
    let f = f64::from(k);
    Camera {
        fx: camera.fx / f,
        fy: camera.fy / f,
        cx: camera.cx / f,
        cy: camera.cy / f,
        width: camera.width / k,
        height: camera.height / k,
        ..camera
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;

    #[test]
    fn a_block_becomes_its_mean_and_the_camera_keeps_its_rays() {
        let device = Default::default();
        // 5x7 pixels of 2 channels, shrunk by 2: 2x3, the last row and column dropped.
        let values: Vec<f32> = (0..5 * 7 * 2).map(|v| v as f32).collect();
        let image = Tensor::<NdArray, 3>::from_data(TensorData::new(values, [5, 7, 2]), &device);
        let shrunk = shrink_image(image, 2);
        assert_eq!(shrunk.dims(), [2, 3, 2]);
        let at = |r: usize, c: usize, ch: usize| ((r * 7 + c) * 2 + ch) as f32;
        let got: Vec<f32> = shrunk.into_data().to_vec().unwrap();
        for (i, j, ch) in [(0, 0, 0), (1, 2, 1), (0, 1, 1)] {
            let block = [(0, 0), (0, 1), (1, 0), (1, 1)]
                .iter()
                .map(|(di, dj)| at(2 * i + di, 2 * j + dj, ch))
                .sum::<f32>()
                / 4.0;
            assert_eq!(
                got[(i * 3 + j) * 2 + ch],
                block,
                "pixel ({i}, {j}) channel {ch}"
            );
        }

        // A point that the camera puts at the centre of pixel (2, 1) of a 4x4 block grid lands
        // at the centre of shrunk pixel (2, 1) of the shrunk camera.
        let camera = Camera {
            rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            translation: [0.1, -0.2, 3.0],
            fx: 400.0,
            fy: 380.0,
            cx: 201.0,
            cy: 149.0,
            width: 402,
            height: 301,
        };
        let small = shrink_camera(camera, 4);
        assert_eq!((small.width, small.height), (100, 75));
        assert_eq!(small.translation, camera.translation);
        let project = |c: &Camera, p: [f64; 3]| {
            let z = p[2] + c.translation[2];
            (
                c.fx * (p[0] + c.translation[0]) / z + c.cx,
                c.fy * (p[1] + c.translation[1]) / z + c.cy,
            )
        };
        let p = [0.37, -0.52, 1.4];
        let (u, v) = project(&camera, p);
        let (us, vs) = project(&small, p);
        assert!((us - u / 4.0).abs() < 1e-12 && (vs - v / 4.0).abs() < 1e-12);
        assert!(shrink_camera(camera, 1) == camera);
    }
}
