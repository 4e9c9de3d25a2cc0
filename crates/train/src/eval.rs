//! Held-out evaluation: PSNR, SSIM and LPIPS (when its weights are there, [`crate::lpips`]) of
//! renders against the eval views, the colour-corrected PSNR and SSIM ([`colour_corrected`]),
//! with `eval.align_steps` the aligned ones (each held-out camera's pose and exposure fitted to
//! its photo first: [`crate::align`]), and side-by-side images. An [`Evaluator`] keeps its
//! renders in a [`ViewCache`] while the field is unchanged (the same generation), so evaluating
//! twice at the same step renders once. It knows the scene
//! and a field, not the trainer: [`Trainer::evaluate`](crate::Trainer::evaluate) calls it.

use std::path::Path;
use std::time::Instant;

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use ember_data::evenly_spaced;
use ember_field::{GaussianField, RenderOptions, SplatBackend, render};
use serde::{Deserialize, Serialize};

use crate::align::{AlignedMetrics, align_view};
use crate::config::EvalConfig;
use crate::error::{TrainError, write_atomically};
use crate::loss::{psnr_from_mse, ssim};
use crate::lpips::{Lpips, MIN_SIDE, load_configured};
use crate::scene::TrainScene;
use crate::view_cache::{CacheStats, ViewCache};
use ember_field::to_host;

/// Metrics of one held-out view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewMetrics {
    /// The view's name.
    pub name: String,
    /// PSNR, dB.
    pub psnr: f32,
    /// SSIM (11x11 Gaussian window).
    pub ssim: f32,
    /// LPIPS (v0.1, AlexNet); `None` without its weights.
    pub lpips: Option<f32>,
    /// PSNR of the render after [`colour_corrected`], dB (`None` in logs older than it).
    #[serde(default)]
    pub cc_psnr: Option<f32>,
    /// SSIM of the render after [`colour_corrected`].
    #[serde(default)]
    pub cc_ssim: Option<f32>,
    /// Whether the photo has a mask: every metric of the view is then over the pixels it
    /// keeps ([`masked_psnr_ssim`]; LPIPS of both images times the mask).
    #[serde(default)]
    pub masked: bool,
    /// The metrics after test-time alignment, with `eval.align_steps` ([`crate::align`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aligned: Option<AlignedMetrics>,
}

/// An evaluation render as the trainer's cache keeps it.
#[derive(Debug, Clone)]
pub struct EvalRender<B: Backend> {
    /// The render clamped to `[0, 1]`, `[H, W, 3]`.
    pub rgb: Tensor<B, 3>,
    /// PSNR against the view's ground truth, dB.
    pub psnr: f32,
    /// SSIM against it.
    pub ssim: f32,
    /// LPIPS against it, when measured.
    pub lpips: Option<f32>,
    /// PSNR after [`colour_corrected`], dB.
    pub cc_psnr: f32,
    /// SSIM after [`colour_corrected`].
    pub cc_ssim: f32,
    /// Whether the metrics are over the pixels of the photo's mask.
    pub masked: bool,
    /// The metrics after test-time alignment, when asked.
    pub aligned: Option<AlignedMetrics>,
}

/// A render next to its ground truth, 8-bit RGB, `[H, 2W, 3]` (render left).
#[derive(Debug, Clone, PartialEq)]
pub struct SideBySide {
    /// The view's name.
    pub name: String,
    /// Width of the pair, pixels (twice the view's).
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// RGB bytes, row-major.
    pub rgb: Vec<u8>,
}

impl SideBySide {
    /// The view's name as a file stem: runs of characters other than ASCII letters, digits and
    /// `-` become one `_` (`./test/r_0` -> `test_r_0`).
    pub fn file_stem(&self) -> String {
        self.name
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("_")
    }

    /// Writes the pair as PNG (atomically).
    pub fn save_png(&self, path: &Path) -> Result<(), TrainError> {
        write_png(path, &self.rgb, self.width, self.height)
    }

    /// Writes the render alone (the pair's left half) as PNG (atomically).
    pub fn save_render_png(&self, path: &Path) -> Result<(), TrainError> {
        let (w, h) = (self.width as usize / 2, self.height as usize);
        let render: Vec<u8> = self
            .rgb
            .chunks_exact(2 * w * 3)
            .flat_map(|row| &row[..w * 3])
            .copied()
            .collect();
        debug_assert_eq!(render.len(), w * h * 3);
        write_png(path, &render, w as u32, h as u32)
    }
}

/// Writes 8-bit RGB `rgb` (`[height, width, 3]`) as a PNG file, atomically.
fn write_png(path: &Path, rgb: &[u8], width: u32, height: u32) -> Result<(), TrainError> {
    let mut bytes = Vec::new();
    image::write_buffer_with_format(
        &mut std::io::Cursor::new(&mut bytes),
        rgb,
        width,
        height,
        image::ExtendedColorType::Rgb8,
        image::ImageFormat::Png,
    )
    .map_err(|e| TrainError::io(path, std::io::Error::other(e)))?;
    write_atomically(path, &bytes)
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    /// Steps completed when it ran.
    pub step: usize,
    /// Mean PSNR over the views, dB.
    pub psnr: f32,
    /// Mean SSIM over the views.
    pub ssim: f32,
    /// Mean LPIPS over the views; `None` without its weights.
    pub lpips: Option<f32>,
    /// Mean colour-corrected PSNR ([`colour_corrected`]), dB.
    pub cc_psnr: f32,
    /// Mean colour-corrected SSIM.
    pub cc_ssim: f32,
    /// Whether the views' photos have masks (see [`ViewMetrics::masked`]).
    #[serde(default)]
    pub masked: bool,
    /// The views' aligned metrics, means over the views, with `eval.align_steps`
    /// ([`crate::align`]).
    pub aligned: Option<AlignedMetrics>,
    /// Why LPIPS is off, on the first evaluation that went without it (said once).
    #[serde(skip)]
    pub lpips_off: Option<String>,
    /// Gaussians.
    pub gaussians: usize,
    /// Wall time of the evaluation, seconds.
    pub seconds: f64,
    /// The run's training time when it ran, seconds
    /// ([`Trainer::training_seconds`](crate::Trainer::training_seconds); `0` from an
    /// [`Evaluator`] outside a run).
    #[serde(default)]
    pub elapsed: f64,
    /// Per view.
    pub views: Vec<ViewMetrics>,
    /// The first `eval.save_images` views, side by side with their ground truth.
    #[serde(skip)]
    pub images: Vec<SideBySide>,
}

/// What one evaluation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalRequest {
    /// The field's generation ([`Trainer::generation`](crate::Trainer::generation)): renders
    /// cached for the same generation are reused.
    pub generation: u64,
    /// The step the report names.
    pub step: usize,
    /// The SH bands rendered.
    pub sh_degree: usize,
    /// Whether the render uses the 2D antialiasing filter (`raster.antialiased`).
    pub antialiased: bool,
    /// Whether LPIPS is measured (with its weights).
    pub lpips: bool,
}

/// Held-out evaluation with its render cache (see the module docs).
#[derive(Debug)]
pub struct Evaluator<B: Backend> {
    config: EvalConfig,
    cache: ViewCache<EvalRender<B>>,
    lpips: LpipsState<B>,
}

/// Whether the evaluator measures LPIPS: its network is loaded at the first evaluation (on the
/// field's device).
#[derive(Debug)]
enum LpipsState<B: Backend> {
    NotLoaded,
    On(Lpips<B>),
    /// Off, and whether that was said.
    Off {
        said: bool,
        why: String,
    },
}

impl<B: SplatBackend> Evaluator<B> {
    /// An evaluator with `config.cache_mib` MiB of cached renders.
    pub fn new(config: &EvalConfig) -> Self {
        Evaluator {
            config: config.clone(),
            cache: ViewCache::new(config.cache_mib << 20),
            lpips: LpipsState::NotLoaded,
        }
    }

    /// Why LPIPS is off, the first time it is asked after the network failed to load.
    fn lpips_off_note(&mut self) -> Option<String> {
        match &mut self.lpips {
            LpipsState::Off { said, why } if !*said => {
                *said = true;
                Some(format!("LPIPS is off: {why}"))
            }
            _ => None,
        }
    }

    /// LPIPS of `rgb` against `target` (`[H, W, 3]`) when the network is on; views smaller
    /// than AlexNet takes turn it off (said once).
    fn lpips_of(
        &mut self,
        rgb: Tensor<B, 3>,
        target: Tensor<B, 3>,
        view: &str,
    ) -> Result<Option<f32>, TrainError> {
        let [height, width, _] = target.dims();
        if height.min(width) < MIN_SIDE && matches!(self.lpips, LpipsState::On(_)) {
            self.lpips = LpipsState::Off {
                said: false,
                why: format!(
                    "the views ({width}x{height} pixels) are smaller than the {MIN_SIDE} pixels \
                     a side AlexNet needs"
                ),
            };
        }
        match &self.lpips {
            LpipsState::On(net) => net
                .image_distance(rgb, target)
                .map(Some)
                .map_err(|e| TrainError::Scene(format!("{view}: {e}"))),
            _ => Ok(None),
        }
    }

    /// Renders held-out view `index` of `scene`, measures it (with the aligned metrics when
    /// `eval.align_steps` asks) and caches it under `generation`.
    fn measure(
        &mut self,
        scene: &TrainScene,
        field: &GaussianField<B>,
        index: usize,
        generation: u64,
        options: &RenderOptions,
        with_lpips: bool,
    ) -> Result<EvalRender<B>, TrainError> {
        let view = &scene.eval[index];
        let image = scene.eval_image(index)?;
        let device = field.means.device();
        let target = image.to_tensor::<B>(&device);
        let mask = image.mask_tensor::<B>(&device);
        let out = render(field, &view.camera, options).map_err(|cause| TrainError::Render {
            view: view.name.clone(),
            cause,
        })?;
        let rgb = out.rgb.clamp(0.0, 1.0);
        let masked = mask.as_ref();
        let (psnr, s) = psnr_ssim(rgb.clone(), target.clone(), masked, &view.name)?;
        let corrected = colour_corrected(rgb.clone(), target.clone(), masked, &view.name)?;
        let (cc_psnr, cc_ssim) = psnr_ssim(corrected, target.clone(), masked, &view.name)?;
        let aligned = match self.config.align_steps {
            0 => None,
            steps => {
                let aligned = align_view(
                    field,
                    &view.camera,
                    &target,
                    masked,
                    options,
                    steps,
                    scene.extent,
                    &view.name,
                )?;
                let (psnr, ssim) = psnr_ssim(aligned.rgb, target.clone(), masked, &view.name)?;
                Some(AlignedMetrics {
                    psnr,
                    ssim,
                    degrees: aligned.degrees,
                    shift: aligned.shift,
                })
            }
        };
        let is_masked = mask.is_some();
        let lpips = match (with_lpips, mask) {
            (false, _) => None,
            (true, Some(mask)) => {
                self.lpips_of(rgb.clone() * mask.clone(), target * mask, &view.name)?
            }
            (true, None) => self.lpips_of(rgb.clone(), target, &view.name)?,
        };
        let evaluated = EvalRender {
            rgb,
            psnr,
            ssim: s,
            lpips,
            cc_psnr,
            cc_ssim,
            masked: is_masked,
            aligned,
        };
        let bytes = evaluated.rgb.shape().num_elements() * size_of::<f32>();
        self.cache
            .insert(index, generation, evaluated.clone(), bytes);
        Ok(evaluated)
    }

    /// Hits and misses of the render cache.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Renders the held-out views of `scene` (at most `eval.max_views`, evenly spaced) with
    /// `request.sh_degree` bands and measures PSNR, SSIM and (when `request.lpips` and its
    /// weights are there) LPIPS against them. Views rendered by an earlier evaluation of the
    /// same `request.generation` of `field` come from the cache. The first
    /// `eval.save_images` views come back side by side with their ground truth in
    /// [`EvalReport::images`].
    pub fn evaluate(
        &mut self,
        scene: &TrainScene,
        field: &GaussianField<B>,
        request: EvalRequest,
    ) -> Result<EvalReport, TrainError> {
        let mut images = Vec::new();
        let pairs = self.config.save_images;
        let mut report = self.evaluate_with(scene, field, request, pairs, &mut |pair| {
            images.push(pair);
            Ok(())
        })?;
        report.images = images;
        Ok(report)
    }

    /// [`Evaluator::evaluate`], handing the first `pairs` views side by side with their
    /// ground truth to `sink` as each is measured instead of keeping them (a whole test split
    /// of full-size pairs need not fit in memory); [`EvalReport::images`] is left empty.
    pub fn evaluate_with(
        &mut self,
        scene: &TrainScene,
        field: &GaussianField<B>,
        request: EvalRequest,
        pairs: usize,
        sink: &mut dyn FnMut(SideBySide) -> Result<(), TrainError>,
    ) -> Result<EvalReport, TrainError> {
        if scene.eval.is_empty() {
            return Err(TrainError::Scene(format!(
                "{} has no held-out views: nothing to evaluate",
                scene.name
            )));
        }
        let EvalRequest {
            generation,
            step,
            sh_degree,
            antialiased,
            lpips: with_lpips,
        } = request;
        let started = Instant::now();
        let device = field.means.device();
        if with_lpips && matches!(self.lpips, LpipsState::NotLoaded) {
            self.lpips = match load_configured(self.config.lpips_weights.as_deref(), &device) {
                Ok(net) => LpipsState::On(net),
                Err(why) => LpipsState::Off { said: false, why },
            };
        }
        let options = RenderOptions::default()
            .with_background(scene.background)
            .with_sh_degree(sh_degree as u32)
            .with_antialiased(antialiased);
        let mut views = Vec::new();
        for (k, index) in evenly_spaced(scene.eval.len(), self.config.max_views)
            .into_iter()
            .enumerate()
        {
            let view = &scene.eval[index];
            let aligning = self.config.align_steps > 0;
            let evaluated = match self.cache.get(index, generation) {
                Some(cached) if cached.aligned.is_none() && aligning => {
                    self.measure(scene, field, index, generation, &options, with_lpips)?
                }
                Some(cached) if cached.lpips.is_some() || !with_lpips => cached,
                Some(mut cached) => {
                    // Rendered by an evaluation that left LPIPS out.
                    let image = scene.eval_image(index)?;
                    let target = image.to_tensor::<B>(&device);
                    let (rgb, target) = match image.mask_tensor::<B>(&device) {
                        Some(mask) => (cached.rgb.clone() * mask.clone(), target * mask),
                        None => (cached.rgb.clone(), target),
                    };
                    cached.lpips = self.lpips_of(rgb, target, &view.name)?;
                    let bytes = cached.rgb.shape().num_elements() * size_of::<f32>();
                    self.cache.insert(index, generation, cached.clone(), bytes);
                    cached
                }
                None => self.measure(scene, field, index, generation, &options, with_lpips)?,
            };
            views.push(ViewMetrics {
                name: view.name.clone(),
                psnr: evaluated.psnr,
                ssim: evaluated.ssim,
                lpips: evaluated.lpips,
                cc_psnr: Some(evaluated.cc_psnr),
                cc_ssim: Some(evaluated.cc_ssim),
                masked: evaluated.masked,
                aligned: evaluated.aligned,
            });
            if k < pairs {
                let truth = scene.eval_image(index)?;
                let rendered = to_host(evaluated.rgb, "eval render")?;
                let (w, h) = (truth.width as usize, truth.height as usize);
                let mut pair = vec![0u8; h * 2 * w * 3];
                for y in 0..h {
                    for x in 0..w {
                        for c in 0..3 {
                            let src = (y * w + x) * 3 + c;
                            pair[(y * 2 * w + x) * 3 + c] = (rendered[src] * 255.0).round() as u8;
                            pair[(y * 2 * w + w + x) * 3 + c] = truth.data[src];
                        }
                    }
                }
                sink(SideBySide {
                    name: view.name.clone(),
                    width: 2 * truth.width,
                    height: truth.height,
                    rgb: pair,
                })?;
            }
        }
        let n = views.len() as f32;
        let lpips = views
            .iter()
            .map(|v| v.lpips)
            .sum::<Option<f32>>()
            .map(|sum| sum / n);
        Ok(EvalReport {
            step,
            psnr: views.iter().map(|v| v.psnr).sum::<f32>() / n,
            ssim: views.iter().map(|v| v.ssim).sum::<f32>() / n,
            lpips,
            cc_psnr: views.iter().filter_map(|v| v.cc_psnr).sum::<f32>() / n,
            cc_ssim: views.iter().filter_map(|v| v.cc_ssim).sum::<f32>() / n,
            masked: views.iter().any(|v| v.masked),
            aligned: mean_aligned(&views),
            lpips_off: self.lpips_off_note(),
            gaussians: field.num_gaussians(),
            seconds: started.elapsed().as_secs_f64(),
            elapsed: 0.0,
            views,
            images: Vec::new(),
        })
    }
}

/// The mean of the views' aligned metrics, when every view has them.
fn mean_aligned(views: &[ViewMetrics]) -> Option<AlignedMetrics> {
    let aligned: Vec<AlignedMetrics> = views.iter().map(|v| v.aligned).collect::<Option<_>>()?;
    let n = aligned.len().max(1);
    let mean = |f: fn(&AlignedMetrics) -> f64| aligned.iter().map(f).sum::<f64>() / n as f64;
    Some(AlignedMetrics {
        psnr: mean(|a| f64::from(a.psnr)) as f32,
        ssim: mean(|a| f64::from(a.ssim)) as f32,
        degrees: mean(|a| a.degrees),
        shift: mean(|a| a.shift),
    })
}

/// PSNR (dB) and SSIM of `rgb` against `target`, both `[H, W, 3]` in `[0, 1]`; with a `mask`
/// `[H, W, 1]`, over the pixels it keeps (see [`masked_psnr_ssim`]).
fn psnr_ssim<B: SplatBackend>(
    rgb: Tensor<B, 3>,
    target: Tensor<B, 3>,
    mask: Option<&Tensor<B, 3>>,
    view: &str,
) -> Result<(f32, f32), TrainError> {
    if let Some(mask) = mask {
        return Ok(masked_psnr_ssim(rgb, target, mask.clone()));
    }
    let mse: f32 = (rgb.clone() - target.clone())
        .powi_scalar(2)
        .mean()
        .into_scalar()
        .elem();
    let s: f32 = ssim(rgb, target)
        .map_err(|cause| TrainError::Loss {
            view: view.to_string(),
            cause,
        })?
        .into_scalar()
        .elem();
    Ok((measured_psnr(mse), s))
}

/// The mean squared error of a render that matches an 8-bit target to within rounding: the
/// variance of a uniform rounding error, `(1/255)² / 12`, on `[0, 1]` images.
pub const QUANTISATION_MSE: f32 = 1.0 / (12.0 * 255.0 * 255.0);

/// A view's PSNR as evaluation reports it: from its squared error, floored at
/// [`QUANTISATION_MSE`] (58.9 dB): the targets are 8-bit, so a closer match is not measurable,
/// and a view drawn exactly (a synthetic scene's empty background) does not make the mean
/// infinite.
pub fn measured_psnr(mse: f32) -> f32 {
    psnr_from_mse(mse.max(QUANTISATION_MSE))
}

/// PSNR (dB) and SSIM of `rgb` against `target` (`[H, W, 3]`) over the pixels `mask`
/// (`[H, W, 1]` weights) keeps: the squared error and the SSIM map are averaged with the mask's
/// weights, both images multiplied by the mask first, so a masked-out pixel's content changes
/// nothing (an SSIM window that straddles the mask's edge sees zeros in both images there).
pub fn masked_psnr_ssim<B: Backend>(
    rgb: Tensor<B, 3>,
    target: Tensor<B, 3>,
    mask: Tensor<B, 3>,
) -> (f32, f32) {
    let [h, w, c] = rgb.dims();
    let (rgb, target) = (rgb * mask.clone(), target * mask.clone());
    let kept: f32 = mask.clone().sum().into_scalar().elem();
    let squared: f32 = (rgb.clone() - target.clone())
        .powi_scalar(2)
        .sum()
        .into_scalar()
        .elem();
    let map = crate::loss::burn_ops::ssim_map(rgb, target);
    let weights = mask.reshape([1, 1, h, w]);
    let ssim_sum: f32 = (map * weights).sum().into_scalar().elem();
    (
        measured_psnr(squared / (kept * c as f32)),
        ssim_sum / (kept * c as f32),
    )
}

/// `render` after the affine colour map that best fits it to `target` (both `[H, W, 3]`):
/// `M rgb + b`, `M` 3x3 and `b` 3, chosen by least squares over every pixel, then clamped to
/// `[0, 1]`. The PSNR and SSIM of this image are the colour-corrected metrics (`cc_psnr`,
/// `cc_ssim`): what the render is worth when a photo's exposure and white balance, which no
/// scene can predict, are forgiven. The normal equations are summed on the device (a `[4, 4]`
/// and a `[4, 3]` read back) and solved in f64, with a ridge of `1e-6` times their trace so a
/// flat render (a single colour) still has a solution. With a `mask` (`[H, W, 1]` weights)
/// the fit is over the pixels it keeps.
pub fn colour_corrected<B: Backend>(
    render: Tensor<B, 3>,
    target: Tensor<B, 3>,
    mask: Option<&Tensor<B, 3>>,
    view: &str,
) -> Result<Tensor<B, 3>, TrainError> {
    let [h, w, _] = render.dims();
    let device = render.device();
    let x = Tensor::cat(
        vec![
            render.reshape([h * w, 3]),
            Tensor::ones([h * w, 1], &device),
        ],
        1,
    );
    let y = target.reshape([h * w, 3]);
    let (fitted, y) = match mask {
        Some(mask) => {
            let weights = mask.clone().reshape([h * w, 1]);
            (x.clone() * weights.clone(), y * weights)
        }
        None => (x.clone(), y),
    };
    let xt = fitted.clone().transpose();
    let read = |t: Tensor<B, 2>| {
        to_host(t, "colour correction")
            .map(|v| v.iter().map(|&v| v as f64).collect::<Vec<f64>>())
            .map_err(|e| TrainError::Scene(format!("{view}: {e}")))
    };
    let xtx = read(xt.clone().matmul(fitted))?;
    let xty = read(xt.matmul(y))?;
    let map = solve_normal_equations(&xtx, &xty);
    let map = Tensor::<B, 2>::from_data(
        burn::tensor::TensorData::new(map.iter().map(|&v| v as f32).collect(), [4, 3]),
        &device,
    );
    Ok(x.matmul(map).clamp(0.0, 1.0).reshape([h, w, 3]))
}

/// `W [4, 3]` (row-major) solving `(A + r I) W = Y` for `A [4, 4]` and `Y [4, 3]`, with the
/// ridge `r` = `1e-6 trace(A)`; Gaussian elimination with partial pivoting.
fn solve_normal_equations(a: &[f64], y: &[f64]) -> Vec<f64> {
    let ridge = 1e-6 * (0..4).map(|i| a[i * 5]).sum::<f64>().max(1e-12);
    let mut m = [[0.0f64; 7]; 4];
    for i in 0..4 {
        for j in 0..4 {
            m[i][j] = a[i * 4 + j] + if i == j { ridge } else { 0.0 };
        }
        for c in 0..3 {
            m[i][4 + c] = y[i * 3 + c];
        }
    }
    for col in 0..4 {
        let pivot = (col..4)
            .max_by(|&p, &q| m[p][col].abs().total_cmp(&m[q][col].abs()))
            .unwrap_or(col);
        m.swap(col, pivot);
        let pivot_row = m[col];
        for (row, values) in m.iter_mut().enumerate() {
            if row != col {
                let factor = values[col] / pivot_row[col];
                for (value, pivot) in values.iter_mut().zip(&pivot_row).skip(col) {
                    *value -= factor * pivot;
                }
            }
        }
    }
    (0..4)
        .flat_map(|i| (0..3).map(move |c| (i, c)))
        .map(|(i, c)| m[i][4 + c] / m[i][i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_drawn_exactly_measures_at_the_quantisation_ceiling() {
        assert!(
            (measured_psnr(0.0) - 58.92).abs() < 0.01,
            "{}",
            measured_psnr(0.0)
        );
        assert_eq!(measured_psnr(0.01), psnr_from_mse(0.01));
    }

    #[test]
    fn masked_metrics_ignore_what_the_mask_hides() {
        let device = Default::default();
        let image = |seed: u64| {
            let mut state = seed;
            let values: Vec<f32> = (0..16 * 12 * 3)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 40) as f32 / (1u64 << 24) as f32
                })
                .collect();
            Tensor::<ember_kernels::backend::Cpu, 3>::from_data(
                burn::tensor::TensorData::new(values, [12, 16, 3]),
                &device,
            )
        };
        let (render, target) = (image(1), image(2));
        // The mask keeps the right half.
        let keep: Vec<f32> = (0..12 * 16)
            .map(|i| if i % 16 >= 8 { 1.0 } else { 0.0 })
            .collect();
        let mask = Tensor::from_data(burn::tensor::TensorData::new(keep, [12, 16, 1]), &device);
        // Other content on the left half of both.
        let left = mask.clone().neg() + 1.0;
        let other_render = render.clone() * mask.clone() + image(3) * left.clone();
        let other_target = target.clone() * mask.clone() + image(4) * left;
        let a = masked_psnr_ssim(render.clone(), target.clone(), mask.clone());
        let b = masked_psnr_ssim(other_render, other_target, mask.clone());
        assert_eq!(a, b);
        // The right half alone, measured as an image of its own, has the same PSNR.
        let half = |t: Tensor<ember_kernels::backend::Cpu, 3>| t.narrow(1, 8, 8);
        let alone = psnr_from_mse(
            (half(render.clone()) - half(target.clone()))
                .powi_scalar(2)
                .mean()
                .into_scalar(),
        );
        assert!((a.0 - alone).abs() < 1e-4, "{} vs {alone}", a.0);
        // A mask that keeps everything gives the plain metrics.
        let all = Tensor::ones([12, 16, 1], &device);
        let (psnr, s) = masked_psnr_ssim(render.clone(), target.clone(), all);
        let plain_ssim: f32 = ssim(render.clone(), target.clone()).unwrap().into_scalar();
        let plain = crate::loss::psnr(render, target);
        assert!((psnr - plain).abs() < 1e-4 && (s - plain_ssim).abs() < 1e-4);
    }

    #[test]
    fn the_colour_correction_undoes_an_affine_colour_map() {
        use ember_kernels::backend::Cpu;
        let (h, w) = (6, 5);
        let render: Vec<f32> = (0..h * w * 3)
            .map(|i| ((i * 37 % 101) as f32 / 101.0) * 0.8 + 0.1)
            .collect();
        // A photo: the render under a gain, a channel mix and an offset, all inside [0, 1].
        let map = [[0.7, 0.05, 0.0], [0.1, 0.8, 0.02], [0.0, 0.04, 0.6]];
        let offset = [0.05, 0.02, 0.1];
        let target: Vec<f32> = render
            .chunks(3)
            .flat_map(|p| {
                (0..3).map(move |c| (0..3).map(|k| map[c][k] * p[k]).sum::<f32>() + offset[c])
            })
            .collect();
        let device = Default::default();
        let tensor = |v: Vec<f32>| {
            Tensor::<Cpu, 3>::from_data(burn::tensor::TensorData::new(v, [h, w, 3]), &device)
        };
        let corrected =
            colour_corrected(tensor(render), tensor(target.clone()), None, "v").unwrap();
        let corrected = to_host(corrected, "corrected").unwrap();
        let worst = corrected
            .iter()
            .zip(&target)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-4, "worst {worst}");
    }
}
