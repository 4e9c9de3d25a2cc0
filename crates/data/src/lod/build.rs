//! [`build_hierarchy`]: the Morton sort of the leaves and the merges, level by level (the
//! merges of a level in parallel).

use std::path::Path;

use ember_kernels::quat::{quat_from_rotation, rotation_matrix, symmetric_eigen};
use rayon::prelude::*;

use super::SplatHierarchy;
use crate::Splats;
use crate::error::{DataError, Result};

/// How [`build_hierarchy`] merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HierarchyConfig {
    /// Nodes of one level merged into a node of the next (2 or more). 4 adds about a third of
    /// the leaves as merged nodes; 2 adds as many as there are leaves, in finer steps.
    pub branching: usize,
}

impl Default for HierarchyConfig {
    fn default() -> Self {
        HierarchyConfig { branching: 4 }
    }
}

/// Opacities of merged nodes stay within this much of 0 and 1 (a finite logit).
const OPACITY_MARGIN: f64 = 1e-6;

/// A node's exact moments, carried up the tree in `f64`.
#[derive(Debug, Clone, Copy)]
struct Moments {
    mass: f64,
    mean: [f64; 3],
    /// `xx, xy, xz, yy, yz, zz`.
    cov: [f64; 6],
}

/// A merged node: its Gaussian and its moments.
struct Merged {
    moments: Moments,
    mean: [f32; 3],
    quat: [f32; 4],
    log_scale: [f32; 3],
    opacity_logit: f32,
    sh_dc: [f32; 3],
    sh_rest: Vec<f32>,
}

/// The hierarchy over `splats` (see the [module docs](super)); `source` names the input in
/// errors. Refuses non-finite Gaussians (a NaN would spread to every node above it) and a
/// branching below 2.
pub fn build_hierarchy(
    splats: &Splats,
    config: &HierarchyConfig,
    source: &Path,
) -> Result<SplatHierarchy> {
    let refuse = |problem: String| DataError::Splat {
        path: source.to_path_buf(),
        problem,
    };
    splats.check(source)?;
    if config.branching < 2 {
        return Err(refuse(format!(
            "a hierarchy merges at least 2 nodes at a time, not {}",
            config.branching
        )));
    }
    if let Some(bad) = splats.non_finite() {
        return Err(refuse(format!(
            "{} Gaussians hold NaN or infinity (the first is {}): a hierarchy needs finite ones \
             (`trainer splat info` lists them)",
            bad.count, bad.first
        )));
    }
    let leaves = splats.len();
    let mut nodes = splats.clone();
    let mut parents: Vec<u32> = vec![0; leaves];
    let mut moments: Vec<Moments> = (0..leaves)
        .into_par_iter()
        .map(|i| leaf_moments(splats, i))
        .collect();
    let mut level = morton_order(splats);
    let k3 = 3 * splats.sh_rest_coefficients();
    while level.len() > 1 {
        let groups: Vec<&[(u64, u32)]> = level.chunks(config.branching).collect();
        let merged: Vec<Option<Merged>> = groups
            .par_iter()
            .map(|group| {
                let ids: Vec<u32> = group.iter().map(|&(_, id)| id).collect();
                (ids.len() > 1).then(|| merge(&nodes, &moments, &ids, k3))
            })
            .collect();
        let mut next = Vec::with_capacity(groups.len());
        for (group, merged) in groups.iter().zip(merged) {
            let Some(merged) = merged else {
                next.push(group[0]);
                continue;
            };
            let id = nodes.len();
            let id32 = u32::try_from(id).map_err(|_| {
                refuse("more than 2^32 nodes: too many Gaussians for a hierarchy".into())
            })?;
            for &(_, child) in group.iter() {
                parents[child as usize] = id32;
            }
            nodes.means.push(merged.mean);
            nodes.quats.push(merged.quat);
            nodes.log_scales.push(merged.log_scale);
            nodes.opacity_logits.push(merged.opacity_logit);
            nodes.sh_dc.push(merged.sh_dc);
            nodes.sh_rest.extend_from_slice(&merged.sh_rest);
            moments.push(merged.moments);
            parents.push(0);
            next.push((group[0].0, id32));
        }
        level = next;
    }
    if let Some(&(_, root)) = level.first() {
        parents[root as usize] = root;
    }
    Ok(SplatHierarchy {
        nodes,
        parents,
        leaves,
    })
}

/// The leaves along a Morton curve of their centres (63 bits, 21 per axis, over the box of the
/// centres), with their codes, sorted by code then index.
fn morton_order(splats: &Splats) -> Vec<(u64, u32)> {
    let Some([lo, hi]) = splats.bounds() else {
        return (0..splats.len() as u32).map(|i| (0, i)).collect();
    };
    let cells = f64::from((1u32 << 21) - 1);
    let scale: [f64; 3] =
        std::array::from_fn(|k| cells / f64::from(hi[k] - lo[k]).max(f64::MIN_POSITIVE));
    let mut keyed: Vec<(u64, u32)> = splats
        .means
        .par_iter()
        .enumerate()
        .map(|(i, m)| {
            let cell = |k: usize| {
                let v = (f64::from(m[k] - lo[k]) * scale[k]).clamp(0.0, cells);
                spread_bits(v as u64)
            };
            (cell(0) | (cell(1) << 1) | (cell(2) << 2), i as u32)
        })
        .collect();
    keyed.par_sort_unstable();
    keyed
}

/// The low 21 bits of `v` spread to every third bit.
fn spread_bits(v: u64) -> u64 {
    let mut x = v & 0x1f_ffff;
    x = (x | (x << 32)) & 0x001f_0000_0000_ffff;
    x = (x | (x << 16)) & 0x001f_0000_ff00_00ff;
    x = (x | (x << 8)) & 0x100f_00f0_0f00_f00f;
    x = (x | (x << 4)) & 0x10c3_0c30_c30c_30c3;
    x = (x | (x << 2)) & 0x1249_2492_4924_9249;
    x
}

/// `s_1 s_2 + s_1 s_3 + s_2 s_3`.
fn mean_area(s: [f64; 3]) -> f64 {
    s[0] * s[1] + s[0] * s[2] + s[1] * s[2]
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Leaf `i`'s mass, centre and covariance.
fn leaf_moments(splats: &Splats, i: usize) -> Moments {
    let q = splats.quats[i].map(f64::from);
    let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let unit = if norm > ember_kernels::quat::MIN_QUAT_NORM {
        q.map(|v| v / norm)
    } else {
        [1.0, 0.0, 0.0, 0.0]
    };
    let r = rotation_matrix(unit);
    let s = splats.log_scales[i].map(|v| f64::from(v).exp());
    let entry = |a: usize, b: usize| {
        (0..3)
            .map(|k| r[3 * a + k] * r[3 * b + k] * s[k] * s[k])
            .sum()
    };
    Moments {
        mass: sigmoid(f64::from(splats.opacity_logits[i])) * mean_area(s),
        mean: splats.means[i].map(f64::from),
        cov: [
            entry(0, 0),
            entry(0, 1),
            entry(0, 2),
            entry(1, 1),
            entry(1, 2),
            entry(2, 2),
        ],
    }
}

/// The node merging `group` (two or more node indices).
fn merge(nodes: &Splats, moments: &[Moments], group: &[u32], k3: usize) -> Merged {
    let children: Vec<&Moments> = group.iter().map(|&c| &moments[c as usize]).collect();
    let mass: f64 = children.iter().map(|c| c.mass).sum();
    let weights: Vec<f64> = if mass > 0.0 && mass.is_finite() {
        children.iter().map(|c| c.mass / mass).collect()
    } else {
        vec![1.0 / group.len() as f64; group.len()]
    };
    let mut mean = [0.0f64; 3];
    for (c, w) in children.iter().zip(&weights) {
        for (m, v) in mean.iter_mut().zip(c.mean) {
            *m += w * v;
        }
    }
    let mut cov = [0.0f64; 6];
    for (c, w) in children.iter().zip(&weights) {
        let d = [0, 1, 2].map(|k| c.mean[k] - mean[k]);
        let outer = [
            d[0] * d[0],
            d[0] * d[1],
            d[0] * d[2],
            d[1] * d[1],
            d[1] * d[2],
            d[2] * d[2],
        ];
        for e in 0..6 {
            cov[e] += w * (c.cov[e] + outer[e]);
        }
    }
    let matrix = [
        [cov[0], cov[1], cov[2]],
        [cov[1], cov[3], cov[4]],
        [cov[2], cov[4], cov[5]],
    ];
    let (values, vectors) = symmetric_eigen(matrix);
    // The smallest variance is kept above a ten-billionth of the largest (a flat set of children
    // makes a flat node, not a degenerate one).
    let floor = (values[2] * 1e-10).max(1e-36);
    let s = values.map(|v| v.max(floor).sqrt());
    // Columns are the eigenvectors; flipping one makes the rotation proper.
    let mut columns = vectors;
    let det = columns[0][0] * (columns[1][1] * columns[2][2] - columns[1][2] * columns[2][1])
        - columns[0][1] * (columns[1][0] * columns[2][2] - columns[1][2] * columns[2][0])
        + columns[0][2] * (columns[1][0] * columns[2][1] - columns[1][1] * columns[2][0]);
    if det < 0.0 {
        columns[2] = columns[2].map(|v| -v);
    }
    let rotation: [f64; 9] = std::array::from_fn(|e| columns[e % 3][e / 3]);
    let quat = quat_from_rotation(rotation);
    let opacity = (mass / mean_area(s)).clamp(OPACITY_MARGIN, 1.0 - OPACITY_MARGIN);
    let mut sh_dc = [0.0f64; 3];
    let mut sh_rest = vec![0.0f64; k3];
    for (&child, w) in group.iter().zip(&weights) {
        let child = child as usize;
        for (acc, &v) in sh_dc.iter_mut().zip(&nodes.sh_dc[child]) {
            *acc += w * f64::from(v);
        }
        for (acc, &v) in sh_rest
            .iter_mut()
            .zip(&nodes.sh_rest[child * k3..(child + 1) * k3])
        {
            *acc += w * f64::from(v);
        }
    }
    Merged {
        moments: Moments {
            mass: if mass.is_finite() { mass } else { 0.0 },
            mean,
            cov,
        },
        mean: mean.map(|v| v as f32),
        quat: quat.map(|v| v as f32),
        log_scale: s.map(|v| v.ln() as f32),
        opacity_logit: (opacity / (1.0 - opacity)).ln() as f32,
        sh_dc: sh_dc.map(|v| v as f32),
        sh_rest: sh_rest.into_iter().map(|v| v as f32).collect(),
    }
}
