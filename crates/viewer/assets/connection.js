// The connection: one WebSocket to the server (PROTOCOL.md), reopened when it drops until the
// run ends, and the server's text messages handed to the parts of the page they are for.

import { length, normalize } from '/geometry.js';
import { resetCamera, restoreView } from '/camera.js';
import { $, cameraSelect, shSelect } from '/dom.js';
import { onEditHello, onEditPreview, onEdits } from '/edit.js';
import { log, updateBanner, updateCameraUi, updateStatusLine } from '/panel.js';
import { sendNow } from '/render.js';
import { ember, state } from '/state.js';
import { addEval, onEnded, onFinished, onStatus, renderEvals, scheduleCurves } from '/training.js';
import { onFrame } from '/view.js';

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10000;

let retryMs = RETRY_MIN_MS;

export function connect() {
  // Retries stay 'disconnected' until one opens; only the first try reads 'connecting'.
  if (state.conn !== 'disconnected') setConn('connecting');
  const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  let socket;
  try {
    socket = new WebSocket(`${scheme}${location.host}/ws`);
  } catch (err) {
    log(`cannot open the socket: ${err.message}`, 'error');
    retry();
    return;
  }
  socket.binaryType = 'arraybuffer';
  socket.onopen = () => setConn('connected');
  socket.onmessage = (event) => {
    if (typeof event.data === 'string') onText(event.data);
    else onFrame(event.data).catch((err) => log(`bad frame: ${err.message}`, 'error'));
  };
  // A failed or dropped connection ends in close, which is where it is handled.
  socket.onerror = () => {};
  socket.onclose = () => {
    if (state.ws !== socket) return;
    state.ws = null;
    state.shotId = null;
    if (state.ended !== null) { setConn('ended'); return; }
    if (state.conn === 'connected') log('connection lost', 'error');
    retry();
  };
  state.ws = socket;
}

function retry() {
  setConn('disconnected');
  setTimeout(connect, retryMs);
  retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
}

function setConn(conn) {
  state.conn = conn;
  updateBanner();
  updateStatusLine();
}

function onText(text) {
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    log('unreadable message from the server', 'error');
    return;
  }
  switch (msg.type) {
    case 'hello': onHello(msg); break;
    case 'status': onStatus(msg); break;
    case 'eval': addEval(msg); renderEvals(); scheduleCurves(); break;
    case 'message': log(msg.text); break;
    case 'finished': onFinished(msg.text); break;
    case 'ended': onEnded(msg.text); break;
    case 'edits': onEdits(msg); break;
    case 'edit_preview': onEditPreview(msg); break;
    case 'error':
      ember.errors.push(msg.message);
      log(msg.message, 'error');
      break;
    default: break;
  }
}

function onHello(h) {
  // A reconnect to the same scene keeps the user's view; a different scene starts afresh.
  const fresh = !ember.hello || ember.hello.name !== h.name;
  ember.hello = h;
  retryMs = RETRY_MIN_MS;
  const sceneUp = h.up && length(h.up) > 1e-9 ? normalize(h.up) : [0, 0, 1];
  const cameras = h.cameras || [];
  const train = cameras.find((c) => c.split === 'train') || cameras[0];
  const kept = fresh ? storedUp(h.name) : { choice: state.scene.upChoice, up: state.scene.up };
  state.scene = { target: h.target, up: kept ? kept.up : sceneUp, upChoice: kept ? kept.choice : 'scene', sceneUp,
    radius: h.radius > 0 ? h.radius : 1, bounds: h.bounds || null,
    front: h.front && length(h.front) > 1e-9 ? h.front : [1, 0, 0], cameras, home: train ? train.index : null,
    lod: h.lod || null };
  $('up-axis').value = state.scene.upChoice;
  $('up-axis').options[0].textContent = cameras.length ? 'from the cameras' : 'scene (−Y)';

  // The file's name; the whole path on hover.
  $('scene-name').textContent = h.name.split(/[\\/]/).filter(Boolean).pop() || h.name;
  $('scene-name').title = h.name;
  $('scene-mode').textContent = h.mode;
  $('scene-gaussians').textContent = h.gaussians.toLocaleString('en-US');
  $('scene-sh').textContent = String(h.sh_degree);
  fillSelects(h);
  onEditHello(h.edits || null);
  // Level of detail: the control only where the server has a hierarchy, at its threshold.
  $('lod-row').hidden = !h.lod;
  if (h.lod) $('lod').value = String(h.lod.threshold);

  state.history = (h.history || []).map(({ step, loss, psnr }) => ({ step, loss, psnr }));
  const measured = state.history.filter((p) => Number.isFinite(p.psnr));
  state.lastPsnr = measured.length ? measured[measured.length - 1].psnr : null;
  state.evals = [];
  (h.evals || []).forEach(addEval);
  ember.lastStatus = null;
  if (h.status) onStatus(h.status);
  if (h.finished) onFinished(h.finished);
  $('training').hidden = !(h.mode === 'training' || ember.lastStatus);
  // A fixed scene (a finished run's record) has no training to pause or checkpoint.
  $('pause').hidden = $('checkpoint').hidden = h.mode !== 'training';
  // During training the curves come first, in view on a laptop's screen.
  if (h.mode === 'training') $('panel').prepend($('training'), $('evals'));
  $('show-cameras').disabled = $('compare').disabled = !cameras.length;
  $('compare').parentElement.title = cameras.length ? '' : 'this scene has no dataset photos';
  renderEvals();
  scheduleCurves();

  // A reload of this tab comes back to the view it had; a new page starts at home.
  if (fresh && !restoreView(h.name)) resetCamera();
  else if (!fresh) updateCameraUi();
  log(`connected to ${h.name}`);
  sendNow('full');
}

// The up a user chose for this scene before (see setUp in camera.js), if any.
function storedUp(name) {
  try {
    const kept = JSON.parse(localStorage.getItem(`ember.up:${name}`) || 'null');
    if (kept && Array.isArray(kept.up) && kept.up.length === 3 && kept.up.every(Number.isFinite) && length(kept.up) > 1e-9) {
      return { choice: String(kept.choice), up: normalize(kept.up) };
    }
  } catch { /* unreadable: not kept */ }
  return null;
}

function fillSelects(h) {
  const cams = state.scene.cameras.map((c) => new Option(`${c.split}: ${c.name}`, String(c.index)));
  cameraSelect.replaceChildren(new Option('free camera', ''), ...cams);
  cameraSelect.disabled = $('camera-prev').disabled = $('camera-next').disabled = !cams.length;
  const previous = shSelect.value;
  const degrees = Array.from({ length: h.sh_degree + 1 }, (_, d) => new Option(String(d), String(d)));
  shSelect.replaceChildren(new Option('all', ''), ...degrees);
  if ([...shSelect.options].some((o) => o.value === previous)) shSelect.value = previous;
}
