//! Niantic's SPZ: quantised Gaussians, attribute by attribute.
//!
//! # Layout
//! Versions 2 and 3: a 16-byte header (`u32` magic `0x5053474e` = `"NGSP"`, `u32` version,
//! `u32` point count, `u8` SH degree, `u8` fractional bits, `u8` flags, `u8` reserved), then
//! the attributes of all points one after the other, the whole gzip-compressed (a raw,
//! uncompressed stream with the same header is read too).
//!
//! Version 4: a 32-byte uncompressed header (as above, with the byte after the flags counting
//! the attribute streams, then a `u32` offset of the table of contents and 12 reserved bytes),
//! a table of `(u64 compressed size, u64 size)` per stream, and each attribute as its own zstd
//! frame, in the same order and encoding as version 3.
//!
//! | attribute | bytes per point | decoded |
//! |---|---|---|
//! | positions | 9 | three 24-bit signed fixed-point numbers, `/ 2^fractional_bits` |
//! | alphas | 1 | `logit(a / 255)` |
//! | colours | 3 | `dc = (c / 255 - 0.5) / 0.15` (SPZ's colour scale, not `SH_C0`) |
//! | scales | 3 | `log_scale = s / 16 - 10` |
//! | rotations | 3 (v2), 4 (v3+) | v2: `(x, y, z) = r / 127.5 - 1`, `w = sqrt(1 - x^2 - y^2 - z^2)`; v3+: "smallest three": the top 2 bits of a `u32` index the largest of `(x, y, z, w)`, the other three follow as 10 bits each (sign bit + 9-bit magnitude of `|q_i| / sqrt(1/2)`), the last component in the lowest bits |
//! | SH | `3 K` | `(b - 128) / 128`, coefficient-major, channel fastest (as `Splats::sh_rest`) |
//!
//! # Frame
//! Versions 3 and 4, as the current tools write them, store positions in a right-up-back frame
//! (y and z opposite to the 3DGS PLY): they are read into the PLY frame by a half turn about x
//! (`y, z -> -y, -z`, with the quaternions and SH bands rotated to match) and written back the
//! same way. Version-2 files are read as stored. This is what the data says: the `minimal-v2`
//! and `minimal-v3` fixtures encode the same grid with opposite `z`, and `biker.spz` (v4)
//! matches `biker.compressed.ply` only after the turn.
//!
//! Quaternions come out normalised (SPZ stores unit quaternions). The flags (anti-aliasing)
//! are not used. The writer writes version 3, gzip-compressed, with 8 bits for every SH
//! coefficient and the largest fractional-bit count (at most 12) that fits the positions.

use std::io::Read;
use std::path::Path;

use ember_kernels::Similarity;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use super::{Reader, Splats, logit_of_byte, sh_rest_coefficients, sigmoid, unit_to_byte};
use crate::error::{DataError, Result};

/// `"NGSP"` read as a little-endian `u32`.
pub const MAGIC: u32 = 0x5053_474e;
/// SPZ's colour scale: `byte = 255 (0.15 dc + 0.5)`.
pub const COLOR_SCALE: f32 = 0.15;
/// Largest fractional-bit count the writer uses (SPZ's default).
const MAX_FRACTIONAL_BITS: u32 = 12;
/// Decompressed bytes after the attributes that are read (to reach the gzip trailer) and
/// ignored.
const MAX_TRAILING: u64 = 1 << 20;
/// Deflate expands data at most about 1032:1; a count claiming more is a corrupt header.
const MAX_EXPANSION: u64 = 1100;

/// What the header says.
#[derive(Debug, Clone, Copy)]
struct Header {
    version: u32,
    count: usize,
    sh_degree: usize,
    fractional_bits: u32,
}

impl Header {
    /// Bytes per point of each attribute stream, in file order.
    fn stream_sizes(&self) -> Vec<usize> {
        let rotation = if self.version == 2 { 3 } else { 4 };
        let mut sizes = vec![9, 1, 3, 3, rotation];
        if self.sh_degree > 0 {
            sizes.push(3 * sh_rest_coefficients(self.sh_degree));
        }
        sizes
    }

    fn body_size(&self) -> u64 {
        self.stream_sizes().iter().sum::<usize>() as u64 * self.count as u64
    }
}

fn invalid(path: &Path, offset: usize, problem: String) -> DataError {
    DataError::InvalidBinary {
        path: path.to_path_buf(),
        offset: offset as u64,
        problem,
    }
}

fn read_header(reader: &mut Reader<'_>, path: &Path) -> Result<(Header, u8)> {
    let magic = reader.u32("SPZ magic")?;
    if magic != MAGIC {
        return Err(invalid(
            path,
            0,
            format!("not an SPZ file (magic {magic:#010x}, expected \"NGSP\")"),
        ));
    }
    let version = reader.u32("SPZ version")?;
    if !(2..=4).contains(&version) {
        return Err(invalid(
            path,
            4,
            format!("SPZ version {version} is not supported (2, 3 and 4 are)"),
        ));
    }
    let count = reader.u32("point count")? as usize;
    let sh_degree = reader.u8("SH degree")? as usize;
    if sh_degree > 3 {
        return Err(invalid(
            path,
            12,
            format!("SH degree {sh_degree} (at most 3)"),
        ));
    }
    let fractional_bits = u32::from(reader.u8("fractional bits")?);
    if fractional_bits > 23 {
        return Err(invalid(
            path,
            13,
            format!("{fractional_bits} fractional bits in a 24-bit position"),
        ));
    }
    let _flags = reader.u8("flags")?;
    let fourth = reader.u8("reserved byte")?;
    Ok((
        Header {
            version,
            count,
            sh_degree,
            fractional_bits,
        },
        fourth,
    ))
}

/// Parses the bytes of an SPZ file (gzip or raw v2/v3, or v4); `path` names it in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Splats> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return parse_gzip(bytes, path);
    }
    let mut reader = Reader::new(bytes, path);
    let (header, streams) = read_header(&mut reader, path)?;
    if header.version == 4 {
        return parse_v4(bytes, reader, header, streams, path);
    }
    let body = reader.take(
        usize::try_from(header.body_size()).unwrap_or(usize::MAX),
        "SPZ attributes",
    )?;
    decode(header, &split_streams(&header, body), path)
}

fn parse_gzip(bytes: &[u8], path: &Path) -> Result<Splats> {
    let gzip_error = |e: std::io::Error| invalid(path, 0, format!("gzip stream: {e}"));
    let mut decoder = GzDecoder::new(bytes);
    let mut head = [0u8; 16];
    decoder.read_exact(&mut head).map_err(gzip_error)?;
    let (header, _) = read_header(&mut Reader::new(&head, path), path)?;
    if header.version == 4 {
        return Err(invalid(path, 4, "SPZ version 4 inside gzip".to_string()));
    }
    let size = header.body_size();
    if size > bytes.len() as u64 * MAX_EXPANSION + (1 << 20) {
        return Err(invalid(
            path,
            8,
            format!(
                "{} points need {size} bytes, more than {} compressed bytes can hold",
                header.count,
                bytes.len()
            ),
        ));
    }
    let mut body = Vec::with_capacity(size as usize);
    let mut limited = decoder.take(size);
    limited.read_to_end(&mut body).map_err(gzip_error)?;
    // Read on to the end of the stream (any trailing data is ignored, up to a bound) so that
    // gzip checks its CRC and length trailer: a file cut inside the trailer is truncated.
    std::io::copy(
        &mut limited.into_inner().take(MAX_TRAILING),
        &mut std::io::sink(),
    )
    .map_err(gzip_error)?;
    if (body.len() as u64) < size {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            offset: 16 + body.len() as u64,
            what: format!(
                "SPZ attributes of {} points (decompressed offset; {size} bytes expected)",
                header.count
            ),
        });
    }
    decode(header, &split_streams(&header, &body), path)
}

/// The attribute streams of a contiguous v2/v3 body of exactly `header.body_size()` bytes.
fn split_streams<'a>(header: &Header, mut body: &'a [u8]) -> Vec<&'a [u8]> {
    header
        .stream_sizes()
        .iter()
        .map(|per_point| {
            let (stream, rest) = body.split_at(per_point * header.count);
            body = rest;
            stream
        })
        .collect()
}

fn parse_v4(
    bytes: &[u8],
    mut reader: Reader<'_>,
    header: Header,
    streams: u8,
    path: &Path,
) -> Result<Splats> {
    let toc_offset = reader.u32("table-of-contents offset")? as usize;
    let sizes = header.stream_sizes();
    if usize::from(streams) != sizes.len() {
        return Err(invalid(
            path,
            15,
            format!(
                "{streams} attribute streams, expected {} for SH degree {}",
                sizes.len(),
                header.sh_degree
            ),
        ));
    }
    if toc_offset < 20 || toc_offset > bytes.len() {
        return Err(invalid(
            path,
            16,
            format!("table of contents at {toc_offset}, outside the file"),
        ));
    }
    let mut toc = Reader::new(bytes, path);
    toc.take(toc_offset, "SPZ header")?;
    let mut entries = Vec::with_capacity(sizes.len());
    for _ in 0..sizes.len() {
        entries.push((toc.u64("compressed size")?, toc.u64("stream size")?));
    }
    let mut data = Reader::new(bytes, path);
    data.take(toc.offset(), "SPZ table of contents")?;
    let mut decoded = Vec::with_capacity(sizes.len());
    for (s, ((compressed, size), per_point)) in entries.iter().zip(&sizes).enumerate() {
        let expected = (*per_point as u64) * header.count as u64;
        if *size != expected {
            return Err(invalid(
                path,
                toc_offset + 16 * s + 8,
                format!(
                    "stream {s} holds {size} bytes, expected {expected} for {} points",
                    header.count
                ),
            ));
        }
        let at = data.offset();
        let frame = data.take(
            usize::try_from(*compressed).unwrap_or(usize::MAX),
            &format!("zstd stream {s}"),
        )?;
        let zstd_error = |problem: String| invalid(path, at, format!("zstd stream {s}: {problem}"));
        let decoder = ruzstd::decoding::StreamingDecoder::new(frame)
            .map_err(|e| zstd_error(e.to_string()))?;
        // Grown as data arrives (zstd has no useful bound on its ratio), at most `expected`.
        let mut out = Vec::new();
        decoder
            .take(expected)
            .read_to_end(&mut out)
            .map_err(|e| zstd_error(e.to_string()))?;
        if out.len() as u64 != expected {
            return Err(zstd_error(format!(
                "decompressed to {} bytes, expected {expected}",
                out.len()
            )));
        }
        decoded.push(out);
    }
    let views: Vec<&[u8]> = decoded.iter().map(Vec::as_slice).collect();
    decode(header, &views, path)
}

/// Decodes the attribute streams (each exactly `count` times its per-point size).
fn decode(header: Header, streams: &[&[u8]], path: &Path) -> Result<Splats> {
    let n = header.count;
    let k = sh_rest_coefficients(header.sh_degree);
    let scale = 1.0 / (1u32 << header.fractional_bits) as f32;
    let means = streams[0]
        .chunks_exact(9)
        .map(|p| {
            std::array::from_fn(|c| {
                let b = &p[3 * c..3 * c + 3];
                // Sign-extend the 24-bit value through the top byte of an i32.
                let v = i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8;
                v as f32 * scale
            })
        })
        .collect();
    let opacity_logits = streams[1].iter().map(|&a| logit_of_byte(a)).collect();
    let sh_dc = streams[2]
        .chunks_exact(3)
        .map(|c| std::array::from_fn(|i| (f32::from(c[i]) / 255.0 - 0.5) / COLOR_SCALE))
        .collect();
    let log_scales = streams[3]
        .chunks_exact(3)
        .map(|s| std::array::from_fn(|i| f32::from(s[i]) / 16.0 - 10.0))
        .collect();
    let quats = if header.version == 2 {
        streams[4].chunks_exact(3).map(unpack_v2_rotation).collect()
    } else {
        streams[4]
            .chunks_exact(4)
            .map(|r| unpack_smallest_three(u32::from_le_bytes([r[0], r[1], r[2], r[3]])))
            .collect()
    };
    let sh_rest = if k > 0 {
        streams[5]
            .iter()
            .map(|&b| (f32::from(b) - 128.0) / 128.0)
            .collect()
    } else {
        Vec::new()
    };
    let splats = Splats {
        means,
        quats,
        log_scales,
        opacity_logits,
        sh_dc,
        sh_rest,
        sh_degree: header.sh_degree,
    };
    debug_assert_eq!(splats.len(), n);
    splats.check(path)?;
    if header.version >= 3 {
        return flip_frame(&splats);
    }
    Ok(splats)
}

/// The change of frame between SPZ v3+ (right, up, back) and the 3DGS PLY (right, down,
/// forward): negate y and z. It is a half turn about x and its own inverse: positions and SH
/// bands go through the transform kernel with that rotation `F`, and each Gaussian's rotation
/// becomes `F R F` (quaternion `(w, x, -y, -z)`), which keeps its local axes (as the other
/// tools convert it; `F R` would describe the same ellipsoid with two axes reversed).
fn flip_frame(splats: &Splats) -> Result<Splats> {
    let mut out = splats.transformed(&Similarity::rotation([0.0, 1.0, 0.0, 0.0]))?;
    for (flipped, q) in out.quats.iter_mut().zip(&splats.quats) {
        *flipped = [q[0], q[1], -q[2], -q[3]];
    }
    Ok(out)
}

/// v2: `(x, y, z)` in bytes, `w >= 0` implied. Returns `(w, x, y, z)`.
fn unpack_v2_rotation(r: &[u8]) -> [f32; 4] {
    let xyz: [f32; 3] = std::array::from_fn(|i| f32::from(r[i]) / 127.5 - 1.0);
    let w = (1.0 - xyz.iter().map(|v| v * v).sum::<f32>())
        .max(0.0)
        .sqrt();
    [w, xyz[0], xyz[1], xyz[2]]
}

/// v3+: smallest three of `(x, y, z, w)`. Returns `(w, x, y, z)`.
fn unpack_smallest_three(mut packed: u32) -> [f32; 4] {
    const MASK: u32 = (1 << 9) - 1;
    let largest = (packed >> 30) as usize;
    let mut xyzw = [0.0f32; 4];
    let mut sum = 0.0;
    for i in (0..4).rev() {
        if i == largest {
            continue;
        }
        let magnitude = (packed & MASK) as f32 / MASK as f32 * std::f32::consts::FRAC_1_SQRT_2;
        let negative = (packed >> 9) & 1 == 1;
        packed >>= 10;
        xyzw[i] = if negative { -magnitude } else { magnitude };
        sum += xyzw[i] * xyzw[i];
    }
    xyzw[largest] = (1.0 - sum).max(0.0).sqrt();
    [xyzw[3], xyzw[0], xyzw[1], xyzw[2]]
}

/// Inverse of [`unpack_smallest_three`] for a `(w, x, y, z)` quaternion (normalised here).
fn pack_smallest_three(q: [f32; 4]) -> u32 {
    let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    let unit = if norm > 0.0 && norm.is_finite() {
        q.map(|v| v / norm)
    } else {
        [1.0, 0.0, 0.0, 0.0]
    };
    let mut xyzw = [unit[1], unit[2], unit[3], unit[0]];
    let largest = (0..4)
        .max_by(|&a, &b| xyzw[a].abs().total_cmp(&xyzw[b].abs()))
        .unwrap_or(3);
    // q and -q are the same rotation: make the implied component positive.
    if xyzw[largest] < 0.0 {
        xyzw = xyzw.map(|v| -v);
    }
    let mut bits = 0u32;
    for (i, v) in xyzw.iter().enumerate() {
        if i == largest {
            continue;
        }
        let magnitude = (v.abs() * std::f32::consts::SQRT_2 * 511.0)
            .round()
            .min(511.0) as u32;
        bits = (bits << 10) | (u32::from(*v < 0.0) << 9) | magnitude;
    }
    bits | ((largest as u32) << 30)
}

/// The version-3, gzip-compressed SPZ bytes of `splats` (checked by the caller); `path` names
/// the destination in errors (positions too large for 24-bit fixed point).
pub fn encode(splats: &Splats, path: &Path) -> Result<Vec<u8>> {
    let splats = &flip_frame(splats)?;
    let n = splats.len();
    let max_abs = splats.means.iter().flatten().fold(0.0f32, |m, v| {
        if v.is_finite() {
            m.max(v.abs())
        } else {
            f32::INFINITY
        }
    });
    let limit = ((1u32 << 23) - 1) as f32;
    let fractional_bits = (0..=MAX_FRACTIONAL_BITS)
        .rev()
        .find(|&bits| max_abs * (1u32 << bits) as f32 <= limit)
        .ok_or_else(|| DataError::Splat {
            path: path.to_path_buf(),
            problem: format!(
                "a position coordinate of magnitude {max_abs} does not fit SPZ's 24-bit fixed point"
            ),
        })?;
    let count = u32::try_from(n).map_err(|_| DataError::Splat {
        path: path.to_path_buf(),
        problem: format!("{n} Gaussians do not fit SPZ's 32-bit count"),
    })?;
    let mut raw = Vec::with_capacity(16 + n * (20 + 3 * splats.sh_rest_coefficients()));
    raw.extend_from_slice(&MAGIC.to_le_bytes());
    raw.extend_from_slice(&3u32.to_le_bytes());
    raw.extend_from_slice(&count.to_le_bytes());
    raw.extend_from_slice(&[splats.sh_degree as u8, fractional_bits as u8, 0, 0]);
    let scale = (1u32 << fractional_bits) as f32;
    for m in &splats.means {
        for v in m {
            let fixed = (v * scale).round() as i32;
            raw.extend_from_slice(&fixed.to_le_bytes()[..3]);
        }
    }
    raw.extend(
        splats
            .opacity_logits
            .iter()
            .map(|&o| unit_to_byte(sigmoid(o))),
    );
    for dc in &splats.sh_dc {
        raw.extend(dc.iter().map(|&c| unit_to_byte(c * COLOR_SCALE + 0.5)));
    }
    for s in &splats.log_scales {
        raw.extend(
            s.iter()
                .map(|&v| ((v + 10.0) * 16.0).round().clamp(0.0, 255.0) as u8),
        );
    }
    for q in &splats.quats {
        raw.extend_from_slice(&pack_smallest_three(*q).to_le_bytes());
    }
    raw.extend(
        splats
            .sh_rest
            .iter()
            .map(|&v| (v * 128.0 + 128.0).round().clamp(0.0, 255.0) as u8),
    );
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    std::io::Write::write_all(&mut encoder, &raw)
        .and_then(|()| encoder.finish())
        .map_err(|e| DataError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_three_round_trips_within_quantisation() {
        for q in [
            [1.0, 0.0, 0.0, 0.0],
            [0.1, -0.7, 0.5, 0.2],
            [-0.3, 0.2, 0.9, -0.1],
            [0.5, 0.5, -0.5, 0.5],
        ] {
            let norm = q.iter().map(|v: &f32| v * v).sum::<f32>().sqrt();
            let unit = q.map(|v| v / norm);
            let back = unpack_smallest_three(pack_smallest_three(q));
            let dot: f32 = unit.iter().zip(&back).map(|(a, b)| a * b).sum();
            assert!(dot.abs() > 1.0 - 1e-5, "{unit:?} -> {back:?}");
        }
        // SPZ's identity is (x, y, z, w) = (0, 0, 0, 1): largest index 3, nothing else.
        assert_eq!(pack_smallest_three([1.0, 0.0, 0.0, 0.0]), 3 << 30);
    }

    #[test]
    fn write_then_read_and_corruptions_are_errors() {
        let splats = Splats {
            means: vec![[1.0, -2.5, 100.0], [0.0, 0.001, -3.0]],
            quats: vec![[1.0, 0.0, 0.0, 0.0], [0.2, 0.4, -0.8, 0.1]],
            log_scales: vec![[-3.0, -2.0, 0.0], [-5.0, -4.5, 1.0]],
            opacity_logits: vec![0.5, -2.0],
            sh_dc: vec![[0.1, -0.2, 0.3], [1.0, 0.0, -1.0]],
            sh_rest: (0..2 * 3 * 3).map(|j| (j as f32 - 9.0) / 10.0).collect(),
            sh_degree: 1,
        };
        let path = Path::new("t.spz");
        let bytes = encode(&splats, path).unwrap();
        let back = parse(&bytes, path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.sh_degree, 1);
        for i in 0..2 {
            for c in 0..3 {
                assert!((back.means[i][c] - splats.means[i][c]).abs() <= 0.5 / 4096.0);
                assert!((back.log_scales[i][c] - splats.log_scales[i][c]).abs() <= 1.0 / 32.0);
            }
        }
        for (a, b) in back.sh_rest.iter().zip(&splats.sh_rest) {
            assert!((a - b).abs() <= 0.5 / 128.0 + 1e-6);
        }
        for cut in [bytes.len() - 9, bytes.len() / 2, 10] {
            assert!(parse(&bytes[..cut], path).is_err());
        }
        assert!(parse(b"NGSP\x09\x00\x00\x00", path).is_err());
        assert!(parse(b"not an spz file at all", path).is_err());
    }
}
