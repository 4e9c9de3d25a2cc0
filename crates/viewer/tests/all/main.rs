//! ember-viewer's tests: the server over real sockets (HTTP routes, WebSocket messages,
//! bad input, several pages, the latest-request rule, live-mode controls) and the editing of a
//! served scene.

mod edit;
mod server;
