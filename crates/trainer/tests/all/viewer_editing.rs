//! Editing a scene in the viewer's page, in Chromium: a sphere set up in the panel (drawn over
//! the view, its effect previewed), applied, undone with Ctrl+Z (the input's bytes again) and
//! redone, a box on top, kept across a reload, and downloaded as the same bytes `trainer edit`
//! writes with the flags the page shows.
//! Skipped without a browser, as in `viewer.rs`.

use fantoccini::Locator;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use serde_json::Value;

use crate::browser::{browser, browser_installed, console, eval, trainer_with_viewer, wait_for};
use crate::common::scratch;
use crate::view_command::http_get;
use crate::viewer::write_scene;

/// Sets the text of the panel's field `id` as typing would (an `input` event).
async fn type_into(client: &fantoccini::Client, id: &str, text: &str) {
    eval(
        client,
        &format!(
            "const f = document.getElementById('{id}'); f.value = '{text}';
             f.dispatchEvent(new Event('input')); return true"
        ),
    )
    .await;
}

/// Pixels of the overlay drawn in the colour of a region being deleted (`#ff5a4f`).
const RED_PIXELS: &str = "const o = document.getElementById('overlay');
    const d = o.getContext('2d').getImageData(0, 0, o.width, o.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] < 140 && d[i + 3] > 100) n++;
    return n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scene_is_edited_in_the_page_as_trainer_edit_would() {
    if !browser_installed() {
        return;
    }
    let dir = scratch("viewer-edit");
    let (ply, _) = write_scene(&dir);
    let (_server, url) = trainer_with_viewer(&["view", ply.to_str().expect("path"), "--port", "0"]);
    let (_driver, client, port) = browser().await;
    client.goto(&url).await.expect("the page loads");
    wait_for(
        &client,
        "return window.ember.framesReceived > 0 && !document.getElementById('edit').hidden \
         && window.ember.edits !== null && window.ember.edits.gaussians === 60",
    )
    .await;

    // A sphere around the ring's +x side, deleted: drawn over the view, previewed.
    let region = client
        .find(Locator::Id("edit-region"))
        .await
        .expect("the region control");
    region.select_by_value("sphere").await.expect("a sphere");
    type_into(&client, "edit-sphere-centre", "0.8, 0, 0").await;
    type_into(&client, "edit-sphere-radius", "0.5").await;
    client
        .find(Locator::Id("edit-outside"))
        .await
        .expect("the delete box")
        .click()
        .await
        .expect("checked");
    wait_for(
        &client,
        "const p = window.ember.editPreview; return p !== null && p.kept < 60 && p.kept > 30",
    )
    .await;
    let preview = eval(&client, "return window.ember.editPreview").await;
    let kept = preview["kept"].as_u64().expect("a count");
    let shown = eval(
        &client,
        "return document.getElementById('edit-preview').textContent",
    )
    .await;
    assert!(
        shown
            .as_str()
            .expect("text")
            .starts_with(&format!("keeps {kept} of 60")),
        "{shown}"
    );
    assert!(
        eval(&client, RED_PIXELS).await.as_u64().expect("a count") > 50,
        "the region is not drawn over the view"
    );

    // Applied: the scene shrinks, the view is redrawn, the panel lists the edit's flags.
    let frames = eval(&client, "return window.ember.framesReceived").await;
    client
        .find(Locator::Id("edit-apply"))
        .await
        .expect("Apply")
        .click()
        .await
        .expect("applied");
    wait_for(
        &client,
        &format!(
            "return window.ember.edits.applied.length === 1 && window.ember.edits.gaussians === {kept} \
             && window.ember.framesReceived > {frames}"
        ),
    )
    .await;
    let flags = eval(&client, "return window.ember.edits.applied[0].flags").await;
    let flags = flags.as_str().expect("flags").to_string();
    assert_eq!(flags, "--crop-sphere 0.8,0,0,0.5 --outside");
    let panel = eval(
        &client,
        "return [document.getElementById('scene-gaussians').textContent,
                 document.getElementById('edit-list').textContent,
                 document.getElementById('edit-download').getAttribute('href')]",
    )
    .await;
    assert_eq!(panel[0], Value::String(kept.to_string()));
    assert!(panel[1].as_str().expect("text").contains(&flags), "{panel}");
    assert_eq!(panel[2], "/api/splats.ply");
    // The same edit again would remove nothing: once the preview says so, Apply is off.
    wait_for(
        &client,
        &format!(
            "const p = window.ember.editPreview; return p !== null && p.gaussians === {kept} \
             && p.kept === {kept} && document.getElementById('edit-apply').disabled"
        ),
    )
    .await;

    // The download is what `trainer edit` writes with those flags, byte for byte.
    let edited = dir.join("edited.ply");
    let mut args = vec![
        "edit",
        ply.to_str().expect("path"),
        edited.to_str().expect("path"),
    ];
    args.extend(flags.split_whitespace());
    let out = crate::common::trainer(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, body) = http_get(&url, "/api/splats.ply");
    assert_eq!(status, 200);
    assert_eq!(
        body,
        std::fs::read(&edited).expect("trainer edit's file"),
        "the page's download differs from trainer edit's output"
    );

    // Ctrl+Z undoes (the view keeps the keys), Redo brings it back.
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: '\u{E009}' })
        .then(KeyAction::Down { value: 'z' })
        .then(KeyAction::Up { value: 'z' })
        .then(KeyAction::Up { value: '\u{E009}' });
    eval(&client, "document.activeElement.blur(); return true").await;
    client.perform_actions(keys).await.expect("Ctrl+Z");
    wait_for(
        &client,
        "return window.ember.edits.applied.length === 0 && window.ember.edits.gaussians === 60 \
         && !document.getElementById('edit-redo').disabled",
    )
    .await;
    assert_eq!(
        http_get(&url, "/api/splats.ply").1,
        std::fs::read(&ply).expect("the input"),
        "undone: the scene as loaded, bit for bit"
    );
    client
        .find(Locator::Id("edit-redo"))
        .await
        .expect("Redo")
        .click()
        .await
        .expect("redone");
    wait_for(
        &client,
        &format!("return window.ember.edits.gaussians === {kept}"),
    )
    .await;

    // A box on top, kept: the second edit is a second `trainer edit` on the first one's output.
    region.select_by_value("box").await.expect("a box");
    type_into(&client, "edit-box-min", "-1, -0.2, -1").await;
    type_into(&client, "edit-box-max", "1, 1, 1").await;
    client
        .find(Locator::Id("edit-outside"))
        .await
        .expect("the delete box")
        .click()
        .await
        .expect("unchecked");
    wait_for(
        &client,
        &format!(
            "const p = window.ember.editPreview; return p !== null && p.gaussians === {kept} \
             && p.kept < {kept} && !document.getElementById('edit-apply').disabled"
        ),
    )
    .await;
    client
        .find(Locator::Id("edit-apply"))
        .await
        .expect("Apply")
        .click()
        .await
        .expect("applied");
    wait_for(&client, "return window.ember.edits.applied.length === 2").await;
    let box_flags = eval(&client, "return window.ember.edits.applied[1].flags").await;
    let box_flags = box_flags.as_str().expect("flags").to_string();
    assert_eq!(box_flags, "--crop-box -1,-0.2,-1,1,1,1");
    let twice = dir.join("edited-twice.ply");
    let mut args = vec![
        "edit",
        edited.to_str().expect("path"),
        twice.to_str().expect("path"),
    ];
    args.extend(box_flags.split_whitespace());
    let out = crate::common::trainer(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        http_get(&url, "/api/splats.ply").1,
        std::fs::read(&twice).expect("trainer edit's second file"),
        "two edits in the page against two trainer edit calls"
    );
    let kept = eval(&client, "return window.ember.edits.gaussians").await;

    // The edits live on the server: a reload shows them.
    client.refresh().await.expect("the page reloads");
    wait_for(
        &client,
        &format!(
            "return window.ember.framesReceived > 0 && window.ember.edits !== null \
             && window.ember.edits.gaussians === {kept} \
             && document.getElementById('edit-list').children.length === 2"
        ),
    )
    .await;
    let errors: Vec<Value> = console(&client, port)
        .await
        .into_iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

/// The bytes of a small PLY of five Gaussians on a diagonal, base64-encoded for the page.
fn diagonal_ply_base64() -> String {
    let splats = ember_data::Splats {
        means: (0..5).map(|i| [i as f32 * 0.3; 3]).collect(),
        quats: vec![[1.0, 0.0, 0.0, 0.0]; 5],
        log_scales: vec![[-2.5; 3]; 5],
        opacity_logits: vec![2.0; 5],
        sh_dc: vec![[1.0, 0.2, -0.5]; 5],
        sh_rest: Vec::new(),
        sh_degree: 0,
    };
    let bytes = ember_data::splats::ply::encode(&splats);
    const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                text.push(DIGITS[(n >> (18 - 6 * k)) as usize & 63] as char);
            } else {
                text.push('=');
            }
        }
    }
    text
}

/// A splat file dropped on the page replaces the scene: every page gets the new one, framed
/// afresh, editable from scratch; a file of another kind is refused on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_dropped_on_the_page_is_opened() {
    if !browser_installed() {
        return;
    }
    let dir = scratch("viewer-drop");
    let (ply, _) = write_scene(&dir);
    let (_server, url) = trainer_with_viewer(&["view", ply.to_str().expect("path"), "--port", "0"]);
    let (_driver, client, port) = browser().await;
    client.goto(&url).await.expect("the page loads");
    wait_for(
        &client,
        "return window.ember.framesReceived > 0 && window.ember.edits !== null \
         && !document.getElementById('open-hint').hidden",
    )
    .await;
    let before = eval(&client, "return window.ember.cameraState().position").await;
    let frames = eval(&client, "return window.ember.framesReceived").await;
    let drop = |name: &str| {
        format!(
            "const bytes = Uint8Array.from(atob('{}'), (c) => c.charCodeAt(0));
             const files = new DataTransfer();
             files.items.add(new File([bytes], '{name}'));
             document.getElementById('view').dispatchEvent(new DragEvent('drop',
               {{ dataTransfer: files, bubbles: true, cancelable: true }}));
             return true",
            diagonal_ply_base64()
        )
    };
    eval(&client, &drop("notes.txt")).await;
    wait_for(
        &client,
        "return [...document.querySelectorAll('#log li')].some((li) => \
         li.textContent.includes('notes.txt: not a splat file'))",
    )
    .await;
    eval(&client, &drop("diagonal.ply")).await;
    wait_for(
        &client,
        &format!(
            "const h = window.ember.hello; return h.name === 'diagonal.ply' && h.gaussians === 5 \
             && window.ember.edits.original === 5 && window.ember.framesReceived > {frames} \
             && document.getElementById('scene-name').textContent === 'diagonal.ply'"
        ),
    )
    .await;
    let after = eval(&client, "return window.ember.cameraState().position").await;
    assert_ne!(before, after, "the new scene is framed afresh");
    let errors: Vec<Value> = console(&client, port)
        .await
        .into_iter()
        .filter(|entry| entry["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}
