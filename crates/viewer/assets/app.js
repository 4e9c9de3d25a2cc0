// The Ember viewer page. It speaks the protocol in crates/viewer/PROTOCOL.md over one
// WebSocket: it owns the camera, asks the server for frames and draws what comes back.
// This is the entry module. The others define what the page does and call each other only
// once it runs, so the order they load in does not matter; this starts it once all have.

import { installHooks } from '/automation.js';
import { updatePathUi } from '/camera-path.js';
import { connect } from '/connection.js';
import { $ } from '/dom.js';
import { listenToEditing } from '/edit.js';
import { listenToControls, listenToView } from '/input.js';
import { listenToDrops } from '/open-file.js';

installHooks();
listenToView();
listenToControls();
listenToEditing();
listenToDrops();
try { $('help').hidden = localStorage.getItem('ember.helpSeen') === '1'; } catch { /* shown */ }
updatePathUi();
connect();
