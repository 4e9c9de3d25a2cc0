//! The one error type of `ember-data`: every variant names the file and what is wrong with it.

use std::fmt;
use std::path::PathBuf;

/// Why loading a dataset, a point cloud or an image failed.
///
/// Every variant carries the path of the offending file (or folder), and where it makes sense
/// the line, byte offset, field or index of the problem. Nothing in this crate panics on what a
/// user supplies; it returns one of these.
///
/// Each message already holds its cause (the operating system's, decoder's or parser's words),
/// so [`std::error::Error::source`] returns `None`: a report that walks the chain prints the
/// cause once.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file or folder could not be read (missing, permissions, ...).
    #[error("{path}: {cause}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        cause: std::io::Error,
    },
    /// The folder holds neither a COLMAP model nor a `transforms*.json`.
    #[error(
        "{path}: not a dataset (no `sparse/` COLMAP model, `cameras.{{bin,txt}}`, `transforms.json` or `transforms_train.json` found)"
    )]
    NotADataset {
        /// The folder given to [`Dataset::load`](crate::Dataset::load).
        path: PathBuf,
    },
    /// A binary file ends before the record it announced.
    #[error("{path}: file ends early at byte {offset} while reading {what}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the missing bytes should have started.
        offset: u64,
        /// The record or field being read.
        what: String,
    },
    /// A binary file holds a value that cannot be right.
    #[error("{path}: byte {offset}: {problem}")]
    InvalidBinary {
        /// The file.
        path: PathBuf,
        /// Offset of the bad value.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A text file (COLMAP `.txt`, PLY header or ASCII body) has a line that does not parse.
    #[error("{path}:{line}: {problem}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A JSON file is not valid JSON or does not have the expected structure.
    #[error("{path}: {cause}")]
    Json {
        /// The file.
        path: PathBuf,
        /// serde_json's message, with line and column.
        cause: serde_json::Error,
    },
    /// A camera model that Ember does not load.
    #[error(
        "{path}: camera {camera_id} uses the {model} model, which is not supported (supported: SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV, OPENCV_FISHEYE)"
    )]
    UnsupportedCameraModel {
        /// The file that declares the camera.
        path: PathBuf,
        /// The camera's id (COLMAP) or frame index (transforms.json).
        camera_id: u64,
        /// The model's name.
        model: String,
    },
    /// A `transforms*.json` without enough intrinsics to make a camera.
    #[error("{path}: frame {frame} has no intrinsics: {problem}")]
    MissingIntrinsics {
        /// The file.
        path: PathBuf,
        /// Index of the frame in `frames`.
        frame: usize,
        /// Which values are missing.
        problem: String,
    },
    /// Intrinsics that cannot be a camera (non-positive focal length or size, NaN).
    #[error("{path}: camera `{camera}` has invalid intrinsics: {problem}")]
    InvalidIntrinsics {
        /// The file.
        path: PathBuf,
        /// The camera id or frame that holds them.
        camera: String,
        /// What is wrong.
        problem: String,
    },
    /// A pose holds NaN or infinity, or is not a rotation.
    #[error("{path}: pose of `{view}` is invalid: {problem}")]
    InvalidPose {
        /// The file.
        path: PathBuf,
        /// The image name or frame index.
        view: String,
        /// What is wrong.
        problem: String,
    },
    /// A camera path (`trainer render --path`) with a value it cannot hold: times that do not
    /// increase, keyframes of different sizes, a frame rate out of range, too many frames.
    #[error("{path}: {field}: {problem}")]
    CameraPath {
        /// The path file.
        path: PathBuf,
        /// The field, as JSON would reach it: `fps`, `keyframes`, `keyframes[2].time`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A camera list (a run's `cameras.json`) without the camera asked for.
    #[error("{path}: no camera named `{name}` (it has: {})", NameList(known))]
    UnknownCamera {
        /// The camera list.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// The names it holds.
        known: Vec<String>,
    },
    /// An image refers to a camera id the model does not have.
    #[error("{path}: image `{image}` refers to camera {camera_id}, which is not in the model")]
    MissingCamera {
        /// The images file.
        path: PathBuf,
        /// The image name.
        image: String,
        /// The camera id it names.
        camera_id: u64,
    },
    /// Image files that the dataset names but that are not on disk.
    #[error("{dir}: {} image file(s) not found: {}", names.len(), NameList(names))]
    MissingImages {
        /// The folder the images were looked for in.
        dir: PathBuf,
        /// Every missing name, as the dataset spells it.
        names: Vec<String>,
    },
    /// An image file that cannot be decoded (unreadable, truncated, corrupt, unsupported).
    #[error("{path}: cannot decode image: {cause}")]
    Image {
        /// The image file.
        path: PathBuf,
        /// The decoder's message.
        cause: image::ImageError,
    },
    /// An image whose size is not the size its camera says.
    #[error(
        "{path}: image is {found_width}x{found_height} but its camera says {expected_width}x{expected_height}"
    )]
    ImageSizeMismatch {
        /// The image file.
        path: PathBuf,
        /// Width the camera expects (after any `images_N/` scaling), pixels.
        expected_width: u32,
        /// Height the camera expects, pixels.
        expected_height: u32,
        /// Width of the file, pixels.
        found_width: u32,
        /// Height of the file, pixels.
        found_height: u32,
    },
    /// An image read as an equirectangular panorama whose width is not twice its height.
    #[error(
        "{path}: a {width}x{height} image is not an equirectangular panorama (a 360° panorama is twice as wide as it is high)"
    )]
    NotEquirectangular {
        /// The image file.
        path: PathBuf,
        /// Its width, pixels.
        width: u32,
        /// Its height, pixels.
        height: u32,
    },
    /// A view of a panorama that could not be decoded: the error of the view its decoding was
    /// for says why, this one names the panorama for the other views cut from it.
    #[error("{path}: the panorama of this view could not be decoded ({cause})")]
    PanoramaFailed {
        /// The panorama file.
        path: PathBuf,
        /// The first view's error, as text.
        cause: String,
    },
    /// A photo that should have a mask has none: no file beside it in the masks folder, a
    /// nerfstudio frame without `mask_path` among frames with one, or (with
    /// `data.alpha_as_mask`) a photo without an alpha channel.
    #[error("{photo}: no mask: {problem}")]
    MissingMask {
        /// The photo.
        photo: PathBuf,
        /// Where the mask was looked for.
        problem: String,
    },
    /// A mask whose size is neither its photo's nor a whole multiple of it.
    #[error(
        "{path}: mask is {found_width}x{found_height} but its photo {photo} is {expected_width}x{expected_height} (a mask has the photo's size, or a whole multiple of it for the photos of an `images_N/` folder)"
    )]
    MaskSizeMismatch {
        /// The mask file.
        path: PathBuf,
        /// The photo it masks.
        photo: PathBuf,
        /// The photo file's width, pixels.
        expected_width: u32,
        /// The photo file's height, pixels.
        expected_height: u32,
        /// The mask's width, pixels.
        found_width: u32,
        /// The mask's height, pixels.
        found_height: u32,
    },
    /// A mask (a file, or a photo's alpha) that hides every pixel of its photo at the size
    /// trained on: nothing would be left to learn from or to measure.
    #[error("{path}: the mask hides every pixel of the photo")]
    EmptyMask {
        /// The mask file, or the photo whose alpha is the mask.
        path: PathBuf,
    },
    /// A PLY file that is not a point cloud Ember can read.
    #[error("{path}: {problem}")]
    Ply {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A splat file that is not what its format says (bad magic, inconsistent sizes, a value
    /// out of range, an unsupported variant).
    #[error("{path}: {problem}")]
    Splat {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A transform that cannot be applied (non-positive scale, NaN, buffer sizes).
    #[error("cannot transform the splats: {0}")]
    Transform(ember_kernels::TransformError),
    /// Options that cannot be honoured (for example `downsample = 0`).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A split that ended up with no views (for example `max_images = 0`).
    #[error("{path}: the {split} split has no views")]
    EmptySplit {
        /// The dataset.
        path: PathBuf,
        /// `train`, `val` or `test`.
        split: &'static str,
    },
    /// The prefetching loader's worker thread stopped (it panicked or was shut down).
    #[error("the image loader's worker thread stopped")]
    LoaderStopped,
}

/// Shorthand for `Result<T, DataError>`.
pub type Result<T> = std::result::Result<T, DataError>;

/// Lists at most 10 names, then how many more.
struct NameList<'a>(&'a [String]);

impl fmt::Display for NameList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 10;
        for (i, name) in self.0.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
        }
        if self.0.len() > SHOWN {
            write!(f, " and {} more", self.0.len() - SHOWN)?;
        }
        Ok(())
    }
}

impl DataError {
    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        DataError::Io {
            path: path.into(),
            cause,
        }
    }
}

impl From<ember_kernels::TransformError> for DataError {
    fn from(error: ember_kernels::TransformError) -> Self {
        DataError::Transform(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_images_lists_names_and_counts_the_rest() {
        let names: Vec<String> = (0..12).map(|i| format!("img_{i}.png")).collect();
        let error = DataError::MissingImages {
            dir: PathBuf::from("/scene/images"),
            names,
        };
        let message = error.to_string();
        assert!(
            message.starts_with("/scene/images: 12 image file(s) not found: img_0.png, img_1.png")
        );
        assert!(message.contains("img_9.png and 2 more"), "{message}");
        assert!(!message.contains("img_10.png"));
    }
}
