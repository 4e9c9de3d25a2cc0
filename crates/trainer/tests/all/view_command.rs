//! `trainer view` over plain HTTP: what each SCENE argument serves (a run folder, a
//! checkpoint, a run's refined cameras) and how bad ones are refused; `trainer render` through
//! a run's refined cameras; a live run's viewer after its last step.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ember_data::{Dataset, DatasetOptions, read_splats};
use ember_viewer::FrameHeader;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::browser::{live_run, trainer_with_viewer};
use crate::common::scratch;
use crate::viewer::write_scene;

/// A plain HTTP/1.1 GET against the viewer: status and body.
pub(crate) fn http_get(url: &str, path: &str) -> (u16, Vec<u8>) {
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
        "eval.every=6",
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
        // The run's record: its curves, its last state, its evaluations and their images.
        assert!(
            info["history"].as_array().is_some_and(|h| !h.is_empty()),
            "{info}"
        );
        assert_eq!(info["status"]["step"], json!(12), "{info}");
        let evals = info["evals"].as_array().expect("evals");
        let steps: Vec<&Value> = evals.iter().map(|e| &e["step"]).collect();
        assert_eq!(steps, [&json!(6), &json!(12)], "{info}");
        let url_of = evals[1]["views"][0]["url"].as_str().expect("an image URL");
        let (status, image) = http_get(&url, url_of);
        assert_eq!(status, 200, "{url_of}");
        assert!(image.starts_with(&[0xFF, 0xD8]), "{url_of} is not a JPEG");
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

/// A run that refines its poses: `trainer view RUN` shows the dataset's cameras at the poses of
/// the run's `cameras.json` (the training ones moved, the held-out one as given), and `trainer
/// render --camera cameras.json --name` draws through one of them.
#[test]
fn view_and_render_use_a_runs_refined_cameras() {
    let dir = scratch("viewer-poses");
    let (_, data) = write_scene(&dir);
    let run = dir.join("run");
    let path = |p: &Path| p.to_str().expect("path").to_string();
    let out = crate::common::trainer(&[
        "--data",
        &path(&data),
        "--steps",
        "6",
        "--set",
        "poses.refine=true",
        "--set",
        "poses.start=0",
        "--set",
        "eval.lpips=\"never\"",
        "--out",
        &path(&run),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("training cameras moved"), "{stdout}");
    let list: Value = serde_json::from_slice(&std::fs::read(run.join("cameras.json")).unwrap())
        .expect("cameras.json is JSON");
    let list = list["cameras"].as_array().expect("a camera list");
    let given = Dataset::load(&data, &DatasetOptions::default()).expect("the dataset");
    let given: Vec<(String, ember_field::Camera)> = given
        .all_views()
        .map(|v| (v.name.clone(), v.camera()))
        .collect();
    let pose = |c: &Value| -> Vec<f64> {
        let numbers = |key: &str| -> Vec<f64> {
            c[key]
                .as_array()
                .expect("numbers")
                .iter()
                .map(|v| v.as_f64().expect("a number"))
                .collect()
        };
        [numbers("rotation"), numbers("translation")].concat()
    };
    let distance = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };

    let (_server, url) = trainer_with_viewer(&["view", &path(&run), "--port", "0"]);
    let (status, body) = http_get(&url, "/api/info");
    assert_eq!(status, 200);
    let info: Value = serde_json::from_slice(&body).expect("JSON");
    let shown = info["cameras"].as_array().expect("cameras");
    assert_eq!(shown.len(), list.len(), "{info}");
    let mut moved = 0;
    for camera in shown {
        let name = camera["name"].as_str().expect("a name");
        let entry = list
            .iter()
            .find(|e| e["name"] == name)
            .expect("every camera in cameras.json");
        assert!(
            distance(&pose(camera), &pose(&entry["camera"])) < 1e-12,
            "{name}: the viewer shows the run's pose"
        );
        let (_, original) = given
            .iter()
            .find(|(n, _)| n == name)
            .expect("a dataset view");
        let original = [original.rotation.to_vec(), original.translation.to_vec()].concat();
        let off = distance(&pose(camera), &original);
        match entry["refined"].as_bool().expect("refined") {
            true => moved += usize::from(off > 1e-9),
            false => assert!(off < 1e-12, "{name} is held out: its given pose"),
        }
    }
    assert!(moved > 0, "refinement moved a training camera: {list:?}");

    let refined = list
        .iter()
        .find(|e| e["refined"] == true)
        .expect("a training camera");
    let image = dir.join("refined.png");
    let out = crate::common::trainer(&[
        "render",
        &path(&run.join("splats.ply")),
        "--camera",
        &path(&run.join("cameras.json")),
        "--name",
        refined["name"].as_str().expect("a name"),
        "--out",
        &path(&image),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        image::open(&image).expect("a PNG").to_rgb8().dimensions(),
        (64, 48)
    );
}

/// A WebSocket to the viewer at `url`, as a page opens it.
async fn page_socket(
    url: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let ws = format!(
        "ws://{}/ws",
        url.trim_start_matches("http://").trim_end_matches('/')
    );
    tokio_tungstenite::connect_async(ws)
        .await
        .expect("connects")
        .0
}

/// A run with `--view` that reaches its last step keeps its viewer up with the final field (a
/// page loaded now is told so and gets frames of the last step) until Ctrl-C, which then
/// ends the process cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_keeps_showing_its_final_field_until_ctrl_c() {
    let out = scratch("viewer-finished");
    let (mut run, url, _) = live_run(6, 16, &out);
    let deadline = Instant::now() + Duration::from_secs(300);
    let info = loop {
        let (status, body) = http_get(&url, "/api/info");
        assert_eq!(status, 200);
        let info: Value = serde_json::from_slice(&body).expect("JSON");
        if info["finished"].is_string() {
            break info;
        }
        assert!(Instant::now() < deadline, "the run did not finish: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = info["finished"].as_str().expect("text");
    assert!(text.contains("step 6") && text.contains("Ctrl-C"), "{text}");
    assert_eq!(info["status"]["step"], 6, "{info}");
    assert!(out.join("splats.ply").is_file() && out.join("metrics.jsonl").is_file());
    assert!(
        run.0.try_wait().expect("status").is_none(),
        "the trainer exited"
    );

    let mut socket = page_socket(&url).await;
    let camera = json!({"rotation": [1, 0, 0, 0, 1, 0, 0, 0, 1], "translation": [0, 0, 3],
        "fx": 32, "fy": 32, "cx": 16, "cy": 16, "width": 32, "height": 32});
    socket
        .send(Message::Text(
            json!({"type": "render", "id": 1, "camera": camera, "format": "png"})
                .to_string()
                .into(),
        ))
        .await
        .expect("sent");
    let header = loop {
        let message = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .expect("a frame within 60 s")
            .expect("open")
            .expect("a message");
        if let Message::Binary(bytes) = message {
            break FrameHeader::parse(&bytes).expect("a frame").0;
        }
    };
    assert_eq!((header.id, header.step, header.width), (1, Some(6), 32));

    let pid = run.0.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status();
    assert!(
        signalled.is_ok_and(|s| s.success()),
        "SIGINT to the trainer"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = run.0.try_wait().expect("status") {
            break status;
        }
        assert!(Instant::now() < deadline, "still running after Ctrl-C");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
}

/// A page pausing or resuming the run is said in the terminal, with the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_from_a_page_is_said_in_the_terminal() {
    let out = scratch("viewer-pause-said");
    let (_run, url, lines) = live_run(1_000_000, 16, &out);
    let mut socket = page_socket(&url).await;
    let said = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line saying `{what}` within 60 s"));
            if line.contains(what) {
                return line;
            }
        }
    };
    for (message, what) in [
        ("pause", "viewer: a page paused training at step "),
        ("resume", "viewer: a page resumed training at step "),
    ] {
        socket
            .send(Message::Text(json!({"type": message}).to_string().into()))
            .await
            .expect("sent");
        let line = said(what);
        let step = line
            .rsplit(' ')
            .next()
            .and_then(|s| s.parse::<usize>().ok());
        assert!(step.is_some(), "{line}");
    }
}
