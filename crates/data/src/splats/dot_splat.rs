//! antimatter15's `.splat`: 32 bytes per Gaussian, no header, no SH bands.
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0-11 | position | `f32` x 3 |
//! | 12-23 | scale | `f32` x 3, **linear** standard deviations (`exp(log_scale)`) |
//! | 24-27 | colour | `u8` RGBA: `round(255 (0.282095 dc + 0.5))`, alpha `round(255 sigmoid(logit))` |
//! | 28-31 | rotation | `u8` x 4, `(w, x, y, z)` of the normalised quaternion, `round(128 q + 128)` |
//!
//! Reading inverts this (an alpha of 0 or 255 gives a finite logit, about -6.2 or 6.2: the
//! opacity is clamped half a step inside `(0, 1)`); a zero or negative scale is an error.

use std::path::Path;

use super::{Reader, SH_C0, Splats, logit_of_byte, sigmoid, unit_to_byte};
use crate::error::{DataError, Result};

/// Bytes per Gaussian.
pub const RECORD_SIZE: usize = 32;

/// Parses the bytes of a `.splat`; `path` names the file in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Splats> {
    if !bytes.len().is_multiple_of(RECORD_SIZE) {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            offset: (bytes.len() - bytes.len() % RECORD_SIZE) as u64,
            what: format!(
                "a 32-byte record ({} bytes left after {} whole records)",
                bytes.len() % RECORD_SIZE,
                bytes.len() / RECORD_SIZE
            ),
        });
    }
    let n = bytes.len() / RECORD_SIZE;
    let mut splats = Splats {
        means: Vec::with_capacity(n),
        quats: Vec::with_capacity(n),
        log_scales: Vec::with_capacity(n),
        opacity_logits: Vec::with_capacity(n),
        sh_dc: Vec::with_capacity(n),
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    let mut reader = Reader::new(bytes, path);
    for _ in 0..n {
        let mean = f32x3(&mut reader, "position")?;
        let scale_offset = reader.offset();
        let scale = f32x3(&mut reader, "scale")?;
        if scale.iter().any(|&s| s.is_nan() || s <= 0.0) {
            return Err(DataError::InvalidBinary {
                path: path.to_path_buf(),
                offset: scale_offset as u64,
                problem: format!("scale {scale:?} is not positive"),
            });
        }
        let rgba = reader.take(4, "colour")?;
        let rot = reader.take(4, "rotation")?;
        splats.means.push(mean);
        splats.log_scales.push(scale.map(f32::ln));
        splats.sh_dc.push(std::array::from_fn(|c| {
            (f32::from(rgba[c]) / 255.0 - 0.5) / SH_C0
        }));
        splats.opacity_logits.push(logit_of_byte(rgba[3]));
        splats
            .quats
            .push(std::array::from_fn(|c| (f32::from(rot[c]) - 128.0) / 128.0));
    }
    Ok(splats)
}

/// Three little-endian `f32`.
fn f32x3(reader: &mut Reader<'_>, what: &str) -> Result<[f32; 3]> {
    let b = reader.take(12, what)?;
    Ok(std::array::from_fn(|c| {
        f32::from_le_bytes([b[4 * c], b[4 * c + 1], b[4 * c + 2], b[4 * c + 3]])
    }))
}

/// The `.splat` bytes of `splats` (checked by the caller); SH bands are dropped.
pub fn encode(splats: &Splats) -> Vec<u8> {
    let mut out = Vec::with_capacity(splats.len() * RECORD_SIZE);
    for i in 0..splats.len() {
        for v in splats.means[i] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in splats.log_scales[i] {
            out.extend_from_slice(&v.exp().to_le_bytes());
        }
        for c in 0..3 {
            out.push(unit_to_byte(SH_C0 * splats.sh_dc[i][c] + 0.5));
        }
        out.push(unit_to_byte(sigmoid(splats.opacity_logits[i])));
        let q = splats.quats[i];
        let norm = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        let unit = if norm > 0.0 && norm.is_finite() {
            q.map(|v| v / norm)
        } else {
            [1.0, 0.0, 0.0, 0.0]
        };
        for v in unit {
            out.push((v * 128.0 + 128.0).round().clamp(0.0, 255.0) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_within_quantisation_and_truncation_is_an_error() {
        let splats = Splats {
            means: vec![[1.5, -2.0, 3.25]],
            quats: vec![[2.0, 0.0, 0.0, 0.0]],
            log_scales: vec![[-2.0, -1.0, 0.5]],
            opacity_logits: vec![1.2],
            sh_dc: vec![[0.5, -0.5, 1.0]],
            sh_rest: vec![],
            sh_degree: 0,
        };
        let bytes = encode(&splats);
        assert_eq!(bytes.len(), RECORD_SIZE);
        let back = parse(&bytes, Path::new("t.splat")).unwrap();
        assert_eq!(back.means, splats.means);
        for c in 0..3 {
            assert!((back.log_scales[0][c] - splats.log_scales[0][c]).abs() < 1e-6);
            assert!((back.sh_dc[0][c] - splats.sh_dc[0][c]).abs() < 0.5 / 255.0 / SH_C0 + 1e-6);
        }
        assert!((sigmoid(back.opacity_logits[0]) - sigmoid(1.2)).abs() < 0.5 / 255.0 + 1e-6);
        assert!((back.quats[0][0] - 1.0).abs() <= 1.0 / 128.0);
        assert!(parse(&bytes[..31], Path::new("t.splat")).is_err());
        let mut zero_scale = bytes.clone();
        zero_scale[12..16].copy_from_slice(&0f32.to_le_bytes());
        assert!(parse(&zero_scale, Path::new("t.splat")).is_err());
    }
}
