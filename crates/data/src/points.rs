//! Point clouds for initialising a scene: COLMAP's `points3D` or a PLY file.
//!
//! A PLY is read by the crate's one PLY reader (any encoding and scalar type, list properties
//! and other elements skipped: a mesh's faces are ignored). From `vertex` it takes `x y z`
//! (required) and `red green blue` (optional): integer colours are taken as 0-255 (`ushort` as
//! 0-65535), float colours as 0-1. Other properties (normals, alpha, 3DGS attributes) are skipped.

use std::path::Path;

use crate::colmap::ColmapPoint3D;
use crate::error::{DataError, Result};
use crate::ply::{Property, Scalar, parse_header, read_vertex};

/// Points with optional colours.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PointCloud {
    /// Positions `[N]` of `[x, y, z]`, world units.
    pub positions: Vec<[f32; 3]>,
    /// Colours `[N]` of 8-bit `[r, g, b]`, when the source has them.
    pub colors: Option<Vec<[u8; 3]>>,
}

impl PointCloud {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The points of a COLMAP model, with their colours.
    pub fn from_colmap(points: &[ColmapPoint3D]) -> PointCloud {
        PointCloud {
            positions: points.iter().map(|p| p.xyz.map(|v| v as f32)).collect(),
            colors: Some(points.iter().map(|p| p.rgb).collect()),
        }
    }

    /// Reads a PLY file.
    pub fn read_ply(path: &Path) -> Result<PointCloud> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        parse_ply(&bytes, path)
    }

    /// Writes the cloud as a binary little-endian PLY (`x y z` floats, then `red green blue`
    /// bytes when it has colours), atomically.
    pub fn write_ply(&self, path: &Path) -> Result<()> {
        let colour = self.colors.as_ref().filter(|c| c.len() == self.len());
        let mut bytes = format!(
            "ply\nformat binary_little_endian 1.0\nelement vertex {}\nproperty float x\nproperty float y\nproperty float z\n{}end_header\n",
            self.len(),
            if colour.is_some() {
                "property uchar red\nproperty uchar green\nproperty uchar blue\n"
            } else {
                ""
            }
        )
        .into_bytes();
        for (i, p) in self.positions.iter().enumerate() {
            for v in p {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            if let Some(colours) = colour {
                bytes.extend_from_slice(&colours[i]);
            }
        }
        crate::write_atomically(path, &bytes).map_err(|e| DataError::io(path, e))
    }
}

/// Parses a PLY file's bytes; `path` names the file in errors.
pub fn parse_ply(bytes: &[u8], path: &Path) -> Result<PointCloud> {
    let header = parse_header(bytes, path)?;
    let vertex_index = header.vertex_index(path)?;
    header.check_vertex_count(vertex_index, bytes.len(), path)?;
    let vertex = &header.elements[vertex_index];
    let mut xyz = [0usize; 3];
    for (slot, name) in xyz.iter_mut().zip(["x", "y", "z"]) {
        *slot = vertex.scalar(name).ok_or_else(|| DataError::Ply {
            path: path.to_path_buf(),
            problem: format!("the vertex element has no `{name}` property"),
        })?;
    }
    let rgb = match (
        vertex.scalar("red"),
        vertex.scalar("green"),
        vertex.scalar("blue"),
    ) {
        (Some(r), Some(g), Some(b)) => {
            let Property::Scalar { ty, .. } = vertex.properties[r] else {
                unreachable!("`scalar` only finds scalar properties")
            };
            Some(([r, g, b], color_scale(ty)))
        }
        _ => None,
    };
    // Where each vertex property goes, looked up once rather than per value.
    let mut slots = vec![Slot::Skip; vertex.properties.len()];
    for (c, &p) in xyz.iter().enumerate() {
        slots[p] = Slot::Position(c);
    }
    for (c, &p) in rgb
        .iter()
        .flat_map(|(channels, _)| channels.iter().enumerate())
    {
        slots[p] = Slot::Color(c);
    }
    let scale = rgb.map_or(1.0, |(_, full)| 255.0 / full);
    let mut positions = vec![[0.0f32; 3]; vertex.count];
    let mut colors = vec![[0u8; 3]; if rgb.is_some() { vertex.count } else { 0 }];
    read_vertex(
        bytes,
        path,
        &header,
        vertex_index,
        |record, property, value| match slots[property] {
            Slot::Position(c) => positions[record][c] = value as f32,
            Slot::Color(c) => {
                colors[record][c] = (value * scale).round().clamp(0.0, 255.0) as u8;
            }
            Slot::Skip => {}
        },
    )?;
    Ok(PointCloud {
        positions,
        colors: rgb.map(|_| colors),
    })
}

/// Where a vertex property goes.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Position(usize),
    Color(usize),
    Skip,
}

/// The full-intensity value of a colour stored in `ty`: 65535 for `ushort`, 1 for floats, 255
/// for the other integers.
fn color_scale(ty: Scalar) -> f64 {
    match ty {
        Scalar::U16 => 65535.0,
        Scalar::F32 | Scalar::F64 => 1.0,
        _ => 255.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `ply` fuzz target: an element without properties declaring 2e10 entries
    /// made the binary reader walk them all (58 s for a 1 KB file).
    #[test]
    fn a_huge_count_of_empty_entries_is_refused_at_once() {
        let text = "ply\nformat binary_little_endian 1.0\nelement junk 20496382304\n\
                    element vertex 1\nproperty float x\nproperty float y\nproperty float z\n\
                    end_header\n";
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(&[0u8; 12]);
        let message = parse_ply(&bytes, Path::new("junk.ply"))
            .unwrap_err()
            .to_string();
        assert!(message.contains("20496382304 `junk` entries"), "{message}");
    }

    const ASCII: &str = "ply\nformat ascii 1.0\ncomment made by hand\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n0 1 2 255 0 10\n-1.5 0.25 3 1 2 3\n3 0 1 1\n";

    #[test]
    fn written_clouds_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("points.ply");
        for colors in [Some(vec![[1, 2, 3], [250, 0, 9]]), None] {
            let cloud = PointCloud {
                positions: vec![[0.5, -1.0, 2.0], [3.0, 4.0, -5.5]],
                colors,
            };
            cloud.write_ply(&path).unwrap();
            assert_eq!(PointCloud::read_ply(&path).unwrap(), cloud);
        }
    }

    #[test]
    fn ascii_with_faces_after_vertices() {
        let cloud = parse_ply(ASCII.as_bytes(), Path::new("a.ply")).unwrap();
        assert_eq!(cloud.positions, vec![[0.0, 1.0, 2.0], [-1.5, 0.25, 3.0]]);
        assert_eq!(cloud.colors, Some(vec![[255, 0, 10], [1, 2, 3]]));
    }

    fn binary(big_endian: bool) -> Vec<u8> {
        let format = if big_endian {
            "binary_big_endian"
        } else {
            "binary_little_endian"
        };
        let mut bytes = format!(
            "ply\r\nformat {format} 1.0\r\nelement face 1\r\nproperty list uchar int vertex_indices\r\nelement vertex 2\r\nproperty double x\r\nproperty float y\r\nproperty float z\r\nproperty float nx\r\nproperty float red\r\nproperty float green\r\nproperty float blue\r\nend_header\r\n"
        )
        .into_bytes();
        bytes.push(3);
        for i in [0i32, 1, 2] {
            bytes.extend(if big_endian {
                i.to_be_bytes()
            } else {
                i.to_le_bytes()
            });
        }
        for v in [
            [1.0f32, 2.0, 3.0, 0.0, 1.0, 0.5, 0.0],
            [4.0, 5.0, 6.0, 0.0, 0.0, 0.0, 1.0],
        ] {
            let x = v[0] as f64;
            bytes.extend(if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            });
            for f in &v[1..] {
                bytes.extend(if big_endian {
                    f.to_be_bytes()
                } else {
                    f.to_le_bytes()
                });
            }
        }
        bytes
    }

    #[test]
    fn binary_both_endians_with_list_before_vertices_and_float_colors() {
        for big in [false, true] {
            let cloud = parse_ply(&binary(big), Path::new("b.ply")).unwrap();
            assert_eq!(cloud.positions, vec![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]);
            assert_eq!(cloud.colors, Some(vec![[255, 128, 0], [0, 0, 255]]));
        }
    }

    #[test]
    fn truncated_and_malformed_files_are_errors() {
        let bytes = binary(false);
        for len in 0..bytes.len() {
            assert!(
                parse_ply(&bytes[..len], Path::new("b.ply")).is_err(),
                "{len}"
            );
        }
        let no_x = ASCII.replace("property float x\n", "property float w\n");
        let error = parse_ply(no_x.as_bytes(), Path::new("a.ply")).unwrap_err();
        assert!(error.to_string().contains("no `x` property"), "{error}");
        let bad_number = ASCII.replace("-1.5", "-1.5e");
        let error = parse_ply(bad_number.as_bytes(), Path::new("a.ply")).unwrap_err();
        assert!(error.to_string().starts_with("a.ply:15:"), "{error}");
        assert!(parse_ply(b"plx\n", Path::new("c.ply")).is_err());
    }
}
