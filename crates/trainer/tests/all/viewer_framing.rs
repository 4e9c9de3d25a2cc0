//! The viewer's orientation aids in Chromium: Fit (G) on a capture frames what its photos frame,
//! the axes in the corner follow the view, and the ground grid draws a round spacing. Skipped
//! without a browser, as in `viewer.rs`.

use fantoccini::Locator;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use serde_json::Value;

use crate::browser::{browser, browser_installed, eval, trainer_with_viewer, wait_for};
use crate::common::scratch;
use crate::viewer::write_scene;

/// Overlay pixels in the view's bottom-right 110 px square (`corner`) or anywhere, whose colour
/// `test(r, g, b, a)` accepts.
fn count_pixels(corner: bool, test: &str) -> String {
    format!(
        "const o = document.getElementById('overlay'), dpr = window.devicePixelRatio || 1;
         const side = Math.round(110 * dpr);
         const [x0, y0] = {corner} ? [o.width - side, o.height - side] : [0, 0];
         const d = o.getContext('2d').getImageData(x0, y0, o.width - x0, o.height - y0).data;
         const test = {test};
         let n = 0;
         for (let i = 0; i < d.length; i += 4) if (test(d[i], d[i + 1], d[i + 2], d[i + 3])) n++;
         return n"
    )
}

async fn count(client: &fantoccini::Client, corner: bool, test: &str) -> u64 {
    eval(client, &count_pixels(corner, test))
        .await
        .as_u64()
        .expect("a count")
}

async fn press(client: &fantoccini::Client, key: char) {
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key });
    client.perform_actions(keys).await.expect("a key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fit_axes_and_grid_help_find_the_way() {
    if !browser_installed() {
        return;
    }
    let dir = scratch("viewer-framing");
    let (ply, data) = write_scene(&dir);
    let (_server, url) = trainer_with_viewer(&[
        "view",
        ply.to_str().expect("path"),
        "--data",
        data.to_str().expect("path"),
        "--port",
        "0",
    ]);
    let (_driver, client, _port) = browser().await;
    client.goto(&url).await.expect("the page loads");
    wait_for(&client, "return window.ember.framesReceived > 0").await;

    // Far out and off centre, then Fit: back at the photos' distance (4, every camera of the
    // scene), looking at the point they look at.
    eval(
        &client,
        "window.ember.setCamera([2.0, 1.5, 11.0], [0.5, 0.4, 0.0]); return true",
    )
    .await;
    eval(&client, "document.activeElement.blur(); return true").await;
    press(&client, 'g').await;
    let fitted = "const s = window.ember.cameraState(), t = window.ember.hello.target;
                  const d = Math.hypot(...s.position.map((p, i) => p - t[i]));
                  const off = Math.hypot(...s.target.map((p, i) => p - t[i]));
                  return Math.abs(d - 4) < 1e-6 && off < 1e-6";
    wait_for(&client, fitted).await;

    // The axes: red, green and blue strokes in the corner, gone when unticked. Seen from +z
    // towards the origin, Z points at the viewer and X and Y lie across the view.
    let red = "(r, g, b, a) => a > 100 && r > 180 && g < 120 && b < 120";
    let green = "(r, g, b, a) => a > 100 && g > 140 && r < 140 && b < 140";
    let blue = "(r, g, b, a) => a > 100 && b > 180 && r < 120";
    for colour in [red, green, blue] {
        assert!(
            count(&client, true, colour).await > 10,
            "no {colour} axis drawn"
        );
    }
    eval(
        &client,
        "window.ember.setCamera([0, 0, 5], [0, 0, 0]); return true",
    )
    .await;
    let axes = eval(&client, "return window.ember.axes()").await;
    let axis = |name: &str| -> Value {
        axes.as_array()
            .expect("axes")
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
            .expect("the axis")
    };
    assert_eq!(axis("Z")["away"], Value::Bool(false), "{axes}");
    let across = |a: &Value| {
        a["x"]
            .as_f64()
            .expect("x")
            .hypot(a["y"].as_f64().expect("y"))
    };
    assert!(across(&axis("Z")) < 1e-6, "Z points at the viewer: {axes}");
    assert!((across(&axis("X")) - 32.0).abs() < 1e-6, "{axes}");
    assert!((across(&axis("Y")) - 32.0).abs() < 1e-6, "{axes}");
    client
        .find(Locator::Id("show-axes"))
        .await
        .expect("the axes box")
        .click()
        .await
        .expect("unticked");
    assert_eq!(count(&client, true, red).await, 0, "the axes stay drawn");

    // The grid: grey lines over the view, a round spacing near a fifth of the scene's radius.
    let grey = "(r, g, b, a) => a > 30 && Math.abs(r - b) < 30 && Math.abs(r - g) < 30";
    assert_eq!(count(&client, false, grey).await, 0);
    client
        .find(Locator::Id("show-grid"))
        .await
        .expect("the grid box")
        .click()
        .await
        .expect("ticked");
    assert!(count(&client, false, grey).await > 500, "no grid drawn");
    let spacing = eval(&client, "return window.ember.gridSpacing()").await;
    let radius = eval(&client, "return window.ember.hello.radius").await;
    let (spacing, radius) = (
        spacing.as_f64().expect("spacing"),
        radius.as_f64().expect("radius"),
    );
    let mantissa = spacing / 10f64.powf(spacing.log10().floor());
    assert!(
        [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
        "{spacing} is not a round spacing"
    );
    assert!(
        spacing >= radius / 5.0 && spacing <= radius,
        "spacing {spacing} for a radius of {radius}"
    );
}
