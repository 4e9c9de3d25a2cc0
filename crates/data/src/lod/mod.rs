//! Level-of-detail hierarchies of Gaussians: the leaves (a splat set as it is) merged bottom-up
//! into a tree, so that a distant view can draw a few merged nodes instead of many sub-pixel
//! leaves (`ember_kernels::lod` chooses them per view; `ember_field::lod` renders them).
//!
//! # The tree
//! Node `n` of `M` is a Gaussian. The `L` leaves come first, in the input's order (`0..L`), then
//! the merged nodes, each after all of its children; the last node is the root and its own
//! parent. [`build_hierarchy`] sorts the leaves along a Morton curve (63 bits, 21 per axis, over
//! the centres' box) and merges runs of [`HierarchyConfig::branching`] consecutive nodes of one
//! level into a node of the next, until one node is left; a lone node at the end of a level moves
//! up as it is.
//!
//! # Merging (moment matching)
//! Child `j` (a leaf, or a merged node carrying its leaves' exact moments) has opacity `o_j`,
//! standard deviations `s_j`, centre `mu_j`, covariance `Sigma_j = R_j diag(s_j^2) R_j^T` and
//! mass
//!
//! ```text
//! m_j = o_j (s_1 s_2 + s_1 s_3 + s_2 s_3)      (opacity times the mean area it covers on
//!                                               screen, up to a constant: Cauchy's formula)
//! ```
//!
//! (a merged node's mass is the sum of its children's, not recomputed from its own opacity).
//! The parent, with `m = sum m_j` and `w_j = m_j / m`:
//!
//! ```text
//! mu    = sum w_j mu_j
//! Sigma = sum w_j (Sigma_j + (mu_j - mu)(mu_j - mu)^T)
//! (R, s) from the eigen-decomposition of Sigma (a proper rotation; s^2 the eigenvalues)
//! o     = m / (s_1 s_2 + s_1 s_3 + s_2 s_3), clamped to [1e-6, 1 - 1e-6]
//! SH    = sum w_j SH_j                        (every band; colour weighted by contribution)
//! ```
//!
//! so the mass, mean and covariance of its leaves are preserved (the opacity only where the
//! clamp is inactive), in `f64`. Children of zero total mass are averaged with equal weights.
//!
//! # Bounds for the cut ([`LodGeometry`])
//! Per node: the sphere `(centre, radius)` around every leaf centre below it (a leaf: its
//! centre, radius 0; a parent: its own centre, the radius reaching every child's sphere) and the
//! `size`, the largest of its own and its children's largest standard deviations. Both are
//! monotone up the tree, which the cut relies on.
//!
//! # On disk ([`write_hierarchy`], [`read_hierarchy`])
//! A binary little-endian PLY whose first element, `vertex`, is exactly the leaves in the 3DGS
//! layout (so every 3DGS tool, and [`crate::read_splats`], reads the file as the plain leaf
//! splats), followed by `lod_node` (the merged nodes, the same properties) and `lod_parent`
//! (`uint parent` for every node, leaves first). A header comment names the layout.

mod build;
mod file;

pub use build::{HierarchyConfig, build_hierarchy};
pub use file::{is_hierarchy, read_hierarchy, write_hierarchy};

use crate::Splats;

/// A level-of-detail hierarchy on the host (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SplatHierarchy {
    /// `[M]` Gaussians: the leaves `0..leaves`, then the merged nodes, children first.
    pub nodes: Splats,
    /// `[M]` each node's parent; the root (node `M - 1`) is its own.
    pub parents: Vec<u32>,
    /// `L`, the number of leaves.
    pub leaves: usize,
}

/// What [`SplatHierarchy::geometry`] returns: per node, the bounds the cut is chosen by.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LodGeometry {
    /// `[M]` centres of the bounding spheres, world units (the nodes' own centres).
    pub centres: Vec<[f32; 3]>,
    /// `[M]` radii of the bounding spheres, world units.
    pub radii: Vec<f32>,
    /// `[M]` the largest standard deviation in the node's subtree, world units.
    pub sizes: Vec<f32>,
}

impl SplatHierarchy {
    /// Number of nodes, leaves included.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    /// Whether the hierarchy has no node.
    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// The leaves alone, as the splat set they came from.
    pub fn leaf_splats(&self) -> Splats {
        let l = self.leaves;
        let k3 = 3 * self.nodes.sh_rest_coefficients();
        Splats {
            means: self.nodes.means[..l].to_vec(),
            quats: self.nodes.quats[..l].to_vec(),
            log_scales: self.nodes.log_scales[..l].to_vec(),
            opacity_logits: self.nodes.opacity_logits[..l].to_vec(),
            sh_dc: self.nodes.sh_dc[..l].to_vec(),
            sh_rest: self.nodes.sh_rest[..l * k3].to_vec(),
            sh_degree: self.nodes.sh_degree,
        }
    }

    /// Why this is not a valid tree, if it is not: the vectors' lengths, the leaf count, every
    /// parent after its child and a merged node, the root its own parent, every merged node
    /// someone's parent.
    pub fn problem(&self) -> Option<String> {
        let m = self.len();
        if self.nodes.len() != m {
            return Some(format!("{} nodes but {m} parents", self.nodes.len()));
        }
        if m == 0 {
            return (self.leaves != 0).then(|| format!("{} leaves but no node", self.leaves));
        }
        if self.leaves == 0 || self.leaves > m {
            return Some(format!("{} leaves in {m} nodes", self.leaves));
        }
        let mut has_child = vec![false; m];
        for (n, &p) in self.parents.iter().enumerate() {
            let p = p as usize;
            if n + 1 == m {
                if p != n {
                    return Some(format!("the root, node {n}, has parent {p}, not itself"));
                }
            } else if p <= n || p < self.leaves || p >= m {
                return Some(format!(
                    "node {n} has parent {p}: a parent is a merged node ({}..{m}) after its child",
                    self.leaves
                ));
            } else {
                has_child[p] = true;
            }
        }
        if m > 1
            && let Some(n) = (self.leaves..m).find(|&n| !has_child[n])
        {
            return Some(format!("merged node {n} has no child"));
        }
        None
    }

    /// The bounds of every node (see the [module docs](self)), in one pass from the leaves up.
    pub fn geometry(&self) -> LodGeometry {
        let m = self.len();
        let centres = self.nodes.means.clone();
        let mut sizes: Vec<f32> = self
            .nodes
            .log_scales
            .iter()
            .map(|s| s[0].max(s[1]).max(s[2]).exp())
            .collect();
        let mut reach = vec![0.0f64; m];
        let mut radii = vec![0.0f32; m];
        for n in 0..m {
            // Final here (every child comes before its parent), and rounded up before it
            // reaches the parent, so that the parent's `f32` sphere holds the child's.
            radii[n] = round_up(reach[n]);
            if n + 1 == m {
                break;
            }
            let p = self.parents[n] as usize;
            let d = (0..3)
                .map(|k| (f64::from(centres[n][k]) - f64::from(centres[p][k])).powi(2))
                .sum::<f64>()
                .sqrt();
            reach[p] = reach[p].max(d + f64::from(radii[n]));
            sizes[p] = sizes[p].max(sizes[n]);
        }
        LodGeometry {
            centres,
            radii,
            sizes,
        }
    }
}

/// The smallest `f32` at least `value` (non-negative and finite), with a relative margin that
/// covers the rounding of the distances the cut computes in `f32`.
fn round_up(value: f64) -> f32 {
    let margin = value * (1.0 + 1e-6);
    let rounded = margin as f32;
    if f64::from(rounded) < margin {
        f32::from_bits(rounded.to_bits() + 1)
    } else {
        rounded
    }
}

#[cfg(test)]
mod tests;
