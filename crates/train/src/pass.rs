//! One step's forward and backward on one replica: render the views, take the loss against the
//! photos (each render through its photo's appearance transform first, when the run learns
//! them: [`crate::appearance`], the photo's clipped highlights then read as lower bounds:
//! [`bounded_by_saturation`]; then times the photo's mask, when it has one, as the photo
//! already is), and return the gradients, before any reduction over replicas.
//!
//! Two ways, with the same result:
//! - [`direct_forward`], the default: the ops' forward and backward called in turn on the inner
//!   backend. The photometric loss is one op that returns its gradient with the loss, and the
//!   rasterizer and the projection have hand-written backwards, so Burn's autodiff graph would
//!   only record what these calls do anyway; without it the host records a step with far
//!   fewer operations, and the loss is summed only on a step that reads it.
//! - [`autodiff_forward`], for a [`TrainingLoss`] of the user's own: the render on the autodiff
//!   backend and `backward()` through whatever the loss does.
//!
//! With `raster.antialiased`, both draw the field through its 3D smoothing filter
//! ([`ember_field::SmoothingFilter`]): the direct pass folds it in before the render and runs
//! its chain rule after the render's backward, the autodiff pass records the fold; the
//! regularisers read the raw parameters in both.
//!
//! With `[poses] refine`, the direct pass runs the projection's backward once per view and
//! returns each camera's pose gradient beside the field's ([`crate::poses`]); the autodiff pass
//! does not (a loss of one's own trains with the given poses).
//!
//! Each returns a [`Forward`]: what the step reads, and [`Forward::backward`]. On ndarray, the
//! autodiff pass with the photometric loss and the direct pass give the same
//! bits: the same kernels run on the same values, and every scale the autodiff graph applies
//! (the batch's `1 / B`) is applied here in the same form.

use burn::tensor::activation::sigmoid;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorPrimitive};
use ember_field::{
    Camera, GaussianField, RenderBackward, RenderOptions, RenderPass, SmoothingFilter,
    SplatAutodiffBackend, panorama_batch_pass, render_batch, render_pass,
};
use ember_kernels::{LossOps, LossOptions, LossOutputs, SplatBackend};

use crate::adam::FieldGradients;
use crate::appearance::Transform;
use crate::error::TrainError;
use crate::loss::photometric_loss;

/// The inner (non-autodiff) backend of `B`: the one a pass calls the ops on.
pub type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// A training loss of one's own: the loss of one rendered view `[H, W, 3]` against its photo
/// `[H, W, 3]`, as a one-element tensor, differentiable through Burn's autodiff. The trainer
/// averages it over a batch's views and adds the configured regularisers (see
/// [`Trainer::set_loss`](crate::Trainer::set_loss)).
pub trait TrainingLoss<B: AutodiffBackend>: Send {
    /// The loss of `rendered` against `target`.
    fn loss(&self, rendered: Tensor<B, 3>, target: Tensor<B, 3>) -> Result<Tensor<B, 1>, String>;
}

impl<B, F> TrainingLoss<B> for F
where
    B: AutodiffBackend,
    F: Fn(Tensor<B, 3>, Tensor<B, 3>) -> Result<Tensor<B, 1>, String> + Send,
{
    fn loss(&self, rendered: Tensor<B, 3>, target: Tensor<B, 3>) -> Result<Tensor<B, 1>, String> {
        self(rendered, target)
    }
}

/// What a pass renders and what it is asked for.
pub(crate) struct PassInputs<'a, I: burn::tensor::backend::Backend> {
    /// This replica's views: cameras, photos `[H, W, 3]` and names (for errors), in order.
    pub cameras: &'a [Camera],
    pub targets: &'a [Tensor<I, 3>],
    /// Each view's mask `[H, W, 1]` (its photo in `targets` is already multiplied by it), or
    /// none at all. The render is multiplied by it before the loss, so a masked-out pixel
    /// neither adds to the loss nor sends a gradient back.
    pub masks: &'a [Tensor<I, 3>],
    pub names: &'a [String],
    /// Each view's appearance row `[1, P]` (see [`crate::appearance`]), or none at all: the
    /// views are compared with the field's colours as they are.
    pub appearance: &'a [Tensor<I, 2>],
    /// How the rows map a render (`None` when the run learns no appearance).
    pub transform: Option<Transform>,
    /// Whether a view with an appearance row compares its photo's saturated channels as a
    /// bound (`appearance.saturation_bound`: [`bounded_by_saturation`]).
    pub saturation_bound: bool,
    /// The whole batch's size (all replicas): each view's loss is divided by it.
    pub batch: usize,
    pub render: RenderOptions,
    pub loss: LossOptions,
    /// The regularisers' weights, divided by the replicas (their sum is the configured one).
    pub opacity_reg: f64,
    pub scale_reg: f64,
    /// Whether the step reads the loss, or the render's mean squared error.
    pub wants_loss: bool,
    pub wants_mse: bool,
    /// Whether the backward returns each view's pose gradient ([`crate::poses`]; the direct
    /// pass only).
    pub wants_poses: bool,
    /// The field's 3D smoothing filter, when the run draws through one.
    pub smoothing: Option<&'a SmoothingFilter<I>>,
    /// The cameras are whole equirectangular panoramas (`data.whole_panoramas`), drawn by
    /// [`ember_field::panorama_batch_pass`] (the direct pass only).
    pub panoramas: bool,
}

impl<I: burn::tensor::backend::Backend> PassInputs<'_, I> {
    /// View `j`'s appearance transform and row, when the run learns them.
    fn appearance_row(&self, j: usize) -> Option<(Transform, &Tensor<I, 2>)> {
        Some((self.transform?, self.appearance.get(j)?))
    }
}

/// A pass after its forward: what the step reads, and what its backward needs.
pub(crate) struct Forward<B: SplatAutodiffBackend> {
    /// This replica's share of the batch's loss `[1]`, when asked.
    pub loss: Option<Tensor<Inner<B>, 1>>,
    /// This replica's share of the batch's mean squared error `[1]`, when asked.
    pub mse: Option<Tensor<Inner<B>, 1>>,
    /// `[C N, 3]`: the projection's extents.
    pub extents: Tensor<Inner<B>, 2, Int>,
    /// `[2]` tile pairs of the render (see `ember_kernels::RasterState::pairs`).
    pub tile_pairs: Option<Tensor<Inner<B>, 1, Int>>,
    backward: Backward<B>,
}

/// What the backward of each kind of pass needs.
enum Backward<B: SplatAutodiffBackend> {
    Direct(Box<DirectBackward<Inner<B>>>),
    Autodiff {
        loss: Tensor<B, 1>,
        leaves: Box<GaussianField<B>>,
        probe: Tensor<B, 2>,
        appearance: Vec<Tensor<B, 2>>,
    },
}

/// The direct pass's backward: the loss's gradient with respect to the colour images, and the
/// render's backward (the rasterizer's, then the projection's: [`ember_field::render_pass`]).
struct DirectBackward<I: SplatBackend> {
    grad_rgb: Tensor<I, 4>,
    render: RenderBackward<I>,
    /// The regularisers' gradients, added to the projection's.
    opacity_reg: Option<Tensor<I, 1>>,
    scale_reg: Option<Tensor<I, 2>>,
    /// The views' appearance gradients, computed with the loss's.
    appearance: Vec<Tensor<I, 2>>,
    /// Whether to return each view's pose gradient.
    wants_poses: bool,
    /// The smoothing filter the field was drawn through, with the raw field's log-scales and
    /// opacity logits its chain rule reads.
    smoothing: Option<(SmoothingFilter<I>, Tensor<I, 2>, Tensor<I, 1>)>,
    view: String,
}

/// The gradients of a pass.
pub(crate) struct PassGradients<I: burn::tensor::backend::Backend> {
    /// The field's.
    pub field: FieldGradients<I>,
    /// The `[C N, 3]` screen-space statistics (`None` for an empty field).
    pub screen: Option<Tensor<I, 2>>,
    /// Each view's appearance gradient `[1, P]`, in order (empty without appearance).
    pub appearance: Vec<Tensor<I, 2>>,
    /// Each view's pose gradient `[dL/dtau, dL/domega]` at its camera as drawn (see
    /// [`crate::poses`]), in order (empty unless asked).
    pub poses: Vec<[f64; 6]>,
}

/// The views' mean squared error over the batch, as this replica's share of it: `rgb [C, H, W,
/// 3]` clamped to `[0, 1]` against the photos, over the pixels their masks keep (weighted by
/// them) when they have masks.
fn batch_mse<I: burn::tensor::backend::Backend>(
    rgb: Tensor<I, 4>,
    targets: &[Tensor<I, 3>],
    masks: &[Tensor<I, 3>],
    batch: usize,
) -> Tensor<I, 1> {
    let share = targets.len();
    let targets = Tensor::stack(targets.to_vec(), 0);
    let mse = match masks.is_empty() {
        true => (rgb.clamp(0.0, 1.0) - targets).powi_scalar(2).mean(),
        false => {
            let masks = Tensor::stack(masks.to_vec(), 0);
            let kept = masks.clone().sum().mul_scalar(3.0);
            ((rgb.clamp(0.0, 1.0) * masks) - targets)
                .powi_scalar(2)
                .sum()
                .div(kept)
        }
    };
    if share == batch {
        mse
    } else {
        mse * (share as f32 / batch as f32)
    }
}

/// The regularisers of a pass: their gradients (`None` for one that is off) and their terms
/// of the loss.
struct Regularisers<I: burn::tensor::backend::Backend> {
    opacity_grad: Option<Tensor<I, 1>>,
    scale_grad: Option<Tensor<I, 2>>,
    terms: Vec<Tensor<I, 1>>,
}

/// The regularisers' terms and gradients, through a small autodiff graph of their own (the
/// same ops and backward as in a whole step's graph).
fn regularisers<B: SplatAutodiffBackend>(
    field: &GaussianField<Inner<B>>,
    inputs: &PassInputs<'_, Inner<B>>,
) -> Regularisers<Inner<B>> {
    let mut terms = Vec::new();
    let opacity = (inputs.opacity_reg > 0.0).then(|| {
        let logits = Tensor::<B, 1>::from_inner(field.opacity_logits.val()).require_grad();
        let term = sigmoid(logits.clone()).mean() * inputs.opacity_reg;
        terms.push(term.clone().inner());
        logits
            .grad(&term.backward())
            .expect("the term reads the logits")
    });
    let scale = (inputs.scale_reg > 0.0).then(|| {
        let log_scales = Tensor::<B, 2>::from_inner(field.log_scales.val()).require_grad();
        let term = log_scales.clone().exp().mean() * inputs.scale_reg;
        terms.push(term.clone().inner());
        log_scales
            .grad(&term.backward())
            .expect("the term reads the scales")
    });
    Regularisers {
        opacity_grad: opacity,
        scale_grad: scale,
        terms,
    }
}

/// The loss of the batch from its views' losses: their sum over the batch's size, plus the
/// regularisers' terms (the order of a step's autodiff graph).
fn batch_loss<I: burn::tensor::backend::Backend>(
    views: Vec<Tensor<I, 1>>,
    batch: usize,
    terms: Vec<Tensor<I, 1>>,
) -> Tensor<I, 1> {
    let mut loss = views
        .into_iter()
        .reduce(|sum, view| sum + view)
        .expect("a batch holds at least one view");
    if batch > 1 {
        loss = loss / batch as f32;
    }
    terms.into_iter().fold(loss, |loss, term| loss + term)
}

/// The forward of the default pass (see the module docs): `field` must hold at least one
/// Gaussian.
pub(crate) fn direct_forward<B: SplatAutodiffBackend>(
    field: &GaussianField<Inner<B>>,
    inputs: &PassInputs<'_, Inner<B>>,
) -> Result<Forward<B>, TrainError> {
    let render_error = |cause: ember_field::RenderError| TrainError::Render {
        view: inputs.names[0].clone(),
        cause,
    };
    let cameras = inputs.cameras;
    let (h, w, views) = (
        cameras[0].height as usize,
        cameras[0].width as usize,
        cameras.len(),
    );
    let drawn = inputs
        .smoothing
        .map(|filter| filter.apply(field))
        .transpose()?;
    let RenderPass {
        images,
        extents,
        tile_pairs,
        backward: render,
    } = match inputs.panoramas {
        false => render_pass(drawn.as_ref().unwrap_or(field), cameras, &inputs.render),
        true => panorama_batch_pass(drawn.as_ref().unwrap_or(field), cameras, &inputs.render),
    }
    .map_err(render_error)?;
    let mut losses = Vec::with_capacity(views);
    let mut grads = Vec::with_capacity(views);
    let mut appearance_grads = Vec::with_capacity(inputs.appearance.len());
    let mut compared_images = Vec::new();
    // The batch's loss is the mean of its views': autodiff scales each view's gradient by
    // `1 / B` (as `1.0 / B` in f32), and by nothing for a batch of one.
    let scale = |grad: Tensor<Inner<B>, 3>| match inputs.batch {
        1 => grad,
        b => grad.mul_scalar(1.0 / b as f32),
    };
    for (j, target) in inputs.targets.iter().enumerate() {
        let rendered = images.rgb(j);
        let row = inputs.appearance_row(j);
        let compared = match row {
            Some((transform, row)) => transform.apply(rendered.clone(), row.clone()),
            None => rendered.clone(),
        };
        if inputs.wants_mse && row.is_some() {
            compared_images.push(compared.clone());
        }
        let mask = inputs.masks.get(j);
        let compared = match mask {
            Some(mask) => compared * mask.clone(),
            None => compared,
        };
        let bounded = (inputs.saturation_bound && row.is_some())
            .then(|| bounded_by_saturation(target.clone(), compared.clone()));
        let (loss, grad) =
            view_loss::<Inner<B>>(compared, bounded.as_ref().unwrap_or(target), inputs, j)?;
        losses.extend(loss);
        // Scaled, then masked: the order of the autodiff pass's backward.
        let grad = match mask {
            Some(mask) => scale(grad) * mask.clone(),
            None => scale(grad),
        };
        match row {
            Some((transform, row)) => {
                let (grad, grad_row) = transform.apply_backward(rendered, row.clone(), grad);
                grads.push(grad);
                appearance_grads.push(grad_row);
            }
            None => grads.push(grad),
        }
    }
    let grad_rgb = match views {
        1 => grads.remove(0).reshape([1, h, w, 3]),
        _ => Tensor::stack(grads, 0),
    };
    let Regularisers {
        opacity_grad: opacity_reg,
        scale_grad: scale_reg,
        terms,
    } = regularisers::<B>(field, inputs);
    let mse = inputs.wants_mse.then(|| {
        let rgb = match compared_images.is_empty() {
            true => images.rgb_batch(),
            false => Tensor::stack(compared_images, 0),
        };
        batch_mse(rgb, inputs.targets, inputs.masks, inputs.batch)
    });
    Ok(Forward {
        loss: inputs
            .wants_loss
            .then(|| batch_loss(losses, inputs.batch, terms)),
        mse,
        extents,
        tile_pairs: Some(tile_pairs),
        backward: Backward::Direct(Box::new(DirectBackward {
            grad_rgb,
            render,
            opacity_reg,
            scale_reg,
            appearance: appearance_grads,
            wants_poses: inputs.wants_poses,
            smoothing: inputs.smoothing.map(|filter| {
                (
                    filter.clone(),
                    field.log_scales.val(),
                    field.opacity_logits.val(),
                )
            }),
            view: inputs.names[0].clone(),
        })),
    })
}

/// A photo's channel value at or above which it counts as saturated: 254.5 / 255, between the
/// two top 8-bit values.
const SATURATED: f32 = 254.5 / 255.0;

/// `target [H, W, 3]` with each saturated channel value (see [`SATURATED`]) raised to the
/// `compared` render's where that is brighter: a clipped photo says only "at least this bright"
/// there, so a brighter render adds no loss (the L1 term's gradient at a zero difference is
/// zero) and a darker one is pulled up as before. `compared` is the render as the loss sees it
/// (transformed, masked); no gradient flows through the raised target.
fn bounded_by_saturation<I: burn::tensor::backend::Backend>(
    target: Tensor<I, 3>,
    compared: Tensor<I, 3>,
) -> Tensor<I, 3> {
    let saturated = target.clone().greater_equal_elem(SATURATED);
    let raised = target.clone().max_pair(compared.detach());
    target.mask_where(saturated, raised)
}

/// View `j`'s photometric loss `[1]` (when the step reads it) and its gradient with respect to
/// `rendered` `[H, W, 3]` (the fused op computes both in one pass).
fn view_loss<I: LossOps>(
    rendered: Tensor<I, 3>,
    target: &Tensor<I, 3>,
    inputs: &PassInputs<'_, I>,
    j: usize,
) -> Result<(Option<Tensor<I, 1>>, Tensor<I, 3>), TrainError> {
    if rendered.dims() != target.dims() {
        return Err(TrainError::Loss {
            view: inputs.names[j].clone(),
            cause: ember_kernels::LossError::ShapeMismatch {
                rendered: rendered.dims(),
                target: target.dims(),
            },
        });
    }
    let outputs = match inputs.wants_loss {
        true => LossOutputs::Both,
        false => LossOutputs::Gradient,
    };
    let out = I::photometric_loss_forward(
        rendered.into_primitive().tensor(),
        target.clone().into_primitive().tensor(),
        inputs.loss,
        outputs,
    );
    let grad = out.grad.expect("asked for the gradient");
    Ok((
        out.loss
            .map(|loss| Tensor::from_primitive(TensorPrimitive::Float(loss))),
        Tensor::from_primitive(TensorPrimitive::Float(grad)),
    ))
}

impl<B: SplatAutodiffBackend> Forward<B> {
    /// The pass's backward.
    pub(crate) fn backward(self) -> Result<PassGradients<Inner<B>>, TrainError> {
        match self.backward {
            Backward::Direct(direct) => direct.run(),
            Backward::Autodiff {
                loss,
                leaves,
                probe,
                appearance,
            } => {
                let gradients = loss.backward();
                let grads = FieldGradients {
                    means: leaves.means.grad(&gradients),
                    quats: leaves.quats.grad(&gradients),
                    log_scales: leaves.log_scales.grad(&gradients),
                    opacity_logits: leaves.opacity_logits.grad(&gradients),
                    sh_dc: leaves.sh_dc.grad(&gradients),
                    sh_rest: leaves.sh_rest.grad(&gradients),
                };
                Ok(PassGradients {
                    field: grads,
                    screen: probe.grad(&gradients),
                    appearance: appearance
                        .iter()
                        .map(|row| {
                            row.grad(&gradients)
                                .unwrap_or_else(|| row.clone().inner().zeros_like())
                        })
                        .collect(),
                    poses: Vec::new(),
                })
            }
        }
    }
}

impl<I: SplatBackend> DirectBackward<I> {
    /// The render's backward, plus the regularisers.
    fn run(self) -> Result<PassGradients<I>, TrainError> {
        let view = self.view;
        let g = self
            .render
            .run(self.grad_rgb, self.wants_poses)
            .map_err(|cause| TrainError::Render { view, cause })?;
        let (log_scales, opacity_logits) = match self.smoothing {
            Some((filter, raw_log_scales, raw_logits)) => {
                filter.backward(raw_log_scales, raw_logits, g.log_scales, g.opacity_logits)?
            }
            None => (g.log_scales, g.opacity_logits),
        };
        let grads = FieldGradients {
            means: Some(g.means),
            quats: Some(g.quats),
            log_scales: Some(match self.scale_reg {
                Some(reg) => log_scales + reg,
                None => log_scales,
            }),
            opacity_logits: Some(match self.opacity_reg {
                Some(reg) => opacity_logits + reg,
                None => opacity_logits,
            }),
            sh_dc: Some(g.sh_dc),
            sh_rest: Some(g.sh_rest),
        };
        Ok(PassGradients {
            field: grads,
            screen: Some(g.screen),
            appearance: self.appearance,
            poses: g.poses,
        })
    }
}

/// The forward through Burn's autodiff with `loss_fn` per view (see the module docs).
pub(crate) fn autodiff_forward<B: SplatAutodiffBackend>(
    field: &GaussianField<Inner<B>>,
    inputs: &PassInputs<'_, Inner<B>>,
    loss_fn: &dyn TrainingLoss<B>,
) -> Result<Forward<B>, TrainError> {
    let leaves = GaussianField::<B>::from_tensors(
        Tensor::from_inner(field.means.val()),
        Tensor::from_inner(field.quats.val()),
        Tensor::from_inner(field.log_scales.val()),
        Tensor::from_inner(field.opacity_logits.val()),
        Tensor::from_inner(field.sh_dc.val()),
        Tensor::from_inner(field.sh_rest.val()),
        None,
    )?;
    let drawn = inputs
        .smoothing
        .map(|filter| {
            SmoothingFilter::<B>::from_variance(Tensor::from_inner(filter.variance.clone()))
                .apply(&leaves)
        })
        .transpose()?;
    let out = render_batch(
        drawn.as_ref().unwrap_or(&leaves),
        inputs.cameras,
        &inputs.render,
    )
    .map_err(|cause| TrainError::Render {
        view: inputs.names[0].clone(),
        cause,
    })?;
    let [views, h, w, _] = out.rgb.dims();
    let mut losses = Vec::with_capacity(views);
    let rows: Vec<Tensor<B, 2>> = inputs
        .appearance
        .iter()
        .map(|row| Tensor::from_inner(row.clone()).require_grad())
        .collect();
    let mut compared_images = Vec::new();
    for (j, target) in inputs.targets.iter().enumerate() {
        // One view is the batch whole: a narrow would add an operation to record and, in the
        // backward, a zero image to assign its gradient into.
        let mut rendered = match views {
            1 => out.rgb.clone().reshape([h, w, 3]),
            _ => out.rgb.clone().narrow(0, j, 1).reshape([h, w, 3]),
        };
        let mut target = Tensor::<B, 3>::from_inner(target.clone());
        let transformed = match (rows.get(j), inputs.transform) {
            (Some(row), Some(transform)) => {
                rendered = transform.apply(rendered, row.clone());
                if inputs.wants_mse {
                    compared_images.push(rendered.clone().inner());
                }
                true
            }
            _ => false,
        };
        if let Some(mask) = inputs.masks.get(j) {
            rendered = rendered * Tensor::from_inner(mask.clone());
        }
        if inputs.saturation_bound && transformed {
            target = bounded_by_saturation(target, rendered.clone());
        }
        losses.push(
            loss_fn
                .loss(rendered, target)
                .map_err(|message| TrainError::CustomLoss {
                    view: inputs.names[j].clone(),
                    message,
                })?,
        );
    }
    let mut loss = batch_loss(losses, inputs.batch, Vec::new());
    if inputs.opacity_reg > 0.0 && field.num_gaussians() > 0 {
        loss = loss + sigmoid(leaves.opacity_logits.val()).mean() * inputs.opacity_reg;
    }
    if inputs.scale_reg > 0.0 && field.num_gaussians() > 0 {
        loss = loss + leaves.log_scales.val().exp().mean() * inputs.scale_reg;
    }
    let mse = inputs.wants_mse.then(|| {
        let rgb = match compared_images.is_empty() {
            true => out.rgb.clone().inner(),
            false => Tensor::stack(compared_images, 0),
        };
        batch_mse(rgb, inputs.targets, inputs.masks, inputs.batch)
    });
    Ok(Forward {
        loss: inputs.wants_loss.then(|| loss.clone().inner()),
        mse,
        extents: out.aux.extents.inner(),
        tile_pairs: out.aux.tile_pairs.map(|t| t.inner()),
        backward: Backward::Autodiff {
            loss,
            leaves: Box::new(leaves),
            probe: out.aux.screen_grads,
            appearance: rows,
        },
    })
}

/// The photometric loss as a [`TrainingLoss`] (what [`direct_forward`] computes, through
/// autodiff): for tests and as an example of the trait.
pub fn photometric<B: AutodiffBackend + LossOps>(options: LossOptions) -> impl TrainingLoss<B> {
    move |rendered: Tensor<B, 3>, target: Tensor<B, 3>| {
        photometric_loss(rendered, target, options).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::{look_at_origin, procedural_field};
    use ember_field::SmoothingOptions;
    use ember_kernels::backend::Cpu;

    type B = burn::backend::Autodiff<Cpu>;

    /// The direct pass chains the 3D smoothing filter's gradient by hand, the autodiff pass
    /// differentiates its fold: the same gradients, to the autodiff fold's rounding. The
    /// filter is as wide as the Gaussians (`strength` 1 squared pixel from two units away:
    /// the fold's factors far from 1), so a wrong or missing chain would be far off. (A whole run would not show it: Adam divides
    /// each parameter's gradient by its own size, and a factor that changes slowly drops out.)
    #[test]
    fn both_passes_chain_the_smoothing_filter_alike() {
        let device = Default::default();
        let field = procedural_field::<Cpu>(800, 3, &device).unwrap();
        let camera = look_at_origin([1.6, -1.1, 0.8], 48);
        let filter = SmoothingFilter::from_cameras(
            field.means.val(),
            &[camera],
            SmoothingOptions {
                strength: 1.0,
                ..Default::default()
            },
        );
        let target = Tensor::<Cpu, 3>::full([48, 48, 3], 0.3, &device);
        let loss = LossOptions { ssim_lambda: 0.2 };
        let names = ["view".to_string()];
        let inputs = PassInputs {
            cameras: &[camera],
            targets: std::slice::from_ref(&target),
            masks: &[],
            names: &names,
            appearance: &[],
            transform: None,
            saturation_bound: false,
            batch: 1,
            render: RenderOptions::default().with_antialiased(true),
            loss,
            opacity_reg: 0.0,
            scale_reg: 0.0,
            wants_loss: true,
            wants_mse: false,
            wants_poses: false,
            smoothing: Some(&filter),
            panoramas: false,
        };
        let direct = direct_forward::<B>(&field, &inputs)
            .unwrap()
            .backward()
            .unwrap()
            .field;
        let autodiff = autodiff_forward::<B>(&field, &inputs, &photometric(loss))
            .unwrap()
            .backward()
            .unwrap()
            .field;
        let host = |t: Option<Tensor<Cpu, 2>>| ember_field::to_host(t.unwrap(), "grad").unwrap();
        let pairs = [
            (
                "log_scales",
                host(direct.log_scales),
                host(autodiff.log_scales),
            ),
            (
                "opacity_logits",
                host(direct.opacity_logits.map(|t| t.unsqueeze_dim(1))),
                host(autodiff.opacity_logits.map(|t| t.unsqueeze_dim(1))),
            ),
            ("means", host(direct.means), host(autodiff.means)),
        ];
        for (name, a, b) in pairs {
            let largest = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(largest > 0.0, "{name}: a gradient");
            for (j, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-3 * largest,
                    "{name}[{j}]: direct {x}, autodiff {y} (largest {largest})"
                );
            }
        }
    }

    /// A photo saturated everywhere, seen through a transform that draws every pixel brighter
    /// (an offset of 2): with `saturation_bound` neither pass has a loss or a gradient left
    /// (but the SSIM term's rounding); without it, both do. Where the transformed render is
    /// darker than the saturated photo (an offset of -2), the bound changes nothing.
    #[test]
    fn a_saturated_photo_bounds_the_render_from_below() {
        let device = Default::default();
        let field = procedural_field::<Cpu>(300, 4, &device).unwrap();
        let camera = look_at_origin([1.6, -1.1, 0.8], 32);
        let target = Tensor::<Cpu, 3>::ones([32, 32, 3], &device);
        let loss = LossOptions { ssim_lambda: 0.2 };
        let names = ["view".to_string()];
        let run = |offset: f32, bound: bool, autodiff: bool| {
            let row =
                Tensor::<Cpu, 2>::from_floats([[0.0, 0.0, 0.0, offset, offset, offset]], &device);
            let inputs = PassInputs {
                cameras: &[camera],
                targets: std::slice::from_ref(&target),
                masks: &[],
                names: &names,
                appearance: std::slice::from_ref(&row),
                transform: Some(Transform::Exposure),
                saturation_bound: bound,
                batch: 1,
                render: RenderOptions::default(),
                loss,
                opacity_reg: 0.0,
                scale_reg: 0.0,
                wants_loss: true,
                wants_mse: false,
                wants_poses: false,
                smoothing: None,
                panoramas: false,
            };
            let forward = match autodiff {
                false => direct_forward::<B>(&field, &inputs).unwrap(),
                true => autodiff_forward::<B>(&field, &inputs, &photometric(loss)).unwrap(),
            };
            let value = forward.loss.clone().unwrap().into_scalar();
            let grads = forward.backward().unwrap();
            let means = ember_field::to_host(grads.field.means.unwrap(), "means").unwrap();
            let row = ember_field::to_host(grads.appearance[0].clone(), "row").unwrap();
            let largest = means.iter().chain(&row).fold(0.0f32, |m, v| m.max(v.abs()));
            (value, largest)
        };
        for autodiff in [false, true] {
            // What is left of the SSIM term's gradient at equal images is its rounding.
            let (loss_bound, grad_bound) = run(2.0, true, autodiff);
            let (loss_unbound, grad_unbound) = run(2.0, false, autodiff);
            assert_eq!(loss_bound, 0.0, "autodiff {autodiff}");
            assert!(loss_unbound > 0.5, "autodiff {autodiff}: {loss_unbound}");
            assert!(
                grad_bound < 1e-4 * grad_unbound,
                "autodiff {autodiff}: {grad_bound} against {grad_unbound}"
            );
            assert_eq!(run(-2.0, true, autodiff), run(-2.0, false, autodiff));
        }
    }
}
