//! The one PLY reader under Ember's point clouds and splat files: the header, and the values of
//! the `vertex` element.
//!
//! Handled: the three encodings (`ascii`, `binary_little_endian`, `binary_big_endian`), every
//! scalar type (values are handed out as `f64`), list properties (skipped, in `vertex` too), and
//! elements before or after `vertex` (a mesh's faces are walked past, never stored). What a
//! vertex property means is the caller's business: [`read_vertex`] hands each scalar value to
//! a closure with its record and property index.
//!
//! Every count is checked against the bytes that follow before anything is sized or looped over
//! by it, so a corrupt header cannot make the reader allocate or walk what the file does not hold.

use std::path::Path;

use crate::error::{DataError, Result};

/// How the body is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Encoding {
    Ascii,
    LittleEndian,
    BigEndian,
}

/// A PLY scalar type.
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

    /// Bytes in a binary body.
    pub(crate) fn size(self) -> usize {
        match self {
            Scalar::I8 | Scalar::U8 => 1,
            Scalar::I16 | Scalar::U16 => 2,
            Scalar::I32 | Scalar::U32 | Scalar::F32 => 4,
            Scalar::F64 => 8,
        }
    }

    /// The value at the start of `b` (at least [`Scalar::size`] bytes).
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

/// One property of an element.
#[derive(Debug, Clone)]
pub(crate) enum Property {
    Scalar { name: String, ty: Scalar },
    List { count: Scalar, item: Scalar },
}

impl Property {
    /// The fewest bytes it takes in a binary record (a list's count alone).
    fn min_size(&self) -> usize {
        match self {
            Property::Scalar { ty, .. } => ty.size(),
            Property::List { count, .. } => count.size(),
        }
    }
}

/// One element of the header: its name, record count and properties in record order.
#[derive(Debug, Clone)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) count: usize,
    pub(crate) properties: Vec<Property>,
}

impl Element {
    /// The index of scalar property `name`.
    pub(crate) fn scalar(&self, name: &str) -> Option<usize> {
        self.properties
            .iter()
            .position(|p| matches!(p, Property::Scalar { name: n, .. } if n == name))
    }

    /// Bytes of a binary record when every property is a scalar.
    fn fixed_size(&self) -> Option<usize> {
        self.properties
            .iter()
            .map(|p| match p {
                Property::Scalar { ty, .. } => Some(ty.size()),
                Property::List { .. } => None,
            })
            .sum()
    }
}

/// A parsed header.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) encoding: Encoding,
    pub(crate) elements: Vec<Element>,
    /// Offset of the body in the file's bytes.
    pub(crate) body_start: usize,
    /// The line number of the body's first line (the header's line count plus one).
    pub(crate) body_line: usize,
}

impl Header {
    /// The index of the `vertex` element.
    pub(crate) fn vertex_index(&self, path: &Path) -> Result<usize> {
        self.elements
            .iter()
            .position(|e| e.name == "vertex")
            .ok_or_else(|| DataError::Ply {
                path: path.to_path_buf(),
                problem: "no `vertex` element".to_string(),
            })
    }

    /// Refuses a vertex count the body cannot hold, before the caller allocates for it: a binary
    /// record is at least its properties' size, an ASCII one at least two characters a value.
    pub(crate) fn check_vertex_count(
        &self,
        vertex: usize,
        file_len: usize,
        path: &Path,
    ) -> Result<()> {
        let element = &self.elements[vertex];
        let min_record: usize = match self.encoding {
            Encoding::Ascii => 2 * element.properties.len(),
            _ => element.properties.iter().map(Property::min_size).sum(),
        };
        let body_len = file_len - self.body_start;
        if element.count.saturating_mul(min_record) > body_len {
            return Err(DataError::Truncated {
                path: path.to_path_buf(),
                offset: file_len as u64,
                what: format!(
                    "{} vertex records of at least {min_record} bytes ({body_len} bytes of body)",
                    element.count
                ),
            });
        }
        Ok(())
    }
}

/// Parses the header of a PLY file's bytes; `path` names the file in errors.
pub(crate) fn parse_header(bytes: &[u8], path: &Path) -> Result<Header> {
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
    Ok(Header {
        encoding,
        elements,
        body_start: offset,
        body_line: line_no + 1,
    })
}

/// A list's item count, refused past a billion (no real file has one; a corrupt count would
/// otherwise be walked).
fn list_length(n: f64) -> Option<usize> {
    (0.0..=1e9).contains(&n).then_some(n as usize)
}

/// Reads the records of element `vertex` of the file `bytes` (whose header is `header`), calling
/// `visit(record, property, value)` for every scalar property of every record, in file order.
/// Elements before it are walked past; those after it are not read.
pub(crate) fn read_vertex(
    bytes: &[u8],
    path: &Path,
    header: &Header,
    vertex: usize,
    visit: impl FnMut(usize, usize, f64),
) -> Result<()> {
    let body = &bytes[header.body_start..];
    match header.encoding {
        Encoding::Ascii => read_ascii(body, path, header, vertex, visit),
        encoding => read_binary(body, path, encoding, &header.elements, vertex, visit),
    }
}

fn read_binary(
    body: &[u8],
    path: &Path,
    encoding: Encoding,
    elements: &[Element],
    vertex: usize,
    mut visit: impl FnMut(usize, usize, f64),
) -> Result<()> {
    let truncated = |offset: usize, what: String| DataError::Truncated {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let mut offset = 0usize;
    for (e, element) in elements.iter().enumerate().take(vertex + 1) {
        let min_size: usize = element.properties.iter().map(Property::min_size).sum();
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
        let wanted = e == vertex;
        if let Some(size) = element.fixed_size() {
            // Checked above: `count * size` bytes are there.
            let records = &body[offset..offset + element.count * size];
            if wanted {
                for (record, bytes) in records.chunks_exact(size.max(1)).enumerate() {
                    let mut at = 0;
                    for (k, property) in element.properties.iter().enumerate() {
                        if let Property::Scalar { ty, .. } = property {
                            visit(record, k, ty.decode(&bytes[at..], encoding));
                            at += ty.size();
                        }
                    }
                }
            }
            offset += records.len();
            continue;
        }
        for record in 0..element.count {
            for (k, property) in element.properties.iter().enumerate() {
                let what = || format!("`{}` record {record}", element.name);
                let end = offset + property.min_size();
                let b = body
                    .get(offset..end)
                    .ok_or_else(|| truncated(offset, what()))?;
                match property {
                    Property::Scalar { ty, .. } => {
                        if wanted {
                            visit(record, k, ty.decode(b, encoding));
                        }
                        offset = end;
                    }
                    Property::List { count, item } => {
                        let n = count.decode(b, encoding);
                        let n = list_length(n).ok_or_else(|| DataError::InvalidBinary {
                            path: path.to_path_buf(),
                            offset: offset as u64,
                            problem: format!("list length {n} in {}", what()),
                        })?;
                        offset = end
                            .checked_add(n * item.size())
                            .filter(|&o| o <= body.len())
                            .ok_or_else(|| truncated(end, what()))?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn read_ascii(
    body: &[u8],
    path: &Path,
    header: &Header,
    vertex: usize,
    mut visit: impl FnMut(usize, usize, f64),
) -> Result<()> {
    // Line numbers in errors count from the top of the file.
    let first_line = header.body_line;
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
    for (e, element) in header.elements.iter().enumerate().take(vertex + 1) {
        for record in 0..element.count {
            let Some((line_no, line)) = lines.next() else {
                return Err(DataError::Ply {
                    path: path.to_path_buf(),
                    problem: format!(
                        "the file ends at `{}` record {record} of {}",
                        element.name, element.count
                    ),
                });
            };
            if e != vertex {
                continue;
            }
            let parse_error = |problem: String| DataError::Parse {
                path: path.to_path_buf(),
                line: line_no,
                problem,
            };
            let mut tokens = line.split_whitespace();
            let mut next = || -> Result<f64> {
                let token = tokens
                    .next()
                    .ok_or_else(|| parse_error(format!("vertex {record} has too few values")))?;
                token
                    .parse::<f64>()
                    .map_err(|_| parse_error(format!("`{token}` is not a number")))
            };
            for (k, property) in element.properties.iter().enumerate() {
                match property {
                    Property::Scalar { .. } => visit(record, k, next()?),
                    Property::List { .. } => {
                        let n = next()?;
                        let n = list_length(n)
                            .ok_or_else(|| parse_error(format!("list length {n}")))?;
                        for _ in 0..n {
                            next()?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
