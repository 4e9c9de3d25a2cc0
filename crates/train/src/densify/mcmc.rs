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
//! - **add**: `min(max_gaussians, 1.05 N) - N` more copies are drawn the same way;
//! - **fence**: a Gaussian whose centre lies farther than `fence` times the radius of the region
//!   the training cameras and initialisation points span counts as dead, at every relocation
//!   from `start` to the end of the run (after `stop`, only these are relocated). Nothing but the
//!   noise below moves a Gaussian that far, and nothing the cameras saw is there.
//!
//! Moments of every Gaussian touched (sources and copies) restart at zero. After every step,
//! centres receive noise shaped by their own covariance and scaled by
//! `lr_means x noise_lr x sigmoid(100 (1 - opacity - 0.995)) / extent^2`, which explores with
//! nearly transparent Gaussians and leaves opaque ones alone. The paper states the noise for a
//! scene normalised to an extent of about 1; the covariance is an area and `lr_means` (a
//! fraction of the extent times the extent) a length, so without the division a scene in other
//! units gets `extent^2` times the noise relative to its size: at cup_colmap's extent of 6.3,
//! 40 times, enough for large transparent Gaussians (whose noise grows with the square of their
//! size) to random-walk to 10^5 times the scene's size. Divided, a scene moves the same
//! whatever its units. The paper's opacity and scale
//! regularisers are `loss.opacity_reg` and `loss.scale_reg` (0.01 each in its experiments).
//!
//! The noise is one op on the parameters' device ([`ember_kernels::perturb_means`]: a rayon pass
//! on the CPU, one kernel on the GPU, no read-back): the standard normals come from an integer
//! hash of each sample's index and the step's seed, so they are the same on every run and after
//! a resume, and their integer bits are the same on every backend (the float transforms after
//! them may round differently).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{RefineContext, RefineReport, Refinement, StepStatistics, Strategy};
use crate::adam::GroupAdam;
use crate::config::DensifyConfig;
use crate::error::TrainError;
use crate::params::index_tensor;
use burn::module::Param;
use ember_field::GaussianField;
use ember_field::to_host;
use ember_kernels::{MeanNoise, NoiseOps, perturb_means};

/// Copies per source are capped here (as the reference implementation does).
const MAX_COPIES: usize = 51;

/// The MCMC strategy (see the module docs).
#[derive(Debug, Clone)]
pub struct McmcDensity {
    config: DensifyConfig,
    /// The error scores `[N]` of the coming refinement (`densify.error_weight`).
    scores: Option<Vec<f32>>,
}

impl McmcDensity {
    /// The strategy with `config`'s schedule, cap and noise rate.
    pub fn new(config: DensifyConfig) -> Self {
        McmcDensity {
            config,
            scores: None,
        }
    }

    /// Whether the refinement after step `step` (steps completed) relocates the dead and grows.
    fn densifies_at(&self, step: usize) -> bool {
        let c = &self.config;
        step > c.start && step.is_multiple_of(c.interval) && step < c.stop
    }
}

/// The draw weights of `rows`: each row's opacity, times `(1 - w) + w s / mean s` with the
/// rows' error scores `s` when there are any (see [`DensifyConfig::error_weight`]).
fn draw_weights(
    rows: Vec<usize>,
    opacity: &[f32],
    scores: Option<&[f32]>,
    weight: f64,
) -> Vec<(usize, f32)> {
    let mean = scores.map_or(0.0, |s| {
        rows.iter().map(|&i| f64::from(s[i])).sum::<f64>() / rows.len().max(1) as f64
    });
    let factor = |i: usize| match scores {
        Some(s) if mean > 0.0 => ((1.0 - weight) + weight * f64::from(s[i]) / mean) as f32,
        _ => 1.0,
    };
    rows.into_iter()
        .map(|i| (i, opacity[i] * factor(i)))
        .collect()
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

/// Whether each Gaussian's centre lies farther than `fence` times the region's radius from its
/// centre (a non-finite centre counts as escaped); all `false` when `fence` is 0.
fn escaped<B: Backend>(
    field: &GaussianField<B>,
    (center, radius): ([f64; 3], f64),
    fence: f64,
) -> Result<Vec<bool>, TrainError> {
    let n = field.num_gaussians();
    if fence <= 0.0 || radius <= 0.0 {
        return Ok(vec![false; n]);
    }
    let limit = (fence * radius).powi(2);
    let means = to_host(field.means.val(), "centres")?;
    Ok(means
        .chunks_exact(3)
        .map(|p| {
            let d2: f64 = (0..3).map(|a| (f64::from(p[a]) - center[a]).powi(2)).sum();
            d2.is_nan() || d2 > limit
        })
        .collect())
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

impl<B: NoiseOps> Strategy<B> for McmcDensity {
    fn name(&self) -> &'static str {
        "mcmc"
    }

    fn observe(&mut self, _step: usize, _stats: &StepStatistics<B>) -> Result<(), TrainError> {
        Ok(())
    }

    fn error_views(&self, step: usize) -> usize {
        match self.config.error_weight > 0.0 && self.densifies_at(step) {
            true => self.config.error_views,
            false => 0,
        }
    }

    fn observe_errors(&mut self, scores: Tensor<B, 1>) -> Result<(), TrainError> {
        self.scores = Some(to_host(scores, "error scores")?);
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
        let relocating = s > c.start && s.is_multiple_of(c.interval) && field.num_gaussians() > 0;
        // After `stop` only the escaped are relocated (when the fence is on).
        let densifying = relocating && self.densifies_at(s);
        // Scores of another set of Gaussians than this one's are never read.
        let mut scores = self
            .scores
            .take()
            .filter(|s| densifying && s.len() == field.num_gaussians());
        let escaped = if relocating && (densifying || c.fence > 0.0) {
            escaped(field, context.region, c.fence)?
        } else {
            Vec::new()
        };
        // After `stop`, a refinement with nobody escaped reads nothing more back.
        if densifying || escaped.contains(&true) {
            let device = field.means.device();
            let n = field.num_gaussians();
            let min_opacity = c.min_opacity as f32;
            let mut logits = to_host(field.opacity_logits.val(), "opacities")?;
            let mut log_scales = to_host(field.log_scales.val(), "scales")?;
            let opacity: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();

            // Relocate the dead (and the escaped) onto live Gaussians drawn by opacity.
            let is_dead = |i: usize| escaped[i] || (densifying && opacity[i] <= min_opacity);
            let dead: Vec<usize> = (0..n).filter(|&i| is_dead(i)).collect();
            let alive = draw_weights(
                (0..n)
                    .filter(|&i| !is_dead(i) && opacity[i] > min_opacity)
                    .collect(),
                &opacity,
                scores.as_deref(),
                c.error_weight,
            );
            report.escaped = escaped.iter().filter(|&&e| e).count();
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
                if let Some(s) = &mut scores {
                    *s = from.iter().map(|&i| s[i]).collect();
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
            let target = if densifying {
                c.max_gaussians.min((1.05 * n as f64) as usize)
            } else {
                n
            };
            let extra = target.saturating_sub(n);
            let opacity: Vec<f32> = logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect();
            let weights = draw_weights(
                (0..n).collect(),
                &opacity,
                scores.as_deref(),
                c.error_weight,
            );
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
    /// field's device: no read-back, one op ([`ember_kernels::perturb_means`]) per step.
    fn inject_noise<B: NoiseOps>(
        &self,
        context: RefineContext,
        field: &mut GaussianField<B>,
        rng: &mut StdRng,
    ) -> Result<(), TrainError> {
        // See the module docs: the noise relative to the scene's size is independent of its units.
        let extent = if context.extent.is_finite() && context.extent > 0.0 {
            context.extent
        } else {
            1.0
        };
        let scale = context.lr_means * self.config.noise_lr / (extent * extent);
        if scale == 0.0 || field.num_gaussians() == 0 {
            return Ok(());
        }
        let noise = MeanNoise {
            seed: rng.random::<u32>(),
            scale,
        };
        let moved = perturb_means(
            field.means.val(),
            field.quats.val(),
            field.log_scales.val(),
            field.opacity_logits.val(),
            &noise,
        )?;
        field.means = Param::from_tensor(moved);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_kernels::noise::cpu::standard_normals;

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

    use ember_kernels::backend::Cpu;

    fn host(t: Tensor<Cpu, 2>) -> Vec<f32> {
        t.into_data().to_vec().expect("f32")
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
            region: ([0.0; 3], 1.0),
        };
        let seed = StdRng::seed_from_u64(11).random::<u32>();
        let normals = standard_normals(n, seed);
        let z: Vec<f32> = (0..3 * n).map(|k| normals[(k % 3) * n + k / 3]).collect();
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

    /// The same scene in units ten times smaller (centres, scales and extent times 10) moves
    /// ten times as far: the same move relative to its size.
    #[test]
    fn noise_is_the_same_in_any_units() {
        let device = Default::default();
        let mut rng = StdRng::seed_from_u64(5);
        let n = 32;
        let means: Vec<f32> = (0..3 * n).map(|_| rng.random::<f32>() - 0.5).collect();
        let quats: Vec<f32> = (0..4 * n).map(|_| rng.random::<f32>() - 0.5).collect();
        let log_scales: Vec<f32> = (0..3 * n).map(|_| rng.random::<f32>() - 4.0).collect();
        let logits: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 4.0 - 8.0).collect();
        let moved = |units: f32| -> Vec<f32> {
            let tensor = |v: Vec<f32>, shape: [usize; 2]| {
                Tensor::<Cpu, 2>::from_data(TensorData::new(v, shape), &device)
            };
            let mut field = GaussianField::from_tensors(
                tensor(means.iter().map(|m| m * units).collect(), [n, 3]),
                tensor(quats.clone(), [n, 4]),
                tensor(log_scales.iter().map(|l| l + units.ln()).collect(), [n, 3]),
                tensor(logits.clone(), [n, 1]).reshape([n]),
                tensor(vec![0.0; 3 * n], [n, 3]).reshape([n, 1, 3]),
                Tensor::zeros([n, 0, 3], &device),
                None,
            )
            .expect("a valid field");
            let extent = 2.0 * f64::from(units);
            let context = RefineContext {
                step: 1,
                extent,
                seed: 3,
                // The means' rate is a fraction of the extent.
                lr_means: 1.6e-4 * extent,
                region: ([0.0; 3], extent),
            };
            McmcDensity::new(DensifyConfig::default())
                .inject_noise(context, &mut field, &mut StdRng::seed_from_u64(3))
                .expect("noise");
            host(field.means.val())
                .iter()
                .zip(&means)
                .map(|(after, before)| after - before * units)
                .collect()
        };
        let (unit, ten) = (moved(1.0), moved(10.0));
        let largest = unit.iter().fold(0.0f32, |m, d| m.max(d.abs()));
        assert!(largest > 1e-4, "largest move {largest}");
        for (a, b) in unit.iter().zip(&ten) {
            assert!((b - 10.0 * a).abs() <= 1e-3 * largest, "{a} -> {b}");
        }
    }

    /// Gaussians at `means` (`[N, 3]`, row-major) with opacity logits `logits`, round (unit
    /// quaternions, scales e^-3), black, SH degree 0.
    fn round_field(means: &[f32], logits: &[f32]) -> GaussianField<Cpu> {
        let device = Default::default();
        let n = logits.len();
        let tensor = |v: Vec<f32>, shape: [usize; 2]| {
            Tensor::<Cpu, 2>::from_data(TensorData::new(v, shape), &device)
        };
        GaussianField::from_tensors(
            tensor(means.to_vec(), [n, 3]),
            tensor([1.0, 0.0, 0.0, 0.0].repeat(n), [n, 4]),
            tensor(vec![-3.0; 3 * n], [n, 3]),
            tensor(logits.to_vec(), [n, 1]).reshape([n]),
            tensor(vec![0.0; 3 * n], [n, 3]).reshape([n, 1, 3]),
            Tensor::zeros([n, 0, 3], &device),
            None,
        )
        .expect("a valid field")
    }

    fn fresh_adam(field: &GaussianField<Cpu>) -> GroupAdam<Cpu> {
        let settings = crate::AdamSettings {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-15,
        };
        GroupAdam::new(settings, field)
    }

    /// With `error_weight = 1` only Gaussians with an error score are relocated onto and
    /// copied; scores are asked for only before a densifying refinement, and scores of another
    /// number of Gaussians are not read.
    #[test]
    fn error_scores_decide_where_copies_go() {
        let device = Default::default();
        let n = 200;
        // Gaussian i at x = i, all alike but the last, which is dead.
        let means: Vec<f32> = (0..n).flat_map(|i| [i as f32, 0.0, 0.0]).collect();
        let mut logits = vec![1.0f32; n];
        logits[n - 1] = -8.0;
        let scored = 20;
        let scores: Vec<f32> = (0..n).map(|i| if i < scored { 0.5 } else { 0.0 }).collect();
        let config = DensifyConfig {
            strategy: crate::config::StrategyKind::Mcmc,
            start: 0,
            stop: 100,
            interval: 5,
            noise_lr: 0.0,
            error_weight: 1.0,
            error_views: 4,
            ..DensifyConfig::default()
        };
        let refine = |scores: Option<Vec<f32>>| {
            let mut field = round_field(&means, &logits);
            let mut adam = fresh_adam(&field);
            let mut strategy = McmcDensity::new(config.clone());
            assert_eq!(Strategy::<Cpu>::error_views(&strategy, 5), 4);
            assert_eq!(Strategy::<Cpu>::error_views(&strategy, 6), 0);
            assert_eq!(Strategy::<Cpu>::error_views(&strategy, 100), 0);
            if let Some(scores) = scores {
                let len = scores.len();
                Strategy::<Cpu>::observe_errors(
                    &mut strategy,
                    Tensor::from_data(TensorData::new(scores, [len]), &device),
                )
                .expect("scores");
            }
            let context = RefineContext {
                step: 5,
                extent: 1.0,
                seed: 9,
                lr_means: 1.6e-4,
                region: ([0.0; 3], 1e3),
            };
            let report = strategy
                .refine(context, &mut field, &mut adam)
                .expect("refined");
            assert_eq!((report.relocated, report.added), (1, 10));
            let moved = host(field.means.val());
            // The dead one's row and the ten appended rows: where their sources were.
            let mut copies: Vec<f32> = vec![moved[3 * (n - 1)]];
            copies.extend((n..n + 10).map(|i| moved[3 * i]));
            copies
        };
        let copies = refine(Some(scores.clone()));
        assert!(
            copies.iter().all(|&x| x < scored as f32),
            "copies of unscored Gaussians: {copies:?}"
        );
        // By opacity alone some of the eleven draws land on the other 179.
        let unscored = refine(None);
        assert!(unscored.iter().any(|&x| x >= scored as f32), "{unscored:?}");
        assert_eq!(refine(Some(scores[..n - 1].to_vec())), unscored);
    }

    /// Gaussians beyond the fence are relocated onto live ones inside it, also after `stop`
    /// (where nothing else is relocated or added); the fence off, they stay.
    #[test]
    fn the_fence_relocates_the_escaped() {
        let n = 6;
        // Gaussians 1 and 4 far out (10 and 40 region radii), 2 nearly transparent.
        let means = [
            0.1, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.3, -40.0, 0.0, 0.0, 0.0,
            -0.4, 0.0,
        ];
        let logits = [2.0, 2.0, -8.0, 1.0, 2.0, 0.5];
        let config = DensifyConfig {
            start: 0,
            stop: 10,
            interval: 5,
            noise_lr: 0.0,
            ..DensifyConfig::default()
        };
        let refine = |fence: f64, step: usize| {
            let mut field = round_field(&means, &logits);
            let mut adam = fresh_adam(&field);
            let context = RefineContext {
                step,
                extent: 1.0,
                seed: 4,
                lr_means: 1.6e-4,
                region: ([0.0; 3], 1.0),
            };
            let mut strategy = McmcDensity::new(DensifyConfig {
                fence,
                ..config.clone()
            });
            let report = strategy
                .refine(context, &mut field, &mut adam)
                .expect("refined");
            (report, host(field.means.val()))
        };
        // After `stop`: only the two escaped move, onto live Gaussians inside the fence.
        let (report, moved) = refine(3.0, 20);
        assert_eq!((report.relocated, report.escaped, report.added), (2, 2, 0));
        assert_eq!(moved.len(), 3 * n);
        for i in [1, 4] {
            let p = &moved[3 * i..3 * i + 3];
            assert!(p.iter().map(|v| v * v).sum::<f32>() < 1.0, "{i}: {p:?}");
        }
        assert_eq!(
            &moved[6..9],
            &means[6..9],
            "the transparent one stays after stop"
        );
        // Before `stop`: the escaped and the dead.
        let (report, _) = refine(3.0, 5);
        assert_eq!((report.relocated, report.escaped), (3, 2));
        // Fence off: after `stop` nothing moves.
        let (report, moved) = refine(0.0, 20);
        assert_eq!((report.relocated, report.escaped), (0, 0));
        assert_eq!(moved, means.to_vec());
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
