//! The server: axum on a tokio runtime of its own, one task per connected page, and the queue
//! of render requests that the rendering side (a thread, or the training loop between steps)
//! takes from.
//!
//! Each connection holds at most one waiting request (a newer one replaces it) and at most one
//! frame in flight (its next request is not handed out until the previous frame was sent), so
//! a page that asks faster than the renderer draws never builds a queue, and a slow page never
//! holds frames in memory. The renderer serves the connections in turn.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ember_data::DecodedImage;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::ViewerError;
use crate::access::{Access, Grant};
use crate::frame::{Frame, encode, encode_frame};
use crate::protocol::{ClientMessage, FrameFormat, FrameHeader, FrameRequest};
use crate::scene::{Mode, SceneInfo};

mod editing;

use editing::Editing;
pub use editing::{EditAsker, MAX_OPEN_BYTES, PendingEdit};

/// Where and how the server listens.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewerConfig {
    /// Address to bind (default 127.0.0.1: only this machine can connect).
    pub host: IpAddr,
    /// Port (0 = any free port).
    pub port: u16,
    /// JPEG quality of moving frames, 1..=100.
    pub jpeg_quality: u8,
    /// Threads that encode one JPEG frame, each a horizontal strip of it (at least 1; the
    /// default is the machine's parallelism).
    pub encode_threads: usize,
}

impl Default for ViewerConfig {
    fn default() -> Self {
        ViewerConfig {
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: DEFAULT_PORT,
            jpeg_quality: 85,
            encode_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The port `trainer view` and `trainer --view` use unless told otherwise.
pub const DEFAULT_PORT: u16 = 7878;

/// The photo of dataset camera `index` (`hello.cameras`), for the page's side-by-side view.
pub type PhotoSource = Box<dyn Fn(usize) -> Result<Arc<DecodedImage>, String> + Send + Sync>;

/// Training progress, as the page's live panel shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// Steps done.
    pub step: usize,
    /// Steps the run will do.
    pub total_steps: usize,
    /// Gaussians now.
    pub gaussians: usize,
    /// The loss of the last step, when it was read back (a run reads it every
    /// `output.loss_every` steps).
    pub loss: Option<f32>,
    /// Training PSNR when the step measured it, dB.
    pub psnr: Option<f32>,
    /// Whether training is paused.
    pub paused: bool,
    /// Recent training speed.
    pub steps_per_second: f64,
}

/// One held-out evaluation, with the images the run saved (render left, photo right).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalViews {
    /// Steps done when it ran.
    pub step: usize,
    /// Mean PSNR, dB.
    pub psnr: f32,
    /// Mean SSIM.
    pub ssim: f32,
    /// Mean LPIPS, when measured.
    pub lpips: Option<f32>,
    /// `(name, frame)` per saved view.
    pub views: Vec<(String, Frame)>,
}

/// A request taken from the queue, to answer with [`Viewer::send_frame`].
#[derive(Debug)]
pub struct PendingFrame {
    client: u64,
    /// What to render.
    pub request: FrameRequest,
}

/// The longest message a page's WebSocket may send in one piece: every message of the protocol
/// is far shorter, and one this size is read whole and answered with an error (the connection
/// stays open). A longer one ends the connection: it cannot be skipped without reading it.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The longest message [`Shared::handle`] parses; a longer one gets an error unread.
const MAX_PARSED_BYTES: usize = 64 << 10;

/// Status messages go out at most this often (the loop may step far faster).
const STATUS_EVERY: Duration = Duration::from_millis(100);
/// Curve points kept for pages that connect later; past it every other one is dropped.
const HISTORY_POINTS: usize = 4000;
/// Evaluations whose images stay served (the latest ones).
pub const EVALS_KEPT: usize = 8;
/// The long side of a photo's thumbnail (`/thumb/{index}`), pixels.
pub const THUMBNAIL_SIDE: u32 = 192;
/// JPEG quality of dataset photos and evaluation images (looked at closely, sent once).
const STILL_QUALITY: u8 = 92;

/// What goes to one page.
enum Outgoing {
    Text(String),
    Frame(Box<FrameHeader>, Frame),
    /// The last message: sent, then the connection is closed.
    End(String),
}

#[derive(Default)]
struct Queue {
    /// The waiting request of each connection.
    waiting: BTreeMap<u64, FrameRequest>,
    /// Connections with a frame not yet sent.
    in_flight: BTreeSet<u64>,
    /// The connection served last (the next one after it goes first).
    last: u64,
}

#[derive(Default)]
struct Live {
    history: Vec<Value>,
    evals: Vec<Value>,
    eval_images: HashMap<(usize, usize), Arc<Vec<u8>>>,
    status: Option<Status>,
    last_status_sent: Option<Instant>,
    /// Set once the run has ended and the server goes on showing its final field: the text
    /// the pages show (see [`Viewer::finish`]).
    finished: Option<String>,
}

struct Shared {
    access: Access,
    editing: Mutex<Editing>,
    scene: Mutex<SceneInfo>,
    photos: Option<PhotoSource>,
    photo_cache: Mutex<PhotoCache>,
    jpeg_quality: u8,
    encode_threads: usize,
    queue: Mutex<Queue>,
    wake: Condvar,
    clients: Mutex<BTreeMap<u64, mpsc::UnboundedSender<Outgoing>>>,
    next_client: AtomicU64,
    live: Mutex<Live>,
    paused: AtomicBool,
    /// Set when the last page left a paused run, which then resumed (for the terminal).
    resumed_unattended: AtomicBool,
    checkpoint: AtomicBool,
    closed: AtomicBool,
}

/// Encoded photos by camera index and whether they are the thumbnail.
type PhotoCache = HashMap<(usize, bool), Arc<Vec<u8>>>;

/// A lock that a panicked holder left poisoned still guards consistent data here (every
/// critical section is a plain insert or remove), so it is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn broadcast(&self, text: String) {
        for tx in lock(&self.clients).values() {
            let _ = tx.send(Outgoing::Text(text.clone()));
        }
    }

    fn send_to(&self, client: u64, message: Outgoing) {
        if let Some(tx) = lock(&self.clients).get(&client) {
            let _ = tx.send(message);
        }
    }

    fn error(&self, client: u64, message: &str) {
        let text = json!({"type": "error", "message": message}).to_string();
        self.send_to(client, Outgoing::Text(text));
    }

    fn hello(&self) -> Value {
        let scene = lock(&self.scene);
        let cameras: Vec<Value> = scene
            .cameras
            .iter()
            .enumerate()
            .map(|(index, c)| {
                // The camera's own JSON form, with the dataset's names beside it.
                let mut camera = json!(c.camera);
                camera["index"] = json!(index);
                camera["name"] = json!(c.name);
                camera["split"] = json!(c.split);
                camera
            })
            .collect();
        let live = lock(&self.live);
        json!({
            "type": "hello", "mode": scene.mode, "name": scene.name,
            "gaussians": live.status.as_ref().map_or(scene.gaussians, |s| s.gaussians),
            "sh_degree": scene.sh_degree, "target": scene.target, "up": scene.up,
            "radius": scene.radius, "bounds": scene.bounds, "front": scene.front,
            "lod": scene.lod, "antialiased": scene.antialiased, "cameras": cameras, "history": live.history,
            "evals": live.evals, "status": live.status, "finished": live.finished,
            "edits": lock(&self.editing).state,
        })
    }

    fn status_message(status: &Status) -> String {
        let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
        value["type"] = "status".into();
        value.to_string()
    }

    /// A page's text message.
    fn handle(&self, client: u64, text: &str) {
        if text.len() > MAX_PARSED_BYTES {
            let error = format!(
                "message of {} bytes refused: the protocol's messages are under {} KiB",
                text.len(),
                MAX_PARSED_BYTES >> 10
            );
            return self.error(client, &error);
        }
        let message = match serde_json::from_str::<ClientMessage>(text) {
            Ok(message) => message,
            Err(e) => return self.error(client, &format!("bad message: {e}")),
        };
        let live = lock(&self.scene).mode == Mode::Training;
        let finished = lock(&self.live).finished.is_some();
        match message {
            ClientMessage::Render(render) => match render.request() {
                Ok(mut request) => {
                    if render.antialiased.is_none() {
                        request.antialiased = lock(&self.scene).antialiased;
                    }
                    lock(&self.queue).waiting.insert(client, request);
                    self.wake.notify_all();
                }
                Err(e) => self.error(client, &e),
            },
            ClientMessage::Pause | ClientMessage::Resume | ClientMessage::Checkpoint if !live => {
                self.error(
                    client,
                    "this server shows a fixed scene: there is no training to control",
                )
            }
            ClientMessage::Pause | ClientMessage::Resume | ClientMessage::Checkpoint
                if finished =>
            {
                self.error(
                    client,
                    "the run has ended: this server shows its final field, there is no training \
                     to control",
                )
            }
            ClientMessage::Pause | ClientMessage::Resume => {
                let pause = matches!(message, ClientMessage::Pause);
                if self.paused.swap(pause, Ordering::SeqCst) != pause {
                    let status = lock(&self.live).status.as_mut().map(|status| {
                        status.paused = pause;
                        Self::status_message(status)
                    });
                    if let Some(text) = status {
                        self.broadcast(text);
                    }
                    let what = if pause {
                        "training paused"
                    } else {
                        "training resumed"
                    };
                    self.broadcast(json!({"type": "message", "text": what}).to_string());
                }
                self.wake.notify_all();
            }
            ClientMessage::Checkpoint => {
                self.checkpoint.store(true, Ordering::SeqCst);
                self.wake.notify_all();
            }
            ClientMessage::Edit(_)
            | ClientMessage::EditPreview(_)
            | ClientMessage::Undo
            | ClientMessage::Redo => self.edit(client, message),
        }
    }

    /// The photo of dataset camera `index` as JPEG, whole or (`thumbnail`) at most
    /// [`THUMBNAIL_SIDE`] pixels a side.
    fn photo(&self, index: usize, thumbnail: bool) -> Result<Arc<Vec<u8>>, StatusCode> {
        if let Some(bytes) = lock(&self.photo_cache).get(&(index, thumbnail)) {
            return Ok(bytes.clone());
        }
        let photos = self.photos.as_ref().ok_or(StatusCode::NOT_FOUND)?;
        if index >= lock(&self.scene).cameras.len() {
            return Err(StatusCode::NOT_FOUND);
        }
        let image = photos(index).map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
        let mut frame = Frame::from_rgb(image.width, image.height, image.data.clone());
        if thumbnail {
            let whole = image::RgbImage::from_raw(frame.width, frame.height, frame.rgb)
                .ok_or(StatusCode::INTERNAL_SERVER_ERROR)?;
            let scale = f64::from(THUMBNAIL_SIDE) / f64::from(frame.width.max(frame.height));
            let side = |n: u32| ((f64::from(n) * scale.min(1.0)).round() as u32).max(1);
            let small = image::imageops::thumbnail(&whole, side(frame.width), side(frame.height));
            frame = Frame::from_rgb(small.width(), small.height(), small.into_raw());
        }
        let bytes = Arc::new(
            encode(&frame, FrameFormat::Jpeg, STILL_QUALITY)
                .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?,
        );
        lock(&self.photo_cache).insert((index, thumbnail), bytes.clone());
        Ok(bytes)
    }
}

/// A running viewer server. Dropping it stops the server and closes every connection.
pub struct Viewer {
    shared: Arc<Shared>,
    address: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Viewer")
            .field("address", &self.address)
            .finish()
    }
}

impl Viewer {
    /// Binds `config.host:config.port` and starts serving `scene` (photos of its dataset
    /// cameras from `photos`). Returns once the socket listens.
    pub fn start(
        config: &ViewerConfig,
        scene: SceneInfo,
        photos: Option<PhotoSource>,
    ) -> Result<Viewer, ViewerError> {
        let requested = SocketAddr::new(config.host, config.port);
        let bind_error = |e: std::io::Error| ViewerError::Bind {
            address: requested,
            cause: e.to_string(),
        };
        let listener = std::net::TcpListener::bind(requested).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let address = listener.local_addr().map_err(bind_error)?;
        let access = Access::for_address(address)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ember-viewer")
            .enable_all()
            .build()
            .map_err(|e| ViewerError::Runtime(e.to_string()))?;
        let shared = Arc::new(Shared {
            access,
            editing: Mutex::new(Editing::default()),
            scene: Mutex::new(scene),
            photos,
            photo_cache: Mutex::new(HashMap::new()),
            jpeg_quality: config.jpeg_quality,
            encode_threads: config.encode_threads.max(1),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            clients: Mutex::new(BTreeMap::new()),
            next_client: AtomicU64::new(1),
            live: Mutex::new(Live::default()),
            paused: AtomicBool::new(false),
            resumed_unattended: AtomicBool::new(false),
            checkpoint: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let app = router(shared.clone());
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(bind_error)?
        };
        runtime.spawn(async move {
            // Serving ends only with the runtime; an accept error is retried by axum.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Viewer {
            shared,
            address,
            runtime: Some(runtime),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The page's URL; off loopback it carries the access token (`/?token=...`), the only way
    /// in (see PROTOCOL.md, "Access").
    pub fn url(&self) -> String {
        match self.shared.access.token() {
            Some(token) => format!("http://{}/?token={token}", self.address),
            None => format!("http://{}/", self.address),
        }
    }

    /// Pages connected now.
    pub fn connections(&self) -> usize {
        lock(&self.shared.clients).len()
    }

    /// The next request to render, waiting up to `wait` for one (`Duration::ZERO`: only
    /// look). Connections are served in turn, each with its newest request.
    pub fn next_request(&self, wait: Duration) -> Option<PendingFrame> {
        let deadline = Instant::now() + wait;
        let mut queue = lock(&self.shared.queue);
        loop {
            let ready = |q: &Queue, range: std::ops::RangeFrom<u64>| {
                q.waiting
                    .range(range)
                    .map(|(&client, _)| client)
                    .find(|client| !q.in_flight.contains(client))
            };
            let next = ready(&queue, queue.last.saturating_add(1)..).or_else(|| ready(&queue, 0..));
            if let Some(client) = next
                && let Some(request) = queue.waiting.remove(&client)
            {
                queue.last = client;
                queue.in_flight.insert(client);
                return Some(PendingFrame { client, request });
            }
            let now = Instant::now();
            if now >= deadline || self.shared.closed.load(Ordering::SeqCst) {
                return None;
            }
            queue = self
                .shared
                .wake
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    /// Answers `pending` with its frame, or with an error message when rendering failed.
    pub fn send_frame(&self, pending: PendingFrame, frame: Result<Frame, ViewerError>) {
        match frame {
            Ok(frame) => {
                let header = FrameHeader {
                    id: pending.request.id,
                    width: frame.width,
                    height: frame.height,
                    format: pending.request.format,
                    render_ms: frame.render_ms,
                    step: frame.step,
                    strips: Vec::new(),
                    strip_height: None,
                    pick: frame.pick,
                };
                self.shared
                    .send_to(pending.client, Outgoing::Frame(Box::new(header), frame));
            }
            Err(e) => {
                self.shared.error(pending.client, &e.to_string());
                self.release(pending.client);
            }
        }
    }

    fn release(&self, client: u64) {
        lock(&self.shared.queue).in_flight.remove(&client);
        self.shared.wake.notify_all();
    }

    /// Records a training step for the curves, and sends the status to every page at most ten
    /// times a second.
    pub fn set_status(&self, status: Status) {
        let mut live = lock(&self.shared.live);
        if status.loss.is_some() {
            live.history.push(json!({
                "step": status.step, "loss": status.loss, "psnr": status.psnr,
                "gaussians": status.gaussians,
            }));
        }
        if live.history.len() > HISTORY_POINTS {
            let mut keep = false;
            live.history.retain(|_| {
                keep = !keep;
                keep
            });
        }
        let due = live
            .last_status_sent
            .is_none_or(|t| t.elapsed() >= STATUS_EVERY);
        let text = Shared::status_message(&status);
        live.status = Some(status);
        if due {
            live.last_status_sent = Some(Instant::now());
            drop(live);
            self.shared.broadcast(text);
        }
    }

    /// Publishes a held-out evaluation: its numbers to every page, its images at
    /// `/eval/{step}/{i}`.
    pub fn publish_eval(&self, eval: EvalViews) -> Result<(), ViewerError> {
        let mut images = Vec::with_capacity(eval.views.len());
        for (name, frame) in &eval.views {
            images.push((
                name.clone(),
                Arc::new(encode(frame, FrameFormat::Jpeg, STILL_QUALITY)?),
            ));
        }
        let views: Vec<Value> = images
            .iter()
            .enumerate()
            .map(|(i, (name, _))| json!({"name": name, "url": format!("/eval/{}/{i}", eval.step)}))
            .collect();
        let message = json!({
            "type": "eval", "step": eval.step, "psnr": eval.psnr, "ssim": eval.ssim,
            "lpips": eval.lpips, "views": views,
        });
        let mut live = lock(&self.shared.live);
        for (i, (_, bytes)) in images.into_iter().enumerate() {
            live.eval_images.insert((eval.step, i), bytes);
        }
        live.evals.push(message.clone());
        let mut steps: Vec<usize> = live.eval_images.keys().map(|k| k.0).collect();
        steps.sort_unstable();
        steps.dedup();
        if steps.len() > EVALS_KEPT {
            let oldest_kept = steps[steps.len() - EVALS_KEPT];
            live.eval_images.retain(|k, _| k.0 >= oldest_kept);
        }
        drop(live);
        self.shared.broadcast(message.to_string());
        Ok(())
    }

    /// A line for every page's message log.
    pub fn message(&self, text: &str) {
        self.shared
            .broadcast(json!({"type": "message", "text": text}).to_string());
    }

    /// Tells every page that the run ended and that this server goes on showing its final
    /// field (`text` says so, e.g. with how to stop it): the last status goes out (the
    /// rate limit of [`Viewer::set_status`] may have held it back), pages that connect later
    /// are told in their hello, and pause, resume and checkpoint are refused from now on. The
    /// caller then serves the final field (e.g. [`crate::serve_scene`]) and ends with
    /// [`Viewer::end`].
    pub fn finish(&self, text: &str) {
        self.shared.paused.store(false, Ordering::SeqCst);
        let mut live = lock(&self.shared.live);
        live.finished = Some(text.to_string());
        let status = live.status.as_mut().map(|status| {
            status.paused = false;
            Shared::status_message(status)
        });
        drop(live);
        if let Some(status) = status {
            self.shared.broadcast(status);
        }
        self.shared
            .broadcast(json!({"type": "finished", "text": text}).to_string());
        self.shared.wake.notify_all();
    }

    /// Tells every page that the run ended and how to see its result again (`text`, e.g. the
    /// `trainer view` command), closes their connections, and waits for them to go, at most
    /// `wait`. A page told so stops reconnecting and shows `text`.
    pub fn end(&self, text: &str, wait: Duration) {
        let message = json!({"type": "ended", "text": text}).to_string();
        for tx in lock(&self.shared.clients).values() {
            let _ = tx.send(Outgoing::End(message.clone()));
        }
        let deadline = Instant::now() + wait;
        while self.connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether a page paused training.
    pub fn paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// Whether training resumed since the last call because the last page left it paused
    /// (nobody would be left to resume it): the caller tells the terminal.
    pub fn take_unattended_resume(&self) -> bool {
        self.shared.resumed_unattended.swap(false, Ordering::SeqCst)
    }

    /// Whether a page asked for a checkpoint since the last call.
    pub fn take_checkpoint_request(&self) -> bool {
        self.shared.checkpoint.swap(false, Ordering::SeqCst)
    }

    /// Wakes a [`Viewer::next_request`] waiting in another thread (after a pause or a stop
    /// flag changed), which then returns `None` if nothing is waiting.
    pub fn wake(&self) {
        self.shared.wake.notify_all();
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        lock(&self.shared.clients).clear();
        // Not waiting for the tasks: a viewer may be dropped inside another async runtime,
        // where blocking is not allowed; the listener closes with the runtime either way.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The page's files, compiled in: the binary serves them without reading any file.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const STYLE_CSS: &str = include_str!("../assets/style.css");
/// The page's scripts, each at its route: ES modules, app.js the entry, which imports the rest.
const SCRIPTS: &[(&str, &str)] = &[
    ("/app.js", include_str!("../assets/app.js")),
    ("/automation.js", include_str!("../assets/automation.js")),
    ("/camera.js", include_str!("../assets/camera.js")),
    ("/camera-path.js", include_str!("../assets/camera-path.js")),
    ("/connection.js", include_str!("../assets/connection.js")),
    ("/curves.js", include_str!("../assets/curves.js")),
    (
        "/dataset-cameras.js",
        include_str!("../assets/dataset-cameras.js"),
    ),
    ("/dom.js", include_str!("../assets/dom.js")),
    ("/edit.js", include_str!("../assets/edit.js")),
    ("/frame.js", include_str!("../assets/frame.js")),
    ("/geometry.js", include_str!("../assets/geometry.js")),
    ("/gizmo.js", include_str!("../assets/gizmo.js")),
    ("/input.js", include_str!("../assets/input.js")),
    ("/open-file.js", include_str!("../assets/open-file.js")),
    ("/overlay.js", include_str!("../assets/overlay.js")),
    ("/panel.js", include_str!("../assets/panel.js")),
    ("/path.js", include_str!("../assets/path.js")),
    ("/render.js", include_str!("../assets/render.js")),
    ("/state.js", include_str!("../assets/state.js")),
    ("/training.js", include_str!("../assets/training.js")),
    ("/view.js", include_str!("../assets/view.js")),
];

fn router(shared: Arc<Shared>) -> Router {
    let asset = |mime: &'static str, body: &'static str| {
        get(move || async move { ([(header::CONTENT_TYPE, mime)], body) })
    };
    let mut router: Router<Arc<Shared>> =
        Router::new().route("/", asset("text/html; charset=utf-8", INDEX_HTML));
    for &(path, body) in SCRIPTS {
        router = router.route(path, asset("text/javascript; charset=utf-8", body));
    }
    router
        .route("/style.css", asset("text/css; charset=utf-8", STYLE_CSS))
        .route("/api/info", get(info))
        .route("/api/splats.ply", get(editing::splats_ply))
        .route(
            "/api/open",
            axum::routing::post(editing::open_file).layer(DefaultBodyLimit::max(MAX_OPEN_BYTES)),
        )
        .route("/photo/{index}", get(photo))
        .route("/thumb/{index}", get(thumbnail))
        .route("/eval/{step}/{index}", get(eval_image))
        .route("/ws", get(socket))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// Every request passes here first: a `Host` the server was not started for, or a missing
/// token off loopback, is answered 403 (see [`crate::access`]).
async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    match shared
        .access
        .check(request.headers(), request.uri().query())
    {
        Err(reason) => (StatusCode::FORBIDDEN, reason).into_response(),
        Ok(grant) => {
            let mut response = next.run(request).await;
            let cookie = shared.access.cookie().filter(|_| grant == Grant::SetCookie);
            if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            response
        }
    }
}

async fn info(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.hello()).into_response()
}

fn jpeg(bytes: Arc<Vec<u8>>) -> Response {
    (
        [(header::CONTENT_TYPE, "image/jpeg")],
        bytes.as_ref().clone(),
    )
        .into_response()
}

async fn photo(State(shared): State<Arc<Shared>>, Path(index): Path<usize>) -> Response {
    photo_response(shared, index, false).await
}

async fn thumbnail(State(shared): State<Arc<Shared>>, Path(index): Path<usize>) -> Response {
    photo_response(shared, index, true).await
}

async fn photo_response(shared: Arc<Shared>, index: usize, thumbnail: bool) -> Response {
    match tokio::task::spawn_blocking(move || shared.photo(index, thumbnail)).await {
        Ok(Ok(bytes)) => jpeg(bytes),
        Ok(Err(status)) => (status, "no such photo").into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn eval_image(
    State(shared): State<Arc<Shared>>,
    Path((step, index)): Path<(usize, usize)>,
) -> Response {
    let bytes = lock(&shared.live).eval_images.get(&(step, index)).cloned();
    match bytes {
        Some(bytes) => jpeg(bytes),
        None => (StatusCode::NOT_FOUND, "no such evaluation image").into_response(),
    }
}

async fn socket(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if let Err(reason) = Access::check_origin(&headers) {
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| connection(shared, socket))
}

/// One page's connection: its messages in, status, frames and errors out.
async fn connection(shared: Arc<Shared>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client = shared.next_client.fetch_add(1, Ordering::SeqCst);
    let hello = shared.hello().to_string();
    lock(&shared.clients).insert(client, tx);
    if sink.send(Message::Text(hello.into())).await.is_ok() {
        loop {
            tokio::select! {
                incoming = stream.next() => match incoming {
                    Some(Ok(Message::Text(text))) => shared.handle(client, text.as_str()),
                    Some(Ok(Message::Binary(_))) => {
                        shared.error(client, "binary messages are not part of the protocol: send JSON text")
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                },
                outgoing = rx.recv() => {
                    let Some(outgoing) = outgoing else { break };
                    let last = matches!(outgoing, Outgoing::End(_));
                    if send(&shared, client, &mut sink, outgoing).await.is_err() || last {
                        break;
                    }
                }
            }
        }
    }
    let alone = {
        let mut clients = lock(&shared.clients);
        clients.remove(&client);
        clients.is_empty()
    };
    // A pause lives as long as a page that can lift it.
    if alone && shared.paused.swap(false, Ordering::SeqCst) {
        if let Some(status) = lock(&shared.live).status.as_mut() {
            status.paused = false;
        }
        shared.resumed_unattended.store(true, Ordering::SeqCst);
    }
    let mut queue = lock(&shared.queue);
    queue.waiting.remove(&client);
    queue.in_flight.remove(&client);
    drop(queue);
    shared.wake.notify_all();
}

async fn send(
    shared: &Arc<Shared>,
    client: u64,
    sink: &mut (impl SinkExt<Message, Error = axum::Error> + Unpin),
    outgoing: Outgoing,
) -> Result<(), axum::Error> {
    match outgoing {
        Outgoing::Text(text) => sink.send(Message::Text(text.into())).await,
        Outgoing::End(text) => {
            sink.send(Message::Text(text.into())).await?;
            let close = CloseFrame {
                code: close_code::NORMAL,
                reason: "the run ended".into(),
            };
            sink.send(Message::Close(Some(close))).await
        }
        Outgoing::Frame(mut header, frame) => {
            let (quality, threads) = (shared.jpeg_quality, shared.encode_threads);
            let format = header.format;
            let encoded =
                tokio::task::spawn_blocking(move || encode_frame(&frame, format, quality, threads))
                    .await;
            // The next request of this page may go to the renderer once this frame is encoded:
            // rendering it overlaps with sending this one.
            lock(&shared.queue).in_flight.remove(&client);
            shared.wake.notify_all();
            match encoded {
                Ok(Ok(encoded)) => {
                    if !encoded.strips.is_empty() {
                        header.strip_height = Some(encoded.strip_height);
                    }
                    header.strips = encoded.strips;
                    sink.send(Message::Binary(header.message(&encoded.bytes).into()))
                        .await
                }
                Ok(Err(e)) => {
                    let text = json!({"type": "error", "message": e.to_string()}).to_string();
                    sink.send(Message::Text(text.into())).await
                }
                Err(_) => Ok(()),
            }
        }
    }
}
