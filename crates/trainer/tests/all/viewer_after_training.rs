//! The live viewer once training has ended, in Chromium: the page stays on the run's final field
//! (reload, banner, controls), and the panel's tools tried on it (views, camera copy, help,
//! narrow window), then the run folder's record. Skipped without a browser, as in `viewer.rs`.

use std::process::Command;
use std::time::Duration;

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use serde_json::{Value, json};

use crate::browser::{
    browser, browser_installed, console, eval, last_frame, live_run, trainer_with_viewer, wait_for,
    wait_for_within,
};
use crate::common::scratch;

/// A run that reaches its last step leaves the page on its final field: the banner says so,
/// the controls that act on the run go, a reload gets the same, and Ctrl-C then ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_stays_on_the_final_field_after_training() {
    if !browser_installed() {
        return;
    }
    let out = scratch("viewer-after");
    let (run, url, _) = live_run(20, 32, &out);
    let (_driver, client, port) = browser().await;
    let finished = "return window.ember.finished !== null \
         && window.ember.lastFrame !== null && window.ember.lastFrame.step === 20 \
         && document.getElementById('banner').textContent.includes('final field') \
         && !document.getElementById('banner').hidden \
         && document.getElementById('pause').disabled \
         && document.getElementById('train-state').textContent === 'finished' \
         && !document.getElementById('edit').hidden && window.ember.edits.gaussians > 0";
    client.goto(&url).await.expect("the page loads");
    wait_for_within(&client, finished, Duration::from_secs(300)).await;
    // A reload comes back to the view the page had, and to the final field.
    let frames = eval(&client, "return window.ember.framesReceived").await;
    eval(
        &client,
        "return window.ember.setCamera([0.3, 0.2, 2.5], [0, 0, 0])",
    )
    .await;
    wait_for(
        &client,
        &format!("return window.ember.framesReceived > {frames}"),
    )
    .await;
    client.refresh().await.expect("the page reloads");
    wait_for(&client, finished).await;
    let position = eval(&client, "return window.ember.cameraState().position").await;
    let expected = [0.3, 0.2, 2.5];
    assert!(
        (0..3).all(|a| (position[a].as_f64().expect("a number") - expected[a]).abs() < 1e-9),
        "the reload moved the view to {position}"
    );
    // In a narrow window the panel goes under the view, which keeps the whole width.
    client
        .set_window_size(600, 800)
        .await
        .expect("a narrow window");
    wait_for(
        &client,
        "const v = document.getElementById('view').getBoundingClientRect();
         const p = document.getElementById('panel').getBoundingClientRect();
         return v.width >= 0.95 * window.innerWidth && p.top >= v.bottom - 1 && p.height > 100",
    )
    .await;
    // Idle, the status line gives no frame rate rather than "0 fps".
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let line = eval(
        &client,
        "return document.getElementById('status-line').textContent",
    )
    .await;
    assert!(
        line.as_str()
            .is_some_and(|t| !t.contains("fps") && t.contains("step 20")),
        "{line}"
    );
    // The depth and the coverage views are grey pictures of the same field.
    for mode in ["depth", "alpha", "rgb"] {
        let frames = eval(&client, "return window.ember.framesReceived").await;
        eval(
            &client,
            &format!(
                "const s = document.getElementById('view-mode'); s.value = '{mode}';
                 s.dispatchEvent(new Event('change')); return true"
            ),
        )
        .await;
        wait_for(
            &client,
            &format!("return window.ember.framesReceived > {frames}"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let frame = last_frame(&client).await;
        let grey = frame.pixels().all(|p| p[0] == p[1] && p[1] == p[2]);
        assert_eq!(grey, mode != "rgb", "{mode}: grey {grey}");
    }
    // "Copy camera" gives the view's camera in the form `trainer render --camera` reads: drawn
    // by the command from the run's folder, it is the picture's size. (A prompt, where the
    // clipboard refuses, must not block the page under test.)
    eval(&client, "window.prompt = () => null; return true").await;
    client
        .find(fantoccini::Locator::Id("copy-camera"))
        .await
        .expect("the button")
        .click()
        .await
        .expect("copied");
    wait_for(&client, "return window.ember.copiedCamera !== null").await;
    let copied = eval(&client, "return window.ember.copiedCamera").await;
    let camera: Value = serde_json::from_str(copied.as_str().expect("text")).expect("JSON");
    assert_eq!(
        camera,
        eval(&client, "return window.ember.viewCamera()").await
    );
    let camera_file = out.with_extension("camera.json");
    std::fs::write(&camera_file, copied.as_str().expect("text")).expect("written");
    let drawn = out.with_extension("copied.png");
    let rendered = crate::common::trainer(&[
        "render",
        out.to_str().expect("path"),
        "--camera",
        camera_file.to_str().expect("path"),
        "--out",
        drawn.to_str().expect("path"),
    ]);
    assert!(rendered.status.success(), "{rendered:?}");
    let image = image::open(&drawn).expect("a PNG");
    assert_eq!(
        (u64::from(image.width()), u64::from(image.height())),
        (
            camera["width"].as_u64().expect("width"),
            camera["height"].as_u64().expect("height")
        )
    );
    // "?" shows and hides the help, as the help says.
    let help = "return document.getElementById('help').hidden";
    let before = eval(&client, help).await;
    let question = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: '?' })
        .then(KeyAction::Up { value: '?' });
    client.perform_actions(question).await.expect("? pressed");
    assert_ne!(eval(&client, help).await, before, "? toggles the help");
    let pid = run.0.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status();
    assert!(
        signalled.is_ok_and(|s| s.success()),
        "SIGINT to the trainer"
    );
    wait_for_within(
        &client,
        "return window.ember.ended !== null \
         && document.getElementById('banner').textContent.includes('trainer view')",
        Duration::from_secs(60),
    )
    .await;
    // The run folder then opens with its record, which has no speed to show.
    let (_view, url) = trainer_with_viewer(&["view", out.to_str().expect("path"), "--port", "0"]);
    client
        .goto(&url)
        .await
        .expect("the run folder's page loads");
    wait_for(
        &client,
        "return !!window.ember.lastStatus && window.ember.lastStatus.step === 20 \
         && document.getElementById('train-step').textContent.startsWith('20')",
    )
    .await;
    assert_eq!(
        eval(
            &client,
            "return document.getElementById('train-speed').textContent"
        )
        .await,
        json!("–")
    );
    let problems: Vec<Value> = console(&client, port)
        .await
        .into_iter()
        .filter(|entry| entry["level"] != "INFO" && entry["level"] != "DEBUG")
        .collect();
    assert!(problems.is_empty(), "console: {problems:?}");
    client.close().await.expect("session closed");
}
