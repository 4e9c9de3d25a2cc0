//! The hierarchy on disk: a 3DGS PLY of the leaves with two more elements (see the
//! [module docs](super)).

use std::path::Path;

use super::SplatHierarchy;
use crate::error::{DataError, Result};
use crate::ply::{Header, parse_header, read_vertex};
use crate::splats::ply::{parse_element, push_element, put_record, record_floats};

/// The header comment that names the layout.
const COMMENT: &str = "comment ember level-of-detail hierarchy: vertex = the leaves (3DGS), \
lod_node = the merged nodes, lod_parent = every node's parent, leaves first";

/// Writes `hierarchy` at `path` (any name; `.lod.ply` says what it is), atomically.
pub fn write_hierarchy(path: &Path, hierarchy: &SplatHierarchy) -> Result<()> {
    hierarchy.nodes.check(path)?;
    if let Some(problem) = hierarchy.problem() {
        return Err(DataError::Splat {
            path: path.to_path_buf(),
            problem: format!("not a valid hierarchy: {problem}"),
        });
    }
    let nodes = &hierarchy.nodes;
    let (m, l) = (hierarchy.len(), hierarchy.leaves);
    let k = nodes.sh_rest_coefficients();
    let mut header = String::from("ply\nformat binary_little_endian 1.0\n");
    header.push_str(COMMENT);
    header.push('\n');
    push_element(&mut header, "vertex", l, k);
    push_element(&mut header, "lod_node", m - l, k);
    header.push_str(&format!("element lod_parent {m}\nproperty uint parent\n"));
    header.push_str("end_header\n");
    let mut out = Vec::with_capacity(header.len() + m * (record_floats(nodes) + 1) * 4);
    out.extend_from_slice(header.as_bytes());
    for i in 0..m {
        put_record(&mut out, nodes, i);
    }
    for &p in &hierarchy.parents {
        out.extend_from_slice(&p.to_le_bytes());
    }
    crate::write_atomically(path, &out).map_err(|e| DataError::io(path, e))
}

/// The index of element `name` in `header`.
fn element(header: &Header, name: &str) -> Option<usize> {
    header.elements.iter().position(|e| e.name == name)
}

/// Whether the PLY at `path` holds a hierarchy (its header has the `lod_node` element); `false`
/// for any other file, readable or not.
pub fn is_hierarchy(path: &Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| parse_header(&bytes, path).ok())
        .is_some_and(|header| element(&header, "lod_node").is_some())
}

/// Reads a hierarchy [`write_hierarchy`] wrote (or any PLY of that layout), checking the tree.
pub fn read_hierarchy(path: &Path) -> Result<SplatHierarchy> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let refuse = |problem: String| DataError::Ply {
        path: path.to_path_buf(),
        problem,
    };
    let header = parse_header(&bytes, path)?;
    let (Some(vertex), Some(node), Some(parent)) = (
        element(&header, "vertex"),
        element(&header, "lod_node"),
        element(&header, "lod_parent"),
    ) else {
        return Err(refuse(
            "not a level-of-detail hierarchy (no `vertex`, `lod_node` and `lod_parent` \
             elements): build one with `trainer lod build`"
                .into(),
        ));
    };
    let mut nodes = parse_element(&bytes, path, &header, vertex)?;
    let merged = parse_element(&bytes, path, &header, node)?;
    if merged.sh_degree != nodes.sh_degree {
        return Err(refuse(format!(
            "the leaves have SH degree {} but the merged nodes {}",
            nodes.sh_degree, merged.sh_degree
        )));
    }
    let leaves = nodes.len();
    nodes.means.extend(merged.means);
    nodes.quats.extend(merged.quats);
    nodes.log_scales.extend(merged.log_scales);
    nodes.opacity_logits.extend(merged.opacity_logits);
    nodes.sh_dc.extend(merged.sh_dc);
    nodes.sh_rest.extend(merged.sh_rest);
    let element = &header.elements[parent];
    let Some(slot) = element.scalar("parent") else {
        return Err(refuse(
            "the `lod_parent` element lacks the property `parent`".into(),
        ));
    };
    if element.count != nodes.len() {
        return Err(refuse(format!(
            "{} parents for {} nodes",
            element.count,
            nodes.len()
        )));
    }
    header.check_vertex_count(parent, bytes.len(), path)?;
    let mut parents = vec![0u32; element.count];
    let mut bad = None;
    read_vertex(&bytes, path, &header, parent, |i, property, v| {
        if property == slot {
            if (0.0..=f64::from(u32::MAX)).contains(&v) && v.fract() == 0.0 {
                parents[i] = v as u32;
            } else if bad.is_none() {
                bad = Some((i, v));
            }
        }
    })?;
    if let Some((i, v)) = bad {
        return Err(refuse(format!("node {i} has parent {v}: not a node index")));
    }
    let hierarchy = SplatHierarchy {
        nodes,
        parents,
        leaves,
    };
    if let Some(problem) = hierarchy.problem() {
        return Err(refuse(format!("not a valid hierarchy: {problem}")));
    }
    Ok(hierarchy)
}
