//! Level of detail: which nodes of a Gaussian hierarchy a view draws, and with what weight.
//!
//! # The hierarchy
//! `M` nodes, each a Gaussian: the `L` leaves first (`0..L`), then merged nodes, every node
//! before its parent; node `M - 1` is the root, its own parent. Per node `n`:
//! `centre_n` and `radius_n` bound a sphere that holds the centres of every leaf below `n`
//! (a parent's sphere holds its children's), and `size_n` (world units) is at least the largest
//! standard deviation of `n`'s Gaussian and at least every child's `size`.
//!
//! # The cut
//! Seen from the camera centre `e` with focal length `f` (pixels), node `n` would be at most
//!
//! ```text
//! rho_n = size_n f / (|e - centre_n| - radius_n)      (+infinity when e is inside the sphere)
//! ```
//!
//! pixels across (one standard deviation) if any part of it lay at the nearest point of its
//! sphere. Both the numerator and the denominator make `rho` monotone: `rho_parent >= rho_child`
//! in every view. A node *opens* (gives way to its children) as `rho` passes the threshold
//! `tau` (pixels):
//!
//! ```text
//! open_n = smoothstep((rho_n - tau) / (b tau)) for a merged node, b = BLEND_BAND - 1
//! open_n = 0                                   for a leaf (it has no children)
//! open_n = 1                                   for a merged node when tau <= 0
//! weight_n = max(open_parent(n) - open_n, 0),  open_parent(root) = 1
//! ```
//!
//! Along any path from the root to a leaf `open` never increases, so the weights along it
//! telescope to exactly 1: every leaf's share of the scene is drawn once, by one node or, in
//! the band `tau < rho < 1.25 tau` ([`BLEND_BAND`]), split between a node and its children (the blend that keeps a
//! moving camera from popping). `tau <= 0` draws the leaves alone, each with weight 1. The
//! renderer multiplies each drawn node's opacity by its weight.
//!
//! # Implementations
//! - the default of [`LodOps::lod_weights`]: Burn tensor ops (a dozen, over all `M` nodes), on
//!   the device for the GPU backends (`device.rs`: no read back, no wait);
//! - `cpu.rs`: two rayon passes (for ndarray, `ndarray.rs`), the same `f32` formula; and the
//!   gather of the drawn nodes in one parallel pass (Burn's ndarray `select` copies row by row
//!   through dynamic-rank indexing, and the opacity's tensor ops are six more passes: together
//!   a sixth of a frame where the cut is most of the leaves); on ndarray the leaves
//!   ([`LodOps::lod_leaves`]) are the nodes' first rows, shared rather than copied;
//! - `autodiff.rs`: the inner backend's op on the inner tensors; the weights are untracked.

pub(crate) mod autodiff;
pub mod cpu;
#[cfg(feature = "cube")]
pub(crate) mod device;
#[cfg(feature = "ndarray")]
pub(crate) mod ndarray;

use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorData, TensorMetadata, TensorPrimitive};

/// One view's settings of the cut.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LodView {
    /// The camera centre, world units.
    pub eye: [f64; 3],
    /// The focal length, pixels (the larger of `fx`, `fy`).
    pub focal: f64,
    /// The threshold `tau`, pixels: nodes at most this size are drawn whole; `<= 0` draws the
    /// leaves alone.
    pub threshold: f64,
}

impl LodView {
    /// The view of `camera` at `threshold` pixels.
    pub fn of(camera: &crate::CameraParams, threshold: f64) -> LodView {
        LodView {
            eye: camera.center(),
            focal: camera.fx.max(camera.fy),
            threshold,
        }
    }
}

/// The hierarchy's geometry, as backend primitives (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct LodInputs<B: Backend> {
    /// `[M, 3]` centres of the bounding spheres, world units.
    pub centres: FloatTensor<B>,
    /// `[M]` radii of the bounding spheres, world units.
    pub radii: FloatTensor<B>,
    /// `[M]` sizes (largest standard deviations, monotone up the tree), world units.
    pub sizes: FloatTensor<B>,
    /// `[M]` each node's parent; the root (node `M - 1`) is its own.
    pub parents: IntTensor<B>,
    /// `L`, the leaf count (`1 <= L <= M`).
    pub leaves: usize,
}

/// Why [`lod_weights`] refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LodError {
    /// An input's shape does not match the `M` nodes of `parents`.
    #[error("level of detail: `{name}` has shape {got:?}, expected {expected:?}")]
    Shape {
        /// The input's name.
        name: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shape it must have.
        expected: Vec<usize>,
    },
    /// More leaves than nodes, or none in a non-empty hierarchy.
    #[error("level of detail: {leaves} leaves in a hierarchy of {nodes} nodes")]
    Leaves {
        /// The leaf count given.
        leaves: usize,
        /// The node count.
        nodes: usize,
    },
}

/// The level-of-detail op on a backend: what [`lod_weights`] dispatches to.
pub trait LodOps: Backend {
    /// Whether a renderer should gather the drawn nodes before projecting them (`true`: the
    /// weights are on the host, reading them is free, and a smaller set is cheaper to project,
    /// sort and raster) or draw every node with its opacity scaled (`false`: a device, where
    /// reading the weights back would wait for it, and a weight of zero culls a node in the
    /// projection at the cost of one thread).
    const GATHERS_CUT: bool = false;

    /// The weights `[M]` of the cut (see the [module docs](self)). Not differentiable. The
    /// default runs Burn tensor ops.
    fn lod_weights(inputs: LodInputs<Self>, view: &LodView) -> FloatTensor<Self> {
        lod_weights_tensor_ops(inputs, view)
    }

    /// The drawn nodes of a cut, gathered (rows `rows` of every parameter, in that order), each
    /// opacity scaled by its weight (`weights[i]` for row `rows[i]`; see
    /// [`weighted_logits_tensor_ops`]): what a renderer that gathers the cut
    /// ([`LodOps::GATHERS_CUT`]) draws. The default is Burn's `select` and tensor ops.
    fn lod_gather(nodes: LodNodes<Self>, rows: &[u32], weights: &[f32]) -> LodNodes<Self> {
        lod_gather_tensor_ops(nodes, rows, weights)
    }

    /// The first `leaves` rows (along the first axis) of every parameter, whatever its shape:
    /// the leaves, which a renderer that gathers the cut draws where a cut would save little.
    /// The default is Burn's `slice` (a copy on some backends).
    fn lod_leaves(nodes: LodNodes<Self>, leaves: usize) -> LodNodes<Self> {
        lod_leaves_tensor_ops(nodes, leaves)
    }
}

/// The weights `[M]` with which a view draws the nodes of a hierarchy (see the
/// [module docs](self)): `centres [M, 3]`, `radii [M]`, `sizes [M]`, `parents [M]` (the root,
/// node `M - 1`, its own), `leaves` the leaf count. Untracked under autodiff.
pub fn lod_weights<B: LodOps>(
    centres: Tensor<B, 2>,
    radii: Tensor<B, 1>,
    sizes: Tensor<B, 1>,
    parents: Tensor<B, 1, Int>,
    leaves: usize,
    view: &LodView,
) -> Result<Tensor<B, 1>, LodError> {
    let m = parents.dims()[0];
    for (name, got, expected) in [
        ("centres", centres.dims().to_vec(), vec![m, 3]),
        ("radii", radii.dims().to_vec(), vec![m]),
        ("sizes", sizes.dims().to_vec(), vec![m]),
    ] {
        if got != expected {
            return Err(LodError::Shape {
                name,
                got,
                expected,
            });
        }
    }
    if m == 0 {
        return Ok(radii);
    }
    if leaves == 0 || leaves > m {
        return Err(LodError::Leaves { leaves, nodes: m });
    }
    let out = B::lod_weights(
        LodInputs {
            centres: centres.into_primitive().tensor(),
            radii: radii.into_primitive().tensor(),
            sizes: sizes.into_primitive().tensor(),
            parents: parents.into_primitive(),
            leaves,
        },
        view,
    );
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

/// [`LodOps::lod_gather`]'s default: Burn's `select` and tensor ops, on any backend.
pub fn lod_gather_tensor_ops<B: Backend>(
    nodes: LodNodes<B>,
    rows: &[u32],
    weights: &[f32],
) -> LodNodes<B> {
    let float2 = |p| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p));
    let device = float2(nodes.means.clone()).device();
    let count = rows.len();
    let indices = Tensor::<B, 1, Int>::from_data(
        TensorData::new(rows.iter().map(|&r| i64::from(r)).collect::<Vec<i64>>(), [count]),
        &device,
    );
    let select = |p| float2(p).select(0, indices.clone()).into_primitive().tensor();
    let weights = Tensor::<B, 1>::from_data(TensorData::new(weights.to_vec(), [count]), &device);
    let logits = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(nodes.opacity_logits))
        .select(0, indices.clone());
    LodNodes {
        means: select(nodes.means),
        quats: select(nodes.quats),
        log_scales: select(nodes.log_scales),
        opacity_logits: weighted_logits_tensor_ops(logits, weights).into_primitive().tensor(),
        sh_dc: select(nodes.sh_dc),
        sh_rest: select(nodes.sh_rest),
    }
}

/// [`LodOps::lod_leaves`]'s default: Burn's `slice`, on any backend.
pub fn lod_leaves_tensor_ops<B: Backend>(nodes: LodNodes<B>, leaves: usize) -> LodNodes<B> {
    nodes.map(|p| leading_rows_sliced::<B>(p, leaves))
}

/// The first `rows` entries of `tensor` along its first axis, whatever its rank, by Burn's
/// `slice`.
pub(crate) fn leading_rows_sliced<B: Backend>(tensor: FloatTensor<B>, rows: usize) -> FloatTensor<B> {
    let ranges: Vec<burn::tensor::Slice> = tensor
        .shape()
        .iter()
        .enumerate()
        .map(|(axis, &d)| burn::tensor::Slice::from(0..if axis == 0 { rows } else { d }))
        .collect();
    B::float_slice(tensor, &ranges)
}

/// A hierarchy's node parameters as backend primitives, each `[M, W]` row-major
/// (`opacity_logits` `[M]`, `sh_dc` `[M, 3]`, `sh_rest` `[M, 3 K]`).
#[derive(Debug, Clone)]
pub struct LodNodes<B: Backend> {
    /// `[M, 3]`
    pub means: FloatTensor<B>,
    /// `[M, 4]`
    pub quats: FloatTensor<B>,
    /// `[M, 3]`
    pub log_scales: FloatTensor<B>,
    /// `[M]`
    pub opacity_logits: FloatTensor<B>,
    /// `[M, 3]`
    pub sh_dc: FloatTensor<B>,
    /// `[M, 3 K]` (`K` may be zero)
    pub sh_rest: FloatTensor<B>,
}

impl<B: Backend> LodNodes<B> {
    /// `f` applied to every parameter.
    pub fn map(self, mut f: impl FnMut(FloatTensor<B>) -> FloatTensor<B>) -> Self {
        LodNodes {
            means: f(self.means),
            quats: f(self.quats),
            log_scales: f(self.log_scales),
            opacity_logits: f(self.opacity_logits),
            sh_dc: f(self.sh_dc),
            sh_rest: f(self.sh_rest),
        }
    }
}

/// The logits of the opacities `sigmoid(logits) weights` (`[N]` each, weights in `[0, 1]`):
/// `ln(o) - ln(1 - o)` of the product, the logit itself where the weight is 1 (bit for bit), and
/// `-inf` where it is 0 (which the projection culls), as tensor ops on any backend.
pub fn weighted_logits_tensor_ops<B: Backend>(
    logits: Tensor<B, 1>,
    weights: Tensor<B, 1>,
) -> Tensor<B, 1> {
    let opacity = burn::tensor::activation::sigmoid(logits.clone()) * weights.clone();
    let weighted = opacity.clone().log() - opacity.neg().log1p();
    weighted.mask_where(weights.greater_equal_elem(1.0), logits)
}

/// [`weighted_logits_tensor_ops`] of one value, as the CPU gathers it.
#[inline(always)]
pub fn weighted_logit(logit: f32, weight: f32) -> f32 {
    if weight >= 1.0 {
        return logit;
    }
    let opacity = weight / (1.0 + (-logit).exp());
    opacity.ln() - (-opacity).ln_1p()
}

/// `smoothstep` of [the module docs](self) as the CPU and the tensor ops compute it:
/// `t^2 (3 - 2 t)` of `t` clamped to `[0, 1]`.
#[inline(always)]
pub fn smoothstep(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// A merged node is fully replaced by its children once `rho` reaches this many thresholds;
/// between 1 and this it is blended with them. Wider is smoother (the blend spans more camera
/// motion) but costs time and fidelity (a node in the band is drawn together with its
/// children, two half-transparent layers): on the biker scene 1.25 against 1.5 drew 5-10% fewer
/// Gaussians at 4x the framing distance at a PSNR 0.2-0.8 dB higher, and still spans a quarter
/// of a level (a parent is about twice its children's size).
pub const BLEND_BAND: f32 = 1.25;

/// Below this a distance to a bounding sphere counts as zero (the camera inside it).
pub const MIN_DISTANCE: f32 = 1e-30;

/// The op as Burn tensor ops on any backend: [`LodOps::lod_weights`]'s default, and the
/// reference `cpu.rs` is tested against. Inputs as [`lod_weights`]'s, checked there.
pub fn lod_weights_tensor_ops<B: Backend>(inputs: LodInputs<B>, view: &LodView) -> FloatTensor<B> {
    let float1 = |p| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(p));
    let radii = float1(inputs.radii);
    let sizes = float1(inputs.sizes);
    let parents = Tensor::<B, 1, Int>::from_primitive(inputs.parents);
    let [m] = radii.dims();
    let leaves = inputs.leaves;
    let device = radii.device();
    let open = if view.threshold > 0.0 {
        let centres = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(inputs.centres));
        let eye = Tensor::<B, 1>::from_floats(view.eye.map(|v| v as f32), &device).reshape([1, 3]);
        let distance = (centres - eye).powi_scalar(2).sum_dim(1).sqrt().reshape([m]) - radii;
        let rho = sizes * (view.focal as f32) / distance.clamp_min(MIN_DISTANCE);
        let tau = view.threshold as f32;
        let t = ((rho - tau) / ((BLEND_BAND - 1.0) * tau)).clamp(0.0, 1.0);
        t.clone() * t.clone() * (t.mul_scalar(-2.0).add_scalar(3.0))
    } else {
        Tensor::ones([m], &device)
    };
    let open = open.slice_assign(0..leaves, Tensor::zeros([leaves], &device));
    let open_parent = open
        .clone()
        .select(0, parents)
        .slice_assign(m - 1..m, Tensor::ones([1], &device));
    (open_parent - open)
        .clamp_min(0.0)
        .into_primitive()
        .tensor()
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod gpu_tests;
#[cfg(test)]
mod tests;
