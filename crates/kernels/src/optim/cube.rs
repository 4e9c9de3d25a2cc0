//! The Adam update as one CubeCL kernel, generic over the runtime and the float type: the four
//! tensors read as one flat vector each, `N` elements per unit (the widest vector the device
//! loads at once that divides the element count), the operations of the tensor-op default in
//! its order.
//!
//! Why a kernel of its own when Burn's fusion already fuses the tensor ops into one: the fusion
//! records, searches and plans a dozen operations per parameter group on the host, every step,
//! and the GPU training step is host-bound; this is one recorded operation per group.

use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{Shape, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use cubecl::calculate_cube_count_elemwise;
use cubecl::prelude::*;
use cubecl::std::tensor::layout::linear::LinearView;
use cubecl::tensor_vector_size_parallel;

use super::{AdamGroup, AdamOps, AdamPrimitives, AdamStep, adam_steps_visible_tensor_ops};
use crate::cube_alloc::output;

/// One unit per `N` elements: the moments, then the parameter (see the [module docs](super)).
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn adam_kernel<F: Float, N: Size>(
    param: &LinearView<Vector<F, N>>,
    grad: &LinearView<Vector<F, N>>,
    exp_avg: &LinearView<Vector<F, N>>,
    exp_avg_sq: &LinearView<Vector<F, N>>,
    param_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    exp_avg_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    exp_avg_sq_out: &mut LinearView<Vector<F, N>, ReadWrite>,
    beta1: InputScalar,
    one_minus_beta1: InputScalar,
    beta2: InputScalar,
    one_minus_beta2: InputScalar,
    sqrt_bias2: InputScalar,
    eps: InputScalar,
    scale: InputScalar,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS;
    if !param_out.is_in_bounds(i) {
        terminate!();
    }
    let g = grad[i];
    let m =
        exp_avg[i] * Vector::new(beta1.get::<F>()) + g * Vector::new(one_minus_beta1.get::<F>());
    let v = exp_avg_sq[i] * Vector::new(beta2.get::<F>())
        + (g * g) * Vector::new(one_minus_beta2.get::<F>());
    let denom = Vector::sqrt(v) / Vector::new(sqrt_bias2.get::<F>()) + Vector::new(eps.get::<F>());
    param_out[i] = param[i] - m / denom * Vector::new(scale.get::<F>());
    exp_avg_out[i] = m;
    exp_avg_sq_out[i] = v;
}

/// Scalars of one group's update in [`adam_groups_kernel`] (see [`AdamStep::scalars`]).
const SCALARS: usize = 7;

/// One unit per element of all the groups together: unit `i` updates element `i - ends[g - 1]`
/// of the group `g` whose range holds it, with that group's [`SCALARS`], in the order of
/// [`adam_kernel`]. With `masked`, an element of a row whose `visible` weight is not positive
/// (row `(i - ends[g - 1]) / widths[g]`) keeps its three old values; without, `visible` and
/// `widths` are not read.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adam_groups_kernel<F: Float>(
    params: &Sequence<Tensor<F>>,
    grads: &Sequence<Tensor<F>>,
    exp_avgs: &Sequence<Tensor<F>>,
    exp_avg_sqs: &Sequence<Tensor<F>>,
    params_out: &mut Sequence<Tensor<F>>,
    exp_avgs_out: &mut Sequence<Tensor<F>>,
    exp_avg_sqs_out: &mut Sequence<Tensor<F>>,
    visible: &Tensor<F>,
    ends: Sequence<u32>,
    widths: Sequence<u32>,
    scalars: Sequence<InputScalar>,
    #[comptime] masked: bool,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS as u32;
    let mut start = 0u32.runtime();
    #[unroll]
    for g in 0..params.len() {
        let end = ends[g];
        if start <= i && i < end {
            let j = (i - start) as usize;
            let s = g * SCALARS;
            let grad = grads[g][j];
            let old_m = exp_avgs[g][j];
            let old_v = exp_avg_sqs[g][j];
            let old_p = params[g][j];
            let m = old_m * scalars[s].get::<F>() + grad * scalars[s + 1].get::<F>();
            let v = old_v * scalars[s + 2].get::<F>() + (grad * grad) * scalars[s + 3].get::<F>();
            let denom = F::sqrt(v) / scalars[s + 4].get::<F>() + scalars[s + 5].get::<F>();
            let p = old_p - m / denom * scalars[s + 6].get::<F>();
            if masked {
                let seen = visible[((i - start) / widths[g]) as usize] > F::new(0.0);
                params_out.index_mut(g)[j] = select(seen, p, old_p);
                exp_avgs_out.index_mut(g)[j] = select(seen, m, old_m);
                exp_avg_sqs_out.index_mut(g)[j] = select(seen, v, old_v);
            } else {
                params_out.index_mut(g)[j] = p;
                exp_avgs_out.index_mut(g)[j] = m;
                exp_avg_sqs_out.index_mut(g)[j] = v;
            }
        }
        start = end;
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> AdamOps
    for CubeBackend<R, F, I, BT>
{
    /// One launch per run of groups the device can bind at once (`7` buffers a group, plus the
    /// mask and the metadata; wgpu's limit depends on the adapter), one launch per group where it
    /// binds fewer than two groups. Groups without elements are returned as they came.
    fn adam_steps(groups: Vec<AdamGroup<Self>>) -> Vec<AdamPrimitives<Self>> {
        launch_groups(groups, None).unwrap_or_else(|groups| {
            groups
                .into_iter()
                .map(|g| Self::adam_step(g.state, g.grad, g.step))
                .collect()
        })
    }

    /// As [`AdamOps::adam_steps`], every group's rows read from `visible` in the same launch;
    /// the tensor-op default where the device binds fewer than two groups at once.
    fn adam_steps_visible(
        groups: Vec<AdamGroup<Self>>,
        visible: FloatTensor<Self>,
    ) -> Vec<AdamPrimitives<Self>> {
        let visible = into_contiguous(visible);
        let rows = visible.shape().num_elements();
        for g in &groups {
            let shape = g.state.param.shape();
            assert!(
                shape.num_elements() == 0 || shape.as_slice().first() == Some(&rows),
                "adam_steps_visible: a group's leading dimension is not the mask's length"
            );
        }
        launch_groups(groups, Some(&visible))
            .unwrap_or_else(|groups| adam_steps_visible_tensor_ops(groups, visible))
    }

    fn adam_step(
        state: AdamPrimitives<Self>,
        grad: FloatTensor<Self>,
        step: AdamStep,
    ) -> AdamPrimitives<Self> {
        let shape = state.param.shape();
        let n = shape.num_elements();
        if n == 0 {
            return state;
        }
        let flat = |t| into_contiguous(Self::float_reshape(t, Shape::new([n])));
        let param = flat(state.param);
        let grad = flat(grad);
        let exp_avg = flat(state.exp_avg);
        let exp_avg_sq = flat(state.exp_avg_sq);
        let dtype = param.dtype;
        let client = param.client.clone();
        let vector_size = tensor_vector_size_parallel(
            client.io_optimized_vector_sizes(dtype.size()),
            param.meta.shape(),
            param.meta.strides(),
            0,
        );
        let units = n / vector_size;
        let cube_dim = CubeDim::new(&client, units);
        let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
        let address = [&param, &grad, &exp_avg, &exp_avg_sq]
            .iter()
            .map(|t| t.required_address_type())
            .max()
            .unwrap_or_default();
        let outputs = [(); 3].map(|_| output(&param, [n], dtype));
        // Each scalar rounded to the tensors' float type, as Burn rounds a tensor-scalar op's.
        let [
            beta1,
            one_minus_beta1,
            beta2,
            one_minus_beta2,
            sqrt_bias2,
            eps,
            scale,
        ] = step.scalars().map(|s| InputScalar::new(s, dtype));
        // SAFETY: every view has `n` elements and the kernel returns for a unit past them.
        unsafe {
            adam_kernel::launch_unchecked::<R>(
                &client,
                cube_count,
                cube_dim,
                address,
                vector_size,
                param.into_linear_view(),
                grad.into_linear_view(),
                exp_avg.into_linear_view(),
                exp_avg_sq.into_linear_view(),
                outputs[0].clone().into_linear_view(),
                outputs[1].clone().into_linear_view(),
                outputs[2].clone().into_linear_view(),
                beta1,
                one_minus_beta1,
                beta2,
                one_minus_beta2,
                sqrt_bias2,
                eps,
                scale,
                dtype.into(),
            );
        }
        let [param, exp_avg, exp_avg_sq] = outputs.map(|t| Self::float_reshape(t, shape.clone()));
        AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        }
    }
}

type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
type Groups<R, F, I, BT> = Vec<AdamGroup<B<R, F, I, BT>>>;
/// The updates, or the groups back where the device binds too few at once.
type Launched<R, F, I, BT> = Result<Vec<AdamPrimitives<B<R, F, I, BT>>>, Groups<R, F, I, BT>>;

/// The groups' updates in as few launches as the device binds (`visible`: only its rows, see
/// [`adam_groups_kernel`]), or the groups back when it binds fewer than two groups at once.
fn launch_groups<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    groups: Groups<R, F, I, BT>,
    visible: Option<&CubeTensor<R>>,
) -> Launched<R, F, I, BT> {
    let Some(first) = groups.first() else {
        return Ok(Vec::new());
    };
    let client = first.state.param.client.clone();
    let max_bindings = client.properties().hardware.max_bindings as usize;
    let per_launch = max_bindings.saturating_sub(2) / 7;
    if per_launch < 2 {
        return Err(groups);
    }
    let mut updated: Vec<Option<Primitives<R, F, I, BT>>> =
        (0..groups.len()).map(|_| None).collect();
    let mut run: Vec<(usize, Group<R, F, I, BT>)> = Vec::with_capacity(per_launch);
    let mut run_elements = 0usize;
    for (index, group) in groups.into_iter().enumerate() {
        let n = group.state.param.shape().num_elements();
        if n == 0 {
            updated[index] = Some(group.state);
            continue;
        }
        if run.len() == per_launch || u32::try_from(run_elements + n).is_err() {
            launch_run(&client, std::mem::take(&mut run), visible, &mut updated);
            run_elements = 0;
        }
        run_elements += n;
        run.push((index, group));
    }
    launch_run(&client, run, visible, &mut updated);
    Ok(updated
        .into_iter()
        .map(|u| u.expect("every group is updated once"))
        .collect())
}
type Group<R, F, I, BT> = AdamGroup<B<R, F, I, BT>>;
type Primitives<R, F, I, BT> = AdamPrimitives<B<R, F, I, BT>>;

/// Updates a run of groups with elements, one launch ([`adam_groups_kernel`]) when it holds more
/// than one group (or any, with `visible`) and its elements fit `u32`, writing each result at
/// the group's index.
fn launch_run<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>(
    client: &ComputeClient<R>,
    run: Vec<(usize, Group<R, F, I, BT>)>,
    visible: Option<&CubeTensor<R>>,
    updated: &mut [Option<Primitives<R, F, I, BT>>],
) {
    let total: usize = run
        .iter()
        .map(|(_, g)| g.state.param.shape().num_elements())
        .sum();
    if run.is_empty() {
        return;
    }
    // A group past `u32` elements is alone in its run (see `launch_groups`).
    if (visible.is_none() && run.len() < 2) || u32::try_from(total).is_err() {
        for (index, g) in run {
            updated[index] = Some(match visible {
                None => B::<R, F, I, BT>::adam_step(g.state, g.grad, g.step),
                Some(visible) => adam_steps_visible_tensor_ops(vec![g], visible.clone())
                    .pop()
                    .expect("one group in, one update out"),
            });
        }
        return;
    }
    let dtype = run[0].1.state.param.dtype;
    let mut args: [SequenceArg<R, _>; 7] = Default::default();
    let mut ends = SequenceArg::<R, u32>::new();
    let mut widths = SequenceArg::<R, u32>::new();
    let mut scalars = SequenceArg::<R, InputScalar>::new();
    let mut outputs = Vec::with_capacity(run.len());
    // Unread without a mask: an input of the launch stands in for it.
    let mut mask = visible.cloned();
    let mut end = 0u32;
    for (index, group) in run {
        let shape = group.state.param.shape();
        let n = shape.num_elements();
        let flat = |t| into_contiguous(B::<R, F, I, BT>::float_reshape(t, Shape::new([n])));
        let inputs = [
            flat(group.state.param),
            flat(group.grad),
            flat(group.state.exp_avg),
            flat(group.state.exp_avg_sq),
        ];
        let out = [(); 3].map(|_| output(&inputs[0], [n], dtype));
        mask.get_or_insert_with(|| inputs[1].clone());
        for (arg, tensor) in args.iter_mut().zip(inputs.iter().chain(&out)) {
            arg.push(tensor.clone().into_tensor_arg());
        }
        end += n as u32;
        ends.push(end);
        let rows = visible.map_or(1, |v| v.shape().num_elements().max(1));
        widths.push((n / rows).max(1) as u32);
        for scalar in group.step.scalars() {
            scalars.push(InputScalar::new(scalar, dtype));
        }
        outputs.push((index, out, shape));
    }
    let mask = mask.expect("a run holds a group");
    let cube_dim = CubeDim::new(client, total);
    let cube_count = calculate_cube_count_elemwise(client, total, cube_dim);
    let [
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        params_out,
        exp_avgs_out,
        exp_avg_sqs_out,
    ] = args;
    adam_groups_kernel::launch::<R>(
        client,
        cube_count,
        cube_dim,
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        params_out,
        exp_avgs_out,
        exp_avg_sqs_out,
        mask.into_tensor_arg(),
        ends,
        widths,
        scalars,
        visible.is_some(),
        dtype.into(),
    );
    for (index, out, shape) in outputs {
        let [param, exp_avg, exp_avg_sq] =
            out.map(|t| B::<R, F, I, BT>::float_reshape(t, shape.clone()));
        updated[index] = Some(AdamPrimitives {
            param,
            exp_avg,
            exp_avg_sq,
        });
    }
}
