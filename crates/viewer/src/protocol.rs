//! The WebSocket messages (`PROTOCOL.md` beside this crate's `Cargo.toml` is the reference):
//! what a page sends, parsed and checked here, and the frame header the server sends back.

use ember_kernels::CameraParams;
use serde::{Deserialize, Serialize};

use crate::edit::EditFilter;

/// Smallest frame side a page may ask for, pixels.
pub const MIN_SIDE: u32 = 16;
/// Largest frame side a page may ask for, pixels.
pub const MAX_SIDE: u32 = 4096;

/// A message from the page, as sent (before [`RenderMessage::request`] checks it).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMessage {
    /// Render one frame.
    Render(RenderMessage),
    /// Pause training (live mode).
    Pause,
    /// Resume training (live mode).
    Resume,
    /// Write a checkpoint now (live mode).
    Checkpoint,
    /// Keep what a filter selects (a scene `trainer view` serves).
    Edit(EditMessage),
    /// How many Gaussians a filter would keep, without applying it.
    EditPreview(EditMessage),
    /// Take the last edit back.
    Undo,
    /// Apply the last edit taken back again.
    Redo,
}

/// An `edit` or `edit_preview` message: the filter, in `trainer edit`'s terms.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditMessage {
    /// What the edit keeps.
    pub filter: EditFilter,
}

/// Checks a camera the page sent beyond what the renderer checks: finite numbers, a frame side
/// in [`MIN_SIDE`]`..=`[`MAX_SIDE`], positive focal lengths, and an orthonormal rotation (within
/// what a page's float arithmetic keeps).
pub fn check_camera(camera: &CameraParams) -> Result<(), String> {
    let finite = camera
        .rotation
        .iter()
        .chain(&camera.translation)
        .chain(&[camera.fx, camera.fy, camera.cx, camera.cy])
        .all(|v| v.is_finite());
    if !finite {
        return Err("camera: every number must be finite".into());
    }
    for (name, side) in [("width", camera.width), ("height", camera.height)] {
        if !(MIN_SIDE..=MAX_SIDE).contains(&side) {
            return Err(format!(
                "camera: {name} {side} is outside {MIN_SIDE}..={MAX_SIDE}"
            ));
        }
    }
    if camera.fx <= 0.0 || camera.fy <= 0.0 {
        return Err("camera: fx and fy must be positive".into());
    }
    let r = &camera.rotation;
    for i in 0..3 {
        for j in 0..3 {
            let dot: f64 = (0..3).map(|k| r[3 * i + k] * r[3 * j + k]).sum();
            let want = if i == j { 1.0 } else { 0.0 };
            if (dot - want).abs() > 1e-3 {
                return Err("camera: rotation is not orthonormal".into());
            }
        }
    }
    Ok(())
}

/// What a frame shows of the field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameView {
    /// The colour, over the background.
    #[default]
    Rgb,
    /// The expected depth of the covered part, grey from white (the frame's nearest) to dark
    /// (its farthest), black where nothing is drawn (see [`crate::frame::depth_shades`]).
    Depth,
    /// The coverage `1 - T`, black (nothing) to white (opaque).
    Alpha,
}

/// An encoding a frame can travel in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameFormat {
    /// Lossy, small: what moving views use.
    #[default]
    Jpeg,
    /// Lossless: screenshots.
    Png,
}

impl FrameFormat {
    /// The MIME type.
    pub fn mime(self) -> &'static str {
        match self {
            FrameFormat::Jpeg => "image/jpeg",
            FrameFormat::Png => "image/png",
        }
    }
}

/// The `render` message as sent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderMessage {
    /// The page's number for the request, echoed in the frame header.
    pub id: u64,
    /// The camera ([`CameraParams`]'s JSON form).
    pub camera: CameraParams,
    /// Background colour, RGB in `[0, 1]` (default black).
    #[serde(default)]
    pub background: [f32; 3],
    /// SH bands to use; `None` = all the scene has.
    #[serde(default)]
    pub sh_degree: Option<u32>,
    /// Overlay the Gaussian centres.
    #[serde(default)]
    pub centres: bool,
    /// The frame's encoding.
    #[serde(default)]
    pub format: FrameFormat,
    /// A pixel `[x, y]` of the frame (from its top-left corner, in pixels) whose surface point
    /// to find: the frame's header then carries a [`Pick`].
    #[serde(default)]
    pub pick: Option<[f64; 2]>,
    /// Level-of-detail threshold, pixels (0 draws every Gaussian); `None` = the scene's (the
    /// hello's `lod.threshold`). Ignored for a scene without a hierarchy.
    #[serde(default)]
    pub lod_threshold: Option<f32>,
    /// Draw with the 2D antialiasing filter; `None` = the scene's (the hello's
    /// `antialiased`).
    #[serde(default)]
    pub antialiased: Option<bool>,
    /// What the frame shows (default the colour).
    #[serde(default)]
    pub view: FrameView,
}

impl RenderMessage {
    /// The checked request.
    pub fn request(&self) -> Result<FrameRequest, String> {
        check_camera(&self.camera)?;
        if !self
            .background
            .iter()
            .all(|c| c.is_finite() && (0.0..=1.0).contains(c))
        {
            return Err("background: each channel must be in [0, 1]".into());
        }
        if let Some(degree) = self.sh_degree.filter(|&d| d > 3) {
            return Err(format!("sh_degree {degree}: at most 3"));
        }
        if let Some([x, y]) = self.pick {
            let (w, h) = (f64::from(self.camera.width), f64::from(self.camera.height));
            if !(x.is_finite() && y.is_finite() && (0.0..w).contains(&x) && (0.0..h).contains(&y)) {
                return Err(format!("pick [{x}, {y}] is outside the {w}x{h} frame"));
            }
        }
        if let Some(t) = self
            .lod_threshold
            .filter(|t| !(t.is_finite() && (0.0..=MAX_LOD_THRESHOLD).contains(t)))
        {
            return Err(format!(
                "lod_threshold {t}: pixels from 0 (off) to {MAX_LOD_THRESHOLD}"
            ));
        }
        Ok(FrameRequest {
            id: self.id,
            camera: self.camera,
            background: self.background,
            sh_degree: self.sh_degree,
            centres: self.centres,
            format: self.format,
            pick: self.pick,
            lod_threshold: self.lod_threshold,
            antialiased: self.antialiased.unwrap_or(false),
            view: self.view,
        })
    }
}

/// A checked render request.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRequest {
    /// The page's number for it.
    pub id: u64,
    /// The camera.
    pub camera: CameraParams,
    /// Background colour, RGB in `[0, 1]`.
    pub background: [f32; 3],
    /// SH bands (clamped to the scene's when rendered); `None` = all.
    pub sh_degree: Option<u32>,
    /// Overlay the Gaussian centres.
    pub centres: bool,
    /// The frame's encoding.
    pub format: FrameFormat,
    /// A pixel whose surface point to find, `[x, y]` from the top-left corner.
    pub pick: Option<[f64; 2]>,
    /// Level-of-detail threshold, pixels; `None` = the scene's.
    pub lod_threshold: Option<f32>,
    /// Draw with the 2D antialiasing filter (the server puts the scene's choice here when the
    /// page did not say).
    pub antialiased: bool,
    /// What the frame shows.
    pub view: FrameView,
}

/// The largest level-of-detail threshold a page may ask for, pixels (past it a frame is a few
/// blobs).
pub const MAX_LOD_THRESHOLD: f32 = 64.0;

/// The surface under a picked pixel: where the page's double click sets the orbit centre.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pick {
    /// The pixel asked about, `[x, y]`.
    pub pixel: [f64; 2],
    /// The point drawn there, world units: the expected depth of the nearest well-covered pixel
    /// (coverage at least one half) within a few pixels, along that pixel's ray; `None` where
    /// the frame shows only background.
    pub point: Option<[f64; 3]>,
}

/// The JSON header in front of a frame's image bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrameHeader {
    /// The request's id.
    pub id: u64,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// The encoding of the bytes after the header.
    pub format: FrameFormat,
    /// Time to render it (read-back included, encoding excluded), ms.
    pub render_ms: f64,
    /// Training steps done when it was rendered (live mode).
    pub step: Option<usize>,
    /// For a frame cut into horizontal strips (JPEG frames, encoded in parallel): the byte
    /// length of each strip's image, top first; empty (and absent from the JSON) for one image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strips: Vec<u32>,
    /// Rows per strip, the last strip holding the rest (absent for one image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_height: Option<u32>,
    /// The answer to the request's `pick` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<Pick>,
}

impl FrameHeader {
    /// The frame's image bytes `image` (as [`FrameHeader::parse`] returns them) decoded and,
    /// for a frame in strips, stacked: `height * width * 3` bytes, RGB, top row first.
    pub fn decode(&self, image: &[u8]) -> Result<Vec<u8>, String> {
        let decode = |bytes: &[u8]| {
            image::load_from_memory(bytes)
                .map(|i| i.to_rgb8())
                .map_err(|e| format!("frame image: {e}"))
        };
        let mut rgb = Vec::with_capacity(self.width as usize * self.height as usize * 3);
        let mut rest = image;
        let lengths: Vec<usize> = if self.strips.is_empty() {
            vec![image.len()]
        } else {
            self.strips.iter().map(|&l| l as usize).collect()
        };
        for length in lengths {
            if length > rest.len() {
                return Err("frame: shorter than its strips".into());
            }
            let (strip, tail) = rest.split_at(length);
            let strip = decode(strip)?;
            if strip.width() != self.width {
                return Err(format!(
                    "frame strip is {} wide, not {}",
                    strip.width(),
                    self.width
                ));
            }
            rgb.extend_from_slice(strip.as_raw());
            rest = tail;
        }
        if rgb.len() != self.width as usize * self.height as usize * 3 {
            return Err(format!(
                "frame: the images hold {} bytes, {}x{} RGB is {}",
                rgb.len(),
                self.width,
                self.height,
                self.width as usize * self.height as usize * 3
            ));
        }
        Ok(rgb)
    }

    /// The binary message: `u32` LE header length, the header's JSON, the image bytes.
    pub fn message(&self, image: &[u8]) -> Vec<u8> {
        let header = serde_json::to_vec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(4 + header.len() + image.len());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(image);
        out
    }

    /// Splits a binary message into its header and image bytes.
    pub fn parse(message: &[u8]) -> Result<(FrameHeader, &[u8]), String> {
        let len = message
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or("frame: shorter than its length field")?;
        let header = message
            .get(4..4 + len)
            .ok_or("frame: shorter than its header")?;
        let header = serde_json::from_slice(header).map_err(|e| format!("frame header: {e}"))?;
        Ok((header, &message[4 + len..]))
    }
}
