//! Editing a splat set: keeping the Gaussians a [`SplatFilter`] selects (a crop box or sphere,
//! inside or outside it, and opacity and size thresholds), as `trainer edit` does on the
//! command line and the viewer's page does on a served scene, so both give the same file.
//!
//! A Gaussian is kept when every condition given holds:
//! - the region (`crop_box`, inclusive `[min, max]` in world units, or `crop_sphere`, centre and
//!   radius): its centre lies inside, or with `outside` not inside (so `outside` deletes the
//!   region). A centre that is not finite lies in no region;
//! - `min_opacity`: `sigmoid(logit) >= min_opacity`;
//! - `max_scale`: its largest standard deviation `exp(max log_scale) <= max_scale`, world units.
//!
//! The tests are made in `f64` from the stored `f32` values, so a threshold equal to a stored
//! value keeps it.

use std::path::Path;

use super::{SplatInfo, Splats, info, read_splats, sh_rest_coefficients, write_splats};
use crate::error::{DataError, Result};

/// The region an edit keeps (or, with [`SplatFilter::outside`], removes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Region {
    /// The box `[min, max]` (inclusive), world units.
    Box {
        /// The corner with the smallest coordinates.
        min: [f64; 3],
        /// The corner with the largest.
        max: [f64; 3],
    },
    /// The ball of `radius` around `centre` (inclusive), world units.
    Sphere {
        /// Its centre.
        centre: [f64; 3],
        /// Its radius, > 0.
        radius: f64,
    },
}

impl Region {
    /// The region of `trainer edit`'s flags: `--crop-box MINX,MINY,MINZ,MAXX,MAXY,MAXZ` or
    /// `--crop-sphere X,Y,Z,R` (the box when both are given: callers refuse that first).
    pub fn from_flags(crop_box: Option<[f64; 6]>, crop_sphere: Option<[f64; 4]>) -> Option<Region> {
        match (crop_box, crop_sphere) {
            (Some([x0, y0, z0, x1, y1, z1]), _) => Some(Region::Box {
                min: [x0, y0, z0],
                max: [x1, y1, z1],
            }),
            (None, Some([x, y, z, radius])) => Some(Region::Sphere {
                centre: [x, y, z],
                radius,
            }),
            (None, None) => None,
        }
    }

    /// Whether the centre `p` lies in the region (a non-finite one never does).
    pub fn contains(&self, p: [f32; 3]) -> bool {
        let p = p.map(f64::from);
        if !p.iter().all(|v| v.is_finite()) {
            return false;
        }
        match self {
            Region::Box { min, max } => (0..3).all(|a| min[a] <= p[a] && p[a] <= max[a]),
            Region::Sphere { centre, radius } => {
                let d2: f64 = (0..3).map(|a| (p[a] - centre[a]).powi(2)).sum();
                d2 <= radius * radius
            }
        }
    }
}

/// Which Gaussians an edit keeps (see the [module docs](self)); a condition left `None` keeps
/// everything.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SplatFilter {
    /// The region kept (or removed, with `outside`).
    pub region: Option<Region>,
    /// Keep what lies outside the region instead of inside (delete the region).
    pub outside: bool,
    /// The smallest opacity kept, in `[0, 1]`.
    pub min_opacity: Option<f64>,
    /// The largest standard deviation kept, world units, > 0.
    pub max_scale: Option<f64>,
}

impl SplatFilter {
    /// A message naming the setting that is out of range, or `Ok` when the filter is usable
    /// (at least one condition, each in range).
    pub fn check(&self) -> std::result::Result<(), String> {
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        match self.region {
            Some(Region::Box { min, max })
                if !(finite(&min) && finite(&max) && (0..3).all(|a| min[a] <= max[a])) =>
            {
                return Err(format!(
                    "the crop box {min:?} .. {max:?} needs finite corners, each coordinate of \
                     the first at most the second's"
                ));
            }
            Some(Region::Sphere { centre, radius })
                if !(finite(&centre) && radius.is_finite() && radius > 0.0) =>
            {
                return Err(format!(
                    "the crop sphere at {centre:?} of radius {radius} needs a finite centre \
                     and a radius > 0"
                ));
            }
            None if self.outside => {
                return Err("`outside` needs a region (a crop box or sphere)".into());
            }
            _ => {}
        }
        if let Some(o) = self.min_opacity.filter(|o| !(0.0..=1.0).contains(o)) {
            return Err(format!("the minimum opacity {o} is not in [0, 1]"));
        }
        if let Some(s) = self.max_scale.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("the maximum scale {s} is not a size > 0"));
        }
        if self.region.is_none() && self.min_opacity.is_none() && self.max_scale.is_none() {
            return Err(
                "nothing to edit: give a crop box or sphere, a minimum opacity or a maximum scale"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether Gaussian `i` of `splats` is kept.
    pub fn keeps(&self, splats: &Splats, i: usize) -> bool {
        if let Some(region) = &self.region
            && region.contains(splats.means[i]) == self.outside
        {
            return false;
        }
        // Written so that a NaN opacity or scale fails its test: such a Gaussian is not kept.
        let opaque = |min: f64| {
            let logit = f64::from(splats.opacity_logits[i]);
            1.0 / (1.0 + (-logit).exp()) >= min
        };
        let small = |max: f64| {
            splats.log_scales[i]
                .iter()
                .all(|&s| f64::from(s).exp() <= max)
        };
        self.min_opacity.is_none_or(opaque) && self.max_scale.is_none_or(small)
    }
}

impl Splats {
    /// The Gaussians `filter` keeps, in their order (every attribute, the SH degree kept).
    pub fn filtered(&self, filter: &SplatFilter) -> Splats {
        let k3 = 3 * sh_rest_coefficients(self.sh_degree);
        let kept: Vec<usize> = (0..self.len()).filter(|&i| filter.keeps(self, i)).collect();
        Splats {
            means: kept.iter().map(|&i| self.means[i]).collect(),
            quats: kept.iter().map(|&i| self.quats[i]).collect(),
            log_scales: kept.iter().map(|&i| self.log_scales[i]).collect(),
            opacity_logits: kept.iter().map(|&i| self.opacity_logits[i]).collect(),
            sh_dc: kept.iter().map(|&i| self.sh_dc[i]).collect(),
            sh_rest: kept
                .iter()
                .flat_map(|&i| self.sh_rest[i * k3..(i + 1) * k3].iter().copied())
                .collect(),
            sh_degree: self.sh_degree,
        }
    }
}

/// Reads `input`, keeps what `filter` selects and writes it as `output` (the format of its
/// extension); returns what was written and how many Gaussians the input had. An out-of-range
/// filter, or one that keeps nothing, is an error and nothing is written.
pub fn edit(input: &Path, output: &Path, filter: &SplatFilter) -> Result<(SplatInfo, usize)> {
    filter.check().map_err(|problem| DataError::Splat {
        path: output.to_path_buf(),
        problem: format!("not written: {problem}"),
    })?;
    let splats = read_splats(input)?;
    let kept = splats.filtered(filter);
    if kept.is_empty() {
        return Err(DataError::Splat {
            path: output.to_path_buf(),
            problem: format!(
                "not written: the edit keeps none of the {} Gaussians of {}",
                splats.len(),
                input.display()
            ),
        });
    }
    write_splats(output, &kept)?;
    // Read back: a format may hold less than the input (`.splat` has no SH bands).
    Ok((info(output)?, splats.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five Gaussians along x at 0..4 (the last centre NaN), SH degree 1 (each row's bands
    /// numbered by the Gaussian), opacities 0.1..0.9 and largest scales 0.1..0.5.
    fn row_of_five() -> Splats {
        let n = 5;
        let logit = |o: f64| (o / (1.0 - o)).ln() as f32;
        Splats {
            means: (0..n)
                .map(|i| [if i == 4 { f32::NAN } else { i as f32 }, 0.0, 0.0])
                .collect(),
            quats: vec![[1.0, 0.0, 0.0, 0.0]; n],
            log_scales: (0..n)
                .map(|i| [-5.0, (0.1 * (i + 1) as f32).ln(), -5.0])
                .collect(),
            opacity_logits: (0..n).map(|i| logit(0.1 + 0.2 * i as f64)).collect(),
            sh_dc: (0..n).map(|i| [i as f32; 3]).collect(),
            sh_rest: (0..n).flat_map(|i| [i as f32; 9]).collect(),
            sh_degree: 1,
        }
    }

    fn kept(filter: SplatFilter) -> Vec<f32> {
        let out = row_of_five().filtered(&filter);
        assert_eq!(
            out.sh_rest.len(),
            9 * out.len(),
            "the bands follow their rows"
        );
        for (dc, rest) in out.sh_dc.iter().zip(out.sh_rest.chunks(9)) {
            assert!(rest.iter().all(|&v| v == dc[0]));
        }
        out.sh_dc.iter().map(|dc| dc[0]).collect()
    }

    #[test]
    fn each_condition_keeps_what_the_docs_say() {
        let unit_box = Some(Region::Box {
            min: [1.0, -1.0, -1.0],
            max: [3.0, 1.0, 1.0],
        });
        let region = |region, outside| SplatFilter {
            region,
            outside,
            ..SplatFilter::default()
        };
        // The box's faces are inside; a NaN centre is in no region, and so outside every one.
        assert_eq!(kept(region(unit_box, false)), [1.0, 2.0, 3.0]);
        assert_eq!(kept(region(unit_box, true)), [0.0, 4.0]);
        let ball = Some(Region::Sphere {
            centre: [0.0, 0.0, 0.0],
            radius: 1.0,
        });
        assert_eq!(kept(region(ball, false)), [0.0, 1.0]);
        let opacity = SplatFilter {
            min_opacity: Some(0.5),
            ..SplatFilter::default()
        };
        assert_eq!(kept(opacity), [2.0, 3.0, 4.0]);
        let scale = SplatFilter {
            max_scale: Some(0.35),
            ..SplatFilter::default()
        };
        assert_eq!(kept(scale), [0.0, 1.0, 2.0]);
        let all = SplatFilter {
            region: unit_box,
            min_opacity: Some(0.5),
            max_scale: Some(0.35),
            ..SplatFilter::default()
        };
        assert_eq!(kept(all), [2.0]);
    }

    #[test]
    fn out_of_range_filters_name_what_is_wrong() {
        let cases = [
            (SplatFilter::default(), "nothing to edit"),
            (
                SplatFilter {
                    outside: true,
                    ..SplatFilter::default()
                },
                "`outside` needs a region",
            ),
            (
                SplatFilter {
                    region: Some(Region::Box {
                        min: [1.0, 0.0, 0.0],
                        max: [0.0, 1.0, 1.0],
                    }),
                    ..SplatFilter::default()
                },
                "crop box",
            ),
            (
                SplatFilter {
                    region: Some(Region::Sphere {
                        centre: [0.0; 3],
                        radius: 0.0,
                    }),
                    ..SplatFilter::default()
                },
                "crop sphere",
            ),
            (
                SplatFilter {
                    min_opacity: Some(1.5),
                    ..SplatFilter::default()
                },
                "minimum opacity",
            ),
            (
                SplatFilter {
                    max_scale: Some(f64::NAN),
                    ..SplatFilter::default()
                },
                "maximum scale",
            ),
        ];
        for (filter, expected) in cases {
            let problem = filter.check().expect_err("refused");
            assert!(problem.contains(expected), "{problem}");
        }
    }

    #[test]
    fn an_edit_writes_the_kept_rows_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.ply");
        write_splats(&input, &row_of_five()).unwrap();
        let output = dir.path().join("out.ply");
        let keep_middle = SplatFilter {
            region: Some(Region::Box {
                min: [0.5, -1.0, -1.0],
                max: [2.5, 1.0, 1.0],
            }),
            ..SplatFilter::default()
        };
        let (written, before) = edit(&input, &output, &keep_middle).unwrap();
        assert_eq!((written.count, written.sh_degree, before), (2, 1, 5));
        assert_eq!(
            read_splats(&output).unwrap(),
            row_of_five().filtered(&keep_middle)
        );
        let nothing = SplatFilter {
            min_opacity: Some(1.0),
            ..SplatFilter::default()
        };
        let gone = dir.path().join("gone.ply");
        let error = edit(&input, &gone, &nothing).unwrap_err().to_string();
        assert!(error.contains("keeps none of the 5"), "{error}");
        assert!(!gone.exists());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left");
    }
}
