//! Driving the viewer's page in a real browser: headless Chromium over WebDriver
//! (chromedriver), and the `trainer` processes it talks to.

use std::ffi::c_int;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Whether the browser is there; fails under `EMBER_REQUIRE_BROWSER=1` when it is not.
pub(crate) fn browser_installed() -> bool {
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
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// chromedriver and the browser it starts, in a process group of their own, all killed when
/// dropped. Killing chromedriver alone left its Chromium running (~60 processes after one run of
/// the tests) whenever a test ended without closing its session, or failed before it.
pub(crate) struct Driver(Child);

unsafe extern "C" {
    fn kill(pid: c_int, signal: c_int) -> c_int;
}

impl Drop for Driver {
    fn drop(&mut self) {
        const SIGKILL: c_int = 9;
        // SAFETY: signals the process group `browser` created with chromedriver as its leader
        // (its id is the group's); a group already gone makes `kill` fail, which is ignored.
        unsafe { kill(-(self.0.id() as c_int), SIGKILL) };
        let _ = self.0.wait();
    }
}

/// Starts `trainer args...` and returns it with the URL it prints (`viewer: open URL`).
pub(crate) fn trainer_with_viewer(args: &[&str]) -> (Running, String) {
    let (running, url, _) = trainer_with_viewer_output(args);
    (running, url)
}

/// A live run on the procedural scene (`resolution` pixels a side, no evaluations) with its
/// viewer on a free port, writing into `out`: [`trainer_with_viewer_output`].
pub(crate) fn live_run(
    steps: usize,
    resolution: u32,
    out: &Path,
) -> (Running, String, std::sync::mpsc::Receiver<String>) {
    let (steps, size) = (
        steps.to_string(),
        format!("data.procedural.resolution={resolution}"),
    );
    trainer_with_viewer_output(&[
        "--steps",
        &steps,
        "--set",
        &size,
        "--set",
        "eval.every=0",
        "--view",
        "--port",
        "0",
        "--out",
        out.to_str().expect("path"),
    ])
}

/// [`trainer_with_viewer`], with the lines it prints after the URL.
pub(crate) fn trainer_with_viewer_output(
    args: &[&str],
) -> (Running, String, std::sync::mpsc::Receiver<String>) {
    let mut child = crate::common::trainer_command()
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
    // Keep draining stdout so the child never blocks on a full pipe, whether or not the
    // lines are read.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (running, url, rx)
}

/// Starts chromedriver on a free port and a headless Chromium session with console logging.
pub(crate) async fn browser() -> (Driver, Client, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let driver = Driver(
        Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
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
pub(crate) async fn console(client: &Client, port: u16) -> Vec<Value> {
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

pub(crate) async fn eval(client: &Client, script: &str) -> Value {
    client.execute(script, Vec::new()).await.expect(script)
}

/// Polls `script` until it returns `true` (20 s at most).
pub(crate) async fn wait_for(client: &Client, script: &str) {
    wait_for_within(client, script, Duration::from_secs(20)).await;
}

/// Polls `script` until it returns `true`, `limit` at most.
pub(crate) async fn wait_for_within(client: &Client, script: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        if eval(client, script).await == Value::Bool(true) {
            return;
        }
        assert!(started.elapsed() < limit, "timed out waiting for: {script}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A left-button drag from the centre of `element` by `(dx, dy)` CSS pixels over 300 ms.
pub(crate) async fn drag(
    client: &Client,
    element: &fantoccini::elements::Element,
    dx: f64,
    dy: f64,
) {
    let drag = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: element.clone(),
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveBy {
            duration: Some(Duration::from_millis(300)),
            x: dx,
            y: dy,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    client.perform_actions(drag).await.expect("a drag");
}

/// The page's last frame at its own size, decoded.
pub(crate) async fn last_frame(client: &Client) -> image::RgbImage {
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
