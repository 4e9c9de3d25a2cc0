// Render requests (PROTOCOL.md): the camera as the server should render it, and when to ask
// for a frame: small ones each animation frame while the view moves, a full-size one once it
// rests.

import { clamp, radians, translationOf } from '/geometry.js';
import { datasetCamera, flyStep, keepView } from '/camera.js';
import { $, canvas, shSelect } from '/dom.js';
import { updateCameraUi } from '/panel.js';
import { MAX_LOD_PX, cam, held, sched, state } from '/state.js';
import { syncCanvasSize } from '/view.js';

const SETTLE_MS = 150;           // the full-size frame follows the last movement by this much
const MAX_FULL_SIDE = 1920;      // long side of a full-size request
const MIN_SIDE = 16;             // the server's limits per side
const MAX_SIDE = 4096;

// The full request size: the canvas's CSS size times devicePixelRatio, long side capped.
export function viewSize() {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth * dpr, h = canvas.clientHeight * dpr;
  const k = Math.min(1, MAX_FULL_SIDE / Math.max(w, h, 1));
  return { w: Math.max(MIN_SIDE, Math.round(w * k)), h: Math.max(MIN_SIDE, Math.round(h * k)) };
}

const side = (x) => clamp(Math.round(x), MIN_SIDE, MAX_SIDE);

// kind: 'quick' (half size, while moving), 'full', or 'shot' (screenshot).
export function renderCamera(kind) {
  const area = viewSize();
  const base = { rotation: cam.rot.slice(), translation: translationOf(cam.rot, cam.eye) };
  const c = datasetCamera();
  if (c) {
    let s = kind === 'shot'
      ? Math.min(1, MAX_SIDE / Math.max(c.width, c.height))
      : Math.min(area.w / c.width, area.h / c.height);
    if (kind === 'quick') s /= 2;
    const width = side(c.width * s), height = side(c.height * s);
    const k = width / c.width;
    return { ...base, fx: c.fx * k, fy: c.fy * k, cx: c.cx * k, cy: c.cy * k, width, height };
  }
  let { w, h } = area;
  if (kind === 'quick') { w /= 2; h /= 2; }
  if (kind === 'shot') {
    const k = Math.min(2, MAX_SIDE / Math.max(w, h));
    w *= k; h *= k;
  }
  const width = side(w), height = side(h);
  const f = height / 2 / Math.tan(radians(state.fovDeg) / 2);
  return { ...base, fx: f, fy: f, cx: width / 2, cy: height / 2, width, height };
}

export function send(message) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN) return false;
  state.ws.send(JSON.stringify(message));
  return true;
}

// `pick`, if given, maps the frame's camera to a pixel of it whose surface point the server
// should find (a double click).
function sendRender(kind, pick = null) {
  if (!state.scene) return null;
  syncCanvasSize();
  const bg = $('background').value;
  const message = {
    type: 'render',
    id: state.nextId + 1,
    camera: renderCamera(kind),
    background: [1, 3, 5].map((i) => parseInt(bg.slice(i, i + 2), 16) / 255),
    sh_degree: shSelect.value === '' ? null : Number(shSelect.value),
    centres: $('centres').checked,
    view: $('view-mode').value,
    format: kind === 'shot' ? 'png' : 'jpeg',
  };
  if (state.scene.lod) {
    const lod = Number($('lod').value);
    message.lod_threshold = Number.isFinite(lod) ? Math.min(Math.max(lod, 0), MAX_LOD_PX) : null;
  }
  if (pick) message.pick = pick(message.camera);
  if (!send(message)) return null;
  if (kind === 'full') keepView();
  state.nextId = message.id;
  state.lastSentAt = performance.now();
  return message.id;
}

// Sends now, dropping whatever the animation frame would have sent.
export function sendNow(kind, pick = null) {
  clearTimeout(sched.settle);
  sched.settle = 0;
  sched.quick = sched.full = false;
  return sendRender(kind, pick);
}

// The camera moved: small frames each animation frame, a full one once it rests.
export function moved() {
  state.datasetIndex = null;
  updateCameraUi();
  sched.quick = true;
  clearTimeout(sched.settle);
  sched.settle = setTimeout(() => { sched.settle = 0; invalidate(); }, SETTLE_MS);
  wake();
}

export function invalidate() { sched.full = true; wake(); }
export function wake() { if (!sched.raf) sched.raf = requestAnimationFrame(tick); }

function tick(now) {
  sched.raf = 0;
  if (state.flyMode && held.size && state.scene) flyStep(now);
  else sched.flyTime = null;
  if (sched.quick || sched.full) {
    sendRender(sched.settle ? 'quick' : 'full');
    sched.quick = sched.full = false;
  }
  if (held.size) wake();
}
