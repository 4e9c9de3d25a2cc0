//! The editing side of the server: edits queued for the renderer, which owns the field
//! ([`crate::edit::SceneEditor`]), the scene as edited served for download, and a splat file a
//! page sends to be shown instead (`POST /api/open`).

use std::collections::VecDeque;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ember_data::Splats;
use serde_json::{Value, json};

use super::{Access, ClientMessage, Live, Outgoing, Shared, Viewer, lock};
use crate::edit::{EditCommand, EditState, kept_by};
use crate::scene::SceneInfo;

/// An edit taken from the queue ([`Viewer::next_edit`]): what to do, and whom to answer
/// ([`Viewer::edited`]).
#[derive(Debug)]
pub struct PendingEdit {
    /// Who asked.
    pub asker: EditAsker,
    /// What to do.
    pub command: EditCommand,
}

/// Who asked for an edit: the page told when it fails (every page, for a file opened over
/// HTTP).
#[derive(Debug, Clone, Copy)]
pub struct EditAsker(Option<u64>);

/// The largest file a page may open over HTTP (`POST /api/open`), bytes.
pub const MAX_OPEN_BYTES: usize = 4 << 30;

/// The scene's editing, once the renderer allows it ([`Viewer::allow_editing`]).
#[derive(Default)]
pub(super) struct Editing {
    /// The scene as edited (what `/api/splats.ply` serves), `None` while editing is off.
    pub(super) splats: Option<Arc<Splats>>,
    pub(super) state: Option<EditState>,
    commands: VecDeque<PendingEdit>,
}

impl Shared {
    /// An editing message: a preview is answered here, from the scene as edited; the rest go
    /// to the renderer, which owns the field.
    pub(super) fn edit(&self, client: u64, message: ClientMessage) {
        let Some(splats) = lock(&self.editing).splats.clone() else {
            return self.error(
                client,
                "this server does not edit its scene: `trainer view SCENE` does (not a \
                 training run)",
            );
        };
        let command = match message {
            ClientMessage::EditPreview(edit) => {
                let text = match kept_by(&splats, &edit.filter) {
                    Ok(kept) => {
                        json!({"type": "edit_preview", "kept": kept, "gaussians": splats.len()})
                    }
                    Err(e) => json!({"type": "error", "message": format!("edit: {e}")}),
                };
                return self.send_to(client, Outgoing::Text(text.to_string()));
            }
            ClientMessage::Edit(edit) => match edit.filter.filter() {
                Ok(_) => EditCommand::Apply(edit.filter),
                Err(e) => return self.error(client, &format!("edit: {e}")),
            },
            ClientMessage::Undo => EditCommand::Undo,
            _ => EditCommand::Redo,
        };
        lock(&self.editing).commands.push_back(PendingEdit {
            asker: EditAsker(Some(client)),
            command,
        });
        self.wake.notify_all();
    }
}

impl Viewer {
    /// Lets the pages edit the scene (see [`crate::edit`]): from now on edits are queued for
    /// [`Viewer::next_edit`], and `/api/splats.ply` serves `splats`.
    pub fn allow_editing(&self, state: EditState, splats: Arc<Splats>) {
        self.publish_edits(state, splats);
    }

    /// The next edit a page asked for, if any.
    pub fn next_edit(&self) -> Option<PendingEdit> {
        lock(&self.shared.editing).commands.pop_front()
    }

    /// Answers `pending`: on success every page learns the new state (and the scene's size),
    /// and `/api/splats.ply` serves `splats`; an error goes to the page that asked.
    pub fn edited(
        &self,
        asker: EditAsker,
        result: Result<(), String>,
        state: EditState,
        splats: Arc<Splats>,
    ) {
        match (result, asker.0) {
            (Ok(()), _) => self.publish_edits(state, splats),
            (Err(e), Some(client)) => self.shared.error(client, &format!("edit: {e}")),
            (Err(e), None) => {
                let text = json!({"type": "error", "message": e}).to_string();
                self.shared.broadcast(text);
            }
        }
    }

    /// Shows another scene (a file a page opened): every page gets a new hello (the page then
    /// frames it afresh), and what the server kept of a run (curves, evaluations) is dropped.
    pub fn replace_scene(&self, scene: SceneInfo) {
        *lock(&self.shared.scene) = scene;
        *lock(&self.shared.live) = Live::default();
        let hello = self.shared.hello().to_string();
        self.shared.broadcast(hello);
    }

    fn publish_edits(&self, state: EditState, splats: Arc<Splats>) {
        lock(&self.shared.scene).gaussians = state.gaussians;
        let mut message = serde_json::to_value(&state).unwrap_or(Value::Null);
        message["type"] = "edits".into();
        let mut editing = lock(&self.shared.editing);
        editing.splats = Some(splats);
        editing.state = Some(state);
        drop(editing);
        self.shared.broadcast(message.to_string());
    }
}

/// The `name` of a query string (`name=...`, percent-encoded as `encodeURIComponent` writes
/// it), if it is there and decodes to UTF-8.
fn query_name(query: Option<&str>) -> Option<String> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("name="))?;
    let mut bytes = Vec::with_capacity(value.len());
    let mut rest = value.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        match b {
            b'%' => {
                let hex = std::str::from_utf8(rest.get(..2)?).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                rest = &rest[2..];
            }
            b'+' => bytes.push(b' '),
            _ => bytes.push(b),
        }
    }
    String::from_utf8(bytes).ok()
}

/// A splat file a page sends (dropped on it) to show instead of the scene: read here, then
/// handed to the renderer, which tells every page (a new hello) or why not (an `error`). Only
/// the server's own page may send one (as for the WebSocket: see [`Access::check_origin`]).
pub(super) async fn open_file(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: axum::body::Bytes,
) -> Response {
    if let Err(reason) = Access::check_origin(&headers) {
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    if lock(&shared.editing).splats.is_none() {
        return (
            StatusCode::CONFLICT,
            "this server does not open files: `trainer view SCENE` does (not a training run)",
        )
            .into_response();
    }
    let Some(name) = query_name(uri.query()) else {
        return (
            StatusCode::BAD_REQUEST,
            "name the file: POST /api/open?name=FILE.ply (its extension names the format)",
        )
            .into_response();
    };
    // The name alone, never a path: nothing is read from or written to the disk.
    let name = name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .to_string();
    let parsed = {
        let name = name.clone();
        tokio::task::spawn_blocking(move || {
            ember_data::parse_splats(&body, std::path::Path::new(&name))
        })
        .await
    };
    let splats = match parsed {
        Ok(Ok(splats)) => splats,
        Ok(Err(e)) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let text = format!("opening {name}: {} Gaussians", splats.len());
    lock(&shared.editing).commands.push_back(PendingEdit {
        asker: EditAsker(None),
        command: EditCommand::Open {
            splats: Box::new(splats),
            name,
        },
    });
    shared.wake.notify_all();
    (StatusCode::ACCEPTED, text).into_response()
}

/// The scene as edited, as a 3DGS PLY file to download (named after the scene).
pub(super) async fn splats_ply(State(shared): State<Arc<Shared>>) -> Response {
    let Some(splats) = lock(&shared.editing).splats.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "this server does not edit its scene: `trainer view SCENE` does",
        )
            .into_response();
    };
    let name = crate::edit::download_name(&lock(&shared.scene).name);
    match tokio::task::spawn_blocking(move || ember_data::splats::ply::encode(&splats)).await {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{name}\""),
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
