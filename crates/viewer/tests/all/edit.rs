//! Editing a served scene (`serve_editable`): edits, previews, undo and redo over the WebSocket,
//! every page told, refusals, and the download as the edits' PLY.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use ember_data::splats::ply;
use ember_data::{Region, SplatFilter};
use ember_field::splats::splats_from_field;
use ember_viewer::{EditCommand, EditFilter, Mode, SceneEditor, Viewer, serve_editable};
use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::server::{
    B, Socket, camera, connect, field, get, next_frame, next_of, next_text, render_message, start,
};

/// A renderer thread serving `field()` for editing until the returned flag is set.
fn serve_for_editing(viewer: &Arc<Viewer>) -> (Arc<AtomicBool>, thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (v, s) = (viewer.clone(), stop.clone());
    let handle = thread::spawn(move || {
        let field = field();
        let splats = splats_from_field(&field).unwrap();
        let mut editor = SceneEditor::new(splats, field, None);
        serve_editable(&v, &mut editor, None, || s.load(Ordering::SeqCst));
    });
    (stop, handle)
}

/// A page's connection and hello once the renderer has started to allow edits (it publishes
/// the editing state when it runs: a page connecting before sees none).
async fn connect_once_editable(viewer: &Viewer) -> (Socket, Value) {
    loop {
        let (socket, hello) = connect(viewer).await;
        if !hello["edits"].is_null() {
            return (socket, hello);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

/// The test field's centres lie on a circle of radius 0.6 in z ~ 0: this sphere holds those
/// with x > 0.4.
fn right_side() -> Value {
    json!({"crop_sphere": [1.0, 0.0, 0.0, 0.6], "outside": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_are_applied_undone_redone_and_every_page_is_told() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve_for_editing(&viewer);
    let (mut page, hello) = connect_once_editable(&viewer).await;
    let (mut other, _) = connect(&viewer).await;
    assert_eq!(hello["edits"]["gaussians"], 20);
    assert_eq!(hello["edits"]["applied"], json!([]));

    let splats = splats_from_field(&field()).unwrap();
    let region = SplatFilter {
        region: Some(Region::Sphere {
            centre: [1.0, 0.0, 0.0],
            radius: 0.6,
        }),
        outside: true,
        ..SplatFilter::default()
    };
    let kept = splats.filtered(&region);
    assert!(
        (5..20).contains(&kept.len()),
        "the test's sphere should delete some: {}",
        kept.len()
    );

    // A preview counts without changing anything.
    send(
        &mut page,
        json!({"type": "edit_preview", "filter": right_side()}),
    )
    .await;
    let preview = next_of(&mut page, "edit_preview").await;
    assert_eq!(preview["kept"], kept.len());
    assert_eq!(preview["gaussians"], 20);

    // An edit: both pages learn the new state, with the `trainer edit` flags.
    send(&mut page, json!({"type": "edit", "filter": right_side()})).await;
    for socket in [&mut page, &mut other] {
        let edits = next_of(socket, "edits").await;
        assert_eq!(edits["gaussians"], kept.len());
        assert_eq!(edits["original"], 20);
        assert_eq!(
            edits["applied"][0]["flags"],
            "--crop-sphere 1,0,0,0.6 --outside"
        );
        assert_eq!(edits["applied"][0]["removed"], 20 - kept.len());
        assert_eq!(edits["redo"], 0);
    }
    let (status, _, body) = get(viewer.address(), "/api/splats.ply");
    assert_eq!(status, 200);
    assert_eq!(body, ply::encode(&kept), "the download is the edited scene");
    assert_eq!(
        get(viewer.address(), "/api/info").2,
        serde_json::to_vec(&next_hello(&viewer).await).unwrap(),
        "a page loaded now is told the edited scene"
    );

    // A threshold on top, then undo twice and redo once.
    send(
        &mut page,
        json!({"type": "edit", "filter": {"max_scale": 0.2}}),
    )
    .await;
    let both = next_of(&mut page, "edits").await;
    assert_eq!(both["applied"].as_array().unwrap().len(), 2);
    assert_eq!(both["applied"][1]["flags"], "--max-scale 0.2");
    send(&mut page, json!({"type": "undo"})).await;
    assert_eq!(next_of(&mut page, "edits").await["redo"], 1);
    send(&mut page, json!({"type": "undo"})).await;
    let undone = next_of(&mut page, "edits").await;
    assert_eq!(undone["gaussians"], 20);
    assert_eq!(undone["redo"], 2);
    assert_eq!(
        get(viewer.address(), "/api/splats.ply").2,
        ply::encode(&splats),
        "undone to the scene as loaded"
    );
    send(&mut page, json!({"type": "redo"})).await;
    let redone = next_of(&mut page, "edits").await;
    assert_eq!(redone["gaussians"], kept.len());
    assert_eq!(redone["redo"], 1);

    // The frames show the edited scene: fewer Gaussians draw less.
    let view = camera(48, 48);
    page.send(render_message(5, &view, "png")).await.unwrap();
    let (header, _) = next_frame(&mut page).await;
    assert_eq!(header.id, 5);

    // Refusals: the scene is unchanged and the page that asked is told why.
    for bad in [
        json!({"type": "edit", "filter": {}}),
        json!({"type": "edit", "filter": {"crop_box": [0, 0, 0, 1, 1, 1], "crop_sphere": [0, 0, 0, 1]}}),
        json!({"type": "edit", "filter": {"min_opacity": 2.0}}),
        json!({"type": "edit", "filter": {"crop_box": [5, 5, 5, 6, 6, 6]}}),
        json!({"type": "edit", "filter": {"outside": true}}),
        json!({"type": "edit", "filter": {"crop_box": [0, 0, 0, 1, 1, 1], "colour": 1}}),
        json!({"type": "edit_preview", "filter": {"max_scale": -1.0}}),
    ] {
        send(&mut page, bad.clone()).await;
        let reply = next_text(&mut page).await;
        assert_eq!(reply["type"], "error", "{bad}: {reply}");
    }
    send(&mut page, json!({"type": "redo"})).await;
    send(&mut page, json!({"type": "undo"})).await;
    // The redo above had one edit to redo; after it, a second redo is refused.
    assert_eq!(
        next_of(&mut page, "edits").await["applied"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        next_of(&mut page, "edits").await["applied"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    send(&mut page, json!({"type": "redo"})).await;
    send(&mut page, json!({"type": "redo"})).await;
    assert_eq!(next_of(&mut page, "edits").await["redo"], 0);
    let refused = next_text(&mut page).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("nothing to redo"),
        "{refused}"
    );

    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

/// The hello a page connecting now receives.
async fn next_hello(viewer: &Viewer) -> Value {
    connect(viewer).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_edit_refuses_edits_and_the_download() {
    let viewer = Arc::new(start(Mode::Scene));
    let stop = Arc::new(AtomicBool::new(false));
    let (v, s) = (viewer.clone(), stop.clone());
    let handle =
        thread::spawn(move || ember_viewer::serve_field(&v, &field(), || s.load(Ordering::SeqCst)));
    let (mut page, hello) = connect(&viewer).await;
    assert!(hello["edits"].is_null(), "{hello}");
    for message in [
        json!({"type": "edit", "filter": {"max_scale": 0.2}}),
        json!({"type": "edit_preview", "filter": {"max_scale": 0.2}}),
        json!({"type": "undo"}),
    ] {
        send(&mut page, message).await;
        let reply = next_text(&mut page).await;
        assert_eq!(reply["type"], "error");
        assert!(
            reply["message"].as_str().unwrap().contains("trainer view"),
            "{reply}"
        );
    }
    assert_eq!(get(viewer.address(), "/api/splats.ply").0, 404);
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[test]
fn the_editor_keeps_the_scene_when_an_edit_fails() {
    let field = field();
    let splats = splats_from_field(&field).unwrap();
    let mut editor = SceneEditor::<B>::new(splats.clone(), field, None);
    let nowhere = EditFilter {
        crop_box: Some([5.0, 5.0, 5.0, 6.0, 6.0, 6.0]),
        ..EditFilter::default()
    };
    let error = editor.run(EditCommand::Apply(nowhere)).unwrap_err();
    assert!(error.contains("keeps none of the 20"), "{error}");
    assert!(
        editor
            .run(EditCommand::Undo)
            .unwrap_err()
            .contains("nothing to undo")
    );
    assert_eq!(editor.state().applied.len(), 0);
    assert_eq!(**editor.splats(), splats);
    assert_eq!(editor.field().num_gaussians(), 20);
    let thin = EditFilter {
        max_scale: Some(0.2),
        ..EditFilter::default()
    };
    editor.run(EditCommand::Apply(thin)).unwrap();
    assert_eq!(editor.field().num_gaussians(), editor.splats().len());
    assert_eq!(
        thin.flags(),
        "--max-scale 0.2",
        "the flags a script passes to trainer edit"
    );
    assert_eq!(
        ember_viewer::edit::download_name("runs/cup/splats.ply"),
        "splats-edited.ply"
    );
    assert_eq!(
        ember_viewer::edit::download_name("a b\"c.spz"),
        "a_b_c-edited.ply"
    );
    assert_eq!(ember_viewer::edit::download_name("/"), "scene-edited.ply");
}

#[test]
fn a_scene_drawn_through_a_hierarchy_gets_a_new_one_after_an_edit() {
    let field = field();
    let splats = splats_from_field(&field).unwrap();
    let hierarchy = field
        .hierarchy(&ember_data::HierarchyConfig::default())
        .unwrap();
    let lod = ember_viewer::SceneLod {
        threshold: 4.0,
        hierarchy,
    };
    let leaves = lod.hierarchy.leaf_field();
    let mut editor = SceneEditor::<B>::new(splats, leaves, Some(lod));
    let sphere = EditFilter {
        crop_sphere: Some([1.0, 0.0, 0.0, 0.6]),
        outside: true,
        ..EditFilter::default()
    };
    editor.run(EditCommand::Apply(sphere)).unwrap();
    let kept = editor.splats().len();
    assert!(kept < 20);
    let lod = editor.lod().expect("still drawn through a hierarchy");
    assert_eq!(lod.hierarchy.leaves, kept);
    assert_eq!(lod.threshold, 4.0, "at the same threshold");
    assert_eq!(editor.field().num_gaussians(), kept);
    let request = ember_viewer::FrameRequest {
        id: 1,
        camera: camera(32, 32),
        background: [0.0; 3],
        sh_degree: None,
        centres: false,
        format: ember_viewer::FrameFormat::Png,
        pick: None,
        lod_threshold: None,
        antialiased: false,
        view: ember_viewer::FrameView::Rgb,
    };
    let frame = ember_viewer::render_scene_frame(editor.field(), editor.lod(), &request).unwrap();
    assert_eq!((frame.width, frame.height), (32, 32));
    editor.run(EditCommand::Undo).unwrap();
    assert_eq!(editor.lod().unwrap().hierarchy.leaves, 20);
}

/// A POST of `body` to `path` with `extra` header lines: status and body.
fn post(address: std::net::SocketAddr, path: &str, body: &[u8], extra: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\n{extra}Content-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        String::from_utf8_lossy(&response[split + 4..]).to_string(),
    )
}

/// Three Gaussians in a row, as a PLY file's bytes.
fn three_in_a_row() -> (ember_data::Splats, Vec<u8>) {
    let splats = ember_data::Splats {
        means: vec![[-1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]],
        quats: vec![[1.0, 0.0, 0.0, 0.0]; 3],
        log_scales: vec![[-2.0; 3]; 3],
        opacity_logits: vec![2.0; 3],
        sh_dc: vec![[0.5, 0.0, -0.5]; 3],
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    let bytes = ply::encode(&splats);
    (splats, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sent_by_a_page_is_shown_instead_and_every_page_is_told() {
    let viewer = Arc::new(start(Mode::Scene));
    let (stop, handle) = serve_for_editing(&viewer);
    let (mut page, _) = connect_once_editable(&viewer).await;
    send(&mut page, json!({"type": "edit", "filter": right_side()})).await;
    next_of(&mut page, "edits").await;

    let (splats, bytes) = three_in_a_row();
    let address = viewer.address();
    let (status, text) = post(
        address,
        "/api/open?name=dir%2Frow%20of%20three.ply",
        &bytes,
        "",
    );
    assert_eq!(status, 202, "{text}");
    assert_eq!(text, "opening row of three.ply: 3 Gaussians");
    let hello = next_of(&mut page, "hello").await;
    assert_eq!(hello["name"], "row of three.ply");
    assert_eq!(hello["gaussians"], 3);
    assert_eq!(hello["cameras"], json!([]), "a file has no dataset cameras");
    assert_eq!(
        hello["edits"]["applied"],
        json!([]),
        "the edits start afresh"
    );
    assert_eq!(hello["edits"]["original"], 3);
    let bounds = &hello["bounds"];
    assert!(
        bounds["max"][0].as_f64().unwrap() > 0.5,
        "framed anew: {bounds}"
    );
    assert_eq!(get(address, "/api/splats.ply").2, ply::encode(&splats));
    page.send(render_message(3, &camera(32, 32), "png"))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut page).await.0.id, 3);

    // Refused: what does not read (named), no name, another site's page, a file without
    // Gaussians; the scene stays.
    let (status, text) = post(address, "/api/open?name=broken.ply", b"ply\nnonsense", "");
    assert_eq!(status, 400);
    assert!(text.contains("broken.ply"), "{text}");
    let (status, text) = post(address, "/api/open?name=scene.txt", &bytes, "");
    assert_eq!(status, 400);
    assert!(text.contains("unknown splat format"), "{text}");
    assert_eq!(post(address, "/api/open", &bytes, "").0, 400);
    let (status, _) = post(
        address,
        "/api/open?name=x.ply",
        &bytes,
        "Origin: http://evil.example\r\n",
    );
    assert_eq!(status, 403);
    let empty = ply::encode(&ember_data::Splats::default());
    assert_eq!(post(address, "/api/open?name=empty.ply", &empty, "").0, 202);
    let refused = next_of(&mut page, "error").await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("no Gaussians"),
        "{refused}"
    );
    assert_eq!(next_hello(&viewer).await["name"], "row of three.ply");

    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_edit_opens_no_file() {
    let viewer = Arc::new(start(Mode::Scene));
    let stop = Arc::new(AtomicBool::new(false));
    let (v, s) = (viewer.clone(), stop.clone());
    let handle =
        thread::spawn(move || ember_viewer::serve_field(&v, &field(), || s.load(Ordering::SeqCst)));
    let (status, text) = post(
        viewer.address(),
        "/api/open?name=x.ply",
        &three_in_a_row().1,
        "",
    );
    assert_eq!(status, 409);
    assert!(text.contains("trainer view"), "{text}");
    stop.store(true, Ordering::SeqCst);
    handle.join().unwrap();
}
