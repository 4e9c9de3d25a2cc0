//! Ember's web viewer: a local HTTP + WebSocket server and a page that needs no build step.
//!
//! The page sends camera requests; the server renders them with `ember_field::render` on the
//! backend the field lives on and sends JPEG frames back. It shows either a fixed field
//! ([`serve_field`]; [`serve_editable`], what `trainer view` runs, also lets the pages edit it:
//! [`edit`]) or a training run ([`LiveRenderer`], which the training loop calls between steps,
//! within a time budget, and which also pauses the run and asks for checkpoints).
//!
//! ```text
//! page --render{camera}--> [Viewer: latest request per page] --next_request--> renderer
//! page <--frame (JPEG)---- [encode on the server's runtime] <--send_frame----- renderer
//! ```
//!
//! `PROTOCOL.md` beside this crate's `Cargo.toml` lists the routes and messages.
//!
//! # Example
//! ```no_run
//! use ember_viewer::{Mode, SceneInfo, Viewer, ViewerConfig, serve_field};
//! # fn field() -> ember_field::GaussianField<burn::backend::NdArray<f32>> { unimplemented!() }
//! let field = field();
//! let means: Vec<f32> = field.means.val().into_data().into_vec().unwrap();
//! let scene = SceneInfo::framed("my scene".into(), Mode::Scene, field.sh_degree(), &means, vec![], None);
//! let viewer = Viewer::start(&ViewerConfig::default(), scene, None)?;
//! println!("open {}", viewer.url());
//! serve_field(&viewer, &field, || false);
//! # Ok::<(), ember_viewer::ViewerError>(())
//! ```

#![warn(missing_docs)]

mod access;
pub mod edit;
pub mod frame;
pub mod protocol;
pub mod scene;
pub mod server;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ember_field::GaussianField;
use ember_kernels::SplatBackend;

pub use edit::{EditCommand, EditFilter, EditState, SceneEditor};
pub use frame::{
    EncodedFrame, Frame, SceneLod, encode_frame, render_frame, render_scene_frame, strip_height,
};
pub use protocol::{FrameFormat, FrameHeader, FrameRequest, FrameView, MAX_LOD_THRESHOLD};
pub use scene::{DatasetCamera, LodInfo, Mode, SceneInfo, Split};
pub use server::{
    DEFAULT_PORT, EVALS_KEPT, EditAsker, EvalViews, MAX_OPEN_BYTES, PendingEdit, PhotoSource,
    Status, Viewer, ViewerConfig,
};

/// What went wrong in the viewer.
#[derive(Debug, thiserror::Error)]
pub enum ViewerError {
    /// The address could not be bound (in use, not an address of this machine, no permission).
    #[error("viewer: cannot listen on {address}: {cause}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The system's reason.
        cause: String,
    },
    /// The server's runtime could not start.
    #[error("viewer: cannot start the server's runtime: {0}")]
    Runtime(String),
    /// A frame could not be rendered.
    #[error("viewer: rendering failed: {0}")]
    Render(String),
    /// A frame could not be encoded.
    #[error("viewer: encoding a frame failed: {0}")]
    Encode(String),
}

/// How long a renderer waits for a request before it looks at its stop flag again.
const POLL: Duration = Duration::from_millis(50);

/// Renders every request for `field` on this thread until `stop` returns `true`.
pub fn serve_field<B: SplatBackend>(
    viewer: &Viewer,
    field: &GaussianField<B>,
    stop: impl Fn() -> bool,
) {
    serve_scene(viewer, field, None, None, stop);
}

/// [`serve_field`] of a scene with a level-of-detail hierarchy of `field` (see
/// [`render_scene_frame`]); the viewer's [`SceneInfo::lod`] should say so, for the page's
/// control. `step`, when given, is the training step the frames say they show (a finished
/// run's final field: a page that follows a run redraws until its frame is of the last step).
pub fn serve_scene<B: SplatBackend>(
    viewer: &Viewer,
    field: &GaussianField<B>,
    lod: Option<&SceneLod<B>>,
    step: Option<usize>,
    stop: impl Fn() -> bool,
) {
    while !stop() {
        if let Some(pending) = viewer.next_request(POLL) {
            let frame = render_scene_frame(field, lod, &pending.request).map(|mut frame| {
                frame.step = step.or(frame.step);
                frame
            });
            viewer.send_frame(pending, frame);
        }
    }
}

/// [`serve_scene`] of a scene the pages may edit (see [`edit`]): each edit a page asks for is
/// carried out before the next frame, and every page is told the result.
pub fn serve_editable<B: SplatBackend>(
    viewer: &Viewer,
    editor: &mut SceneEditor<B>,
    step: Option<usize>,
    stop: impl Fn() -> bool,
) {
    viewer.allow_editing(editor.state(), editor.splats().clone());
    while !stop() {
        while let Some(PendingEdit { asker, command }) = viewer.next_edit() {
            let opened = match &command {
                EditCommand::Open { name, .. } => Some(name.clone()),
                _ => None,
            };
            let result = editor.run(command);
            let shown = result.is_ok();
            viewer.edited(asker, result, editor.state(), editor.splats().clone());
            // After the edits' state, so that the new hello carries the fresh one.
            if let (true, Some(name)) = (shown, opened) {
                viewer.replace_scene(editor.scene_info(name));
            }
        }
        if let Some(pending) = viewer.next_request(POLL) {
            let frame = render_scene_frame(editor.field(), editor.lod(), &pending.request).map(
                |mut frame| {
                    frame.step = step.or(frame.step);
                    frame
                },
            );
            viewer.send_frame(pending, frame);
        }
    }
}

/// Renders the pages' requests between training steps, spending at most a fraction of the
/// training time on them (the frame rate the pages see drops instead of the training speed).
/// While a page has paused the run it renders whatever is asked.
#[derive(Debug)]
pub struct LiveRenderer {
    budget: f64,
    training: Duration,
    rendering: Duration,
    /// When the last call returned (the step in between is training time).
    returned: Option<Instant>,
}

/// What the training loop does after [`LiveRenderer::between_steps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveAction {
    /// Go on with the next step.
    Continue,
    /// Write a checkpoint (a page asked), then call `between_steps` again.
    Checkpoint,
}

impl LiveRenderer {
    /// A renderer that spends at most `budget` (e.g. 0.1) of the training time rendering.
    pub fn new(budget: f64) -> LiveRenderer {
        LiveRenderer {
            budget,
            training: Duration::ZERO,
            rendering: Duration::ZERO,
            returned: None,
        }
    }

    /// Seconds rendered against seconds trained since the start, while not paused.
    pub fn share(&self) -> f64 {
        self.rendering.as_secs_f64() / self.training.as_secs_f64().max(1e-9)
    }

    /// Between two steps (`field` after `step` steps): renders one waiting request when the
    /// budget allows; while paused, renders every request until a page resumes, asks for a
    /// checkpoint, or `stop` returns `true`.
    pub fn between_steps<B: SplatBackend>(
        &mut self,
        viewer: &Viewer,
        field: &GaussianField<B>,
        step: usize,
        stop: &dyn Fn() -> bool,
    ) -> LiveAction {
        if let Some(returned) = self.returned {
            self.training += returned.elapsed();
        }
        let action = self.serve(viewer, field, step, stop);
        self.returned = Some(Instant::now());
        action
    }

    fn serve<B: SplatBackend>(
        &mut self,
        viewer: &Viewer,
        field: &GaussianField<B>,
        step: usize,
        stop: &dyn Fn() -> bool,
    ) -> LiveAction {
        let render = |pending: server::PendingFrame| {
            let frame = render_frame(field, &pending.request).map(|mut frame| {
                frame.step = Some(step);
                frame
            });
            viewer.send_frame(pending, frame);
        };
        if viewer.take_checkpoint_request() {
            return LiveAction::Checkpoint;
        }
        if !viewer.paused() {
            if self.rendering.as_secs_f64() <= self.budget * self.training.as_secs_f64()
                && let Some(pending) = viewer.next_request(Duration::ZERO)
            {
                let started = Instant::now();
                render(pending);
                self.rendering += started.elapsed();
            }
            return LiveAction::Continue;
        }
        while viewer.paused() && !stop() {
            if viewer.take_checkpoint_request() {
                return LiveAction::Checkpoint;
            }
            if let Some(pending) = viewer.next_request(POLL) {
                render(pending);
            }
        }
        LiveAction::Continue
    }
}
