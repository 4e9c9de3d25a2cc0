// The view: frames drawn on the canvas as they come (PROTOCOL.md, "Binary: a frame"), the
// answer to a double click's pick, and screenshots.

import { clamp } from '/geometry.js';
import { orbitAround } from '/camera.js';
import { canvas, ctx } from '/dom.js';
import { decodeFrame } from '/frame.js';
import { log, updateStatusLine } from '/panel.js';
import { sendNow, viewSize } from '/render.js';
import { ember, frameTimes, state } from '/state.js';

const decoder = new TextDecoder();

// Returns whether the backing store changed (which also clears it).
export function syncCanvasSize() {
  const { w, h } = viewSize();
  if (canvas.width === w && canvas.height === h) return false;
  canvas.width = w;
  canvas.height = h;
  draw();
  return true;
}

// Letterboxed, so a dataset camera's aspect lines up with the photo (object-fit: contain).
function draw() {
  const { lastBitmap } = state;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!lastBitmap) return;
  const s = Math.min(canvas.width / lastBitmap.width, canvas.height / lastBitmap.height);
  const w = lastBitmap.width * s, h = lastBitmap.height * s;
  ctx.imageSmoothingQuality = 'high';
  ctx.drawImage(lastBitmap, (canvas.width - w) / 2, (canvas.height - h) / 2, w, h);
}

export async function onFrame(buffer) {
  const n = buffer.byteLength >= 4 ? new DataView(buffer).getUint32(0, true) : -1;
  if (n < 0 || 4 + n > buffer.byteLength) throw new Error('frame shorter than its header');
  const header = JSON.parse(decoder.decode(new Uint8Array(buffer, 4, n)));
  const bytes = new Uint8Array(buffer, 4 + n);
  if (state.shotId !== null && header.id === state.shotId) saveScreenshot(bytes);
  else if (state.shotId !== null && header.id > state.shotId) {
    log('screenshot skipped: the view moved before it was rendered', 'error');
    state.shotId = null;
  }
  if (header.pick) onPick(header.pick);
  if (header.id < state.lastDrawnId) return;
  const bitmap = await decodeFrame(header, bytes);
  // Decoding is asynchronous, so a newer frame may have been drawn meanwhile.
  if (header.id < state.lastDrawnId) { bitmap.close(); return; }
  state.lastDrawnId = header.id;
  if (state.lastBitmap) state.lastBitmap.close();
  state.lastBitmap = bitmap;
  draw();
  ember.framesReceived += 1;
  ember.lastFrame = { id: header.id, width: header.width, height: header.height,
    render_ms: header.render_ms, step: header.step ?? null };
  frameTimes.push(performance.now());
  updateStatusLine();
}

// A double click's answer: orbit around the surface point, if the pixel showed one.
function onPick(pick) {
  if (pick.point) {
    orbitAround(pick.point);
    log('orbit centre set on the surface under the cursor');
  } else {
    log('nothing under the cursor to orbit around', 'error');
  }
}

// The pixel of a frame through `camera` at the CSS point (x, y) of the view, which shows
// the frame letterboxed.
export function framePixel(camera, x, y) {
  const dpr = window.devicePixelRatio || 1;
  const s = Math.min(canvas.width / camera.width, canvas.height / camera.height);
  const left = (canvas.width - camera.width * s) / 2, top = (canvas.height - camera.height * s) / 2;
  const px = clamp((x * dpr - left) / s, 0, camera.width - 0.001);
  const py = clamp((y * dpr - top) / s, 0, camera.height - 0.001);
  return [px, py];
}

// Hands `blob` to the browser as a download named `name`.
export function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  // The download reads the URL asynchronously; give it time before freeing the blob.
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function saveScreenshot(bytes) {
  state.shotId = null;
  download(new Blob([bytes], { type: 'image/png' }), 'ember-screenshot.png');
  log('screenshot saved');
}

export function takeScreenshot() {
  const id = sendNow('shot');
  if (id === null) { log('screenshot: not connected', 'error'); return; }
  state.shotId = id;
  log('rendering screenshot…');
}
