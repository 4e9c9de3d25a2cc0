//! The 3DGS PLY layout: one `vertex` element with
//! `x y z [nx ny nz] f_dc_0..2 f_rest_0..(3K-1) opacity scale_0..2 rot_0..3`.
//!
//! Read by the crate's one PLY reader: ASCII, binary little- and big-endian, any scalar type
//! (stored as `f32`), properties in any order; extra properties (normals, anything else, lists)
//! and other elements are skipped. The
//! `f_rest_*` count must be `3 K` for an SH degree 0-3 (`K = 0, 3, 8, 15`); they are
//! channel-major (all red coefficients, then green, then blue). A missing required property is
//! named in the error.
//!
//! Write: binary little-endian `float` in the order above, with zero normals (the layout the
//! 3DGS reference code and most viewers expect). Reading what was written gives identical
//! floats.

use std::path::Path;

use super::{Splats, sh_rest_coefficients};
use crate::error::{DataError, Result};
use crate::ply::{Header, Property, parse_header, read_vertex};

/// Where a vertex property goes.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Mean(usize),
    Dc(usize),
    /// Index in the PLY's channel-major `f_rest_*` order.
    Rest(usize),
    Opacity,
    Scale(usize),
    Rot(usize),
    Skip,
}

/// Parses the bytes of a 3DGS PLY; `path` names the file in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Splats> {
    let header = parse_header(bytes, path)?;
    let vertex_index = header.vertex_index(path)?;
    parse_element(bytes, path, &header, vertex_index)
}

/// Parses element `vertex_index` of a PLY (whose header is `header`) as 3DGS Gaussians: the
/// `vertex` element of a 3DGS PLY, or another element with the same properties.
pub(crate) fn parse_element(
    bytes: &[u8],
    path: &Path,
    header: &Header,
    vertex_index: usize,
) -> Result<Splats> {
    let ply_error = |problem: String| DataError::Ply {
        path: path.to_path_buf(),
        problem,
    };
    let vertex = &header.elements[vertex_index];
    let mut rest_count = 0usize;
    let mut slots = Vec::with_capacity(vertex.properties.len());
    for property in &vertex.properties {
        let slot = match property {
            Property::List { .. } => Slot::Skip,
            Property::Scalar { name, .. } => match name.as_str() {
                "x" => Slot::Mean(0),
                "y" => Slot::Mean(1),
                "z" => Slot::Mean(2),
                "opacity" => Slot::Opacity,
                other => {
                    let indexed = |prefix: &str| other.strip_prefix(prefix)?.parse::<usize>().ok();
                    if let Some(c) = indexed("f_dc_").filter(|&c| c < 3) {
                        Slot::Dc(c)
                    } else if let Some(j) = indexed("f_rest_") {
                        // Checked before `j + 1`, which `usize::MAX` would overflow.
                        let most = 3 * sh_rest_coefficients(3);
                        if j >= most {
                            return Err(ply_error(format!(
                                "property `{other}`: SH degree 3, the highest, has {most} `f_rest_*` values"
                            )));
                        }
                        rest_count = rest_count.max(j + 1);
                        Slot::Rest(j)
                    } else if let Some(c) = indexed("scale_").filter(|&c| c < 3) {
                        Slot::Scale(c)
                    } else if let Some(c) = indexed("rot_").filter(|&c| c < 4) {
                        Slot::Rot(c)
                    } else {
                        Slot::Skip
                    }
                }
            },
        };
        slots.push(slot);
    }
    // The SH degree first: it bounds the `f_rest_*` names listed below (a name such as
    // `f_rest_99999999999` must not size anything).
    let sh_degree = (0..=3)
        .find(|&d| 3 * sh_rest_coefficients(d) == rest_count)
        .ok_or_else(|| {
            ply_error(format!(
                "{rest_count} `f_rest_*` properties: not 3 ((d + 1)^2 - 1) for an SH degree d of 0 to 3"
            ))
        })?;
    // Every required property, once.
    let has = |name: &str| vertex.scalar(name).is_some();
    let mut required: Vec<String> = ["x", "y", "z", "opacity"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    required.extend((0..3).map(|c| format!("f_dc_{c}")));
    required.extend((0..3).map(|c| format!("scale_{c}")));
    required.extend((0..4).map(|c| format!("rot_{c}")));
    required.extend((0..rest_count).map(|j| format!("f_rest_{j}")));
    let missing: Vec<&str> = required
        .iter()
        .filter(|name| !has(name))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(ply_error(format!(
            "the {} element lacks the 3DGS propert{} {}",
            vertex.name,
            if missing.len() == 1 { "y" } else { "ies" },
            missing
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let k = sh_rest_coefficients(sh_degree);
    let n = vertex.count;
    header.check_vertex_count(vertex_index, bytes.len(), path)?;
    let mut splats = Splats {
        means: vec![[0.0; 3]; n],
        quats: vec![[0.0; 4]; n],
        log_scales: vec![[0.0; 3]; n],
        opacity_logits: vec![0.0; n],
        sh_dc: vec![[0.0; 3]; n],
        sh_rest: vec![0.0; n * k * 3],
        sh_degree,
    };
    read_vertex(bytes, path, header, vertex_index, |i, property, v| {
        let v = v as f32;
        match slots[property] {
            Slot::Mean(c) => splats.means[i][c] = v,
            Slot::Dc(c) => splats.sh_dc[i][c] = v,
            // f_rest_j is channel j / K, coefficient j % K; stored coefficient-major.
            Slot::Rest(j) => splats.sh_rest[(i * k + j % k) * 3 + j / k] = v,
            Slot::Opacity => splats.opacity_logits[i] = v,
            Slot::Scale(c) => splats.log_scales[i][c] = v,
            Slot::Rot(c) => splats.quats[i][c] = v,
            Slot::Skip => {}
        }
    })?;
    Ok(splats)
}

/// The binary little-endian 3DGS PLY of `splats` (checked by the caller).
pub fn encode(splats: &Splats) -> Vec<u8> {
    let n = splats.len();
    let mut header = String::from("ply\nformat binary_little_endian 1.0\n");
    push_element(&mut header, "vertex", n, splats.sh_rest_coefficients());
    header.push_str("end_header\n");
    let mut out = Vec::with_capacity(header.len() + n * record_floats(splats) * 4);
    out.extend_from_slice(header.as_bytes());
    for i in 0..n {
        put_record(&mut out, splats, i);
    }
    out
}

/// Appends to a PLY header the element `name` of `count` 3DGS records of `k` SH coefficients per
/// channel beyond the DC term: every property `float`, in [`encode`]'s order.
pub(crate) fn push_element(header: &mut String, name: &str, count: usize, k: usize) {
    header.push_str(&format!("element {name} {count}\n"));
    let mut names: Vec<String> = [
        "x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend((0..3 * k).map(|j| format!("f_rest_{j}")));
    names.push("opacity".to_string());
    names.extend((0..3).map(|c| format!("scale_{c}")));
    names.extend((0..4).map(|c| format!("rot_{c}")));
    for name in &names {
        header.push_str(&format!("property float {name}\n"));
    }
}

/// Floats in one record of [`push_element`]'s layout.
pub(crate) fn record_floats(splats: &Splats) -> usize {
    9 + 3 * splats.sh_rest_coefficients() + 1 + 3 + 4
}

/// Appends Gaussian `i` of `splats` as one binary little-endian record of [`push_element`]'s
/// layout (zero normals).
pub(crate) fn put_record(out: &mut Vec<u8>, splats: &Splats, i: usize) {
    let k = splats.sh_rest_coefficients();
    let mut put = |v: f32| out.extend_from_slice(&v.to_le_bytes());
    splats.means[i].iter().for_each(|&v| put(v));
    (0..3).for_each(|_| put(0.0));
    splats.sh_dc[i].iter().for_each(|&v| put(v));
    for c in 0..3 {
        for j in 0..k {
            put(splats.sh_rest[(i * k + j) * 3 + c]);
        }
    }
    put(splats.opacity_logits[i]);
    splats.log_scales[i].iter().for_each(|&v| put(v));
    splats.quats[i].iter().for_each(|&v| put(v));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(degree: usize) -> Splats {
        let n = 3;
        let k = sh_rest_coefficients(degree);
        let f = |i: usize| (i as f32 * 0.37).sin() * 3.0;
        Splats {
            means: (0..n).map(|i| [f(i), f(i + 10), f(i + 20)]).collect(),
            quats: (0..n).map(|i| [2.0, f(i), -0.5, f(i + 3)]).collect(),
            log_scales: (0..n).map(|i| [-23.0 + f(i) * 1e-3, -4.0, f(i)]).collect(),
            opacity_logits: (0..n).map(f).collect(),
            sh_dc: (0..n).map(|i| [f(i + 1), f(i + 2), f(i + 5)]).collect(),
            sh_rest: (0..n * k * 3).map(|j| f(j + 100)).collect(),
            sh_degree: degree,
        }
    }

    #[test]
    fn binary_round_trip_is_bit_exact_at_every_degree() {
        for degree in 0..=3 {
            let splats = sample(degree);
            let back = parse(&encode(&splats), Path::new("t.ply")).unwrap();
            assert_eq!(back, splats);
        }
    }

    /// One reader under every PLY: a splat file whose vertices carry a list (a mesh exporter's
    /// `vertex_indices`) reads as the same Gaussians in ASCII and in both binary byte orders.
    #[test]
    fn a_list_in_the_vertex_is_skipped_in_every_encoding() {
        let names = [
            "x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1",
            "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
        ];
        let values: Vec<f32> = (0..names.len()).map(|v| v as f32 * 0.5 - 1.0).collect();
        let header = |format: &str| {
            let mut text = format!("ply\nformat {format} 1.0\nelement vertex 1\n");
            text.push_str("property float x\nproperty list uchar int links\n");
            for name in &names[1..] {
                text.push_str(&format!("property float {name}\n"));
            }
            text + "end_header\n"
        };
        let mut ascii = header("ascii");
        ascii.push_str(&format!("{} 2 7 8", values[0]));
        for v in &values[1..] {
            ascii.push_str(&format!(" {v}"));
        }
        ascii.push('\n');
        let binary = |big: bool| {
            let mut bytes = header(if big {
                "binary_big_endian"
            } else {
                "binary_little_endian"
            })
            .into_bytes();
            let f32_bytes = |v: f32| {
                if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
            };
            let i32_bytes = |v: i32| {
                if big {
                    v.to_be_bytes()
                } else {
                    v.to_le_bytes()
                }
            };
            bytes.extend(f32_bytes(values[0]));
            bytes.push(2);
            bytes.extend(i32_bytes(7));
            bytes.extend(i32_bytes(8));
            for v in &values[1..] {
                bytes.extend(f32_bytes(*v));
            }
            bytes
        };
        let want = parse(ascii.as_bytes(), Path::new("a.ply")).unwrap();
        assert_eq!(want.means, vec![[values[0], values[1], values[2]]]);
        assert_eq!(
            want.quats,
            vec![[values[10], values[11], values[12], values[13]]]
        );
        for big in [false, true] {
            assert_eq!(
                parse(&binary(big), Path::new("b.ply")).unwrap(),
                want,
                "big {big}"
            );
        }
    }

    #[test]
    fn ascii_with_extra_properties_and_channel_major_rest() {
        let mut text = String::from("ply\nformat ascii 1.0\nelement vertex 1\n");
        for name in ["rot_0", "rot_1", "rot_2", "rot_3", "x", "y", "z", "extra"] {
            text.push_str(&format!("property float {name}\n"));
        }
        for name in [
            "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
        ] {
            text.push_str(&format!("property double {name}\n"));
        }
        for j in 0..9 {
            text.push_str(&format!("property float f_rest_{j}\n"));
        }
        text.push_str("end_header\n1 0 0 0 1 2 3 99 0.1 0.2 0.3 -1 -2 -3 -4 ");
        text.push_str("10 11 12 20 21 22 30 31 32\n");
        let s = parse(text.as_bytes(), Path::new("a.ply")).unwrap();
        assert_eq!(s.sh_degree, 1);
        assert_eq!(s.means, vec![[1.0, 2.0, 3.0]]);
        assert_eq!(s.quats, vec![[1.0, 0.0, 0.0, 0.0]]);
        assert_eq!(s.log_scales, vec![[-2.0, -3.0, -4.0]]);
        // Coefficient-major in memory: (k0: r g b), (k1: r g b), ...
        assert_eq!(
            s.sh_rest,
            vec![10.0, 20.0, 30.0, 11.0, 21.0, 31.0, 12.0, 22.0, 32.0]
        );
    }

    /// Found by the `splat_ply` fuzz target: the largest `f_rest_*` index sized a list of
    /// names before the SH degree was checked (an allocation of 7.2 PB).
    #[test]
    fn a_huge_f_rest_index_is_refused_without_allocating_or_overflowing() {
        // The second is `usize::MAX`, whose `+ 1` once overflowed (found by the fuzz target).
        for huge in ["f_rest_300000000000000000", "f_rest_18446744073709551615"] {
            let mut text = String::from("ply\nformat binary_little_endian 1.0\nelement vertex 1\n");
            for name in [
                "x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1",
                "scale_2", "rot_0", "rot_1", "rot_2", "rot_3", huge,
            ] {
                text.push_str(&format!("property float {name}\n"));
            }
            text.push_str("end_header\n");
            let mut bytes = text.into_bytes();
            bytes.extend_from_slice(&[0u8; 15 * 4]);
            let message = parse(&bytes, Path::new("huge.ply"))
                .unwrap_err()
                .to_string();
            assert!(
                message.contains(huge) && message.contains("has 45 `f_rest_*` values"),
                "{message}"
            );
        }
    }

    #[test]
    fn missing_properties_are_named_and_truncation_is_an_error() {
        let text = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nend_header\n1 2\n";
        let message = parse(text.as_bytes(), Path::new("m.ply"))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("`z`") && message.contains("`rot_3`"),
            "{message}"
        );
        let bytes = encode(&sample(2));
        for cut in [bytes.len() - 1, bytes.len() / 2, 40] {
            assert!(parse(&bytes[..cut], Path::new("t.ply")).is_err());
        }
        let mut bad_rest = String::from("ply\nformat ascii 1.0\nelement vertex 0\n");
        for name in [
            "x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "f_rest_0", "opacity",
        ] {
            bad_rest.push_str(&format!("property float {name}\n"));
        }
        for name in [
            "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3",
        ] {
            bad_rest.push_str(&format!("property float {name}\n"));
        }
        bad_rest.push_str("end_header\n");
        let message = parse(bad_rest.as_bytes(), Path::new("r.ply"))
            .unwrap_err()
            .to_string();
        assert!(message.contains("1 `f_rest_*`"), "{message}");
    }
}
