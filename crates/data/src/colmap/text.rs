//! COLMAP's text model format: whitespace-separated values, `#` comment lines.
//!
//! ```text
//! cameras.txt   CAMERA_ID MODEL WIDTH HEIGHT PARAMS[]
//! images.txt    IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME
//!               POINTS2D[] as (X Y POINT3D_ID), POINT3D_ID -1 when none   (one line, may be empty)
//! points3D.txt  POINT3D_ID X Y Z R G B ERROR TRACK[] as (IMAGE_ID POINT2D_IDX)
//! ```
//!
//! The writer prints floats with Rust's shortest representation that reads back to the same
//! `f64`, so a model written and read again is bit-identical.

use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr;

use super::{
    CameraModel, ColmapCamera, ColmapImage, ColmapModel, ColmapPoint3D, Point2D, TrackElement,
};
use crate::error::{DataError, Result};

/// The lines of a text file with their 1-based numbers; errors if it is not UTF-8.
fn lines<'a>(bytes: &'a [u8], path: &Path) -> Result<Vec<(usize, &'a str)>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        DataError::Parse {
            path: path.to_path_buf(),
            line,
            problem: "not UTF-8 text".to_string(),
        }
    })?;
    Ok(text.lines().enumerate().map(|(i, l)| (i + 1, l)).collect())
}

fn is_skipped(line: &str) -> bool {
    let line = line.trim();
    line.is_empty() || line.starts_with('#')
}

/// Parses one token as `T`, naming the file, line and field on failure.
fn field<T: FromStr>(token: Option<&str>, path: &Path, line: usize, name: &str) -> Result<T> {
    let parse_error = |problem: String| DataError::Parse {
        path: path.to_path_buf(),
        line,
        problem,
    };
    let token = token.ok_or_else(|| parse_error(format!("missing {name}")))?;
    token
        .parse()
        .map_err(|_| parse_error(format!("{name} `{token}` does not parse")))
}

/// Parses the bytes of a `cameras.txt`; `path` names the file in errors.
pub fn parse_cameras_text(bytes: &[u8], path: &Path) -> Result<Vec<ColmapCamera>> {
    let mut cameras = Vec::new();
    for (n, line) in lines(bytes, path)? {
        if is_skipped(line) {
            continue;
        }
        let mut tokens = line.split_whitespace();
        let id: u32 = field(tokens.next(), path, n, "CAMERA_ID")?;
        let model_name: String = field(tokens.next(), path, n, "MODEL")?;
        let model = CameraModel::from_name(&model_name).ok_or_else(|| DataError::Parse {
            path: path.to_path_buf(),
            line: n,
            problem: format!("camera {id} has unknown camera model `{model_name}`"),
        })?;
        let width: u64 = field(tokens.next(), path, n, "WIDTH")?;
        let height: u64 = field(tokens.next(), path, n, "HEIGHT")?;
        let params = tokens
            .map(|t| field(Some(t), path, n, "a camera parameter"))
            .collect::<Result<Vec<f64>>>()?;
        if params.len() != model.num_params() {
            return Err(DataError::Parse {
                path: path.to_path_buf(),
                line: n,
                problem: format!(
                    "camera {id}: {model_name} has {} parameters, the line has {}",
                    model.num_params(),
                    params.len()
                ),
            });
        }
        cameras.push(ColmapCamera {
            id,
            model,
            width,
            height,
            params,
        });
    }
    Ok(cameras)
}

/// Parses the bytes of an `images.txt`; `path` names the file in errors.
pub fn parse_images_text(bytes: &[u8], path: &Path) -> Result<Vec<ColmapImage>> {
    let lines = lines(bytes, path)?;
    let mut images = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (n, line) = lines[i];
        i += 1;
        if is_skipped(line) {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let mut it = tokens.iter().copied();
        let id: u32 = field(it.next(), path, n, "IMAGE_ID")?;
        let mut qvec = [0.0; 4];
        for (v, name) in qvec.iter_mut().zip(["QW", "QX", "QY", "QZ"]) {
            *v = field(it.next(), path, n, name)?;
        }
        let mut tvec = [0.0; 3];
        for (v, name) in tvec.iter_mut().zip(["TX", "TY", "TZ"]) {
            *v = field(it.next(), path, n, name)?;
        }
        let camera_id: u32 = field(it.next(), path, n, "CAMERA_ID")?;
        if tokens.len() < 10 {
            return Err(DataError::Parse {
                path: path.to_path_buf(),
                line: n,
                problem: format!("image {id} has no NAME"),
            });
        }
        let name = tokens[9..].join(" ");
        // The 2D points line follows directly (it is empty when the image has none, and COLMAP
        // omits it at the very end of a file).
        let mut points2d = Vec::new();
        if let Some(&(pn, points_line)) = lines.get(i) {
            i += 1;
            let values: Vec<&str> = points_line.split_whitespace().collect();
            if !values.len().is_multiple_of(3) {
                return Err(DataError::Parse {
                    path: path.to_path_buf(),
                    line: pn,
                    problem: format!(
                        "the 2D points of image {id} have {} values, not a multiple of 3 (X Y POINT3D_ID)",
                        values.len()
                    ),
                });
            }
            for triple in values.chunks_exact(3) {
                let x: f64 = field(Some(triple[0]), path, pn, "X")?;
                let y: f64 = field(Some(triple[1]), path, pn, "Y")?;
                let point: i64 = field(Some(triple[2]), path, pn, "POINT3D_ID")?;
                let point3d_id = match point {
                    -1 => None,
                    p if p >= 0 => Some(p as u64),
                    p => {
                        return Err(DataError::Parse {
                            path: path.to_path_buf(),
                            line: pn,
                            problem: format!("POINT3D_ID {p} is negative and not -1"),
                        });
                    }
                };
                points2d.push(Point2D {
                    xy: [x, y],
                    point3d_id,
                });
            }
        }
        images.push(ColmapImage {
            id,
            qvec,
            tvec,
            camera_id,
            name,
            points2d,
        });
    }
    Ok(images)
}

/// Parses the bytes of a `points3D.txt`; `path` names the file in errors.
pub fn parse_points3d_text(bytes: &[u8], path: &Path) -> Result<Vec<ColmapPoint3D>> {
    let mut points = Vec::new();
    for (n, line) in lines(bytes, path)? {
        if is_skipped(line) {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let mut it = tokens.iter().copied();
        let id: u64 = field(it.next(), path, n, "POINT3D_ID")?;
        let mut xyz = [0.0; 3];
        for (v, name) in xyz.iter_mut().zip(["X", "Y", "Z"]) {
            *v = field(it.next(), path, n, name)?;
        }
        let mut rgb = [0u8; 3];
        for (v, name) in rgb.iter_mut().zip(["R", "G", "B"]) {
            *v = field(it.next(), path, n, name)?;
        }
        let error: f64 = field(it.next(), path, n, "ERROR")?;
        let rest = tokens.len().saturating_sub(8);
        if !rest.is_multiple_of(2) {
            return Err(DataError::Parse {
                path: path.to_path_buf(),
                line: n,
                problem: format!(
                    "the track of point {id} has {rest} values, not pairs (IMAGE_ID POINT2D_IDX)"
                ),
            });
        }
        let mut track = Vec::with_capacity(rest / 2);
        while let Some(image) = it.next() {
            track.push(TrackElement {
                image_id: field(Some(image), path, n, "IMAGE_ID")?,
                point2d_index: field(it.next(), path, n, "POINT2D_IDX")?,
            });
        }
        points.push(ColmapPoint3D {
            id,
            xyz,
            rgb,
            error,
            track,
        });
    }
    Ok(points)
}

/// Encodes a model's three files in COLMAP's text format: `(cameras, images, points3D)`.
pub(crate) fn encode_text(model: &ColmapModel) -> (String, String, String) {
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let mut cameras = String::from(
        "# Camera list with one line of data per camera:\n#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n",
    );
    let _ = writeln!(cameras, "# Number of cameras: {}", model.cameras.len());
    for c in model.cameras.values() {
        let _ = write!(
            cameras,
            "{} {} {} {}",
            c.id,
            c.model.name(),
            c.width,
            c.height
        );
        for p in &c.params {
            let _ = write!(cameras, " {p}");
        }
        cameras.push('\n');
    }
    let mut images = String::from(
        "# Image list with two lines of data per image:\n#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n#   POINTS2D[] as (X, Y, POINT3D_ID)\n",
    );
    let _ = writeln!(images, "# Number of images: {}", model.images.len());
    for im in &model.images {
        let [qw, qx, qy, qz] = im.qvec;
        let [tx, ty, tz] = im.tvec;
        let _ = writeln!(
            images,
            "{} {qw} {qx} {qy} {qz} {tx} {ty} {tz} {} {}",
            im.id, im.camera_id, im.name
        );
        for (k, p) in im.points2d.iter().enumerate() {
            let sep = if k == 0 { "" } else { " " };
            match p.point3d_id {
                Some(id) => {
                    let _ = write!(images, "{sep}{} {} {id}", p.xy[0], p.xy[1]);
                }
                None => {
                    let _ = write!(images, "{sep}{} {} -1", p.xy[0], p.xy[1]);
                }
            }
        }
        images.push('\n');
    }
    let mut points = String::from(
        "# 3D point list with one line of data per point:\n#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)\n",
    );
    let _ = writeln!(points, "# Number of points: {}", model.points3d.len());
    for p in &model.points3d {
        let [x, y, z] = p.xyz;
        let [r, g, b] = p.rgb;
        let _ = write!(points, "{} {x} {y} {z} {r} {g} {b} {}", p.id, p.error);
        for t in &p.track {
            let _ = write!(points, " {} {}", t.image_id, t.point2d_index);
        }
        points.push('\n');
    }
    (cameras, images, points)
}

/// Writes `cameras.txt`, `images.txt` and `points3D.txt` into `dir`.
pub fn write_text(model: &ColmapModel, dir: &Path) -> Result<()> {
    let (cameras, images, points) = encode_text(model);
    for (name, text) in [
        ("cameras.txt", cameras),
        ("images.txt", images),
        ("points3D.txt", points),
    ] {
        let path = dir.join(name);
        crate::write_atomically(&path, text.as_bytes()).map_err(|e| DataError::io(&path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_colmap_documentation_example() {
        let cameras = b"# Camera list\n1 SIMPLE_RADIAL 3072 2304 2559.81 1536 1152 -0.0204997\n\n2 PINHOLE 640 480 500 500 320 240\n";
        let cameras = parse_cameras_text(cameras, Path::new("cameras.txt")).unwrap();
        assert_eq!(cameras.len(), 2);
        assert_eq!(cameras[0].model, CameraModel::SimpleRadial);
        assert_eq!(cameras[0].params[3], -0.0204997);
        let images = b"# Image list\n1 0.851773 0.0165051 0.503764 -0.142941 -0.737434 1.02973 3.74354 1 P1180141.JPG\n2362.39 248.498 58396 1784.7 268.254 59027\n2 0.9 0.1 0.1 0.1 0 0 0 2 empty one.png\n\n";
        let images = parse_images_text(images, Path::new("images.txt")).unwrap();
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].name, "P1180141.JPG");
        assert_eq!(images[0].points2d.len(), 2);
        assert_eq!(images[0].points2d[1].point3d_id, Some(59027));
        assert_eq!(images[1].name, "empty one.png");
        assert!(images[1].points2d.is_empty());
        let points = b"63390 1.67241 0.292931 0.609726 115 121 122 1.33927 16 6542 15 7345\n";
        let points = parse_points3d_text(points, Path::new("points3D.txt")).unwrap();
        assert_eq!(points[0].rgb, [115, 121, 122]);
        assert_eq!(points[0].track.len(), 2);
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let bad = b"# header\n1 PINHOLE 640 480 500 500 320\n";
        let error = parse_cameras_text(bad, Path::new("cameras.txt")).unwrap_err();
        assert!(error.to_string().starts_with("cameras.txt:2:"), "{error}");
        let unknown = b"1 WEIRD 640 480 1 2 3\n";
        let error = parse_cameras_text(unknown, Path::new("cameras.txt")).unwrap_err();
        assert!(error.to_string().contains("WEIRD"), "{error}");
        let bad_qw = b"1 x 0 0 0 0 0 0 1 a.png\n\n";
        let error = parse_images_text(bad_qw, Path::new("images.txt")).unwrap_err();
        assert!(error.to_string().contains("QW `x`"), "{error}");
        let odd_track = b"1 0 0 0 1 2 3 0.5 7\n";
        assert!(parse_points3d_text(odd_track, Path::new("p")).is_err());
    }
}
