//! LPIPS (Zhang et al., CVPR 2018, "The Unreasonable Effectiveness of Deep Features as a
//! Perceptual Metric"), version 0.1 with AlexNet: the perceptual distance Gaussian-splatting
//! papers report beside PSNR and SSIM. Lower is better; 0 for identical images.
//!
//! For two RGB images `a`, `b` in `[0, 1]`:
//! 1. each goes to `[-1, 1]` (`2x - 1`), then `(x - shift) / scale` per channel, with
//!    `shift = (-0.030, -0.088, -0.188)` and `scale = (0.458, 0.448, 0.450)`;
//! 2. AlexNet's five convolution stages run on it, each conv -> ReLU (conv1 11x11 stride 4
//!    padding 2, conv2 5x5 padding 2, conv3-5 3x3 padding 1), with a 3x3 stride-2 max pool before
//!    stages 2 and 3; the five ReLU outputs `f_k` (`C_k` channels) are the taps;
//! 3. per tap, the features are unit-normalised along the channels,
//!    `u = f / (sqrt(sum_c f_c^2) + 1e-10)`, and
//!    `d_k = mean over (y, x) of sum_c w_kc (u_a - u_b)_c^2` with the learned non-negative
//!    channel weights `w_k` (the "lin" layers);
//! 4. `LPIPS = sum_k d_k`.
//!
//! The weights come from a safetensors file in PyTorch's layout and names (AlexNet's
//! `features.{0,3,6,8,10}.{weight,bias}`, the calibration layers' `lin{0..4}.model.1.weight`),
//! which `scripts/lpips-weights.py` makes from the public torchvision AlexNet and the `lpips`
//! package's v0.1 weights. Ember ships that file (`crates/train/assets/lpips/`, BSD licences
//! beside it) inside this crate: [`Lpips::bundled`] needs no file at run time, and every
//! evaluation measures LPIPS unless another file is named. [`Lpips`] is a Burn module: it runs
//! on the backend of the images.

use std::path::{Path, PathBuf};

use burn::module::{Module, Param};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::module::{conv2d, max_pool2d};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{ElementConversion, Tensor, TensorData};
use safetensors::tensor::Dtype;

/// AlexNet's convolutions as LPIPS taps them: the name in the weights file, input and output
/// channels, kernel side, stride and padding.
const CONVS: [(&str, usize, usize, usize, usize, usize); 5] = [
    ("features.0", 3, 64, 11, 4, 2),
    ("features.3", 64, 192, 5, 1, 2),
    ("features.6", 192, 384, 3, 1, 1),
    ("features.8", 384, 256, 3, 1, 1),
    ("features.10", 256, 256, 3, 1, 1),
];

/// The input normalisation's per-channel shift and scale (after mapping to `[-1, 1]`).
const SHIFT: [f32; 3] = [-0.030, -0.088, -0.188];
const SCALE: [f32; 3] = [0.458, 0.448, 0.450];

/// What keeps a zero feature vector from dividing by zero in the unit normalisation.
const NORM_EPSILON: f32 = 1e-10;

/// The environment variable that names the weights file where no flag or config does.
pub const WEIGHTS_ENV: &str = "EMBER_LPIPS_WEIGHTS";

/// The weights Ember ships (`crates/train/assets/lpips/alex.safetensors`, see its README).
const BUNDLED_WEIGHTS: &[u8] = include_bytes!("../assets/lpips/alex.safetensors");

/// The weights file to use: `configured` (a flag's or a config's), else the file
/// [`WEIGHTS_ENV`] names; `None` when neither says (the shipped weights are used then).
pub fn weights_path(configured: Option<&Path>) -> Option<PathBuf> {
    configured
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(WEIGHTS_ENV).map(PathBuf::from))
}

/// The network from the weights [`weights_path`] finds for `configured`, else the shipped ones
/// ([`Lpips::bundled`]), on `device`; the error is why LPIPS is off (a named file that does not
/// load), for the user to read.
pub fn load_configured<B: Backend>(
    configured: Option<&Path>,
    device: &B::Device,
) -> Result<Lpips<B>, String> {
    match weights_path(configured) {
        Some(path) => Lpips::load(&path, device).map_err(|e| e.to_string()),
        None => Ok(Lpips::bundled(device)),
    }
}

/// The smallest image side AlexNet's stages take: the last max pool needs a 3x3 input.
pub const MIN_SIDE: usize = 32;

/// What went wrong computing LPIPS.
#[derive(Debug, thiserror::Error)]
pub enum LpipsError {
    /// The weights file could not be read or does not hold what LPIPS needs.
    #[error("LPIPS weights {}: {problem}", path.display())]
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor.
        problem: String,
    },
    /// The two batches differ in shape or are not RGB.
    #[error(
        "LPIPS: the images are {a:?} and {b:?} ([N, 3, H, W]): they must have one shape, with 3 channels"
    )]
    Shapes {
        /// The first batch's shape.
        a: [usize; 4],
        /// The second batch's shape.
        b: [usize; 4],
    },
    /// An image smaller than the network takes.
    #[error("LPIPS: a {height}x{width} image is too small: AlexNet needs {MIN_SIDE} pixels a side")]
    TooSmall {
        /// Height, pixels.
        height: usize,
        /// Width, pixels.
        width: usize,
    },
}

/// The LPIPS network (AlexNet, v0.1) with its weights.
#[derive(Module, Debug)]
pub struct Lpips<B: Backend> {
    /// `[C_out, C_in, k, k]` per stage.
    weights: Vec<Param<Tensor<B, 4>>>,
    /// `[C_out]` per stage.
    biases: Vec<Param<Tensor<B, 1>>>,
    /// `[C_out]` per stage: the calibration layers' channel weights.
    lins: Vec<Param<Tensor<B, 1>>>,
}

impl<B: Backend> Lpips<B> {
    /// Reads the weights from the safetensors file at `path` (see the module's doc) onto
    /// `device`, checking every tensor's name, type (F32) and shape.
    pub fn load(path: &Path, device: &B::Device) -> Result<Self, LpipsError> {
        let bad = |problem: String| LpipsError::Weights {
            path: path.to_path_buf(),
            problem,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot be read ({e})")))?;
        Self::from_bytes(&bytes, device).map_err(bad)
    }

    /// The network with the weights Ember ships (see the module's doc), on `device`.
    pub fn bundled(device: &B::Device) -> Self {
        Self::from_bytes(BUNDLED_WEIGHTS, device)
            .expect("the shipped LPIPS weights are checked by the crate's tests")
    }

    /// The network from the bytes of a weights file; the error says what is wrong.
    fn from_bytes(bytes: &[u8], device: &B::Device) -> Result<Self, String> {
        let file = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| format!("not a safetensors file ({e})"))?;
        let read = |name: &str, shape: &[usize]| -> Result<TensorData, String> {
            let view = file
                .tensor(name)
                .map_err(|_| format!("no tensor `{name}`"))?;
            if view.dtype() != Dtype::F32 {
                return Err(format!("`{name}` is {:?}, not F32", view.dtype()));
            }
            if view.shape() != shape {
                return Err(format!(
                    "`{name}` has shape {:?}, not {shape:?}",
                    view.shape()
                ));
            }
            let values: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(at) = values.iter().position(|v| !v.is_finite()) {
                return Err(format!("`{name}` holds a non-finite value at {at}"));
            }
            Ok(TensorData::new(values, shape.to_vec()))
        };
        let mut weights = Vec::with_capacity(CONVS.len());
        let mut biases = Vec::with_capacity(CONVS.len());
        let mut lins = Vec::with_capacity(CONVS.len());
        for (stage, &(name, inputs, outputs, kernel, _, _)) in CONVS.iter().enumerate() {
            let weight = read(
                &format!("{name}.weight"),
                &[outputs, inputs, kernel, kernel],
            )?;
            let bias = read(&format!("{name}.bias"), &[outputs])?;
            let lin = read(&format!("lin{stage}.model.1.weight"), &[1, outputs, 1, 1])?;
            weights.push(Param::from_data(weight, device));
            biases.push(Param::from_data(bias, device));
            let lin = Tensor::<B, 4>::from_data(lin, device).reshape([outputs]);
            lins.push(Param::from_tensor(lin));
        }
        Ok(Lpips {
            weights,
            biases,
            lins,
        })
    }

    /// LPIPS of each pair of images of `a` and `b`, `[N, 3, H, W]` RGB in `[0, 1]` (values
    /// outside are used as they are): `[N]`.
    pub fn distance(&self, a: Tensor<B, 4>, b: Tensor<B, 4>) -> Result<Tensor<B, 1>, LpipsError> {
        let [n, channels, height, width] = a.dims();
        if a.dims() != b.dims() || channels != 3 {
            return Err(LpipsError::Shapes {
                a: a.dims(),
                b: b.dims(),
            });
        }
        if height.min(width) < MIN_SIDE {
            return Err(LpipsError::TooSmall { height, width });
        }
        let device = a.device();
        let per_channel = |values: [f32; 3]| {
            Tensor::<B, 1>::from_data(TensorData::new(values.to_vec(), [3]), &device)
                .reshape([1, 3, 1, 1])
        };
        // Both batches through the network at once.
        let mut x =
            (Tensor::cat(vec![a, b], 0) * 2.0 - 1.0 - per_channel(SHIFT)) / per_channel(SCALE);
        let mut total = Tensor::<B, 1>::zeros([n], &device);
        for (stage, &(_, _, outputs, _, stride, padding)) in CONVS.iter().enumerate() {
            if stage == 1 || stage == 2 {
                x = max_pool2d(x, [3, 3], [2, 2], [0, 0], [1, 1], false);
            }
            let options = ConvOptions::new([stride; 2], [padding; 2], [1, 1], 1);
            x = relu(conv2d(
                x,
                self.weights[stage].val(),
                Some(self.biases[stage].val()),
                options,
            ));
            let norm = x.clone().powi_scalar(2).sum_dim(1).sqrt() + NORM_EPSILON;
            let unit = x.clone() / norm;
            let [_, _, h, w] = unit.dims();
            let difference = (unit.clone().slice(0..n) - unit.slice(n..2 * n)).powi_scalar(2);
            let weighted =
                (difference * self.lins[stage].val().reshape([1, outputs, 1, 1])).sum_dim(1);
            total = total + weighted.reshape([n, h * w]).mean_dim(1).reshape([n]);
        }
        Ok(total)
    }

    /// LPIPS of two images `[H, W, 3]` (the renderer's layout), RGB in `[0, 1]`.
    pub fn image_distance(&self, a: Tensor<B, 3>, b: Tensor<B, 3>) -> Result<f32, LpipsError> {
        let batch = |image: Tensor<B, 3>| image.permute([2, 0, 1]).unsqueeze::<4>();
        let [height, width, channels] = a.dims();
        if a.dims() != b.dims() || channels != 3 {
            let [h2, w2, c2] = b.dims();
            return Err(LpipsError::Shapes {
                a: [1, channels, height, width],
                b: [1, c2, h2, w2],
            });
        }
        Ok(self
            .distance(batch(a), batch(b))?
            .into_scalar()
            .elem::<f32>())
    }
}
