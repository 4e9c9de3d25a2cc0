// Input: the pointer, wheel and keys on the view, and the side panel's controls. Nothing is
// listened to until app.js calls listenToView and listenToControls, once every module is loaded.

import { centerOf, dot, length, radians, row, sub } from '/geometry.js';
import {
  fitScene, jumpTo, look, orbit, pan, resetCamera, resetUp, setFov, setRoll, setUp, zoom,
} from '/camera.js';
import { addKeyView, savePath, updatePathUi } from '/camera-path.js';
import { drawOverlay, hover } from '/dataset-cameras.js';
import { $, cameraSelect, canvas, fovInput, photo, shSelect } from '/dom.js';
import { cameraAt } from '/overlay.js';
import { log, stepCamera, updateCameraUi, updateStatusLine } from '/panel.js';
import { invalidate, moved, renderCamera, send, sendNow, wake } from '/render.js';
import { MAX_LOD_PX, cam, ember, held, path, state } from '/state.js';
import { scheduleCurves } from '/training.js';
import { framePixel, syncCanvasSize, takeScreenshot } from '/view.js';

const ZOOM_PER_PX = 0.0015;      // wheel pixels to log-distance
const HOVER_PX = 14;             // how near a drawn camera the pointer picks it
const CLICK_SLOP_PX = 3;         // a press that moves less than this is a click, not a drag
const MOVE_KEYS = new Set(['KeyW', 'KeyA', 'KeyS', 'KeyD', 'KeyQ', 'KeyE']);

let press = null;                // where a press began, to tell a click from a drag

const endDrag = (e) => {
  if (!state.drag || e.pointerId !== state.drag.id) return;
  state.drag = null;
  canvas.classList.remove('dragging');
  // A click (no drag) on a drawn camera flies to it.
  const still = press && Math.hypot(e.clientX - press.x, e.clientY - press.y) < CLICK_SLOP_PX;
  if (e.type === 'pointerup' && still && press.camera !== null) {
    jumpTo(press.camera);
    sendNow('full');
  }
  press = null;
};

// Keys go to the view unless a control that uses letters has the focus.
const typing = (el) => el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement ||
  (el instanceof HTMLInputElement && !['checkbox', 'button', 'range', 'color'].includes(el.type));

// The help shows until the view is first used, then stays away (on this browser) until asked.
function hideHelp() {
  if ($('help').hidden) return;
  $('help').hidden = true;
  try { localStorage.setItem('ember.helpSeen', '1'); } catch { /* not kept */ }
}

function toggleHelp() {
  if ($('help').hidden) $('help').hidden = false;
  else hideHelp();
}

function setFly(on) {
  state.flyMode = on;
  $('fly').checked = on;
  held.clear();
}

export function listenToView() {
  canvas.addEventListener('pointerdown', (e) => {
    if (state.drag || !state.scene) return;
    const panning = e.button === 2 || (e.button === 0 && e.shiftKey);
    if (!panning && e.button !== 0) return;
    // Let the keys reach the view again after a control had the focus.
    if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
    hideHelp();
    press = { x: e.clientX, y: e.clientY, camera: state.hovered };
    hover(null, 0, 0);
    state.drag = { id: e.pointerId, x: e.clientX, y: e.clientY, mode: panning ? 'pan' : state.flyMode ? 'look' : 'orbit' };
    // Synthetic pointers (scripted events) cannot be captured; the drag still works inside.
    try { canvas.setPointerCapture(e.pointerId); } catch { /* not a live pointer */ }
    canvas.classList.add('dragging');
  });

  canvas.addEventListener('pointermove', (e) => {
    const { drag } = state;
    if (!drag && state.scene && $('show-cameras').checked) {
      const box = canvas.getBoundingClientRect();
      const x = e.clientX - box.left, y = e.clientY - box.top;
      hover(cameraAt(state.overlayCameras, x, y, HOVER_PX), x, y);
    }
    if (!drag || e.pointerId !== drag.id) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!dx && !dy) return;
    drag.x = e.clientX;
    drag.y = e.clientY;
    if (drag.mode === 'pan') pan(dx, dy);
    else if (drag.mode === 'look') look(dx, dy);
    else orbit(dx, dy);
    moved();
  });

  canvas.addEventListener('pointerup', endDrag);
  canvas.addEventListener('pointercancel', endDrag);
  canvas.addEventListener('lostpointercapture', endDrag);
  canvas.addEventListener('contextmenu', (e) => e.preventDefault());
  canvas.addEventListener('pointerleave', () => { if (!state.drag) hover(null, 0, 0); });

  // Double click: the orbit centre goes to the surface under the cursor (the server finds it
  // in the depth of a frame rendered for the purpose).
  canvas.addEventListener('dblclick', (e) => {
    if (!state.scene) return;
    const box = canvas.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    if (sendNow('full', (camera) => framePixel(camera, x, y)) === null) log('not connected', 'error');
  });

  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    if (!state.scene) return;
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? canvas.clientHeight : 1;
    zoom(Math.exp(e.deltaY * unit * ZOOM_PER_PX));
    hideHelp();
    moved();
  }, { passive: false });

  window.addEventListener('keydown', (e) => {
    state.fast = e.shiftKey;
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (MOVE_KEYS.has(e.code) && state.flyMode) {
      held.add(e.code);
      wake();
      e.preventDefault();
      return;
    }
    if (e.repeat) return;
    if (e.code === 'KeyF') setFly(!state.flyMode);
    else if (e.code === 'KeyR' && state.scene) { resetUp(); resetCamera(); sendNow('full'); }
    else if (e.code === 'KeyG' && state.scene) { fitScene(); sendNow('full'); }
    else if (e.code === 'KeyH' || e.key === '?') toggleHelp();
  });
  window.addEventListener('keyup', (e) => { state.fast = e.shiftKey; held.delete(e.code); });
  window.addEventListener('blur', () => held.clear());
}

// The view's camera as JSON (the full-size frame's, the form `trainer render --camera` reads),
// to the clipboard; where the page may not write it (plain HTTP off loopback), into a prompt to
// copy from.
function copyCamera() {
  if (!state.scene) return;
  const text = JSON.stringify(renderCamera('full'));
  ember.copiedCamera = text;
  const done = () => log('camera copied as JSON (trainer render --camera)');
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => window.prompt('The camera as JSON', text));
  } else {
    window.prompt('The camera as JSON', text);
  }
}

export function listenToControls() {
  cameraSelect.addEventListener('change', () => {
    if (!state.scene) return;
    if (cameraSelect.value === '') { state.datasetIndex = null; updateCameraUi(); }
    else jumpTo(Number(cameraSelect.value));
    sendNow('full');
    // The list keeps the keys (type-ahead) while focused: hand them back to the view.
    cameraSelect.blur();
  });
  $('camera-prev').addEventListener('click', () => stepCamera(-1));
  $('camera-next').addEventListener('click', () => stepCamera(1));
  $('reset').addEventListener('click', () => { if (state.scene) { resetCamera(); sendNow('full'); } });
  $('compare').addEventListener('change', () => {
    const { scene } = state;
    // The photos belong to the dataset cameras: from a free view, go to the nearest one.
    if ($('compare').checked && state.datasetIndex === null && scene && scene.cameras.length) {
      const forward = row(cam.rot, 2);
      const score = (c) => length(sub(centerOf(c), cam.eye)) / scene.radius + (1 - dot(row(c.rotation, 2), forward));
      const nearest = scene.cameras.reduce((a, b) => (score(b) < score(a) ? b : a));
      jumpTo(nearest.index);
      sendNow('full');
      log(`compare: moved to the nearest dataset camera, ${nearest.name}`);
    }
    updateCameraUi();
  });
  $('fit').addEventListener('click', () => { if (state.scene) { fitScene(); sendNow('full'); } });
  $('show-cameras').addEventListener('change', () => { hover(null, 0, 0); drawOverlay(); });
  $('show-axes').addEventListener('change', drawOverlay);
  $('show-grid').addEventListener('change', drawOverlay);
  $('up-axis').addEventListener('change', () => { if (state.scene) setUp($('up-axis').value); $('up-axis').blur(); });
  $('roll').addEventListener('input', () => {
    if (!state.scene) return;
    setRoll(radians(Number($('roll').value)));
    moved();
  });
  $('help-toggle').addEventListener('click', toggleHelp);
  $('path-add').addEventListener('click', addKeyView);
  $('path-undo').addEventListener('click', () => { path.keys.pop(); updatePathUi(); });
  $('path-clear').addEventListener('click', () => { path.clear(); updatePathUi(); });
  $('path-save').addEventListener('click', savePath);
  $('path-size').addEventListener('change', () => { updatePathUi(); $('path-size').blur(); });
  $('fly').addEventListener('change', (e) => setFly(e.target.checked));
  fovInput.addEventListener('input', () => {
    setFov(Number(fovInput.value));
    if (state.scene) moved();
  });
  $('background').addEventListener('input', invalidate);
  shSelect.addEventListener('change', invalidate);
  $('centres').addEventListener('change', invalidate);
  $('view-mode').addEventListener('change', () => { invalidate(); $('view-mode').blur(); });
  // The field shows what is drawn: past the range it is clamped, empty or unreadable it goes
  // back to the server's threshold, not to a silent 0.
  $('lod').addEventListener('change', () => {
    const field = $('lod');
    const value = field.value.trim() === '' ? NaN : Number(field.value);
    const fallback = state.scene && state.scene.lod ? state.scene.lod.threshold : 0;
    field.value = String(Number.isFinite(value) ? Math.min(Math.max(value, 0), MAX_LOD_PX) : fallback);
    invalidate();
  });
  $('screenshot').addEventListener('click', takeScreenshot);
  $('copy-camera').addEventListener('click', copyCamera);
  $('pause').addEventListener('click', () => send({ type: ember.lastStatus?.paused ? 'resume' : 'pause' }));
  $('checkpoint').addEventListener('click', () => {
    if (send({ type: 'checkpoint' })) log('checkpoint requested');
  });
  $('panel-toggle').addEventListener('click', () => {
    $('panel').hidden = !$('panel').hidden;
    document.body.classList.toggle('panel-hidden', $('panel').hidden);
  });
  $('training').addEventListener('toggle', scheduleCurves);
  photo.addEventListener('error', () => {
    if (photo.getAttribute('src')) log('no photo for this camera', 'error');
  });

  // Layout changes (window, panel, compare split) resize the canvas: re-request at the new size.
  new ResizeObserver(() => { if (syncCanvasSize() && state.scene) { drawOverlay(); invalidate(); } }).observe(canvas);
  new ResizeObserver(scheduleCurves).observe($('psnr-curve'));
  setInterval(updateStatusLine, 1000);
}
