//! Level of detail: a [`GaussianHierarchy`] on a device, and the render of the cut each view
//! needs ([`render_lod`]).
//!
//! A hierarchy is built once on the host (`ember_data::lod`: moment-matched merges over a Morton
//! order; [`GaussianField::hierarchy`] from a field, or read from a `trainer lod build` file).
//! Per view, `ember_kernels::lod_weights` weighs every node (on the device for wgpu and cuda,
//! a rayon pass on the CPU): nodes whose projected size is under
//! [`RenderOptions::lod_threshold`] pixels are drawn whole, in place of their leaves, and a
//! node near the threshold is blended with its children (its opacity and theirs scaled by
//! weights that sum to one along every path), so a moving camera does not pop. Then the
//! ordinary projection and rasterization draw what the cut chose:
//!
//! - on the CPU (`LodOps::GATHERS_CUT`) the drawn nodes are gathered first, so projection,
//!   sort and raster see only them;
//! - on a GPU every node goes to the projection with its opacity scaled (a weight of zero culls
//!   it there): nothing is read back, no wait for the device.
//!
//! Threshold 0 draws the leaves alone, exactly as [`render`] draws the field they came from
//! (bit for bit on the CPU), and so does the CPU where the cut would save less than
//! [`RenderOptions::lod_min_saving`] of the leaves ([`drawn_cut`]; a GPU draws the cut). Up
//! close the CPU learns that from the hierarchy's bounds alone, before weighing any node
//! ([`GaussianHierarchy::merged_leaves_at_most`]). The renders are images to look at: not
//! differentiable with respect to the hierarchy.

use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData, TensorPrimitive};
use ember_data::{HierarchyConfig, SplatHierarchy, build_hierarchy};
use ember_kernels::{
    CameraParams, LodNodes, LodOps, LodView, SplatBackend, lod::MIN_DISTANCE, lod_weights,
    weighted_logits_tensor_ops,
};

use crate::render::{
    BatchImages, RenderError, RenderOptions, RenderOutput, render, render_batch_images,
};
use crate::splats::{field_from_splats, splats_from_field};
use crate::{GaussianField, ModelError};

/// The default [`RenderOptions::lod_threshold`] where level of detail is on (`trainer bench
/// lod`, the viewer), pixels: a node is drawn whole once its largest standard deviation would
/// cover at most this much of the screen. One pixel merges only what a pixel cannot show, so
/// level of detail does not show at any distance: the viewer's opening view of biker draws its
/// head at 47 dB against the full render (1.5 px: 40 dB, 2 px: 34 dB, 4 px: 26 dB, where the
/// face is visibly smeared). It pays where much of a scene is under a pixel (far views, large
/// scenes; BENCHMARKS.md, "Level of detail"); a larger threshold trades a softer picture for
/// speed (4 px: 2.2x at 4x the framing distance on biker, at 36 dB over the frame).
pub const DEFAULT_LOD_THRESHOLD: f32 = 1.0;

/// The default [`RenderOptions::lod_min_saving`] where level of detail is on: a cut that saves
/// under a tenth of the leaves is not gathered. On biker at the default threshold the cut draws
/// 99.7% of the leaves at the framing distance, 91% at 4x, and the gather (a copy of every
/// drawn node's parameters) made those frames 15-28% slower than the leaves (BENCHMARKS.md,
/// "Level of detail").
pub const DEFAULT_LOD_MIN_SAVING: f32 = 0.1;

/// A level-of-detail hierarchy on a device: every node's Gaussian and the bounds the cut is
/// chosen by (see `ember_data::lod` for the tree and the merges).
#[derive(Debug, Clone)]
pub struct GaussianHierarchy<B: Backend> {
    /// `[M]` nodes as one field: the leaves `0..leaves`, then the merged nodes, each after its
    /// children; the last is the root.
    pub nodes: GaussianField<B>,
    /// `[M, 3]` centres of the nodes' bounding spheres, world units.
    pub centres: Tensor<B, 2>,
    /// `[M]` radii of the bounding spheres, world units.
    pub radii: Tensor<B, 1>,
    /// `[M]` the largest standard deviation in each node's subtree, world units.
    pub sizes: Tensor<B, 1>,
    /// `[M]` each node's parent; the root is its own.
    pub parents: Tensor<B, 1, Int>,
    /// `L`, the number of leaves.
    pub leaves: usize,
    /// What bounds, on the host, the leaves a view's cut can leave out.
    merge_bound: MergeBound,
    /// The leaves as a cut (their rows shared, weight one each), made by the first view that
    /// draws them on the gathering path and cloned by the next: no copy, no allocation.
    leaves_cut: std::sync::OnceLock<LodCut<B>>,
}

impl<B: Backend> GaussianHierarchy<B> {
    /// The hierarchy `hierarchy` (host) on `device`.
    pub fn from_splat_hierarchy(
        hierarchy: &SplatHierarchy,
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        if let Some(problem) = hierarchy.problem() {
            return Err(ModelError::Invalid(format!(
                "not a valid hierarchy: {problem}"
            )));
        }
        let m = hierarchy.len();
        let geometry = hierarchy.geometry();
        let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
        let on = (device, dtype);
        let merge_bound = MergeBound::new(&geometry, &hierarchy.parents, hierarchy.leaves);
        Ok(GaussianHierarchy {
            nodes: field_from_splats(&hierarchy.nodes, device)?,
            centres: Tensor::from_data(
                TensorData::new(geometry.centres.as_flattened().to_vec(), [m, 3]),
                on,
            ),
            radii: Tensor::from_data(TensorData::new(geometry.radii, [m]), on),
            sizes: Tensor::from_data(TensorData::new(geometry.sizes, [m]), on),
            parents: Tensor::from_data(
                TensorData::new(
                    hierarchy.parents.iter().map(|&p| i64::from(p)).collect(),
                    [m],
                ),
                device,
            ),
            leaves: hierarchy.leaves,
            merge_bound,
            leaves_cut: std::sync::OnceLock::new(),
        })
    }

    /// At most how many leaves the cut at `threshold` pixels through `camera` leaves out
    /// (gives weight zero), from the hierarchy's bounds alone: no node is weighed. A leaf is
    /// left out only when its parent's `rho` is at most the threshold, and `rho >= size f / |e -
    /// x|` for the leaf's centre `x` (the parent's sphere holds it), counted over 2048 groups of
    /// leaves, each within a sphere. At least the exact count, in every view a cut accepts (a
    /// finite camera, `ember_kernels::project::check_camera`).
    pub fn merged_leaves_at_most(&self, camera: &CameraParams, threshold: f32) -> usize {
        self.merge_bound.merged_leaves_at_most(camera, threshold)
    }

    /// Number of nodes, leaves included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.num_gaussians()
    }

    /// The leaves alone: the field the hierarchy was built from (on the CPU the nodes' own rows,
    /// shared, not copied).
    pub fn leaf_field(&self) -> GaussianField<B>
    where
        B: LodOps,
    {
        let nodes = &self.nodes;
        let rows = B::lod_leaves(
            LodNodes {
                means: nodes.means.val().into_primitive().tensor(),
                quats: nodes.quats.val().into_primitive().tensor(),
                log_scales: nodes.log_scales.val().into_primitive().tensor(),
                opacity_logits: nodes.opacity_logits.val().into_primitive().tensor(),
                sh_dc: nodes.sh_dc.val().into_primitive().tensor(),
                sh_rest: nodes.sh_rest.val().into_primitive().tensor(),
            },
            self.leaves,
        );
        let float = |p| TensorPrimitive::Float(p);
        GaussianField::from_tensors(
            Tensor::from_primitive(float(rows.means)),
            Tensor::from_primitive(float(rows.quats)),
            Tensor::from_primitive(float(rows.log_scales)),
            Tensor::from_primitive(float(rows.opacity_logits)),
            Tensor::from_primitive(float(rows.sh_dc)),
            Tensor::from_primitive(float(rows.sh_rest)),
            None,
        )
        .expect("rows of a valid field")
    }
}

impl<B: Backend> GaussianField<B> {
    /// This field's level-of-detail hierarchy (its parameters read to the host, merged there,
    /// the hierarchy uploaded to the same device). Features are not carried.
    pub fn hierarchy(&self, config: &HierarchyConfig) -> Result<GaussianHierarchy<B>, ModelError> {
        let splats = splats_from_field(self)?;
        let hierarchy = build_hierarchy(&splats, config, std::path::Path::new("the field"))
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        GaussianHierarchy::from_splat_hierarchy(&hierarchy, &self.means.device())
    }
}

/// A bound on the leaves a view's cut leaves out, from the hierarchy's geometry alone.
///
/// A leaf is left out (weight zero) exactly when its parent does not open, i.e. when the
/// parent's `rho = size f / (|e - centre| - radius)` is at most the threshold `tau`
/// (`ember_kernels::lod`). The parent's sphere holds the leaf's centre `x`, so its nearest point
/// is at most `|e - x|` from the camera centre `e`, and `rho >= size f / |e - x|`. The leaves
/// are split into [`MergeBound::GROUPS`] groups (subtrees of the hierarchy's top), each bounded
/// by a sphere around its leaves' centres: a leaf of group `g` is at most
/// `D_g = |e - centre_g| + radius_g` away, so only the leaves whose parent's `size` is at most
/// `tau D_g / f` can be left out. With each group's parent sizes sorted, a view counts them
/// with one distance and one binary search per group, and can learn that its cut saves little
/// without weighing the nodes.
#[derive(Debug, Clone, Default)]
struct MergeBound {
    /// Per group, the sizes of its leaves' parents, ascending (a leaf that is its own parent,
    /// in a hierarchy of one node, is never left out and not listed), one group after another.
    parent_sizes: Vec<f32>,
    /// Group `g`'s sizes are `parent_sizes[starts[g]..starts[g + 1]]`.
    starts: Vec<usize>,
    /// Per group, a sphere around its leaves' centres: centre and radius, world units.
    spheres: Vec<([f64; 3], f64)>,
}

impl MergeBound {
    /// How many groups: a few dozen leaves each on a scene of 10^5 leaves, and a view's count
    /// some tens of microseconds.
    const GROUPS: usize = 2048;

    /// The slack on the size bound, relative: the weights' `f32` arithmetic may round a
    /// parent's `rho` down by a few ulps, which must not take a leaf out of the count.
    const SLACK: f64 = 1e-3;

    fn new(geometry: &ember_data::LodGeometry, parents: &[u32], leaves: usize) -> MergeBound {
        let m = parents.len();
        if m == 0 {
            return MergeBound::default();
        }
        let parent = |n: usize| parents[n] as usize;
        // Leaves below each node (every child comes before its parent), and each merged
        // node's children.
        let mut below = vec![0usize; m];
        let mut children = vec![Vec::new(); m];
        for n in 0..m {
            below[n] += usize::from(n < leaves);
            if parent(n) != n {
                below[parent(n)] += below[n];
                children[parent(n)].push(n);
            }
        }
        // The groups: from the root down, the largest subtree split until there are enough.
        let mut frontier = std::collections::BinaryHeap::from([(below[m - 1], m - 1)]);
        while frontier.len() < Self::GROUPS {
            match frontier.peek() {
                Some(&(_, n)) if !children[n].is_empty() => {
                    frontier.pop();
                    frontier.extend(children[n].iter().map(|&c| (below[c], c)));
                }
                _ => break,
            }
        }
        let frontier = frontier.into_vec();
        // Each node's group, parents first (a parent's index is above its children's).
        let mut group = vec![usize::MAX; m];
        for (g, &(_, n)) in frontier.iter().enumerate() {
            group[n] = g;
        }
        for n in (0..m).rev() {
            if group[n] == usize::MAX && parent(n) != n {
                group[n] = group[parent(n)];
            }
        }
        let groups = frontier.len();
        let centre = |n: usize| geometry.centres[n].map(f64::from);
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); groups];
        for n in 0..leaves {
            members[group[n]].push(n);
        }
        let mut bound = MergeBound {
            parent_sizes: Vec::with_capacity(leaves),
            starts: vec![0],
            spheres: Vec::with_capacity(groups),
        };
        for (&(_, root), leaves) in frontier.iter().zip(&members) {
            let c = centre(root);
            let radius = leaves.iter().fold(0.0f64, |r, &n| {
                let x = centre(n);
                r.max(
                    ((x[0] - c[0]).powi(2) + (x[1] - c[1]).powi(2) + (x[2] - c[2]).powi(2)).sqrt(),
                )
            });
            let start = bound.parent_sizes.len();
            bound.parent_sizes.extend(
                leaves
                    .iter()
                    .filter(|&&n| parent(n) != n)
                    .map(|&n| geometry.sizes[parent(n)]),
            );
            bound.parent_sizes[start..].sort_unstable_by(f32::total_cmp);
            bound.starts.push(bound.parent_sizes.len());
            bound.spheres.push((c, radius));
        }
        bound
    }

    /// At most how many leaves the cut at `threshold` pixels through `camera` leaves out.
    fn merged_leaves_at_most(&self, camera: &CameraParams, threshold: f32) -> usize {
        if threshold <= 0.0 {
            return 0;
        }
        let [ex, ey, ez] = camera.center();
        let per_distance = f64::from(threshold) / camera.fx.max(camera.fy) * (1.0 + Self::SLACK);
        self.spheres
            .iter()
            .zip(self.starts.windows(2))
            .map(|(&([cx, cy, cz], radius), span)| {
                let farthest =
                    ((ex - cx).powi(2) + (ey - cy).powi(2) + (ez - cz).powi(2)).sqrt() + radius;
                let largest = per_distance * farthest.max(f64::from(MIN_DISTANCE));
                self.parent_sizes[span[0]..span[1]]
                    .partition_point(|&size| f64::from(size) <= largest)
            })
            .sum()
    }
}

/// What a view of a hierarchy draws: a field for the ordinary renderer.
#[derive(Debug, Clone)]
pub struct LodCut<B: Backend> {
    /// The Gaussians to draw, opacities already weighted: the drawn nodes alone on the CPU,
    /// every node on a GPU (those not drawn with opacity zero, which the projection culls).
    pub field: GaussianField<B>,
    /// `[M]` the weights of the cut, per node.
    pub weights: Tensor<B, 1>,
}

impl<B: Backend> LodCut<B> {
    /// Nodes drawn (weight above zero). Reads the weights back: a wait on a GPU.
    pub fn drawn(&self) -> usize {
        self.weights
            .clone()
            .greater_elem(0.0)
            .int()
            .sum()
            .into_scalar()
            .elem::<i64>() as usize
    }
}

/// The cut of `hierarchy` that `camera` draws at `threshold` pixels (see the
/// [module docs](self)).
pub fn lod_cut<B: LodOps>(
    hierarchy: &GaussianHierarchy<B>,
    camera: &CameraParams,
    threshold: f32,
) -> Result<LodCut<B>, RenderError> {
    cut(hierarchy, camera, threshold, 0.0)
}

/// What [`render_lod`] draws of `hierarchy` through `camera` under `options`: the cut at
/// `options.lod_threshold`, or the leaves where it would save less than
/// `options.lod_min_saving` of them on the CPU.
pub fn drawn_cut<B: LodOps>(
    hierarchy: &GaussianHierarchy<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<LodCut<B>, RenderError> {
    cut(
        hierarchy,
        camera,
        options.lod_threshold,
        options.lod_min_saving,
    )
}

/// [`lod_cut`], or the leaves on the gathering path where the cut saves less than
/// `min_saving` of them.
fn cut<B: LodOps>(
    hierarchy: &GaussianHierarchy<B>,
    camera: &CameraParams,
    threshold: f32,
    min_saving: f32,
) -> Result<LodCut<B>, RenderError> {
    ember_kernels::project::check_camera(camera)?;
    let nodes = &hierarchy.nodes;
    let device = nodes.means.device();
    let (m, l) = (hierarchy.num_nodes(), hierarchy.leaves);
    if m == 0 {
        return Ok(LodCut {
            field: nodes.clone(),
            weights: Tensor::from_data(TensorData::new(Vec::<f32>::new(), [0]), &device),
        });
    }
    let saves_little =
        |drawn: usize| min_saving > 0.0 && drawn as f64 > f64::from(1.0 - min_saving) * l as f64;
    let leaves = || {
        hierarchy
            .leaves_cut
            .get_or_init(|| LodCut {
                field: hierarchy.leaf_field(),
                weights: Tensor::from_data(
                    TensorData::new((0..m).map(|n| f32::from(n < l)).collect(), [m]),
                    &device,
                ),
            })
            .clone()
    };
    // Up close the bound alone shows that the cut saves little: the leaves, without weighing
    // a node (the weights were most of what a frame paid for the cut there).
    if B::GATHERS_CUT
        && min_saving > 0.0
        && saves_little(l - hierarchy.merged_leaves_at_most(camera, threshold))
    {
        return Ok(leaves());
    }
    let weights = lod_weights(
        hierarchy.centres.clone(),
        hierarchy.radii.clone(),
        hierarchy.sizes.clone(),
        hierarchy.parents.clone(),
        hierarchy.leaves,
        &LodView::of(camera, f64::from(threshold)),
    )
    .map_err(RenderError::Lod)?;
    if !B::GATHERS_CUT {
        let field = with_weighted_opacity(nodes, weights.clone());
        return Ok(LodCut { field, weights });
    }
    // Read before anything else holds the tensor: a shared ndarray array is read element by
    // element.
    let host: Vec<f32> = weights
        .into_data()
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| RenderError::ReadBack(format!("the cut's weights: {e:?}")))?;
    let only_leaves = host[..l].iter().all(|&w| w == 1.0) && host[l..].iter().all(|&w| w == 0.0);
    if only_leaves || saves_little(host.iter().filter(|&&w| w > 0.0).count()) {
        return Ok(leaves());
    }
    let (drawn, drawn_weights): (Vec<u32>, Vec<f32>) = host
        .iter()
        .enumerate()
        .filter(|(_, w)| **w > 0.0)
        .map(|(n, &w)| (n as u32, w))
        .unzip();
    let field = gather(nodes, &drawn, &drawn_weights);
    let weights = Tensor::from_data(TensorData::new(host, [m]), &device);
    Ok(LodCut { field, weights })
}

/// Rows `rows` of every parameter of `field` (no features), each opacity scaled by its weight
/// (`weights`, one per row), as one field.
fn gather<B: LodOps>(field: &GaussianField<B>, rows: &[u32], weights: &[f32]) -> GaussianField<B> {
    let n = field.num_gaussians();
    let k = rows.len();
    let [_, r, _] = field.sh_rest.dims();
    let primitive = |t: Tensor<B, 2>| t.into_primitive().tensor();
    let gathered = B::lod_gather(
        LodNodes {
            means: primitive(field.means.val()),
            quats: primitive(field.quats.val()),
            log_scales: primitive(field.log_scales.val()),
            opacity_logits: field.opacity_logits.val().into_primitive().tensor(),
            sh_dc: primitive(field.sh_dc.val().reshape([n, 3])),
            sh_rest: primitive(field.sh_rest.val().reshape([n, 3 * r])),
        },
        rows,
        weights,
    );
    let float2 = |p| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p));
    GaussianField::from_tensors(
        float2(gathered.means),
        float2(gathered.quats),
        float2(gathered.log_scales),
        Tensor::from_primitive(TensorPrimitive::Float(gathered.opacity_logits)),
        float2(gathered.sh_dc).reshape([k, 1, 3]),
        float2(gathered.sh_rest).reshape([k, r, 3]),
        None,
    )
    .expect("rows of a valid field")
}

/// `field` with each opacity multiplied by its weight (`[N]` in `[0, 1]`, see
/// `ember_kernels::weighted_logits_tensor_ops`).
fn with_weighted_opacity<B: Backend>(
    field: &GaussianField<B>,
    weights: Tensor<B, 1>,
) -> GaussianField<B> {
    GaussianField::from_tensors(
        field.means.val(),
        field.quats.val(),
        field.log_scales.val(),
        weighted_logits_tensor_ops(field.opacity_logits.val(), weights),
        field.sh_dc.val(),
        field.sh_rest.val(),
        None,
    )
    .expect("the field's own shapes")
}

/// Renders the cut of `hierarchy` that `camera` needs at `options.lod_threshold` pixels (see
/// the [module docs](self)); the per-Gaussian by-products are those of the drawn field.
pub fn render_lod<B: SplatBackend>(
    hierarchy: &GaussianHierarchy<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<RenderOutput<B>, RenderError> {
    let cut = drawn_cut(hierarchy, camera, options)?;
    render(&cut.field, camera, options)
}

/// [`render_lod`]'s images alone, as a batch of one (what a viewer shows; see
/// [`render_batch_images`]).
pub fn render_lod_images<B: SplatBackend>(
    hierarchy: &GaussianHierarchy<B>,
    camera: &CameraParams,
    options: &RenderOptions,
) -> Result<BatchImages<B>, RenderError> {
    let cut = drawn_cut(hierarchy, camera, options)?;
    render_batch_images(&cut.field, core::slice::from_ref(camera), options)
}
