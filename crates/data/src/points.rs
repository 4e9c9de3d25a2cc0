//! Point clouds for initialising a scene: COLMAP's `points3D` or a PLY file.
//!
//! The PLY reader handles the three encodings (`ascii`, `binary_little_endian`,
//! `binary_big_endian`), every scalar type, list properties (skipped), and elements before or
//! after `vertex` (a mesh's faces are ignored). From `vertex` it takes `x y z` (required) and
//! `red green blue` (optional): integer colours are taken as 0-255 (`ushort` as 0-65535),
//! float colours as 0-1. Other properties (normals, alpha, 3DGS attributes) are skipped.

use std::path::Path;

use crate::colmap::ColmapPoint3D;
use crate::error::{DataError, Result};

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
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Encoding {
    Ascii,
    LittleEndian,
    BigEndian,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    F32,
    F64,
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "char" | "int8" => Scalar::I8,
            "uchar" | "uint8" => Scalar::U8,
            "short" | "int16" => Scalar::I16,
            "ushort" | "uint16" => Scalar::U16,
            "int" | "int32" => Scalar::I32,
            "uint" | "uint32" => Scalar::U32,
            "float" | "float32" => Scalar::F32,
            "double" | "float64" => Scalar::F64,
            _ => return None,
        })
    }

    pub(crate) fn size(self) -> usize {
        match self {
            Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 => 2,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 4,
            Scalar::F64 => 8,
        }
    }

    /// The full-intensity value of a colour stored in this type.
    fn color_scale(self) -> f64 {
        match self {
            Scalar::U16 => 65535.0,
            Scalar::F32 | Scalar::F64 => 1.0,
            _ => 255.0,
        }
    }

    pub(crate) fn decode(self, b: &[u8], encoding: Encoding) -> f64 {
        macro_rules! num {
            ($t:ty) => {{
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..std::mem::size_of::<$t>()]);
                if encoding == Encoding::BigEndian {
                    <$t>::from_be_bytes(a) as f64
                } else {
                    <$t>::from_le_bytes(a) as f64
                }
            }};
        }
        match self {
            Scalar::I8 => num!(i8),
            Scalar::U8 => num!(u8),
            Scalar::I16 => num!(i16),
            Scalar::U16 => num!(u16),
            Scalar::I32 => num!(i32),
            Scalar::U32 => num!(u32),
            Scalar::F32 => num!(f32),
            Scalar::F64 => num!(f64),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Property {
    Scalar { name: String, ty: Scalar },
    List { count: Scalar, item: Scalar },
}

#[derive(Debug, Clone)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) count: usize,
    pub(crate) properties: Vec<Property>,
}

/// Where in a vertex record the wanted values are: property index for x, y, z, r, g, b.
struct VertexLayout {
    xyz: [usize; 3],
    rgb: Option<([usize; 3], Scalar)>,
}

/// Parses a PLY file's bytes; `path` names the file in errors.
pub fn parse_ply(bytes: &[u8], path: &Path) -> Result<PointCloud> {
    let ply_error = |problem: String| DataError::Ply {
        path: path.to_path_buf(),
        problem,
    };
    let (encoding, elements, body_start) = parse_header(bytes, path)?;
    let vertex_index = elements
        .iter()
        .position(|e| e.name == "vertex")
        .ok_or_else(|| ply_error("no `vertex` element".to_string()))?;
    let vertex = &elements[vertex_index];
    let find = |name: &str| {
        vertex
            .properties
            .iter()
            .position(|p| matches!(p, Property::Scalar { name: n, .. } if n == name))
    };
    let mut xyz = [0usize; 3];
    for (slot, name) in xyz.iter_mut().zip(["x", "y", "z"]) {
        *slot = find(name)
            .ok_or_else(|| ply_error(format!("the vertex element has no `{name}` property")))?;
    }
    let rgb = match (find("red"), find("green"), find("blue")) {
        (Some(r), Some(g), Some(b)) => {
            let Property::Scalar { ty, .. } = vertex.properties[r] else {
                unreachable!("find only returns scalar properties")
            };
            Some(([r, g, b], ty))
        }
        _ => None,
    };
    let layout = VertexLayout { xyz, rgb };
    let body = &bytes[body_start..];
    match encoding {
        Encoding::Ascii => read_ascii(body, path, &elements, vertex_index, &layout, bytes),
        _ => read_binary(body, path, encoding, &elements, vertex_index, &layout),
    }
}

/// The encoding, the elements and the offset of the body of a PLY file.
pub(crate) fn parse_header(bytes: &[u8], path: &Path) -> Result<(Encoding, Vec<Element>, usize)> {
    let parse_error = |line: usize, problem: String| DataError::Parse {
        path: path.to_path_buf(),
        line,
        problem,
    };
    let mut offset = 0;
    let mut line_no = 0;
    let mut encoding = None;
    let mut elements: Vec<Element> = Vec::new();
    loop {
        line_no += 1;
        let rest = &bytes[offset..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(parse_error(
                line_no,
                "the header ends without `end_header`".to_string(),
            ));
        };
        let line = std::str::from_utf8(&rest[..end])
            .map_err(|_| parse_error(line_no, "header line is not text".to_string()))?
            .trim_end_matches('\r');
        offset += end + 1;
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if line_no == 1 {
            if line != "ply" {
                return Err(DataError::Ply {
                    path: path.to_path_buf(),
                    problem: "not a PLY file (first line is not `ply`)".to_string(),
                });
            }
            continue;
        }
        match tokens.as_slice() {
            ["end_header"] => break,
            ["format", format, _version] => {
                encoding = Some(match *format {
                    "ascii" => Encoding::Ascii,
                    "binary_little_endian" => Encoding::LittleEndian,
                    "binary_big_endian" => Encoding::BigEndian,
                    other => {
                        return Err(parse_error(line_no, format!("unknown format `{other}`")));
                    }
                });
            }
            ["comment", ..] | ["obj_info", ..] | [] => {}
            ["element", name, count] => {
                let count = count.parse().map_err(|_| {
                    parse_error(
                        line_no,
                        format!(
                            "element `{name}` has count `{count}`, which is not a whole number \
                             from 0 to {}",
                            usize::MAX
                        ),
                    )
                })?;
                elements.push(Element {
                    name: name.to_string(),
                    count,
                    properties: Vec::new(),
                });
            }
            ["property", "list", count, item, _name] => {
                let (Some(count), Some(item)) = (Scalar::parse(count), Scalar::parse(item)) else {
                    return Err(parse_error(
                        line_no,
                        format!("unknown list type in `{line}`"),
                    ));
                };
                let element = elements.last_mut().ok_or_else(|| {
                    parse_error(line_no, "property before any element".to_string())
                })?;
                element.properties.push(Property::List { count, item });
            }
            ["property", ty, name] => {
                let ty = Scalar::parse(ty)
                    .ok_or_else(|| parse_error(line_no, format!("unknown property type `{ty}`")))?;
                let element = elements.last_mut().ok_or_else(|| {
                    parse_error(line_no, "property before any element".to_string())
                })?;
                element.properties.push(Property::Scalar {
                    name: name.to_string(),
                    ty,
                });
            }
            _ => {
                return Err(parse_error(
                    line_no,
                    format!("unexpected header line `{line}`"),
                ));
            }
        }
    }
    let encoding = encoding.ok_or_else(|| DataError::Ply {
        path: path.to_path_buf(),
        problem: "the header has no `format` line".to_string(),
    })?;
    // Every entry of an element with properties takes at least one byte (binary) or one
    // character (ASCII): a larger count is a corrupt header, refused before anything is sized
    // or looped over by it. An element without properties holds nothing, so the same bound
    // keeps a count of billions of empty entries from being walked.
    let body = bytes.len() - offset;
    if let Some(e) = elements.iter().find(|e| e.count > body) {
        return Err(DataError::Ply {
            path: path.to_path_buf(),
            problem: format!(
                "the header declares {} `{}` entries but only {body} bytes follow it",
                e.count, e.name
            ),
        });
    }
    Ok((encoding, elements, offset))
}

fn color_of(values: &[f64], layout: &VertexLayout) -> Option<[u8; 3]> {
    layout.rgb.map(|(idx, ty)| {
        let scale = 255.0 / ty.color_scale();
        idx.map(|i| (values[i] * scale).round().clamp(0.0, 255.0) as u8)
    })
}

fn read_binary(
    body: &[u8],
    path: &Path,
    encoding: Encoding,
    elements: &[Element],
    vertex_index: usize,
    layout: &VertexLayout,
) -> Result<PointCloud> {
    let truncated = |offset: usize, what: String| DataError::Truncated {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let mut offset = 0usize;
    for (e, element) in elements.iter().enumerate() {
        let min_size: usize = element
            .properties
            .iter()
            .map(|p| match p {
                Property::Scalar { ty, .. } => ty.size(),
                Property::List { count, .. } => count.size(),
            })
            .sum();
        let left = body.len() - offset;
        if element.count.saturating_mul(min_size) > left {
            return Err(truncated(
                offset,
                format!(
                    "{} `{}` records of at least {min_size} bytes ({left} bytes left)",
                    element.count, element.name
                ),
            ));
        }
        let wanted = e == vertex_index;
        let mut cloud = PointCloud::default();
        let mut colors = Vec::new();
        if wanted {
            cloud.positions.reserve(element.count);
        }
        let mut values = vec![0.0f64; element.properties.len()];
        for record in 0..element.count {
            for (k, property) in element.properties.iter().enumerate() {
                let what = || format!("`{}` record {record}", element.name);
                match property {
                    Property::Scalar { ty, .. } => {
                        let end = offset + ty.size();
                        let b = body
                            .get(offset..end)
                            .ok_or_else(|| truncated(offset, what()))?;
                        values[k] = ty.decode(b, encoding);
                        offset = end;
                    }
                    Property::List { count, item } => {
                        let end = offset + count.size();
                        let b = body
                            .get(offset..end)
                            .ok_or_else(|| truncated(offset, what()))?;
                        let n = count.decode(b, encoding);
                        if !(0.0..=u32::MAX as f64).contains(&n) {
                            return Err(DataError::InvalidBinary {
                                path: path.to_path_buf(),
                                offset: offset as u64,
                                problem: format!("list length {n} in {}", what()),
                            });
                        }
                        offset = end
                            .checked_add(n as usize * item.size())
                            .filter(|&o| o <= body.len())
                            .ok_or_else(|| truncated(end, what()))?;
                    }
                }
            }
            if wanted {
                cloud.positions.push(layout.xyz.map(|i| values[i] as f32));
                if let Some(c) = color_of(&values, layout) {
                    colors.push(c);
                }
            }
        }
        if wanted {
            cloud.colors = layout.rgb.map(|_| colors);
            // Elements after the vertices are not needed.
            return Ok(cloud);
        }
    }
    unreachable!("vertex_index is the index of an element")
}

fn read_ascii(
    body: &[u8],
    path: &Path,
    elements: &[Element],
    vertex_index: usize,
    layout: &VertexLayout,
    whole: &[u8],
) -> Result<PointCloud> {
    // Line numbers in errors count from the top of the file.
    let header_lines = whole.len() - body.len();
    let first_line = whole[..header_lines]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1;
    let text = std::str::from_utf8(body).map_err(|e| DataError::Parse {
        path: path.to_path_buf(),
        line: first_line
            + body[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
        problem: "not UTF-8 text".to_string(),
    })?;
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (first_line + i, l))
        .filter(|(_, l)| !l.trim().is_empty());
    for (e, element) in elements.iter().enumerate() {
        if e != vertex_index {
            for record in 0..element.count {
                if lines.next().is_none() {
                    return Err(DataError::Ply {
                        path: path.to_path_buf(),
                        problem: format!(
                            "file ends at `{}` record {record} of {}",
                            element.name, element.count
                        ),
                    });
                }
            }
            continue;
        }
        let mut cloud = PointCloud::default();
        let mut colors = Vec::new();
        let mut values = vec![0.0f64; element.properties.len()];
        for record in 0..element.count {
            let Some((line_no, line)) = lines.next() else {
                return Err(DataError::Ply {
                    path: path.to_path_buf(),
                    problem: format!("file ends at vertex {record} of {}", element.count),
                });
            };
            let parse_error = |problem: String| DataError::Parse {
                path: path.to_path_buf(),
                line: line_no,
                problem,
            };
            let mut tokens = line.split_whitespace();
            for (k, property) in element.properties.iter().enumerate() {
                let mut next = || -> Result<f64> {
                    let token = tokens.next().ok_or_else(|| {
                        parse_error(format!("vertex {record} has too few values"))
                    })?;
                    token
                        .parse::<f64>()
                        .map_err(|_| parse_error(format!("`{token}` is not a number")))
                };
                match property {
                    Property::Scalar { .. } => values[k] = next()?,
                    Property::List { .. } => {
                        let n = next()?;
                        if !(0.0..=1e9).contains(&n) {
                            return Err(parse_error(format!("list length {n}")));
                        }
                        for _ in 0..n as usize {
                            next()?;
                        }
                    }
                }
            }
            cloud.positions.push(layout.xyz.map(|i| values[i] as f32));
            if let Some(c) = color_of(&values, layout) {
                colors.push(c);
            }
        }
        cloud.colors = layout.rgb.map(|_| colors);
        return Ok(cloud);
    }
    unreachable!("vertex_index is the index of an element")
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
