//! The learnable Gaussian field: a Burn `Module` holding the raw parameters of `N` Gaussians.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, activation};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::init::knn_mean_distance;
use crate::sh;
use ember_kernels::{FieldError, FieldOptions, SplatBackend, field_query};

/// A set of anisotropic 3D Gaussians with learnable parameters (activations live in the ops).
///
/// | parameter        | shape       | meaning                                                |
/// |------------------|-------------|--------------------------------------------------------|
/// | `means`          | `[N, 3]`    | centres, world units                                   |
/// | `quats`          | `[N, 4]`    | rotations `(w, x, y, z)`, unnormalised                 |
/// | `log_scales`     | `[N, 3]`    | log standard deviations along the local axes           |
/// | `opacity_logits` | `[N]`       | opacity (and query weight) before the sigmoid          |
/// | `sh_dc`          | `[N, 1, 3]` | degree-0 SH colour coefficient                         |
/// | `sh_rest`        | `[N, K, 3]` | higher SH bands, `K = (d + 1)^2 - 1` (`K = 0` at `d = 0`) |
/// | `features`       | `[N, C]`    | optional per-Gaussian features for [`Self::query_features`] |
#[derive(Module, Debug)]
pub struct GaussianField<B: Backend> {
    /// `[N, 3]`
    pub means: Param<Tensor<B, 2>>,
    /// `[N, 4]`
    pub quats: Param<Tensor<B, 2>>,
    /// `[N, 3]`
    pub log_scales: Param<Tensor<B, 2>>,
    /// `[N]`
    pub opacity_logits: Param<Tensor<B, 1>>,
    /// `[N, 1, 3]`
    pub sh_dc: Param<Tensor<B, 3>>,
    /// `[N, K, 3]`
    pub sh_rest: Param<Tensor<B, 3>>,
    /// `[N, C]`, when the field carries features.
    pub features: Option<Param<Tensor<B, 2>>>,
}

/// How a new field is initialised.
#[derive(Config, Debug)]
pub struct GaussianFieldConfig {
    /// Spherical-harmonics degree (0 to 3).
    #[config(default = 0)]
    pub sh_degree: usize,
    /// Feature channels per Gaussian (`0`: no features).
    #[config(default = 0)]
    pub feature_channels: usize,
    /// Initial opacity (after the sigmoid), in `(0, 1)`.
    #[config(default = 0.1)]
    pub opacity: f64,
    /// Initial scale (standard deviation, world units). `None`: for [`GaussianField::from_points`]
    /// the mean distance to the 3 nearest neighbours, for [`GaussianField::random_in_box`] a
    /// tenth of the mean spacing of `N` points in the box.
    pub scale: Option<f64>,
    /// Seed of every random draw of the constructors.
    #[config(default = 0)]
    pub seed: u64,
}

/// Why a model operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The query itself was refused.
    #[error(transparent)]
    Query(#[from] FieldError),
    /// `query_features` on a field built without features.
    #[error(
        "this GaussianField has no per-Gaussian features (GaussianFieldConfig::feature_channels = 0)"
    )]
    NoFeatures,
    /// A parameter holds NaN or infinity.
    #[error(
        "GaussianField parameter `{parameter}` is not finite at Gaussian {index} (value {value})"
    )]
    NonFinite {
        /// The parameter's name.
        parameter: &'static str,
        /// The Gaussian's index.
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// Constructor inputs that cannot make a field.
    #[error("GaussianField: {0}")]
    Invalid(String),
    /// A tensor could not be read back from its device ([`to_host`]).
    #[error("reading {what} from the device: {message}")]
    Readback {
        /// Which tensor.
        what: &'static str,
        /// The device's reason.
        message: String,
    },
}

/// A tensor's values on the host, as `f32`; `what` names it in the error. A device that failed
/// (out of memory, lost) is an error, not a panic.
pub fn to_host<B: Backend, const D: usize>(
    tensor: Tensor<B, D>,
    what: &'static str,
) -> Result<Vec<f32>, ModelError> {
    let readback = |message: String| ModelError::Readback { what, message };
    tensor
        .try_into_data()
        .map_err(|e| readback(e.to_string()))?
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| readback(format!("{e:?}")))
}

impl<B: Backend> GaussianField<B> {
    /// A field from raw parameter tensors (shapes in the type docs; checked).
    pub fn from_tensors(
        means: Tensor<B, 2>,
        quats: Tensor<B, 2>,
        log_scales: Tensor<B, 2>,
        opacity_logits: Tensor<B, 1>,
        sh_dc: Tensor<B, 3>,
        sh_rest: Tensor<B, 3>,
        features: Option<Tensor<B, 2>>,
    ) -> Result<Self, ModelError> {
        let n = means.dims()[0];
        let check = |name: &str, ok: bool, dims: &[usize]| {
            if ok {
                Ok(())
            } else {
                Err(ModelError::Invalid(format!(
                    "`{name}` has shape {dims:?} (N = {n})"
                )))
            }
        };
        check("means", means.dims()[1] == 3, &means.dims())?;
        check("quats", quats.dims() == [n, 4], &quats.dims())?;
        check(
            "log_scales",
            log_scales.dims() == [n, 3],
            &log_scales.dims(),
        )?;
        check(
            "opacity_logits",
            opacity_logits.dims() == [n],
            &opacity_logits.dims(),
        )?;
        check("sh_dc", sh_dc.dims() == [n, 1, 3], &sh_dc.dims())?;
        let k = sh_rest.dims()[1];
        let degree_ok = (0..=3).any(|d| sh::num_coefficients(d) == k + 1);
        check(
            "sh_rest",
            sh_rest.dims() == [n, k, 3] && degree_ok,
            &sh_rest.dims(),
        )?;
        if let Some(f) = &features {
            check("features", f.dims()[0] == n && f.dims()[1] > 0, &f.dims())?;
        }
        Ok(GaussianField {
            means: Param::from_tensor(means),
            quats: Param::from_tensor(quats),
            log_scales: Param::from_tensor(log_scales),
            opacity_logits: Param::from_tensor(opacity_logits),
            sh_dc: Param::from_tensor(sh_dc),
            sh_rest: Param::from_tensor(sh_rest),
            features: features.map(Param::from_tensor),
        })
    }

    /// `n` Gaussians with centres uniform in the box `[lo, hi]`, random unit quaternions,
    /// isotropic scales, the configured opacity, grey colour and features uniform in `[0, 1)`.
    pub fn random_in_box(
        config: &GaussianFieldConfig,
        n: usize,
        lo: [f32; 3],
        hi: [f32; 3],
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        if (0..3).any(|a| !(lo[a].is_finite() && hi[a].is_finite() && lo[a] <= hi[a])) {
            return Err(ModelError::Invalid(format!(
                "box {lo:?}..{hi:?} is empty or not finite"
            )));
        }
        let mut rng = StdRng::seed_from_u64(config.seed);
        let means: Vec<f32> = (0..n)
            .flat_map(|_| {
                core::array::from_fn::<f32, 3, _>(|a| lo[a] + (hi[a] - lo[a]) * rng.random::<f32>())
            })
            .collect();
        let volume: f64 = (0..3).map(|a| f64::from(hi[a] - lo[a]).max(1e-9)).product();
        let scale = config
            .scale
            .unwrap_or_else(|| 0.1 * (volume / n.max(1) as f64).cbrt());
        let colours = vec![0.5f32; 3 * n];
        Self::build(
            config,
            means,
            vec![scale as f32; n],
            colours,
            true,
            &mut rng,
            device,
        )
    }

    /// One Gaussian per point (`points` `[M, 3]`, `colours` `[M, 3]` linear RGB in `[0, 1]`):
    /// colour to the SH DC term, isotropic scale from the mean distance to the 3 nearest
    /// neighbours (or the configured scale), identity rotation, the configured opacity.
    pub fn from_points(
        config: &GaussianFieldConfig,
        points: &[f32],
        colours: &[f32],
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        if !points.len().is_multiple_of(3) || colours.len() != points.len() {
            return Err(ModelError::Invalid(format!(
                "{} point values and {} colour values: expected [M, 3] and [M, 3]",
                points.len(),
                colours.len()
            )));
        }
        if let Some(i) = points.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::NonFinite {
                parameter: "points",
                index: i / 3,
                value: points[i],
            });
        }
        let scales = match config.scale {
            Some(s) => vec![s as f32; points.len() / 3],
            None => knn_mean_distance(points, 3)
                .into_iter()
                .map(|d| d.max(1e-7))
                .collect(),
        };
        let mut rng = StdRng::seed_from_u64(config.seed);
        Self::build(
            config,
            points.to_vec(),
            scales,
            colours.to_vec(),
            false,
            &mut rng,
            device,
        )
    }

    fn build(
        config: &GaussianFieldConfig,
        means: Vec<f32>,
        scales: Vec<f32>,
        colours: Vec<f32>,
        random_rotations: bool,
        rng: &mut StdRng,
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        if config.sh_degree > 3 {
            return Err(ModelError::Invalid(format!(
                "SH degree {} (0 to 3)",
                config.sh_degree
            )));
        }
        if !(config.opacity > 0.0 && config.opacity < 1.0) {
            return Err(ModelError::Invalid(format!(
                "opacity {} (must be in (0, 1))",
                config.opacity
            )));
        }
        let n = scales.len();
        let quats: Vec<f32> = if !random_rotations {
            [1.0, 0.0, 0.0, 0.0].repeat(n)
        } else {
            // Uniform random rotations: normalised 4D Gaussian samples (Box-Muller).
            (0..n)
                .flat_map(|_| {
                    let q: [f32; 4] = core::array::from_fn(|_| {
                        let (u, v) = (rng.random::<f32>().max(1e-12), rng.random::<f32>());
                        (-2.0 * u.ln()).sqrt() * (core::f32::consts::TAU * v).cos()
                    });
                    let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    q.map(|x| x / norm)
                })
                .collect()
        };
        let logit = (config.opacity / (1.0 - config.opacity)).ln() as f32;
        let k = sh::num_coefficients(config.sh_degree) - 1;
        let features = (config.feature_channels > 0).then(|| {
            let c = config.feature_channels;
            let f: Vec<f32> = (0..n * c).map(|_| rng.random::<f32>()).collect();
            Tensor::from_data(TensorData::new(f, [n, c]), device)
        });
        let dc: Vec<f32> = colours
            .iter()
            .map(|c| sh::rgb_to_dc(f64::from(*c)) as f32)
            .collect();
        Self::from_tensors(
            Tensor::from_data(TensorData::new(means, [n, 3]), device),
            Tensor::from_data(TensorData::new(quats, [n, 4]), device),
            Tensor::from_data(
                TensorData::new(
                    scales
                        .iter()
                        .flat_map(|s| [s.ln(); 3])
                        .collect::<Vec<f32>>(),
                    [n, 3],
                ),
                device,
            ),
            Tensor::full([n], logit, device),
            Tensor::from_data(TensorData::new(dc, [n, 1, 3]), device),
            Tensor::zeros([n, k, 3], device),
            features,
        )
    }

    /// Number of Gaussians `N`.
    pub fn num_gaussians(&self) -> usize {
        self.means.dims()[0]
    }

    /// Spherical-harmonics degree, from the shape of `sh_rest`.
    pub fn sh_degree(&self) -> usize {
        let k = self.sh_rest.dims()[1];
        (0..=3)
            .find(|d| sh::num_coefficients(*d) == k + 1)
            .unwrap_or(0)
    }

    /// Opacities after the sigmoid, `[N]`.
    pub fn opacities(&self) -> Tensor<B, 1> {
        activation::sigmoid(self.opacity_logits.val())
    }

    /// The Gaussians `indices` (`[M]`, any order, repeats allowed) as a new field: row `i` of
    /// every parameter is row `indices[i]` of this one's. The new parameters are fresh leaves.
    pub fn select(&self, indices: &Tensor<B, 1, Int>) -> Self {
        let m = indices.dims()[0];
        let rows = |t: Tensor<B, 3>| select_rows(t, indices, m);
        GaussianField {
            means: Param::from_tensor(select_rows(self.means.val(), indices, m)),
            quats: Param::from_tensor(select_rows(self.quats.val(), indices, m)),
            log_scales: Param::from_tensor(select_rows(self.log_scales.val(), indices, m)),
            opacity_logits: Param::from_tensor(select_rows(self.opacity_logits.val(), indices, m)),
            sh_dc: Param::from_tensor(rows(self.sh_dc.val())),
            sh_rest: Param::from_tensor(rows(self.sh_rest.val())),
            features: self
                .features
                .as_ref()
                .map(|f| Param::from_tensor(select_rows(f.val(), indices, m))),
        }
    }

    /// These Gaussians followed by `other`'s (same SH degree and features; checked).
    pub fn cat(self, other: Self) -> Result<Self, ModelError> {
        if other.sh_rest.dims()[1] != self.sh_rest.dims()[1]
            || other.features.as_ref().map(|f| f.dims()[1])
                != self.features.as_ref().map(|f| f.dims()[1])
        {
            return Err(ModelError::Invalid(format!(
                "cannot append Gaussians with SH degree {} and {:?} feature channels to a field \
                 with SH degree {} and {:?}",
                other.sh_degree(),
                other.features.as_ref().map(|f| f.dims()[1]),
                self.sh_degree(),
                self.features.as_ref().map(|f| f.dims()[1]),
            )));
        }
        if other.num_gaussians() == 0 {
            return Ok(self);
        }
        if self.num_gaussians() == 0 {
            return Ok(other);
        }
        let features = match (self.features, other.features) {
            (Some(a), Some(b)) => Some(Param::from_tensor(cat_rows(a.val(), b.val()))),
            _ => None,
        };
        Ok(GaussianField {
            means: Param::from_tensor(cat_rows(self.means.val(), other.means.val())),
            quats: Param::from_tensor(cat_rows(self.quats.val(), other.quats.val())),
            log_scales: Param::from_tensor(cat_rows(self.log_scales.val(), other.log_scales.val())),
            opacity_logits: Param::from_tensor(cat_rows(
                self.opacity_logits.val(),
                other.opacity_logits.val(),
            )),
            sh_dc: Param::from_tensor(cat_rows(self.sh_dc.val(), other.sh_dc.val())),
            sh_rest: Param::from_tensor(cat_rows(self.sh_rest.val(), other.sh_rest.val())),
            features,
        })
    }

    /// A field of `n` Gaussians with every parameter zero and this one's SH degree and
    /// features (e.g. optimizer moments for new Gaussians).
    pub fn zeros(&self, n: usize) -> Self {
        fn zero<B: Backend, const D: usize>(
            like: &Param<Tensor<B, D>>,
            n: usize,
        ) -> Param<Tensor<B, D>> {
            let mut dims = like.dims();
            dims[0] = n;
            Param::from_tensor(Tensor::zeros(dims, &like.device()))
        }
        GaussianField {
            means: zero(&self.means, n),
            quats: zero(&self.quats, n),
            log_scales: zero(&self.log_scales, n),
            opacity_logits: zero(&self.opacity_logits, n),
            sh_dc: zero(&self.sh_dc, n),
            sh_rest: zero(&self.sh_rest, n),
            features: self.features.as_ref().map(|f| zero(f, n)),
        }
    }

    /// Reads every parameter back and reports the first non-finite value by name and index.
    /// (The ops themselves never read back: NaN propagates through them.)
    pub fn validate(&self) -> Result<(), ModelError> {
        fn scan<B: Backend, const D: usize>(
            name: &'static str,
            t: Tensor<B, D>,
        ) -> Result<(), ModelError> {
            let per = t.dims()[1..].iter().product::<usize>().max(1);
            let data = t.into_data().convert::<f32>();
            let values = data.as_slice::<f32>().unwrap_or(&[]);
            match values.iter().position(|v| !v.is_finite()) {
                Some(i) => Err(ModelError::NonFinite {
                    parameter: name,
                    index: i / per,
                    value: values[i],
                }),
                None => Ok(()),
            }
        }
        scan("means", self.means.val())?;
        scan("quats", self.quats.val())?;
        scan("log_scales", self.log_scales.val())?;
        scan("opacity_logits", self.opacity_logits.val())?;
        scan("sh_dc", self.sh_dc.val())?;
        scan("sh_rest", self.sh_rest.val())?;
        if let Some(f) = &self.features {
            scan("features", f.val())?;
        }
        Ok(())
    }
}

impl<B: SplatBackend> GaussianField<B> {
    /// The opacity-weighted density at `points` `[P, 3]`:
    /// `value(x) = sum_i sigmoid(opacity_logit_i) exp(-1/2 d_i(x)^2)`, `[P]`.
    ///
    /// Differentiable with respect to the field's parameters and the points.
    pub fn query(
        &self,
        points: Tensor<B, 2>,
        options: FieldOptions,
    ) -> Result<Tensor<B, 1>, ModelError> {
        let [p, _] = points.dims();
        let weights = self.opacities().unsqueeze_dim::<2>(1);
        let values = field_query(
            points,
            self.means.val(),
            self.quats.val(),
            self.log_scales.val(),
            weights,
            options,
        )?;
        Ok(values.reshape([p]))
    }

    /// The feature field at `points` `[P, 3]`: `out[p, c] = sum_i f_ic exp(-1/2 d_i(x_p)^2)`,
    /// `[P, C]`. Errors when the field has no features.
    pub fn query_features(
        &self,
        points: Tensor<B, 2>,
        options: FieldOptions,
    ) -> Result<Tensor<B, 2>, ModelError> {
        let features = self.features.as_ref().ok_or(ModelError::NoFeatures)?;
        Ok(field_query(
            points,
            self.means.val(),
            self.quats.val(),
            self.log_scales.val(),
            features.val(),
            options,
        )?)
    }
}

/// Rows `indices` of `t` (`m` of them). A tensor without elements is not indexed: the result is
/// zeros of the selected shape.
fn select_rows<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    indices: &Tensor<B, 1, Int>,
    m: usize,
) -> Tensor<B, D> {
    let mut dims = t.dims();
    dims[0] = m;
    if dims.iter().product::<usize>() == 0 {
        Tensor::zeros(dims, &t.device())
    } else {
        t.select(0, indices.clone())
    }
}

/// `a`'s rows followed by `b`'s. Tensors without elements are not concatenated: the result is
/// zeros of the joined shape.
fn cat_rows<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> Tensor<B, D> {
    let mut dims = a.dims();
    dims[0] += b.dims()[0];
    if dims.iter().product::<usize>() == 0 {
        Tensor::zeros(dims, &a.device())
    } else {
        Tensor::cat(vec![a, b], 0)
    }
}
