//! Trained Gaussian splats on disk: the 3DGS PLY layout, `.splat`, SPZ and PlayCanvas'
//! compressed PLY, in the parameterisation of Ember's `GaussianField`.
//!
//! | format | read | write | notes |
//! |---|---|---|---|
//! | 3DGS PLY ([`ply`]) | yes | yes | ASCII and binary; SH degree 0-3; bit-exact round trip |
//! | `.splat` ([`dot_splat`]) | yes | yes | 32 bytes per Gaussian, no SH (lossy: 8-bit colour, opacity and rotation) |
//! | SPZ ([`spz`]) | v2, v3 (gzip or raw), v4 (`NGSP` + zstd streams) | v3 (gzip) | quantised, see the module |
//! | PlayCanvas compressed PLY ([`compressed_ply`]) | yes, without SH bands | no | chunked min/max quantisation |
//!
//! Not supported: `.ksplat` (GaussianSplats3D), writing SPZ v4 or compressed PLY, and the SH
//! bands of a compressed PLY (such a file is refused by name).
//!
//! [`read_splats`] and [`write_splats`] pick the format from the extension (a `.ply` is read as
//! a compressed PLY when its header says so). [`convert`], [`transform`], [`edit::edit`] and
//! [`info`] are the file-level operations a command line calls.
//!
//! # Conventions
//! Values are stored as the 3DGS PLY stores them and as `GaussianField` holds them: opacity as
//! a logit, scales as natural logs, quaternions `(w, x, y, z)` **not normalised**, colour as SH
//! coefficients (`colour = 0.282095 dc + 0.5`). The quantised formats are decoded into the same
//! parameters. No axis convention is applied: every format is read and written in the frame its
//! numbers are stored in (the playcanvas-engine `biker` scene decodes to the same positions from
//! SPZ and from compressed PLY without any flip).

pub mod compressed_ply;
pub mod dot_splat;
pub mod edit;
pub mod ply;
pub mod spz;

use std::path::Path;

use ember_kernels::transform::Similarity;
use ember_kernels::transform::cpu::{GaussianSlices, GaussianSlicesMut, transform_into};

use crate::error::{DataError, Result};

/// The degree-0 real spherical harmonic in `f32` ([`ember_kernels::SH_C0`]): `colour = SH_C0 * dc + 0.5`.
pub const SH_C0: f32 = ember_kernels::SH_C0 as f32;

/// A set of Gaussians on the host, one entry per Gaussian in every vector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Splats {
    /// Centres `[N]` of `[x, y, z]`, world units.
    pub means: Vec<[f32; 3]>,
    /// Rotations `[N]` of `[w, x, y, z]`, not necessarily normalised.
    pub quats: Vec<[f32; 4]>,
    /// Natural logs of the standard deviations along the local axes, `[N]` of 3.
    pub log_scales: Vec<[f32; 3]>,
    /// Opacities before the sigmoid, `[N]`.
    pub opacity_logits: Vec<f32>,
    /// Degree-0 SH coefficients `[N]` of `[r, g, b]`.
    pub sh_dc: Vec<[f32; 3]>,
    /// SH bands 1 to `sh_degree`, `[N, K, 3]` flat (coefficient-major, channel fastest),
    /// `K = (sh_degree + 1)^2 - 1`: `GaussianField::sh_rest`'s layout (the PLY's `f_rest_*` are
    /// channel-major and are reordered on read and write).
    pub sh_rest: Vec<f32>,
    /// SH degree, 0 to 3.
    pub sh_degree: usize,
}

/// Number of SH coefficients per channel beyond the DC term for a degree: `(d + 1)^2 - 1`.
pub fn sh_rest_coefficients(degree: usize) -> usize {
    (degree + 1) * (degree + 1) - 1
}

impl Splats {
    /// Number of Gaussians.
    pub fn len(&self) -> usize {
        self.means.len()
    }

    /// Whether there are no Gaussians.
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }

    /// `K`, the SH coefficients per channel in [`Self::sh_rest`].
    pub fn sh_rest_coefficients(&self) -> usize {
        sh_rest_coefficients(self.sh_degree)
    }

    /// Checks that every vector has one entry per Gaussian and the degree is 0 to 3; `path`
    /// names the file in the error.
    pub fn check(&self, path: &Path) -> Result<()> {
        let n = self.len();
        let k = sh_rest_coefficients(self.sh_degree.min(3));
        let ok = self.sh_degree <= 3
            && self.quats.len() == n
            && self.log_scales.len() == n
            && self.opacity_logits.len() == n
            && self.sh_dc.len() == n
            && self.sh_rest.len() == n * k * 3;
        if ok {
            Ok(())
        } else {
            Err(DataError::Splat {
                path: path.to_path_buf(),
                problem: format!(
                    "inconsistent splat set: {n} means, {} quats, {} log_scales, {} opacities, \
                     {} sh_dc, {} sh_rest values at SH degree {}",
                    self.quats.len(),
                    self.log_scales.len(),
                    self.opacity_logits.len(),
                    self.sh_dc.len(),
                    self.sh_rest.len(),
                    self.sh_degree
                ),
            })
        }
    }

    /// How many Gaussians hold a NaN or infinite value in any attribute, and the index of the
    /// first; `None` when every value is finite.
    pub fn non_finite(&self) -> Option<NonFinite> {
        let k3 = 3 * self.sh_rest_coefficients();
        let bad = |i: usize| {
            let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
            !(finite(&self.means[i])
                && finite(&self.quats[i])
                && finite(&self.log_scales[i])
                && self.opacity_logits[i].is_finite()
                && finite(&self.sh_dc[i])
                && self.sh_rest.get(i * k3..(i + 1) * k3).is_none_or(finite))
        };
        let mut found: Option<NonFinite> = None;
        for i in (0..self.len()).filter(|&i| bad(i)) {
            match &mut found {
                Some(f) => f.count += 1,
                None => found = Some(NonFinite { count: 1, first: i }),
            }
        }
        found
    }

    /// The axis-aligned box `[min, max]` of the finite centres, `None` when there is none.
    pub fn bounds(&self) -> Option<[[f32; 3]; 2]> {
        let mut lo = [f32::INFINITY; 3];
        let mut hi = [f32::NEG_INFINITY; 3];
        for m in self
            .means
            .iter()
            .filter(|m| m.iter().all(|v| v.is_finite()))
        {
            for c in 0..3 {
                lo[c] = lo[c].min(m[c]);
                hi[c] = hi[c].max(m[c]);
            }
        }
        (lo[0] <= hi[0]).then_some([lo, hi])
    }

    /// The set moved by `similarity` (means, rotations, scales and SH bands; see
    /// [`ember_kernels::transform`]), through the fused CPU kernel.
    pub fn transformed(&self, similarity: &Similarity) -> std::result::Result<Splats, DataError> {
        let n = self.len();
        let mut out = Splats {
            means: vec![[0.0; 3]; n],
            quats: vec![[0.0; 4]; n],
            log_scales: vec![[0.0; 3]; n],
            opacity_logits: self.opacity_logits.clone(),
            sh_dc: self.sh_dc.clone(),
            sh_rest: vec![0.0; self.sh_rest.len()],
            sh_degree: self.sh_degree,
        };
        transform_into(
            similarity,
            GaussianSlices {
                means: self.means.as_flattened(),
                quats: self.quats.as_flattened(),
                log_scales: self.log_scales.as_flattened(),
                sh_rest: &self.sh_rest,
            },
            GaussianSlicesMut {
                means: out.means.as_flattened_mut(),
                quats: out.quats.as_flattened_mut(),
                log_scales: out.log_scales.as_flattened_mut(),
                sh_rest: &mut out.sh_rest,
            },
        )?;
        Ok(out)
    }
}

/// Gaussians with a NaN or infinite value (see [`Splats::non_finite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonFinite {
    /// How many Gaussians have one.
    pub count: usize,
    /// The index of the first.
    pub first: usize,
}

/// A splat file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplatFormat {
    /// The 3DGS PLY layout (`.ply`).
    Ply,
    /// PlayCanvas' compressed PLY (`.compressed.ply`, or a `.ply` whose header has a `chunk`
    /// element); read only.
    CompressedPly,
    /// antimatter15's `.splat`.
    Splat,
    /// Niantic's SPZ (`.spz`).
    Spz,
}

impl std::fmt::Display for SplatFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SplatFormat::Ply => "3DGS PLY",
            SplatFormat::CompressedPly => "compressed PLY",
            SplatFormat::Splat => ".splat",
            SplatFormat::Spz => "SPZ",
        })
    }
}

impl SplatFormat {
    /// The format a path's extension names (`.compressed.ply` before `.ply`).
    pub fn from_path(path: &Path) -> Result<SplatFormat> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if name.ends_with(".compressed.ply") {
            Ok(SplatFormat::CompressedPly)
        } else if name.ends_with(".ply") {
            Ok(SplatFormat::Ply)
        } else if name.ends_with(".splat") {
            Ok(SplatFormat::Splat)
        } else if name.ends_with(".spz") {
            Ok(SplatFormat::Spz)
        } else {
            Err(DataError::Splat {
                path: path.to_path_buf(),
                problem: "unknown splat format (expected .ply, .compressed.ply, .splat or .spz)"
                    .to_string(),
            })
        }
    }
}

/// Reads a splat file; the format comes from the extension, and a `.ply` is read as a
/// compressed PLY when its header has the `chunk` element.
pub fn read_splats(path: &Path) -> Result<Splats> {
    SplatFormat::from_path(path)?;
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    parse_splats(&bytes, path)
}

/// A splat file's contents, `bytes`, in the format `path`'s extension names (as
/// [`read_splats`] reads it; `path` is not opened: it names the file in errors), e.g. a file a
/// browser sent.
pub fn parse_splats(bytes: &[u8], path: &Path) -> Result<Splats> {
    match SplatFormat::from_path(path)? {
        SplatFormat::Ply | SplatFormat::CompressedPly => {
            if compressed_ply::is_compressed_ply(bytes) {
                compressed_ply::parse(bytes, path)
            } else {
                ply::parse(bytes, path)
            }
        }
        SplatFormat::Splat => dot_splat::parse(bytes, path),
        SplatFormat::Spz => spz::parse(bytes, path),
    }
}

/// Writes `splats` in the format of `path`'s extension, atomically (temporary file + rename).
/// `.splat` drops the SH bands; compressed PLY cannot be written.
pub fn write_splats(path: &Path, splats: &Splats) -> Result<()> {
    splats.check(path)?;
    let bytes = match SplatFormat::from_path(path)? {
        SplatFormat::Ply => ply::encode(splats),
        SplatFormat::Splat => dot_splat::encode(splats),
        SplatFormat::Spz => spz::encode(splats, path)?,
        SplatFormat::CompressedPly => {
            return Err(DataError::Splat {
                path: path.to_path_buf(),
                problem: "writing PlayCanvas compressed PLY is not supported (write .ply, .splat or .spz)"
                    .to_string(),
            });
        }
    };
    crate::write_atomically(path, &bytes).map_err(|e| DataError::io(path, e))
}

/// What a splat file holds, in brief.
#[derive(Debug, Clone, PartialEq)]
pub struct SplatInfo {
    /// The file's format.
    pub format: SplatFormat,
    /// Number of Gaussians.
    pub count: usize,
    /// SH degree, 0 to 3.
    pub sh_degree: usize,
    /// Axis-aligned box `[min, max]` of the finite centres, world units; `None` when there is
    /// none.
    pub bounds: Option<[[f32; 3]; 2]>,
    /// The Gaussians holding NaN or infinity, `None` when there are none.
    pub non_finite: Option<NonFinite>,
}

impl SplatInfo {
    fn of(splats: &Splats, path: &Path) -> Result<SplatInfo> {
        let mut format = SplatFormat::from_path(path)?;
        if format == SplatFormat::Ply
            && std::fs::read(path)
                .map(|b| compressed_ply::is_compressed_ply(&b))
                .unwrap_or(false)
        {
            format = SplatFormat::CompressedPly;
        }
        Ok(SplatInfo {
            format,
            count: splats.len(),
            sh_degree: splats.sh_degree,
            bounds: splats.bounds(),
            non_finite: splats.non_finite(),
        })
    }
}

/// Count, SH degree and bounds of a splat file.
pub fn info(path: &Path) -> Result<SplatInfo> {
    let splats = read_splats(path)?;
    SplatInfo::of(&splats, path)
}

/// Reads `input` and writes it as `output`, each in the format of its extension; returns what
/// was written.
pub fn convert(input: &Path, output: &Path) -> Result<SplatInfo> {
    let splats = read_splats(input)?;
    write_splats(output, &splats)?;
    // Read back: a format may hold less than the input (`.splat` has no SH bands).
    info(output)
}

/// Reads `input`, applies `similarity` (means, rotations, scales and SH bands) and writes the
/// result as `output`; returns what was written.
pub fn transform(input: &Path, output: &Path, similarity: &Similarity) -> Result<SplatInfo> {
    let splats = read_splats(input)?;
    let moved = splats.transformed(similarity)?;
    let before = splats.non_finite().map_or(0, |f| f.count);
    if let Some(after) = moved.non_finite().filter(|after| after.count > before) {
        return Err(DataError::Splat {
            path: output.to_path_buf(),
            problem: format!(
                "not written: the transform leaves {} of {} Gaussians with non-finite values \
                 (first: index {}); the scale or translation is beyond f32's range for them",
                after.count,
                moved.len(),
                after.first
            ),
        });
    }
    write_splats(output, &moved)?;
    // Read back: a format may hold less than the input (`.splat` has no SH bands).
    info(output)
}

/// A little-endian cursor over a byte slice that reports where it ran out.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], path: &'a Path) -> Self {
        Reader {
            bytes,
            offset: 0,
            path,
        }
    }

    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The next `len` bytes, or a [`DataError::Truncated`] naming `what`.
    pub(crate) fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .offset
            .checked_add(len)
            .filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(DataError::Truncated {
                path: self.path.to_path_buf(),
                offset: self.offset as u64,
                what: format!(
                    "{what} ({len} bytes, {} left)",
                    self.bytes.len() - self.offset
                ),
            });
        };
        let out = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

/// `ln(p / (1 - p))` for an 8-bit opacity, kept finite: `p` is clamped half a step inside
/// `(0, 1)`, so 0 and 255 give about -6.2 and 6.2 instead of infinities.
pub(crate) fn logit_of_byte(byte: u8) -> f32 {
    let p = (f32::from(byte) / 255.0).clamp(0.5 / 255.0, 1.0 - 0.5 / 255.0);
    (p / (1.0 - p)).ln()
}

/// `1 / (1 + e^-x)`.
pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `round(v * 255)` clamped to a byte.
pub(crate) fn unit_to_byte(v: f32) -> u8 {
    (v * 255.0).round().clamp(0.0, 255.0) as u8
}
