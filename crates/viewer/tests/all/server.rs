use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use burn::tensor::{Tensor, TensorData};
use ember_data::DecodedImage;
use ember_field::GaussianField;
use ember_kernels::CameraParams;
use ember_viewer::{
    DatasetCamera, EvalViews, Frame, FrameHeader, FrameRequest, FrameView, LiveAction,
    LiveRenderer, Mode, SceneInfo, Split, Status, Viewer, ViewerConfig, render_frame, serve_field,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

pub(crate) type B = ember_kernels::backend::Cpu;
pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Twenty coloured Gaussians around the origin.
pub(crate) fn field() -> GaussianField<B> {
    let device = Default::default();
    let n = 20;
    let means: Vec<f32> = (0..n)
        .flat_map(|i| {
            let a = i as f32 * 0.7;
            [
                0.6 * a.cos(),
                0.6 * a.sin(),
                0.2 * (i as f32 / n as f32 - 0.5),
            ]
        })
        .collect();
    let quats: Vec<f32> = (0..n).flat_map(|_| [1.0, 0.0, 0.0, 0.0]).collect();
    let scales = vec![-2.0f32; n * 3];
    let opacity = vec![2.0f32; n];
    let dc: Vec<f32> = (0..n)
        .flat_map(|i| [i as f32 / n as f32 - 0.3, 0.4, 0.3 - i as f32 / n as f32])
        .collect();
    let t2 = |v: Vec<f32>, c: usize| Tensor::<B, 2>::from_data(TensorData::new(v, [n, c]), &device);
    GaussianField::from_tensors(
        t2(means, 3),
        t2(quats, 4),
        t2(scales, 3),
        Tensor::from_data(TensorData::new(opacity, [n]), &device),
        Tensor::from_data(TensorData::new(dc, [n, 1, 3]), &device),
        Tensor::zeros([n, 0, 3], &device),
        None,
    )
    .unwrap()
}

/// A camera at (0, 0, -3) looking down +z at the origin.
pub(crate) fn camera(width: u32, height: u32) -> CameraParams {
    CameraParams {
        rotation: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        translation: [0.0, 0.0, 3.0],
        fx: width as f64,
        fy: width as f64,
        cx: width as f64 / 2.0,
        cy: height as f64 / 2.0,
        width,
        height,
    }
}

fn scene(mode: Mode) -> SceneInfo {
    let cameras = vec![
        DatasetCamera {
            name: "front".into(),
            split: Split::Train,
            camera: camera(64, 48),
        },
        DatasetCamera {
            name: "held".into(),
            split: Split::Test,
            camera: camera(32, 32),
        },
    ];
    SceneInfo::framed("test".into(), mode, 0, &[0.0; 3], cameras, Some([0.0; 3]))
}

pub(crate) fn start(mode: Mode) -> Viewer {
    let config = ViewerConfig {
        port: 0,
        ..ViewerConfig::default()
    };
    let photos: ember_viewer::PhotoSource = Box::new(|index| {
        Ok(Arc::new(DecodedImage {
            width: 8,
            height: 4,
            data: vec![(index * 40) as u8; 8 * 4 * 3],
            transparency: None,
            mask: None,
        }))
    });
    Viewer::start(&config, scene(mode), Some(photos)).unwrap()
}

/// A renderer thread serving `field()` until the returned flag is set.
fn serve(viewer: &Arc<Viewer>) -> (Arc<AtomicBool>, thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (v, s) = (viewer.clone(), stop.clone());
    let handle = thread::spawn(move || serve_field(&v, &field(), || s.load(Ordering::SeqCst)));
    (stop, handle)
}

/// A plain HTTP/1.1 GET: status code, content type, body.
pub(crate) fn get(address: SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let (status, head, body) = get_as(address, path, &address.to_string(), "");
    (status, header_of(&head, "content-type"), body)
}

/// A GET sent to `address` naming the server `host`, with `extra` header lines (each ending in
/// `\r\n`): status code, response head, body.
fn get_as(address: SocketAddr, path: &str, host: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, response[split + 4..].to_vec())
}

/// The value of header `name` (lower case) in a response head, or "".
fn header_of(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (key, value) = l.split_once(": ")?;
            key.eq_ignore_ascii_case(name).then(|| value.to_string())
        })
        .unwrap_or_default()
}

pub(crate) async fn connect(viewer: &Viewer) -> (Socket, Value) {
    let url = format!("ws://{}/ws", viewer.address());
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let hello = next_text(&mut socket).await;
    (socket, hello)
}

async fn next_message(socket: &mut Socket) -> Message {
    tokio::time::timeout(Duration::from_secs(20), socket.next())
        .await
        .expect("no message within 20 s")
        .expect("the socket closed")
        .unwrap()
}

/// The next text message, skipping frames.
pub(crate) async fn next_text(socket: &mut Socket) -> Value {
    loop {
        if let Message::Text(text) = next_message(socket).await {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

/// The next text message of `kind`, skipping everything else.
pub(crate) async fn next_of(socket: &mut Socket, kind: &str) -> Value {
    loop {
        let message = next_text(socket).await;
        if message["type"] == kind {
            return message;
        }
    }
}

/// The next frame, skipping text messages.
pub(crate) async fn next_frame(socket: &mut Socket) -> (FrameHeader, Vec<u8>) {
    loop {
        if let Message::Binary(bytes) = next_message(socket).await {
            let (header, image) = FrameHeader::parse(&bytes).unwrap();
            return (header, image.to_vec());
        }
    }
}

pub(crate) fn render_message(id: u64, camera: &CameraParams, format: &str) -> Message {
    Message::Text(
        json!({"type": "render", "id": id, "camera": camera, "background": [0.1, 0.2, 0.3],
               "format": format})
        .to_string()
        .into(),
    )
}

#[test]
fn routes_serve_the_page_and_refuse_everything_else() {
    let viewer = start(Mode::Scene);
    let address = viewer.address();
    let (status, mime, body) = get(address, "/");
    assert_eq!(status, 200);
    assert!(mime.starts_with("text/html"));
    let page = String::from_utf8(body).unwrap();
    assert!(page.contains("/app.js") && page.contains("/style.css"));
    // No asset comes from another host.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    // Every script of the page's folder is served as it is, and every module a script
    // imports (`from '/x.js'`) is one of them.
    let assets = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
    let mut scripts = Vec::new();
    for entry in std::fs::read_dir(&assets).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "js") {
            scripts.push(path);
        }
    }
    assert!(scripts.len() > 1, "{}", assets.display());
    for path in &scripts {
        let route = format!("/{}", path.file_name().unwrap().to_str().unwrap());
        let (status, mime, body) = get(address, &route);
        assert_eq!(status, 200, "{route}");
        assert!(mime.starts_with("text/javascript"), "{route}: {mime}");
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(String::from_utf8(body).unwrap(), text, "{route}");
        for import in text.split("from '").skip(1) {
            let module = import.split('\'').next().unwrap();
            assert_eq!(get(address, module).0, 200, "{route} imports {module}");
        }
    }
    assert!(get(address, "/style.css").1.starts_with("text/css"));
    let (status, mime, body) = get(address, "/api/info");
    assert_eq!((status, mime.as_str()), (200, "application/json"));
    let info: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(info["type"], "hello");
    assert_eq!(info["cameras"].as_array().unwrap().len(), 2);
    assert_eq!(info["cameras"][1]["split"], "test");
    let (status, mime, body) = get(address, "/photo/1");
    assert_eq!((status, mime.as_str()), (200, "image/jpeg"));
    let photo = image::load_from_memory(&body).unwrap().to_rgb8();
    assert_eq!(photo.dimensions(), (8, 4));
    assert!(
        photo
            .pixels()
            .all(|p| p.0.iter().all(|&c| (c as i32 - 40).abs() <= 2))
    );
    // Its thumbnail: no larger than the photo, at most 192 pixels a side.
    let (status, mime, body) = get(address, "/thumb/1");
    assert_eq!((status, mime.as_str()), (200, "image/jpeg"));
    let thumb = image::load_from_memory(&body).unwrap();
    assert_eq!((thumb.width(), thumb.height()), (8, 4));
    assert_eq!(info["front"].as_array().map(Vec::len), Some(3), "{info}");
    assert_eq!(info["bounds"]["min"], json!([0.0, 0.0, 0.0]), "{info}");
    for path in [
        "/photo/2",
        "/thumb/2",
        "/photo/../../etc/passwd",
        "/eval/0/0",
        "/Cargo.toml",
        "/assets/app.js",
        "/src/lib.rs",
    ] {
        assert_eq!(get(address, path).0, 404, "{path}");
    }
    // A photo is named by its index only.
    for path in ["/photo/abc", "/photo/%2e%2e%2fCargo.toml", "/photo/-1"] {
        assert_eq!(get(address, path).0, 400, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_request_gets_the_renderers_frame() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve(&viewer);
    let (mut socket, hello) = connect(&viewer).await;
    assert_eq!(hello["mode"], "scene");
    let camera = camera(40, 30);
    socket
        .send(render_message(7, &camera, "png"))
        .await
        .unwrap();
    let (header, bytes) = next_frame(&mut socket).await;
    assert_eq!((header.id, header.width, header.height), (7, 40, 30));
    let got = header.decode(&bytes).unwrap();
    let request = FrameRequest {
        id: 7,
        camera,
        background: [0.1, 0.2, 0.3],
        sh_degree: None,
        centres: false,
        format: ember_viewer::FrameFormat::Png,
        pick: None,
        lod_threshold: None,
        antialiased: false,
        view: FrameView::Rgb,
    };
    let want = render_frame(&field(), &request).unwrap();
    assert_eq!(got, want.rgb, "the PNG frame is the render, bit for bit");
    // Not blank: the Gaussians cover part of the frame, the background the rest.
    assert!(want.rgb.chunks_exact(3).any(|p| p != [26, 51, 77]));
    assert!(want.rgb.chunks_exact(3).any(|p| p == [26, 51, 77]));
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

/// A page may ask for the depth or the coverage instead of the colour: grey frames, black
/// where nothing is drawn, the coverage the render's own, the depth nearer-is-brighter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depth_and_coverage_views_are_served_as_grey_frames() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve(&viewer);
    let (mut socket, _) = connect(&viewer).await;
    let camera = camera(40, 30);
    let mut frames = Vec::new();
    for (id, view) in [(1, "alpha"), (2, "depth")] {
        socket
            .send(Message::Text(
                json!({"type": "render", "id": id, "camera": camera, "format": "png",
                       "background": [0.1, 0.2, 0.3], "view": view})
                .to_string()
                .into(),
            ))
            .await
            .unwrap();
        let (header, bytes) = next_frame(&mut socket).await;
        assert_eq!(header.id, id);
        frames.push(header.decode(&bytes).unwrap());
    }
    let out = ember_field::render(
        &field(),
        &camera,
        &ember_field::RenderOptions::default().with_background([0.1, 0.2, 0.3]),
    )
    .unwrap();
    let alpha = out.alpha.into_data().into_vec::<f32>().unwrap();
    let depth = out.depth.into_data().into_vec::<f32>().unwrap();
    for (frame, shades) in [
        (&frames[0], alpha.clone()),
        (
            &frames[1],
            ember_viewer::frame::depth_shades(&depth, &alpha),
        ),
    ] {
        for (pixel, shade) in frame.chunks_exact(3).zip(&shades) {
            let want = (shade.clamp(0.0, 1.0) * 255.0 + 0.5) as u8;
            assert_eq!(pixel, [want; 3], "a grey of the render's own value");
        }
    }
    // Background stays black in both; the nearest covered pixel is the brightest depth.
    let uncovered = alpha
        .iter()
        .position(|&a| a < 1e-3)
        .expect("some background");
    assert_eq!(frames[0][3 * uncovered], 0);
    assert_eq!(frames[1][3 * uncovered], 0);
    let nearest = (0..depth.len())
        .filter(|&i| alpha[i] >= 0.5)
        .min_by(|&a, &b| depth[a].total_cmp(&depth[b]))
        .expect("a covered pixel");
    assert_eq!(frames[1][3 * nearest], 255);
    // An unknown view is refused with the connection kept.
    socket
        .send(Message::Text(
            json!({"type": "render", "id": 3, "camera": camera, "view": "normals"})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    assert!(
        next_of(&mut socket, "error").await["message"]
            .as_str()
            .unwrap()
            .contains("normals")
    );
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scene_trained_antialiased_is_drawn_with_the_filter_unless_asked_otherwise() {
    let config = ViewerConfig {
        port: 0,
        ..ViewerConfig::default()
    };
    let viewer =
        Arc::new(Viewer::start(&config, scene(Mode::Scene).with_antialiased(true), None).unwrap());
    let (stop, handle) = serve(&viewer);
    let (mut socket, hello) = connect(&viewer).await;
    assert_eq!(hello["antialiased"], true);
    let camera = camera(40, 30);
    let request = |antialiased: bool| FrameRequest {
        id: 1,
        camera,
        background: [0.1, 0.2, 0.3],
        sh_degree: None,
        centres: false,
        format: ember_viewer::FrameFormat::Png,
        pick: None,
        lod_threshold: None,
        antialiased,
        view: FrameView::Rgb,
    };
    let filtered = render_frame(&field(), &request(true)).unwrap().rgb;
    let plain = render_frame(&field(), &request(false)).unwrap().rgb;
    assert_ne!(filtered, plain, "the filter changes the frame");
    socket
        .send(render_message(1, &camera, "png"))
        .await
        .unwrap();
    let (header, bytes) = next_frame(&mut socket).await;
    assert_eq!(
        header.decode(&bytes).unwrap(),
        filtered,
        "the scene's filter by default"
    );
    let off = json!({"type": "render", "id": 2, "camera": camera,
                     "background": [0.1, 0.2, 0.3], "format": "png", "antialiased": false});
    socket
        .send(Message::Text(off.to_string().into()))
        .await
        .unwrap();
    let (header, bytes) = next_frame(&mut socket).await;
    assert_eq!(
        header.decode(&bytes).unwrap(),
        plain,
        "off when the page asks"
    );
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pick_finds_the_surface_under_the_pixel() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve(&viewer);
    let (mut socket, _) = connect(&viewer).await;
    let camera = camera(40, 30);
    // Gaussian 0 sits at (0.6, 0, -0.1): pixel (40 * 0.6 / 3.1 + 20, 15) = (27.7, 15). The
    // frame's corner shows the background: nothing to pick there.
    for (id, pixel) in [(1, [27.7, 15.2]), (2, [0.5, 0.5])] {
        let message = json!({"type": "render", "id": id, "camera": camera, "pick": pixel});
        socket
            .send(Message::Text(message.to_string().into()))
            .await
            .unwrap();
        let (header, _) = next_frame(&mut socket).await;
        let pick = header.pick.expect("the header answers the pick");
        assert_eq!(pick.pixel, pixel);
        match (id, pick.point) {
            (1, Some(point)) => {
                let error: f64 = [0.6, 0.0, -0.1]
                    .iter()
                    .zip(point)
                    .map(|(want, got)| (want - got).powi(2))
                    .sum();
                assert!(error.sqrt() < 0.2, "picked {point:?}");
            }
            (2, None) => {}
            _ => panic!("pick {id}: {:?}", pick.point),
        }
    }
    // A frame without a pick has none in its header.
    socket
        .send(render_message(3, &camera, "jpeg"))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut socket).await.0.pick, None);
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_get_an_error_and_the_connection_stays_up() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve(&viewer);
    let (mut socket, _) = connect(&viewer).await;
    let mut camera = camera(32, 32);
    let good = camera;
    let mut too_big = camera;
    too_big.width = 100_000;
    let mut with_position = json!(camera);
    with_position["position"] = json!([0.0, 0.0, 0.0]);
    camera.rotation[0] = 2.0;
    let bad = [
        "not json".to_string(),
        json!({"type": "fly"}).to_string(),
        json!({"type": "render", "id": 1}).to_string(),
        json!({"type": "render", "id": 1, "camera": camera}).to_string(),
        json!({"type": "render", "id": 1, "camera": too_big}).to_string(),
        json!({"type": "render", "id": 1, "camera": with_position}).to_string(),
        json!({"type": "render", "id": 1, "camera": good, "pick": [32.0, 1.0]}).to_string(),
        json!({"type": "pause"}).to_string(),
        json!({"type": "checkpoint"}).to_string(),
    ];
    for text in &bad {
        socket
            .send(Message::Text(text.clone().into()))
            .await
            .unwrap();
        let reply = next_text(&mut socket).await;
        assert_eq!(reply["type"], "error", "{text}: {reply}");
        assert!(!reply["message"].as_str().unwrap().is_empty());
    }
    socket
        .send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(next_text(&mut socket).await["type"], "error");
    // 30 MB of JSON in one frame: an error, not a dropped connection.
    let huge = format!(r#"{{"type": "render", "id": "{}"}}"#, "x".repeat(30 << 20));
    socket.send(Message::Text(huge.into())).await.unwrap();
    let reply = next_text(&mut socket).await;
    assert_eq!(reply["type"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("bytes refused"),
        "{reply}"
    );
    // Still served.
    socket
        .send(render_message(9, &camera_params_ok(), "jpeg"))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut socket).await.0.id, 9);
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

fn camera_params_ok() -> CameraParams {
    camera(32, 24)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_pages_are_served_and_one_leaving_disturbs_nobody() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve(&viewer);
    let mut sockets = Vec::new();
    for _ in 0..4 {
        sockets.push(connect(&viewer).await.0);
    }
    assert_eq!(viewer.connections(), 4);
    for (i, socket) in sockets.iter_mut().enumerate() {
        socket
            .send(render_message(
                100 + i as u64,
                &camera(32 + 8 * i as u32, 24),
                "jpeg",
            ))
            .await
            .unwrap();
    }
    // One page leaves with its request unanswered.
    let mut gone = sockets.remove(0);
    gone.close(None).await.unwrap();
    for (i, socket) in sockets.iter_mut().enumerate() {
        let (header, bytes) = next_frame(socket).await;
        assert_eq!(header.id, 101 + i as u64);
        assert_eq!(header.width, 40 + 8 * i as u32);
        let decoded = header.decode(&bytes).unwrap();
        assert_eq!(decoded.len(), 3 * (header.width * header.height) as usize);
    }
    for _ in 0..100 {
        if viewer.connections() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(viewer.connections(), 3);
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_latest_request_of_a_page_is_rendered() {
    let viewer = Arc::new(start(Mode::Scene));
    let (mut socket, _) = connect(&viewer).await;
    // No renderer yet: the requests wait, each replacing the one before.
    for id in 1..=20 {
        socket
            .send(render_message(id, &camera(32, 24), "jpeg"))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (stop, handle) = serve(&viewer);
    assert_eq!(next_frame(&mut socket).await.0.id, 20);
    // Nothing else comes.
    let more = tokio::time::timeout(Duration::from_millis(500), socket.next()).await;
    assert!(more.is_err(), "a second frame arrived: {more:?}");
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_mode_pauses_checkpoints_and_publishes_progress() {
    let viewer = Arc::new(start(Mode::Training));
    let (mut socket, hello) = connect(&viewer).await;
    assert_eq!(hello["mode"], "training");
    let status = |step| Status {
        step,
        total_steps: 100,
        gaussians: 20,
        loss: Some(0.5 / step as f32),
        psnr: Some(20.0),
        paused: false,
        steps_per_second: 3.0,
    };
    viewer.set_status(status(1));
    let got = next_of(&mut socket, "status").await;
    assert_eq!(
        (got["step"].as_u64(), got["gaussians"].as_u64()),
        (Some(1), Some(20))
    );
    let mut frame = Frame::from_rgb(16, 8, vec![200; 16 * 8 * 3]);
    frame.step = Some(5);
    viewer
        .publish_eval(EvalViews {
            step: 5,
            psnr: 21.5,
            ssim: 0.8,
            lpips: Some(0.25),
            views: vec![("r_0".into(), frame)],
        })
        .unwrap();
    let eval = next_of(&mut socket, "eval").await;
    assert_eq!(eval["views"][0]["url"], "/eval/5/0");
    assert_eq!(eval["lpips"], json!(0.25));
    let (code, mime, _) = get(viewer.address(), "/eval/5/0");
    assert_eq!((code, mime.as_str()), (200, "image/jpeg"));

    socket
        .send(Message::Text(json!({"type": "pause"}).to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        next_of(&mut socket, "message").await["text"],
        "training paused"
    );
    assert!(viewer.paused());
    // A page that connects now sees the history and the evaluation.
    let (_, later) = connect(&viewer).await;
    assert_eq!(later["history"].as_array().unwrap().len(), 1);
    assert_eq!(later["evals"][0]["step"], 5);

    // Paused, the live renderer holds the run and still renders; a checkpoint request and
    // then resume let it go.
    let (v, field) = (viewer.clone(), field());
    let live = thread::spawn(move || {
        let mut renderer = LiveRenderer::new(0.1);
        let first = renderer.between_steps(&v, &field, 5, &|| false);
        let second = renderer.between_steps(&v, &field, 5, &|| false);
        (first, second)
    });
    socket
        .send(render_message(3, &camera(32, 24), "jpeg"))
        .await
        .unwrap();
    let (header, _) = next_frame(&mut socket).await;
    assert_eq!((header.id, header.step), (3, Some(5)));
    socket
        .send(Message::Text(
            json!({"type": "checkpoint"}).to_string().into(),
        ))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    socket
        .send(Message::Text(json!({"type": "resume"}).to_string().into()))
        .await
        .unwrap();
    let (first, second) = live.join().unwrap();
    assert_eq!(
        (first, second),
        (LiveAction::Checkpoint, LiveAction::Continue)
    );
    assert!(!viewer.paused());
}

/// The end of a run is told to every page, which is then let go: not left to reconnect to a
/// server that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_run_is_told_and_the_pages_let_go() {
    let viewer = Arc::new(start(Mode::Training));
    let (mut socket, _) = connect(&viewer).await;
    let v = viewer.clone();
    let ending = tokio::task::spawn_blocking(move || {
        v.end(
            "the run ended; trainer view runs/x",
            Duration::from_secs(10),
        )
    });
    let ended = next_of(&mut socket, "ended").await;
    assert_eq!(ended["text"], "the run ended; trainer view runs/x");
    match next_message(&mut socket).await {
        Message::Close(Some(frame)) => assert_eq!(u16::from(frame.code), 1000),
        other => panic!("expected a close frame, got {other:?}"),
    }
    ending.await.unwrap();
    assert_eq!(viewer.connections(), 0);
}

/// A finished run goes on being shown: the pages get the last status (even one the rate limit
/// held back) and the word, a page that connects later finds it in its hello, frames still
/// come, and nothing can pause or checkpoint a run that is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_stays_on_show_until_the_end() {
    let viewer = Arc::new(start(Mode::Training));
    let (mut socket, hello) = connect(&viewer).await;
    assert_eq!(hello["finished"], Value::Null);
    let status = |step| Status {
        step,
        total_steps: 10,
        gaussians: 20,
        loss: Some(0.1),
        psnr: None,
        paused: false,
        steps_per_second: 3.0,
    };
    viewer.set_status(status(9));
    assert_eq!(next_of(&mut socket, "status").await["step"], 9);
    // Within the rate limit: held back, until the run finishes.
    viewer.set_status(status(10));
    viewer.finish("Training ended at step 10");
    assert_eq!(next_of(&mut socket, "status").await["step"], 10);
    assert_eq!(
        next_of(&mut socket, "finished").await["text"],
        "Training ended at step 10"
    );
    let (mut later, hello) = connect(&viewer).await;
    assert_eq!(hello["finished"], "Training ended at step 10");
    assert_eq!(hello["status"]["step"], 10);
    for message in ["pause", "resume", "checkpoint"] {
        later
            .send(Message::Text(json!({"type": message}).to_string().into()))
            .await
            .unwrap();
        let error = next_of(&mut later, "error").await;
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("the run has ended"),
            "{error}"
        );
    }
    assert!(!viewer.paused() && !viewer.take_checkpoint_request());
    let stop = Arc::new(AtomicBool::new(false));
    let (v, s) = (viewer.clone(), stop.clone());
    let server = thread::spawn(move || {
        ember_viewer::serve_scene(&v, &field(), None, Some(10), || s.load(Ordering::SeqCst))
    });
    later
        .send(render_message(4, &camera(32, 24), "jpeg"))
        .await
        .unwrap();
    let (header, _) = next_frame(&mut later).await;
    assert_eq!((header.id, header.step), (4, Some(10)));
    stop.store(true, Ordering::SeqCst);
    server.join().unwrap();
    let v = viewer.clone();
    let ending = tokio::task::spawn_blocking(move || v.end("stopped", Duration::from_secs(10)));
    assert_eq!(next_of(&mut socket, "ended").await["text"], "stopped");
    ending.await.unwrap();
}

/// A pause ends with the last page that could lift it: the run resumes, and the caller is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_does_not_outlive_the_last_page() {
    let viewer = Arc::new(start(Mode::Training));
    let (mut first, _) = connect(&viewer).await;
    let (mut second, _) = connect(&viewer).await;
    first
        .send(Message::Text(json!({"type": "pause"}).to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        next_of(&mut first, "message").await["text"],
        "training paused"
    );
    first.close(None).await.unwrap();
    // Another page is still there to resume it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(viewer.paused());
    assert!(!viewer.take_unattended_resume());
    second.close(None).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while viewer.paused() {
        assert!(
            std::time::Instant::now() < deadline,
            "still paused without a page"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(viewer.take_unattended_resume());
    assert!(!viewer.take_unattended_resume(), "told once");
}

/// A web page elsewhere must not drive or read the viewer: foreign `Host` names (DNS
/// rebinding) and foreign `Origin`s (cross-site WebSockets) are refused; a client without an
/// `Origin` (not a browser page) and the page itself pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_sites_can_neither_connect_nor_read() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let viewer = start(Mode::Training);
    let address = viewer.address();
    for path in ["/", "/api/info", "/photo/0", "/ws", "/nothing"] {
        let (status, _, body) = get_as(address, path, "attacker.test", "");
        assert_eq!(status, 403, "{path}");
        assert!(
            String::from_utf8_lossy(&body).contains("answers to"),
            "{path}"
        );
    }
    let port = address.port();
    assert_eq!(
        get_as(address, "/api/info", &format!("localhost:{port}"), "").0,
        200
    );
    let url = format!("ws://{address}/ws");
    let with_origin = |origin: &str| {
        let mut request = url.as_str().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Origin", origin.parse().unwrap());
        request
    };
    match tokio_tungstenite::connect_async(with_origin("http://evil.example")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403)
        }
        other => panic!("a foreign origin was not refused: {:?}", other.map(|_| ())),
    }
    let own = with_origin(&format!("http://{address}"));
    let (mut socket, _) = tokio_tungstenite::connect_async(own).await.unwrap();
    assert_eq!(next_text(&mut socket).await["type"], "hello");
    // The refused page could not pause training.
    assert!(!viewer.paused());
}

/// Off loopback the viewer asks for the token of its URL, then for the cookie it sets.
#[test]
fn off_loopback_the_printed_url_is_the_only_way_in() {
    let config = ViewerConfig {
        host: "0.0.0.0".parse().unwrap(),
        port: 0,
        ..ViewerConfig::default()
    };
    let viewer = Viewer::start(&config, scene(Mode::Scene), None).unwrap();
    let url = viewer.url();
    let token = url
        .split_once("?token=")
        .expect("the URL carries the token")
        .1;
    assert_eq!(token.len(), 32);
    let address = SocketAddr::from(([127, 0, 0, 1], viewer.address().port()));
    let host = format!("some-name.local:{}", address.port());
    let (status, _, body) = get_as(address, "/api/info", &host, "");
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("token"));
    let (status, head, _) = get_as(address, &format!("/?token={token}"), &host, "");
    assert_eq!(status, 200);
    let cookie = header_of(&head, "set-cookie");
    assert!(
        cookie.starts_with(&format!("ember_token={token}")),
        "{cookie}"
    );
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let carried = format!("Cookie: ember_token={token}\r\n");
    assert_eq!(get_as(address, "/api/info", &host, &carried).0, 200);
    let wrong = "Cookie: ember_token=00000000000000000000000000000000\r\n";
    assert_eq!(get_as(address, "/api/info", &host, wrong).0, 403);
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let first = start(Mode::Scene);
    let config = ViewerConfig {
        port: first.address().port(),
        ..ViewerConfig::default()
    };
    let error = Viewer::start(&config, scene(Mode::Scene), None).unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&first.address().to_string()), "{text}");
}
