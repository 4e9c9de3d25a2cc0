//! An MCMC-style strategy after Kheradmand et al., "3D Gaussian Splatting as Markov Chain Monte
//! Carlo" (2024): the Gaussians are samples, and densification becomes moving them, with a hard
//! cap on their number.
//!
//! Every `interval` steps between `start` and `stop`:
//! - **relocate**: every Gaussian with opacity at most `min_opacity` ("dead") is moved onto a
//!   live one drawn with probability proportional to opacity; the drawn Gaussian and its new
//!   copies share its contribution: with `n` copies in total, opacity `1 - (1 - o)^(1/n)` and
//!   scales multiplied by `o / sum_{i=1..n} sum_{k<i} C(i-1, k) (-1)^k o'^(k+1) / sqrt(k+1)`
//!   (the paper's moment-matching rule), so that the rendered sum is unchanged;
//! - **add**: `min(max_gaussians, 1.05 N) - N` more copies are drawn the same way.
//!
//! Moments of every Gaussian touched (sources and copies) restart at zero. After every step,
//! centres receive noise shaped by their own covariance and scaled by
//! `lr_means x noise_lr x sigmoid(100 (1 - opacity - 0.995))`, which explores with nearly
//! transparent Gaussians and leaves opaque ones alone. The paper's opacity and scale
//! regularisers are `loss.opacity_reg` and `loss.scale_reg` (0.01 each in its experiments).
//!
//! The noise is computed on the parameters' device with tensor operations (no read-back): the
//! standard normals come from an integer hash of each sample's index and the step's seed, so
//! they are the same on every run and after a resume, and their integer bits are the same on
//! every backend (the float transforms after them may round differently).

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{RefineContext, RefineReport, Refinement, StepStatistics, Strategy};
use crate::adam::GroupAdam;
use crate::config::DensifyConfig;
use crate::error::TrainError;
use crate::params::{index_tensor, to_host};
use burn::module::Param;
use ember_field::GaussianField;

/// Copies per source are capped here (as the reference implementation does).
const MAX_COPIES: usize = 51;

/// The MCMC strategy (see the module docs).
#[derive(Debug, Clone)]
pub struct McmcDensity {
    config: DensifyConfig,
}

impl McmcDensity {
    /// The strategy with `config`'s schedule, cap and noise rate.
    pub fn new(config: DensifyConfig) -> Self {
        McmcDensity { config }
    }
}

/// Opacity and scale factor of each of `n` copies of a Gaussian of opacity `o` (see the module
/// docs).
pub fn relocation(o: f32, n: usize, min_opacity: f32) -> (f32, f32) {
    let n = n.clamp(1, MAX_COPIES);
    let o = f64::from(o).clamp(1e-12, 1.0 - 1e-7);
    let new_o = 1.0 - (1.0 - o).powf(1.0 / n as f64);
    let mut denom = 0.0;
    for i in 1..=n {
        let mut binom = 1.0f64; // C(i - 1, k)
        for k in 0..i {
            if k > 0 {
                binom = binom * (i - k) as f64 / k as f64;
            }
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            denom += binom * sign / ((k + 1) as f64).sqrt() * new_o.powi(k as i32 + 1);
        }
    }
    let factor = if denom > 0.0 { o / denom } else { 1.0 };
    let new_o = new_o.clamp(f64::from(min_opacity), 1.0 - 1e-7);
    (new_o as f32, factor as f32)
}

/// `count` indices drawn with replacement with probabilities proportional to `weights`.
fn draw(weights: &[(usize, f32)], count: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut total = 0.0f64;
    for (_, w) in weights {
        total += f64::from(w.max(0.0));
        cumulative.push(total);
    }
    if total <= 0.0 {
        return Vec::new();
    }
    (0..count)
        .map(|_| {
            let u = rng.random::<f64>() * total;
            let k = cumulative
                .partition_point(|c| *c <= u)
                .min(weights.len() - 1);
            weights[k].0
        })
        .collect()
}

fn logit(o: f32) -> f32 {
    (o / (1.0 - o)).ln()
}

/// Gives every row of `sources` (with repeats) and its copies their share of the source's
/// opacity and scale: `copies[i]` is the number of rows that will carry source `i`'s
/// contribution. Updates `logits` and `log_scales` in place.
fn share(
    sources: &[usize],
    copies: &std::collections::HashMap<usize, usize>,
    logits: &mut [f32],
    log_scales: &mut [f32],
    min_opacity: f32,
) {
    let mut done = std::collections::HashSet::new();
    for &src in sources {
        if !done.insert(src) {
            continue;
        }
        let o = 1.0 / (1.0 + (-logits[src]).exp());
        let (new_o, factor) = relocation(o, copies[&src], min_opacity);
        logits[src] = logit(new_o);
        for a in 0..3 {
            log_scales[3 * src + a] += factor.max(1e-12).ln();
        }
    }
}

impl<B: Backend> Strategy<B> for McmcDensity {
    fn name(&self) -> &'static str {
        "mcmc"
    }

    fn observe(&mut self, _step: usize, _stats: &StepStatistics<B>) -> Result<(), TrainError> {
        Ok(())
    }

    fn refine(
        &mut self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        adam: &mut GroupAdam<B>,
    ) -> Result<RefineReport, TrainError> {
        let c = &self.config;
        let s = context.step;
        let mut report = RefineReport::default();
        let mut rng = StdRng::seed_from_u64(context.seed);
        if s > c.start && s < c.stop && s.is_multiple_of(c.interval) && field.num_gaussians() > 0 {
            let device = field.means.device();
            let n = field.num_gaussians();
            let min_opacity = c.min_opacity as f32;
            let mut logits = to_host(field.opacity_logits.val(), "opacities")?;
            let mut log_scales = to_host(field.log_scales.val(), "scales")?;
            let opacity: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();

            // Relocate the dead onto live Gaussians drawn by opacity.
            let dead: Vec<usize> = (0..n).filter(|&i| opacity[i] <= min_opacity).collect();
            let alive: Vec<(usize, f32)> = (0..n)
                .filter(|&i| opacity[i] > min_opacity)
                .map(|i| (i, opacity[i]))
                .collect();
            let sources = draw(&alive, dead.len(), &mut rng);
            if !sources.is_empty() {
                let mut copies = std::collections::HashMap::new();
                for &src in &sources {
                    *copies.entry(src).or_insert(1usize) += 1;
                }
                share(&sources, &copies, &mut logits, &mut log_scales, min_opacity);
                // Row i of the new set is row from[i] of the old one.
                let mut from: Vec<usize> = (0..n).collect();
                for (&d, &src) in dead.iter().zip(&sources) {
                    from[d] = src;
                }
                let logits_moved: Vec<f32> = from.iter().map(|&i| logits[i]).collect();
                let scales_moved: Vec<f32> = from
                    .iter()
                    .flat_map(|&i| log_scales[3 * i..3 * i + 3].to_vec())
                    .collect();
                let mut moved = field.select(&index_tensor(&from, &device));
                moved.opacity_logits = Param::from_tensor(Tensor::from_data(
                    TensorData::new(logits_moved.clone(), [n]),
                    &device,
                ));
                moved.log_scales = Param::from_tensor(Tensor::from_data(
                    TensorData::new(scales_moved.clone(), [n, 3]),
                    &device,
                ));
                *field = moved;
                logits = logits_moved;
                log_scales = scales_moved;
                let mut touched: Vec<usize> = dead.clone();
                touched.extend(copies.keys());
                adam.zero_rows(&touched);
                report.relocated = sources.len();
            }

            // Add copies up to the cap.
            let target = c.max_gaussians.min((1.05 * n as f64) as usize);
            let extra = target.saturating_sub(n);
            let opacity: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();
            let weights: Vec<(usize, f32)> = (0..n).map(|i| (i, opacity[i])).collect();
            let sources = draw(&weights, extra, &mut rng);
            if !sources.is_empty() {
                let mut copies = std::collections::HashMap::new();
                for &src in &sources {
                    *copies.entry(src).or_insert(1usize) += 1;
                }
                share(&sources, &copies, &mut logits, &mut log_scales, min_opacity);
                field.opacity_logits =
                    Param::from_tensor(Tensor::from_data(TensorData::new(logits, [n]), &device));
                field.log_scales = Param::from_tensor(Tensor::from_data(
                    TensorData::new(log_scales, [n, 3]),
                    &device,
                ));
                let touched: Vec<usize> = copies.keys().copied().collect();
                adam.zero_rows(&touched);
                let added = field.select(&index_tensor(&sources, &device));
                Refinement {
                    keep: (0..n).collect(),
                    added,
                }
                .apply(field, adam)?;
                report.added = sources.len();
            }
        }
        self.inject_noise(context, field, &mut rng)?;
        Ok(report)
    }

    fn state(&self) -> Vec<(&'static str, Tensor<B, 1>)> {
        Vec::new()
    }

    fn load_state(&mut self, state: Vec<(String, Tensor<B, 1>)>) -> Result<(), TrainError> {
        match state.first() {
            None => Ok(()),
            Some((name, _)) => Err(TrainError::Scene(format!(
                "the MCMC strategy keeps no state, the checkpoint has `{name}`"
            ))),
        }
    }
}

impl McmcDensity {
    /// Moves every centre by noise shaped by its covariance (see the module docs), on the
    /// field's device: no read-back, one small tensor program per step.
    fn inject_noise<B: Backend>(
        &self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        rng: &mut StdRng,
    ) -> Result<(), TrainError> {
        let scaler = context.lr_means * self.config.noise_lr;
        let n = field.num_gaussians();
        if scaler == 0.0 || n == 0 {
            return Ok(());
        }
        let device = field.means.device();
        // Parameters as rows (`[3, N]`, `[4, N]`): each component is then a contiguous row,
        // which ndarray walks much faster than a column of a row-major `[N, k]` tensor.
        let row = |t: &Tensor<B, 2>, c: usize| t.clone().narrow(0, c, 1);
        let z = standard_normals::<B>(n, rng.random::<u32>(), &device);
        let quats = field.quats.val().detach().transpose();
        let norm = quats.clone().powi_scalar(2).sum_dim(0).sqrt();
        // A zero quaternion stays zero here, and the formula below then gives the identity (as
        // the projection treats it).
        let q = quats / norm.clamp_min(1e-12);
        let r = rotation_rows(row(&q, 0), row(&q, 1), row(&q, 2), row(&q, 3));
        let s2 = (field.log_scales.val().detach().transpose() * 2.0).exp();
        let opacity = sigmoid(field.opacity_logits.val().detach().reshape([1, n]));
        // Nearly transparent Gaussians explore; opaque ones barely move.
        let gate = sigmoid((opacity.neg().add_scalar(1.0 - 0.995)) * 100.0) * scaler;
        let z = z * gate;
        // d = R S^2 R^T z, component by component.
        let u: Vec<Tensor<B, 2>> = (0..3)
            .map(|a| {
                let rt_z = (0..3)
                    .map(|b| r[3 * b + a].clone() * row(&z, b))
                    .reduce(|acc, t| acc + t)
                    .expect("three terms");
                row(&s2, a) * rt_z
            })
            .collect();
        let d: Vec<Tensor<B, 2>> = (0..3)
            .map(|i| {
                (0..3)
                    .map(|a| r[3 * i + a].clone() * u[a].clone())
                    .reduce(|acc, t| acc + t)
                    .expect("three terms")
            })
            .collect();
        // Non-finite parameters (culled by the projection) are left where they are.
        let d = Tensor::cat(d, 0).transpose();
        let d = d.clone().mask_fill(d.is_nan(), 0.0);
        field.means = Param::from_tensor(field.means.val().detach() + d);
        Ok(())
    }
}

/// The rotation matrix of unit quaternions `(w, x, y, z)` (`[1, N]` each), as its nine entries
/// `[1, N]`, row-major (the formula of `ember_kernels::quat::rotation_matrix`).
fn rotation_rows<B: Backend>(
    w: Tensor<B, 2>,
    x: Tensor<B, 2>,
    y: Tensor<B, 2>,
    z: Tensor<B, 2>,
) -> [Tensor<B, 2>; 9] {
    let product = |a: &Tensor<B, 2>, b: &Tensor<B, 2>| a.clone() * b.clone();
    let (xx, yy, zz) = (product(&x, &x), product(&y, &y), product(&z, &z));
    let (xy, xz, yz) = (product(&x, &y), product(&x, &z), product(&y, &z));
    let (wx, wy, wz) = (product(&w, &x), product(&w, &y), product(&w, &z));
    let diagonal = |a: Tensor<B, 2>, b: Tensor<B, 2>| (a + b).mul_scalar(-2.0).add_scalar(1.0);
    let twice = |a: Tensor<B, 2>| a.mul_scalar(2.0);
    [
        diagonal(yy.clone(), zz.clone()),
        twice(xy.clone() - wz.clone()),
        twice(xz.clone() + wy.clone()),
        twice(xy + wz),
        diagonal(xx.clone(), zz),
        twice(yz.clone() - wx.clone()),
        twice(xz - wy),
        twice(yz + wx),
        diagonal(xx, yy),
    ]
}

/// Low 31 bits: what survives every integer operation below identically on an `i32` backend
/// (wrapping) and an `i64` one (exact).
const HASH_MASK: i64 = 0x7fff_ffff;
/// The multiplier of the hash's rounds (below 2^31, so products stay within `i64`).
const HASH_MULTIPLIER: i64 = 0x045d_9f3b;

/// `[3, n]` standard normal samples computed on `device` from `seed` alone: an integer hash of
/// each sample's index (the same bits on every backend) turned into uniforms and then normals by
/// the Box-Muller transform. Counter-based, so a step's noise depends only on its seed, and a
/// resumed run draws what the uninterrupted one drew.
fn standard_normals<B: Backend>(n: usize, seed: u32, device: &B::Device) -> Tensor<B, 2> {
    let pairs = (3 * n).div_ceil(2);
    let hash = |x: Tensor<B, 1, Int>| {
        let mix = |x: Tensor<B, 1, Int>| {
            let shifted = x.clone().bitwise_right_shift_scalar(16.elem());
            x.bitwise_xor(shifted)
        };
        let round = |x: Tensor<B, 1, Int>| {
            mix(x)
                .mul_scalar(HASH_MULTIPLIER)
                .bitwise_and_scalar(HASH_MASK.elem())
        };
        mix(round(round(x)))
    };
    let index = Tensor::<B, 1, Int>::arange(0..2 * pairs as i64, device);
    let bits = hash(index.bitwise_xor_scalar((i64::from(seed) & HASH_MASK).elem()));
    // 24 bits per uniform: exact in f32. The first of each pair is in (0, 1] for the logarithm.
    let uniform = bits.bitwise_right_shift_scalar(7.elem()).float() / (1u32 << 24) as f64;
    let u1 = uniform
        .clone()
        .narrow(0, 0, pairs)
        .add_scalar(1.0 / (1u32 << 24) as f64);
    let angle = uniform.narrow(0, pairs, pairs) * core::f64::consts::TAU;
    let radius = (u1.log() * -2.0).sqrt();
    let normals = Tensor::cat(
        vec![radius.clone() * angle.clone().cos(), radius * angle.sin()],
        0,
    );
    normals.narrow(0, 0, 3 * n).reshape([3, n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_is_the_identity() {
        let (o, f) = relocation(0.3, 1, 0.005);
        assert!((o - 0.3).abs() < 1e-6 && (f - 1.0).abs() < 1e-5, "{o} {f}");
    }

    #[test]
    fn copies_split_the_opacity() {
        // Two copies composited: 1 - (1 - o')^2 = o.
        let (o2, f) = relocation(0.6, 2, 0.005);
        assert!((1.0 - (1.0 - o2).powi(2) - 0.6).abs() < 1e-5);
        assert!(f > 0.0 && f.is_finite());
    }

    type Cpu = burn::backend::NdArray<f32>;

    fn host(t: Tensor<Cpu, 2>) -> Vec<f32> {
        t.into_data().to_vec().expect("f32")
    }

    #[test]
    fn normals_are_standard_and_depend_only_on_the_seed() {
        let device = Default::default();
        let a = host(standard_normals::<Cpu>(20_001, 7, &device).transpose());
        assert_eq!(a.len(), 60_003);
        assert_eq!(
            a,
            host(standard_normals::<Cpu>(20_001, 7, &device).transpose())
        );
        let b = host(standard_normals::<Cpu>(20_001, 8, &device).transpose());
        assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 59_000);
        let n = a.len() as f64;
        let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = a
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let fourth = a
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(4))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "variance {var}");
        // A normal's kurtosis is 3 (a uniform's is 1.8).
        assert!(
            (fourth / (var * var) - 3.0).abs() < 0.15,
            "kurtosis {}",
            fourth / var / var
        );
        let beyond = a.iter().filter(|v| v.abs() > 3.0).count() as f64 / n;
        assert!((0.001..0.005).contains(&beyond), "{beyond} beyond 3 sigma");
        // The three axes of a Gaussian are uncorrelated, and its squared norm is chi-square
        // with 3 degrees of freedom (mean 3, variance 6).
        let gaussians = a.len() / 3;
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            let c: f64 = a
                .chunks(3)
                .map(|z| f64::from(z[p]) * f64::from(z[q]))
                .sum::<f64>()
                / gaussians as f64;
            assert!(c.abs() < 0.03, "axes {p} and {q}: correlation {c}");
        }
        let norms: Vec<f64> = a
            .chunks(3)
            .map(|z| z.iter().map(|&v| f64::from(v).powi(2)).sum())
            .collect();
        let norm_mean = norms.iter().sum::<f64>() / gaussians as f64;
        let norm_var =
            norms.iter().map(|v| (v - norm_mean).powi(2)).sum::<f64>() / gaussians as f64;
        assert!(
            (norm_mean - 3.0).abs() < 0.1,
            "mean squared norm {norm_mean}"
        );
        assert!(
            (norm_var - 6.0).abs() < 0.5,
            "variance of the squared norm {norm_var}"
        );
        // Neighbouring samples are uncorrelated.
        let lag: f64 = a
            .windows(2)
            .map(|w| f64::from(w[0]) * f64::from(w[1]))
            .sum::<f64>()
            / n;
        assert!(lag.abs() < 0.02, "lag-1 correlation {lag}");
    }

    /// The device noise against the same noise shaped on the host, Gaussian by Gaussian: the
    /// covariance `R S^2 R^T` from unnormalised quaternions, the opacity gate, and NaN rows left
    /// in place.
    #[test]
    fn noise_is_shaped_by_each_covariance() {
        let device = Default::default();
        let mut rng = StdRng::seed_from_u64(3);
        let n = 64;
        let mut means: Vec<f32> = (0..3 * n)
            .map(|_| rng.random::<f32>() * 4.0 - 2.0)
            .collect();
        let mut quats: Vec<f32> = (0..4 * n)
            .map(|_| rng.random::<f32>() * 2.0 - 1.0)
            .collect();
        quats[4..8].fill(0.0);
        let log_scales: Vec<f32> = (0..3 * n)
            .map(|_| rng.random::<f32>() * 3.0 - 4.0)
            .collect();
        let logits: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 14.0 - 10.0).collect();
        means[3 * 9] = f32::NAN;
        let tensor = |v: &[f32], shape: [usize; 2]| {
            Tensor::<Cpu, 2>::from_data(TensorData::new(v.to_vec(), shape), &device)
        };
        let mut field = GaussianField::from_tensors(
            tensor(&means, [n, 3]),
            tensor(&quats, [n, 4]),
            tensor(&log_scales, [n, 3]),
            tensor(&logits, [n, 1]).reshape([n]),
            tensor(&vec![0.0; 3 * n], [n, 3]).reshape([n, 1, 3]),
            Tensor::zeros([n, 0, 3], &device),
            None,
        )
        .expect("a valid field");
        let strategy = McmcDensity::new(DensifyConfig::default());
        let context = RefineContext {
            step: 1,
            extent: 1.0,
            seed: 11,
            lr_means: 1.6e-4,
        };
        let seed = StdRng::seed_from_u64(11).random::<u32>();
        let z = host(standard_normals::<Cpu>(n, seed, &device).transpose());
        strategy
            .inject_noise(context, &mut field, &mut StdRng::seed_from_u64(11))
            .expect("noise");
        let moved = host(field.means.val());
        let scaler = (context.lr_means * strategy.config.noise_lr) as f32;
        let mut largest = 0.0f32;
        for i in 0..n {
            let q = &quats[4 * i..4 * i + 4];
            let r = super::super::adaptive::rotation_matrix(q);
            let opacity = 1.0 / (1.0 + (-logits[i]).exp());
            let gate = 1.0 / (1.0 + (-100.0 * (1.0 - opacity - 0.995)).exp()) * scaler;
            let zi: [f32; 3] = core::array::from_fn(|b| z[3 * i + b] * gate);
            let s2: [f32; 3] = core::array::from_fn(|a| (2.0 * log_scales[3 * i + a]).exp());
            let rt_z: [f32; 3] =
                core::array::from_fn(|a| (0..3).map(|b| r[3 * b + a] * zi[b]).sum());
            for row in 0..3 {
                let d: f32 = (0..3).map(|a| r[3 * row + a] * s2[a] * rt_z[a]).sum();
                let got = moved[3 * i + row] - means[3 * i + row];
                if i == 9 && row == 0 {
                    assert!(moved[3 * i].is_nan());
                    continue;
                }
                largest = largest.max(d.abs());
                assert!(
                    (got - d).abs() <= 1e-6 + 1e-3 * d.abs(),
                    "Gaussian {i} axis {row}: {got} vs {d}"
                );
            }
        }
        // The test moves some Gaussians measurably.
        assert!(largest > 1e-3, "largest move {largest}");
    }

    /// The hash's integer operations wrap on wgpu's `i32` and are exact on ndarray's `i64`; the
    /// masks make both give the same bits, so the normals agree up to the float rounding of
    /// the logarithm and the cosine.
    #[cfg(feature = "wgpu")]
    #[test]
    fn normals_on_wgpu_match_the_cpu() {
        type Wgpu = burn::backend::Wgpu<f32, i32, u32>;
        let cpu = host(standard_normals::<Cpu>(
            5_000,
            0xdead_beef,
            &Default::default(),
        ));
        let gpu = standard_normals::<Wgpu>(5_000, 0xdead_beef, &Default::default());
        let gpu: Vec<f32> = gpu.into_data().to_vec().expect("f32");
        let worst = cpu
            .iter()
            .zip(&gpu)
            .map(|(a, b)| (a - b).abs() / (1.0 + a.abs()))
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-4, "largest difference {worst}");
    }

    #[test]
    fn draws_follow_the_weights() {
        let mut rng = StdRng::seed_from_u64(1);
        let picks = draw(&[(7, 0.0), (8, 1.0), (9, 3.0)], 4000, &mut rng);
        let nines = picks.iter().filter(|&&i| i == 9).count();
        assert!(picks.iter().all(|&i| i != 7));
        assert!((2800..3200).contains(&nines), "{nines}");
        assert!(draw(&[(1, 0.0)], 3, &mut rng).is_empty());
    }
}
