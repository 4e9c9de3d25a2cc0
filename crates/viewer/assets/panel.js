// The side panel's camera controls kept in step with the view, the status line under it and
// the log.

import { rollOf } from '/geometry.js';
import { jumpTo } from '/camera.js';
import { drawOverlay } from '/dataset-cameras.js';
import { $, cameraSelect, logList, photo, stage, statusLine } from '/dom.js';
import { sendNow } from '/render.js';
import { cam, ember, frameTimes, state } from '/state.js';
import { fmt } from '/training.js';

const LOG_LINES = 8;

export function updateCameraUi() {
  const { scene, datasetIndex } = state;
  if (!scene) return;
  const roll = Math.round((rollOf(cam.rot, scene.up) * 180) / Math.PI);
  $('roll').value = String(roll);
  $('roll-value').textContent = `${roll}°`;
  cameraSelect.value = datasetIndex === null ? '' : String(datasetIndex);
  const show = $('compare').checked && datasetIndex !== null;
  stage.classList.toggle('compare', show);
  drawOverlay();
  $('photo-pane').hidden = !show;
  if (show && photo.getAttribute('src') !== `/photo/${datasetIndex}`) photo.src = `/photo/${datasetIndex}`;
}

export function stepCamera(delta) {
  const { scene } = state;
  if (!scene || !scene.cameras.length) return;
  const list = scene.cameras;
  const at = list.findIndex((c) => c.index === state.lastDataset);
  const next = at < 0 ? (delta > 0 ? 0 : list.length - 1) : (at + delta + list.length) % list.length;
  jumpTo(list[next].index);
  sendNow('full');
}

// The line over the picture: the connection lost or ended, else a finished run's word (the page
// shows its final field), else nothing.
export function updateBanner() {
  const text = state.conn === 'ended' ? state.ended
    : state.conn === 'disconnected' ? 'Disconnected — reconnecting…'
      : state.finished;
  $('banner').textContent = text || '';
  $('banner').hidden = !text;
  $('banner').classList.toggle('finished', state.conn !== 'ended' && state.conn !== 'disconnected' && !!text);
}

export function updateStatusLine() {
  const now = performance.now();
  while (frameTimes.length && frameTimes[0] < now - 1000) frameTimes.shift();
  const parts = [state.conn];
  const f = ember.lastFrame;
  if (f) {
    parts.push(`${f.width}×${f.height}`, `${fmt(f.render_ms, 1)} ms`);
    if (f.step !== null) parts.push(`step ${f.step}`);
  }
  // Idle (no frame in the last second) is not a frame rate of zero.
  if (frameTimes.length) parts.push(`${frameTimes.length} fps`);
  statusLine.textContent = parts.join('  ·  ');
  statusLine.dataset.state = state.conn;
}

export function log(text, kind = 'info') {
  const li = document.createElement('li');
  li.className = kind;
  li.textContent = `${new Date().toLocaleTimeString('en-GB')}  ${text}`;
  logList.prepend(li);
  while (logList.children.length > LOG_LINES) logList.lastElementChild.remove();
}
