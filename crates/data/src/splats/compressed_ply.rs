//! PlayCanvas' compressed PLY (SuperSplat, splat-transform): Gaussians quantised in chunks of
//! 256, against each chunk's min/max.
//!
//! Elements, binary little-endian: `chunk` (one per 256 Gaussians, `float` properties
//! `min_x min_y min_z max_x max_y max_z min_scale_x .. max_scale_z`, optionally
//! `min_r min_g min_b max_r max_g max_b`), then `vertex` (`uint` `packed_position`,
//! `packed_rotation`, `packed_scale`, `packed_color`).
//!
//! | packed | bits | decoded |
//! |---|---|---|
//! | position | x 11, y 10, z 11 (high to low) | `lerp(min, max, v / (2^bits - 1))` |
//! | scale | the same | log scale, `lerp(min_scale, max_scale, ..)` |
//! | colour | r, g, b, a 8 bits each (high to low) | `rgb = lerp(min_rgb, max_rgb, v / 255)` (or `v / 255` without the chunk's colour range), `dc = (rgb - 0.5) / SH_C0`; opacity logit from `a` |
//! | rotation | 2-bit index of the largest component, then three 10-bit ones | each `(v / 1023 - 0.5) sqrt(2)`, in `(rot_0, .., rot_3)` order with the largest (positive) put back |
//!
//! Not supported: the optional `sh` element (SH bands 1-3 as 8-bit values): a file that has
//! one is refused by name rather than read without its view-dependent colour.

use std::path::Path;

use super::{SH_C0, Splats, logit_of_byte};
use crate::error::{DataError, Result};
use crate::ply::{Element, Encoding, Property, parse_header};

/// Gaussians per chunk.
pub const CHUNK_SIZE: usize = 256;

/// Whether `bytes` look like a compressed PLY: a PLY header with a `chunk` element.
pub fn is_compressed_ply(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    head.starts_with(b"ply")
        && head
            .windows(b"element chunk ".len())
            .any(|w| w == b"element chunk ")
}

/// Byte offsets of the named `float` / `uint` properties in a record of `element`, and the
/// record size. Every property must be a 4-byte scalar.
fn layout(element: &Element, path: &Path) -> Result<(Vec<(String, usize)>, usize)> {
    let mut offset = 0;
    let mut named = Vec::new();
    for property in &element.properties {
        match property {
            Property::Scalar { name, ty } if ty.size() == 4 => {
                named.push((name.clone(), offset));
                offset += 4;
            }
            _ => {
                return Err(DataError::Ply {
                    path: path.to_path_buf(),
                    problem: format!(
                        "compressed PLY: the `{}` element has a property that is not a 4-byte scalar",
                        element.name
                    ),
                });
            }
        }
    }
    Ok((named, offset))
}

fn find(named: &[(String, usize)], name: &str, element: &str, path: &Path) -> Result<usize> {
    named
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, at)| *at)
        .ok_or_else(|| DataError::Ply {
            path: path.to_path_buf(),
            problem: format!("compressed PLY: the `{element}` element has no `{name}` property"),
        })
}

fn f32_at(record: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
}

fn u32_at(record: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
}

/// `(x, y, z)` of an 11-10-11 packed value, each in `[0, 1]`.
fn unpack_111011(v: u32) -> [f32; 3] {
    [
        ((v >> 21) & 0x7ff) as f32 / 2047.0,
        ((v >> 11) & 0x3ff) as f32 / 1023.0,
        (v & 0x7ff) as f32 / 2047.0,
    ]
}

/// `(rot_0, rot_1, rot_2, rot_3)` of a 2-10-10-10 "smallest three" value.
fn unpack_rotation(v: u32) -> [f32; 4] {
    let component =
        |shift: u32| (((v >> shift) & 0x3ff) as f32 / 1023.0 - 0.5) * std::f32::consts::SQRT_2;
    let (a, b, c) = (component(20), component(10), component(0));
    let m = (1.0 - (a * a + b * b + c * c)).max(0.0).sqrt();
    match v >> 30 {
        0 => [m, a, b, c],
        1 => [a, m, b, c],
        2 => [a, b, m, c],
        _ => [a, b, c, m],
    }
}

/// Parses the bytes of a compressed PLY; `path` names the file in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Splats> {
    let ply_error = |problem: String| DataError::Ply {
        path: path.to_path_buf(),
        problem,
    };
    let header = parse_header(bytes, path)?;
    let (elements, body_start) = (&header.elements, header.body_start);
    if header.encoding != Encoding::LittleEndian {
        return Err(ply_error(
            "compressed PLY must be binary_little_endian".to_string(),
        ));
    }
    if elements.iter().any(|e| e.name == "sh") {
        return Err(ply_error(
            "compressed PLY with SH bands (an `sh` element) is not supported".to_string(),
        ));
    }
    let (Some(chunk), Some(vertex)) = (
        elements.iter().position(|e| e.name == "chunk"),
        elements.iter().position(|e| e.name == "vertex"),
    ) else {
        return Err(ply_error(
            "compressed PLY needs a `chunk` and a `vertex` element".to_string(),
        ));
    };
    if chunk + 1 != vertex || chunk != 0 {
        return Err(ply_error(
            "compressed PLY: expected the `chunk` element first, then `vertex`".to_string(),
        ));
    }
    let (chunk_props, chunk_size) = layout(&elements[chunk], path)?;
    let (vertex_props, vertex_size) = layout(&elements[vertex], path)?;
    let chunks = elements[chunk].count;
    let n = elements[vertex].count;
    if chunks != n.div_ceil(CHUNK_SIZE) {
        return Err(ply_error(format!(
            "compressed PLY: {chunks} chunks for {n} Gaussians (expected {})",
            n.div_ceil(CHUNK_SIZE)
        )));
    }
    let body = &bytes[body_start..];
    let chunk_bytes = chunks.saturating_mul(chunk_size);
    let needed = chunk_bytes.saturating_add(n.saturating_mul(vertex_size));
    if needed > body.len() {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            offset: (body_start + body.len()) as u64,
            what: format!(
                "{chunks} chunk and {n} vertex records ({needed} bytes, {} in the file)",
                body.len()
            ),
        });
    }
    let get = |name: &str| find(&chunk_props, name, "chunk", path);
    let bounds: [usize; 12] = {
        let names = [
            "min_x",
            "min_y",
            "min_z",
            "max_x",
            "max_y",
            "max_z",
            "min_scale_x",
            "min_scale_y",
            "min_scale_z",
            "max_scale_x",
            "max_scale_y",
            "max_scale_z",
        ];
        let mut at = [0; 12];
        for (slot, name) in at.iter_mut().zip(names) {
            *slot = get(name)?;
        }
        at
    };
    let color_range: Option<[usize; 6]> = ["min_r", "min_g", "min_b", "max_r", "max_g", "max_b"]
        .iter()
        .map(|name| get(name).ok())
        .collect::<Option<Vec<_>>>()
        .map(|v| [v[0], v[1], v[2], v[3], v[4], v[5]]);
    let vget = |name: &str| find(&vertex_props, name, "vertex", path);
    let (p_pos, p_rot, p_scale, p_color) = (
        vget("packed_position")?,
        vget("packed_rotation")?,
        vget("packed_scale")?,
        vget("packed_color")?,
    );
    let mut splats = Splats {
        means: Vec::with_capacity(n),
        quats: Vec::with_capacity(n),
        log_scales: Vec::with_capacity(n),
        opacity_logits: Vec::with_capacity(n),
        sh_dc: Vec::with_capacity(n),
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    let lerp = |lo: f32, hi: f32, t: f32| lo + (hi - lo) * t;
    let vertices = &body[chunk_bytes..needed];
    for (i, record) in vertices.chunks_exact(vertex_size.max(1)).enumerate() {
        let c = &body[(i / CHUNK_SIZE) * chunk_size..][..chunk_size];
        let b = bounds.map(|at| f32_at(c, at));
        let pos = unpack_111011(u32_at(record, p_pos));
        splats
            .means
            .push(std::array::from_fn(|k| lerp(b[k], b[3 + k], pos[k])));
        let scale = unpack_111011(u32_at(record, p_scale));
        splats
            .log_scales
            .push(std::array::from_fn(|k| lerp(b[6 + k], b[9 + k], scale[k])));
        let color = u32_at(record, p_color);
        let channel = |shift: u32| ((color >> shift) & 0xff) as f32 / 255.0;
        let rgb = [channel(24), channel(16), channel(8)];
        let rgb = match color_range {
            Some(at) => {
                std::array::from_fn(|k| lerp(f32_at(c, at[k]), f32_at(c, at[3 + k]), rgb[k]))
            }
            None => rgb,
        };
        splats.sh_dc.push(rgb.map(|v| (v - 0.5) / SH_C0));
        splats
            .opacity_logits
            .push(logit_of_byte((color & 0xff) as u8));
        splats.quats.push(unpack_rotation(u32_at(record, p_rot)));
    }
    Ok(splats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_bit_fields() {
        let v = (2047 << 21) | (512 << 11);
        let [x, y, z] = unpack_111011(v);
        assert_eq!((x, z), (1.0, 0.0));
        assert!((y - 512.0 / 1023.0).abs() < 1e-7);
        // Largest index 0 (rot_0 = w), the others at the midpoint (0): the identity.
        let identity = unpack_rotation((511 << 20) | (511 << 10) | 511);
        assert!((identity[0] - 1.0).abs() < 1e-3 && identity[1].abs() < 2e-3);
    }

    #[test]
    fn truncated_and_inconsistent_files_are_errors() {
        let mut header = String::from("ply\nformat binary_little_endian 1.0\nelement chunk 1\n");
        for name in [
            "min_x",
            "min_y",
            "min_z",
            "max_x",
            "max_y",
            "max_z",
            "min_scale_x",
            "min_scale_y",
            "min_scale_z",
            "max_scale_x",
            "max_scale_y",
            "max_scale_z",
        ] {
            header.push_str(&format!("property float {name}\n"));
        }
        header.push_str("element vertex 2\n");
        for name in [
            "packed_position",
            "packed_rotation",
            "packed_scale",
            "packed_color",
        ] {
            header.push_str(&format!("property uint {name}\n"));
        }
        header.push_str("end_header\n");
        let mut bytes = header.into_bytes();
        assert!(is_compressed_ply(&bytes));
        bytes.extend(std::iter::repeat_n(0u8, 48 + 32));
        let s = parse(&bytes, Path::new("c.ply")).unwrap();
        assert_eq!(s.len(), 2);
        assert!(parse(&bytes[..bytes.len() - 1], Path::new("c.ply")).is_err());
        let wrong_chunks = String::from_utf8_lossy(&bytes).replace("chunk 1", "chunk 2");
        assert!(parse(wrong_chunks.as_bytes(), Path::new("c.ply")).is_err());
    }
}
