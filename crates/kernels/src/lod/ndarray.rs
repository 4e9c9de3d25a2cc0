//! The level-of-detail op on the ndarray backend: [`cpu::lod_weights`](super::cpu::lod_weights)
//! on the host tensors for `f32`; `f64` ones run the default tensor ops. The renderer gathers
//! the cut here ([`LodOps::GATHERS_CUT`]): reading the weights is free. The leaves are the
//! nodes' first rows, shared, not copied (Burn's `narrow` copies them: 1.5 ms a frame on
//! biker's 153k leaves, where the whole frame is 40).

use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, TensorMetadata};

use super::{LodInputs, LodNodes, LodOps, LodView, cpu, lod_gather_tensor_ops, lod_weights_tensor_ops};
use crate::ndarray_host::{NdArrayBackend, float_tensor, host_slice, int_host_slice, leading_rows};

impl<B: NdArrayBackend> LodOps for B {
    const GATHERS_CUT: bool = true;

    fn lod_weights(inputs: LodInputs<Self>, view: &LodView) -> FloatTensor<Self> {
        if inputs.radii.dtype() != DType::F32 {
            return lod_weights_tensor_ops(inputs, view);
        }
        let parents = int_host_slice::<B>(&inputs.parents);
        let weights = cpu::lod_weights(
            &host_slice::<f32, B>(&inputs.centres),
            &host_slice::<f32, B>(&inputs.radii),
            &host_slice::<f32, B>(&inputs.sizes),
            &parents,
            inputs.leaves,
            view,
        );
        let m = weights.len();
        float_tensor::<f32, B>(weights, Shape::new([m]))
    }

    fn lod_gather(nodes: LodNodes<Self>, rows: &[u32], weights: &[f32]) -> LodNodes<Self> {
        if nodes.means.dtype() != DType::F32 {
            return lod_gather_tensor_ops(nodes, rows, weights);
        }
        let rest = nodes.sh_rest.shape()[1];
        let g = cpu::gather_cut(
            &host_slice::<f32, B>(&nodes.means),
            &host_slice::<f32, B>(&nodes.quats),
            &host_slice::<f32, B>(&nodes.log_scales),
            &host_slice::<f32, B>(&nodes.opacity_logits),
            &host_slice::<f32, B>(&nodes.sh_dc),
            &host_slice::<f32, B>(&nodes.sh_rest),
            rest,
            rows,
            weights,
        );
        let k = rows.len();
        let tensor = |values: Vec<f32>, width: usize| {
            float_tensor::<f32, B>(values, Shape::new([k, width]))
        };
        LodNodes {
            means: tensor(g.means, 3),
            quats: tensor(g.quats, 4),
            log_scales: tensor(g.log_scales, 3),
            opacity_logits: float_tensor::<f32, B>(g.opacity_logits, Shape::new([k])),
            sh_dc: tensor(g.sh_dc, 3),
            sh_rest: tensor(g.sh_rest, rest),
        }
    }

    fn lod_leaves(nodes: LodNodes<Self>, leaves: usize) -> LodNodes<Self> {
        nodes.map(|p| leading_rows::<B>(p, leaves))
    }
}
