//! `trainer view` and `trainer --view`: what each SCENE argument serves and how bad ones are
//! refused, over plain HTTP; and the page in a real browser, headless Chromium driven over
//! WebDriver (chromedriver), on a splat file with a dataset and on a live training run. The
//! browser tests are skipped with a message where no browser is installed, unless
//! `EMBER_REQUIRE_BROWSER=1` (CI), where that fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use ember_data::{Dataset, DatasetOptions, read_splats};
use ember_field::splats::{field_from_splats, write_field};
use ember_field::{GaussianField, RenderOptions, render};
use fantoccini::actions::{
    InputSource, KeyAction, KeyActions, MOUSE_BUTTON_LEFT, MouseActions, PointerAction,
};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::common::scratch;

type B = NdArray<f32>;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser is there; fails under `EMBER_REQUIRE_BROWSER=1` when it is not.
fn browser_installed() -> bool {
    if Path::new(CHROMIUM).is_file() && Path::new(CHROMEDRIVER).is_file() {
        return true;
    }
    if std::env::var("EMBER_REQUIRE_BROWSER").as_deref() == Ok("1") {
        panic!("EMBER_REQUIRE_BROWSER=1 but {CHROMIUM} or {CHROMEDRIVER} is missing");
    }
    println!(
        "skipped: no {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)"
    );
    false
}

/// A child process killed when dropped (a failing assertion leaves no server behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `trainer args...` and returns it with the URL it prints (`viewer: open URL`).
fn trainer_with_viewer(args: &[&str]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainer"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("trainer starts");
    let stdout = child.stdout.take().expect("stdout");
    let running = Running(child);
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("trainer ended before printing the viewer's URL")
            .expect("stdout");
        if let Some(rest) = line.split("viewer: open ").nth(1) {
            break rest.split_whitespace().next().expect("a URL").to_string();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (running, url)
}

/// Starts chromedriver on a free port and a headless Chromium session with console logging.
async fn browser() -> (Running, Client, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let driver = Running(
        Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts"),
    );
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "chromedriver does not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let capabilities = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1000,700"],
        },
        "goog:loggingPrefs": {"browser": "ALL"},
    });
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = ClientBuilder::new(connector)
        .capabilities(capabilities.as_object().expect("an object").clone())
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session");
    (driver, client, port)
}

/// The browser console's entries since the last call, through chromedriver's log endpoint.
async fn console(client: &Client, port: u16) -> Vec<Value> {
    let session = client.session_id().await.expect("session").expect("an id");
    let body = json!({"type": "browser"}).to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("chromedriver");
    write!(
        stream,
        "POST /session/{session}/se/log HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request");
    // chromedriver keeps the connection open: read the headers, then Content-Length bytes.
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().expect("a length");
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("the body");
    let value: Value = serde_json::from_slice(&body).expect("JSON");
    value["value"].as_array().cloned().unwrap_or_default()
}

async fn eval(client: &Client, script: &str) -> Value {
    client.execute(script, Vec::new()).await.expect(script)
}

/// Polls `script` until it returns `true` (20 s at most).
async fn wait_for(client: &Client, script: &str) {
    wait_for_within(client, script, Duration::from_secs(20)).await;
}

/// Polls `script` until it returns `true`, `limit` at most.
async fn wait_for_within(client: &Client, script: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if eval(client, script).await == Value::Bool(true) {
            return;
        }
        assert!(started.elapsed() < limit, "timed out waiting for: {script}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The page's last frame at its own size, decoded.
async fn last_frame(client: &Client) -> image::RgbImage {
    let url = eval(client, "return window.ember.lastFramePng()").await;
    let url = url.as_str().expect("a data URL");
    let png = decode_base64(url.split(',').nth(1).expect("base64 data"));
    image::load_from_memory(&png).expect("a PNG").to_rgb8()
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    digits
        .chunks(4)
        .flat_map(|c| {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            bytes.into_iter().take(c.len() - 1)
        })
        .collect()
}

/// A scene the test knows: 60 coloured Gaussians on a ring around the origin, and a
/// nerfstudio dataset of three 64x48 cameras around it (solid grey photos).
fn write_scene(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir.join("data/images")).expect("dataset folder");
    let device = Default::default();
    let n = 60;
    let means: Vec<f32> = (0..n)
        .flat_map(|i| {
            let a = i as f32 * std::f32::consts::TAU / n as f32;
            [0.8 * a.cos(), 0.8 * a.sin(), 0.3 * (3.0 * a).sin()]
        })
        .collect();
    let dc: Vec<f32> = (0..n)
        .flat_map(|i| {
            let a = i as f32 * std::f32::consts::TAU / n as f32;
            [a.cos(), a.sin(), -a.cos()].map(|c| 0.5 * c)
        })
        .collect();
    let rows =
        |v: Vec<f32>, c: usize| Tensor::<B, 2>::from_data(TensorData::new(v, [n, c]), &device);
    let field = GaussianField::from_tensors(
        rows(means, 3),
        rows((0..n).flat_map(|_| [1.0, 0.0, 0.0, 0.0]).collect(), 4),
        rows(vec![-2.3; n * 3], 3),
        Tensor::from_data(TensorData::new(vec![3.0f32; n], [n]), &device),
        Tensor::from_data(TensorData::new(dc, [n, 1, 3]), &device),
        Tensor::zeros([n, 0, 3], &device),
        None,
    )
    .expect("a field");
    let ply = dir.join("scene.ply");
    write_field(&field, &ply).expect("PLY written");
    // OpenGL camera-to-world matrices (x right, y up, z back), 4 units from the origin.
    let poses = [
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 4.0],
        ],
        [
            [0.0, 0.0, 1.0, 4.0],
            [0.0, 1.0, 0.0, 0.0],
            [-1.0, 0.0, 0.0, 0.0],
        ],
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 4.0],
            [0.0, -1.0, 0.0, 0.0],
        ],
    ];
    let mut frames = Vec::new();
    for (i, pose) in poses.iter().enumerate() {
        let photo = image::RgbImage::from_pixel(64, 48, image::Rgb([90, 90, 90]));
        photo
            .save(dir.join(format!("data/images/{i}.png")))
            .expect("photo");
        let mut matrix: Vec<Vec<f64>> = pose.iter().map(|r| r.to_vec()).collect();
        matrix.push(vec![0.0, 0.0, 0.0, 1.0]);
        frames.push(json!({"file_path": format!("images/{i}.png"), "transform_matrix": matrix}));
    }
    let transforms = json!({"fl_x": 60.0, "fl_y": 60.0, "cx": 32.0, "cy": 24.0, "w": 64, "h": 48,
                            "frames": frames});
    std::fs::write(dir.join("data/transforms.json"), transforms.to_string()).expect("transforms");
    (ply, dir.join("data"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_in_chromium_renders_orbits_and_jumps_to_dataset_cameras() {
    if !browser_installed() {
        return;
    }
    let dir = scratch("viewer-browser");
    let (ply, data) = write_scene(&dir);
    let (_server, url) = trainer_with_viewer(&[
        "view",
        ply.to_str().expect("path"),
        "--data",
        data.to_str().expect("path"),
        "--port",
        "0",
    ]);
    let (_driver, client, port) = browser().await;
    client.goto(&url).await.expect("the page loads");
    wait_for(
        &client,
        "return !!window.ember && window.ember.framesReceived > 0",
    )
    .await;

    // The frame on the canvas is not blank: its pixels vary.
    let spread = eval(
        &client,
        "const c = document.getElementById('view');
         const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
         let lo = 255, hi = 0;
         for (let i = 0; i < d.length; i += 4) { lo = Math.min(lo, d[i + 1]); hi = Math.max(hi, d[i + 1]); }
         return hi - lo;",
    )
    .await;
    assert!(
        spread.as_f64().expect("a number") > 50.0,
        "a blank canvas: {spread}"
    );

    // Dragging orbits the camera, and a new, different frame arrives.
    let before = eval(&client, "return window.ember.cameraState().position").await;
    let frames = eval(&client, "return window.ember.framesReceived").await;
    let first = last_frame(&client).await;
    let canvas = client
        .find(fantoccini::Locator::Id("view"))
        .await
        .expect("the canvas");
    let drag = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: canvas,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveBy {
            duration: Some(Duration::from_millis(300)),
            x: 150.0,
            y: 40.0,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    client.perform_actions(drag).await.expect("a drag");
    let after = eval(&client, "return window.ember.cameraState().position").await;
    assert_ne!(before, after, "the drag did not move the camera");
    wait_for(
        &client,
        &format!("return window.ember.framesReceived > {frames}"),
    )
    .await;
    // The full-size frame after the move (the last one requested).
    let last_id = eval(&client, "return window.ember.requestFrame()").await;
    wait_for(
        &client,
        &format!("return window.ember.lastFrame.id >= {last_id}"),
    )
    .await;
    assert_ne!(first, last_frame(&client).await, "the frame did not change");

    // Jumping to dataset camera 1 shows what `render` draws through that camera.
    let id = eval(&client, "return window.ember.jumpToCamera(1)").await;
    wait_for(
        &client,
        &format!("return window.ember.lastFrame.id >= {id}"),
    )
    .await;
    let got = last_frame(&client).await;
    let splats = read_splats(&ply).expect("the PLY");
    let field = field_from_splats::<B>(&splats, &Default::default()).expect("a field");
    let dataset = Dataset::load(&data, &DatasetOptions::default()).expect("the dataset");
    let mut camera = dataset.all_views().nth(1).expect("camera 1").camera();
    let scale = f64::from(got.width()) / f64::from(camera.width);
    (camera.fx, camera.fy, camera.cx, camera.cy) = (
        camera.fx * scale,
        camera.fy * scale,
        camera.cx * scale,
        camera.cy * scale,
    );
    (camera.width, camera.height) = got.dimensions();
    let want = render(&field, &camera, &RenderOptions::default()).expect("a render");
    let want: Vec<f32> = want.rgb.into_data().into_vec().expect("values");
    let mse = got
        .as_raw()
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (f32::from(g) / 255.0 - w.clamp(0.0, 1.0)).powi(2))
        .sum::<f32>()
        / want.len() as f32;
    let psnr = -10.0 * mse.log10();
    assert!(
        psnr > 30.0,
        "the jump's frame is {psnr:.1} dB from render() of camera 1"
    );
    let state = eval(&client, "return window.ember.cameraState().datasetCamera").await;
    assert_eq!(state, json!(1));

    // Choosing a camera from the list leaves the keys to the view: R resets it at once.
    let list = client
        .find(fantoccini::Locator::Id("camera-select"))
        .await
        .expect("the camera list");
    list.select_by_value("2").await.expect("camera 2 chosen");
    wait_for(
        &client,
        "return window.ember.cameraState().datasetCamera === 2",
    )
    .await;
    let press_r = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: 'r' })
        .then(KeyAction::Up { value: 'r' });
    client.perform_actions(press_r).await.expect("R pressed");
    let home = "window.ember.hello.cameras.find((c) => c.split === 'train').index";
    wait_for(
        &client,
        &format!("return window.ember.cameraState().datasetCamera === {home}"),
    )
    .await;

    let problems: Vec<Value> = console(&client, port)
        .await
        .into_iter()
        .filter(|entry| entry["level"] != "INFO" && entry["level"] != "DEBUG")
        .collect();
    assert!(problems.is_empty(), "console: {problems:?}");
    client.close().await.expect("session closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_page_shows_the_step_advancing() {
    if !browser_installed() {
        return;
    }
    let out = scratch("viewer-live");
    let (run, url) = trainer_with_viewer(&[
        "--steps",
        "1000000",
        "--set",
        "data.procedural.resolution=32",
        "--set",
        "eval.every=0",
        "--view",
        "--port",
        "0",
        "--out",
        out.to_str().expect("path"),
    ]);
    let (_driver, client, port) = browser().await;
    client.goto(&url).await.expect("the page loads");
    wait_for(
        &client,
        "return !!window.ember && !!window.ember.lastStatus",
    )
    .await;
    wait_for(&client, "return window.ember.framesReceived > 0").await;
    let step = eval(&client, "return window.ember.lastStatus.step").await;
    wait_for(
        &client,
        &format!("return window.ember.lastStatus.step > {step} + 5"),
    )
    .await;
    // Without any input the picture follows the training: a later frame, of a later step,
    // and different pixels. The live renderer keeps to its share of the training time, so on
    // a loaded machine (the wgpu tests beside this one) a frame can take many seconds to come.
    let first_step = eval(&client, "return window.ember.lastFrame.step").await;
    let first = last_frame(&client).await;
    wait_for_within(
        &client,
        &format!("return window.ember.lastFrame.step > {first_step} + 5"),
        Duration::from_secs(120),
    )
    .await;
    assert_ne!(first, last_frame(&client).await, "the live picture froze");
    // The PSNR readout keeps the last measured value between the steps that measure it.
    wait_for(
        &client,
        "return /[0-9]/.test(document.getElementById('train-psnr').textContent)",
    )
    .await;
    for _ in 0..10 {
        let psnr = eval(
            &client,
            "return document.getElementById('train-psnr').textContent",
        )
        .await;
        assert!(
            psnr.as_str().is_some_and(|s| s.ends_with(" dB")),
            "the PSNR readout went blank: {psnr}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shown = eval(
        &client,
        "return document.getElementById('train-step').textContent",
    )
    .await;
    assert!(
        shown
            .as_str()
            .is_some_and(|s| s.chars().any(|c| c.is_ascii_digit())),
        "the live panel shows no step: {shown}"
    );
    // Ctrl-C ends the run: the page says so and how to keep viewing, and stops reconnecting.
    let pid = run.0.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status();
    assert!(
        signalled.is_ok_and(|s| s.success()),
        "SIGINT to the trainer"
    );
    wait_for_within(
        &client,
        "return window.ember.ended !== null \
         && document.getElementById('banner').textContent.includes('trainer view') \
         && document.getElementById('pause').disabled",
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let banner = eval(
        &client,
        "const b = document.getElementById('banner'); return [b.hidden, b.textContent]",
    )
    .await;
    assert_eq!(banner[0], json!(false), "{banner}");
    assert!(
        banner[1]
            .as_str()
            .is_some_and(|t| !t.contains("reconnecting")),
        "the page went back to reconnecting: {banner}"
    );
    let problems: Vec<Value> = console(&client, port)
        .await
        .into_iter()
        .filter(|entry| entry["level"] != "INFO" && entry["level"] != "DEBUG")
        .collect();
    assert!(problems.is_empty(), "console: {problems:?}");
    client.close().await.expect("session closed");
}

/// A plain HTTP/1.1 GET against the viewer: status and body.
fn http_get(url: &str, path: &str) -> (u16, Vec<u8>) {
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut stream = TcpStream::connect(&host).expect("the viewer listens");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("response");
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers");
    let status = String::from_utf8_lossy(&response[..split])
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, response[split + 4..].to_vec())
}

#[test]
fn view_serves_a_run_folder_and_a_checkpoint_with_the_runs_field() {
    let dir = scratch("viewer-run");
    let run = dir.join("run");
    let out = crate::common::trainer(&[
        "--steps",
        "12",
        "--set",
        "data.procedural.resolution=16",
        "--set",
        "eval.every=0",
        "--out",
        run.to_str().expect("path"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let splats = read_splats(&run.join("splats.ply")).expect("the run's PLY");
    for scene in [run.clone(), run.join("checkpoint.safetensors")] {
        let (_server, url) =
            trainer_with_viewer(&["view", scene.to_str().expect("path"), "--port", "0"]);
        let (status, body) = http_get(&url, "/api/info");
        assert_eq!(status, 200);
        let info: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(
            info["gaussians"],
            json!(splats.len()),
            "{}",
            scene.display()
        );
        assert_eq!(info["mode"], "scene");
        // The procedural scene has no dataset on disk: no cameras, no photos.
        assert_eq!(info["cameras"], json!([]));
        assert_eq!(http_get(&url, "/photo/0").0, 404);
        assert_eq!(http_get(&url, "/").0, 200);
    }
}

#[test]
fn view_refuses_what_is_not_a_scene_with_a_clear_error() {
    let dir = scratch("viewer-bad");
    std::fs::create_dir_all(dir.join("empty")).expect("folder");
    std::fs::write(dir.join("noise.ply"), b"ply\nnot really\n").expect("file");
    std::fs::write(
        dir.join("noise.safetensors"),
        b"\x08\x00\x00\x00\x00\x00\x00\x00{}",
    )
    .expect("file");
    let cases = [
        (dir.join("missing.ply"), "missing.ply"),
        (
            dir.join("empty"),
            "without checkpoint.safetensors or splats.ply",
        ),
        (dir.join("noise.ply"), "noise.ply"),
        (dir.join("noise.safetensors"), "noise.safetensors"),
    ];
    for (scene, expected) in cases {
        let out = crate::common::trainer(&["view", scene.to_str().expect("path"), "--port", "0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was served", scene.display());
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(stderr.contains(expected), "{}: {stderr}", scene.display());
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A port that is taken is named in the error.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("address").port().to_string();
    let (ply, _) = write_scene(&dir);
    let out = crate::common::trainer(&["view", ply.to_str().expect("path"), "--port", &port]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&format!("127.0.0.1:{port}")),
        "{stderr}"
    );
}
