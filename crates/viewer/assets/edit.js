// Editing the scene (PROTOCOL.md, "Editing"): a crop box or sphere kept or deleted, opacity and
// size thresholds, undo and redo, and the result downloaded as PLY. The page only describes an
// edit, in `trainer edit`'s terms; the server applies it and tells every page the result. The
// region being set up is drawn over the view (dataset-cameras.js draws the overlay).

import { add, mul } from '/geometry.js';
import { target } from '/camera.js';
import { drawOverlay } from '/dataset-cameras.js';
import { $ } from '/dom.js';
import { log } from '/panel.js';
import { send, sendNow } from '/render.js';
import { ember, state } from '/state.js';

const PREVIEW_DELAY_MS = 120;
const CIRCLE_SEGMENTS = 64;

let previewTimer = 0;

// Three comma- or space-separated finite numbers (`n` of them), else null.
function numbers(text, n) {
  const parts = text.split(/[\s,]+/).filter(Boolean).map(Number);
  return parts.length === n && parts.every(Number.isFinite) ? parts : null;
}

// A number field: its value, null when empty, NaN when it is not a number.
function optional(id) {
  const text = $(id).value.trim();
  return text === '' ? null : Number(text);
}

// A number as the form shows it: six significant digits (the edit uses the digits shown).
const short = (v) => String(Number(v.toPrecision(6)));

// The filter the form describes ({filter} or {problem}: what to fix).
export function formFilter() {
  const filter = { crop_box: null, crop_sphere: null, outside: $('edit-outside').checked,
    min_opacity: optional('edit-min-opacity'), max_scale: optional('edit-max-scale') };
  const region = $('edit-region').value;
  if (region === 'box') {
    const min = numbers($('edit-box-min').value, 3), max = numbers($('edit-box-max').value, 3);
    if (!min || !max) return { problem: 'the box needs three numbers for each corner' };
    filter.crop_box = [...min, ...max];
  } else if (region === 'sphere') {
    const centre = numbers($('edit-sphere-centre').value, 3), radius = Number($('edit-sphere-radius').value);
    if (!centre || !(radius > 0)) return { problem: 'the sphere needs a centre (three numbers) and a radius > 0' };
    filter.crop_sphere = [...centre, radius];
  } else {
    filter.outside = false;
  }
  if (Number.isNaN(filter.min_opacity) || Number.isNaN(filter.max_scale)) return { problem: 'a threshold is not a number' };
  if (!filter.crop_box && !filter.crop_sphere && filter.min_opacity === null && filter.max_scale === null) {
    return { problem: 'choose a region or a threshold' };
  }
  return { filter };
}

// The hello's editing state: the panel shows where the server edits the scene. (The hello
// itself asks for the first frame, once the camera is placed.)
export function onEditHello(edits) {
  $('edit').hidden = !edits;
  // A server that edits its scene also opens files dropped on the page (open-file.js).
  $('open-hint').hidden = !edits;
  ember.edits = null;
  if (edits) showEdits(edits);
}

// The server's `edits` message: the scene as edited now, drawn anew.
export function onEdits(msg) {
  const before = ember.edits;
  showEdits(msg);
  if (before && before.gaussians !== msg.gaussians) {
    log(`scene edited: ${msg.gaussians.toLocaleString('en-US')} Gaussians (${(msg.original - msg.gaussians).toLocaleString('en-US')} of ${msg.original.toLocaleString('en-US')} removed)`);
  }
  sendNow('full');
}

function showEdits(msg) {
  // A run's viewer allows editing once training has ended: the panel appears then.
  $('edit').hidden = false;
  ember.edits = msg;
  $('scene-gaussians').textContent = msg.gaussians.toLocaleString('en-US');
  $('edit-undo').disabled = !msg.applied.length;
  $('edit-redo').disabled = !msg.redo;
  const removed = msg.original - msg.gaussians;
  $('edit-summary').textContent = msg.applied.length
    ? `${msg.applied.length} edit${msg.applied.length > 1 ? 's' : ''}: ${removed.toLocaleString('en-US')} of ${msg.original.toLocaleString('en-US')} Gaussians removed`
    : 'not edited';
  $('edit-list').replaceChildren(...msg.applied.map((e) => {
    const item = document.createElement('li');
    const code = document.createElement('code');
    code.textContent = e.flags;
    item.append(code, ` (−${e.removed.toLocaleString('en-US')})`);
    return item;
  }));
  schedulePreview();
}

// The server's answer to a preview.
export function onEditPreview(msg) {
  ember.editPreview = msg;
  const removed = msg.gaussians - msg.kept;
  $('edit-preview').textContent = `keeps ${msg.kept.toLocaleString('en-US')} of ${msg.gaussians.toLocaleString('en-US')} (removes ${removed.toLocaleString('en-US')})`;
  // An edit that removes nothing would only fill the undo list.
  $('edit-apply').disabled = msg.kept === 0 || msg.kept === msg.gaussians;
}

function schedulePreview() {
  clearTimeout(previewTimer);
  previewTimer = setTimeout(preview, PREVIEW_DELAY_MS);
}

function preview() {
  if ($('edit').hidden) return;
  const { filter, problem } = formFilter();
  $('edit-apply').disabled = !filter;
  if (!filter) { $('edit-preview').textContent = problem; ember.editPreview = null; return; }
  send({ type: 'edit_preview', filter });
}

function apply() {
  const { filter, problem } = formFilter();
  if (!filter) { log(`edit: ${problem}`, 'error'); return; }
  send({ type: 'edit', filter });
}

// A region of the scene's size around the orbit target, when the region is first chosen or
// moved there (a double click sets the target on a surface: the region then holds it).
function placeRegion(always) {
  const { scene } = state;
  if (!scene) return;
  const at = target(), half = 0.25 * scene.radius;
  const text = (p) => p.map(short).join(', ');
  if ($('edit-region').value === 'box' && (always || !numbers($('edit-box-min').value, 3))) {
    $('edit-box-min').value = text(add(at, [-half, -half, -half]));
    $('edit-box-max').value = text(add(at, [half, half, half]));
  }
  if ($('edit-region').value === 'sphere' && (always || !numbers($('edit-sphere-centre').value, 3))) {
    $('edit-sphere-centre').value = text(at);
    $('edit-sphere-radius').value = short(half);
  }
}

function showRegionInputs() {
  const region = $('edit-region').value;
  $('edit-box').hidden = region !== 'box';
  $('edit-sphere').hidden = region !== 'sphere';
  $('edit-outside').disabled = $('edit-here').disabled = region === 'none';
}

// The region of the form as world-space polylines (box edges, or the sphere's three great
// circles), for the overlay; none when the form holds no region.
export function regionLines() {
  if ($('edit').hidden) return [];
  const { filter } = formFilter();
  if (filter && filter.crop_box) {
    const [x0, y0, z0, x1, y1, z1] = filter.crop_box;
    const c = (i) => [i & 1 ? x1 : x0, i & 2 ? y1 : y0, i & 4 ? z1 : z0];
    const edges = [[0, 1], [2, 3], [4, 5], [6, 7], [0, 2], [1, 3], [4, 6], [5, 7], [0, 4], [1, 5], [2, 6], [3, 7]];
    return edges.map(([a, b]) => [c(a), c(b)]);
  }
  if (filter && filter.crop_sphere) {
    const [x, y, z, r] = filter.crop_sphere;
    const axes = [[[1, 0, 0], [0, 1, 0]], [[0, 1, 0], [0, 0, 1]], [[0, 0, 1], [1, 0, 0]]];
    return axes.map(([u, v]) => Array.from({ length: CIRCLE_SEGMENTS + 1 }, (_, i) => {
      const a = (i / CIRCLE_SEGMENTS) * 2 * Math.PI;
      return add([x, y, z], add(mul(u, r * Math.cos(a)), mul(v, r * Math.sin(a))));
    }));
  }
  return [];
}

// The overlay colour of the region: what it deletes, or what it keeps.
export const regionColour = () => ($('edit-outside').checked ? '#ff5a4f' : '#4fd18b');

export function listenToEditing() {
  const changed = () => { schedulePreview(); drawOverlay(); };
  for (const id of ['edit-box-min', 'edit-box-max', 'edit-sphere-centre', 'edit-sphere-radius',
    'edit-min-opacity', 'edit-max-scale']) {
    $(id).addEventListener('input', changed);
  }
  $('edit-outside').addEventListener('change', changed);
  $('edit-region').addEventListener('change', () => { showRegionInputs(); placeRegion(false); changed(); });
  $('edit-here').addEventListener('click', () => { placeRegion(true); changed(); });
  $('edit-apply').addEventListener('click', apply);
  $('edit-undo').addEventListener('click', () => send({ type: 'undo' }));
  $('edit-redo').addEventListener('click', () => send({ type: 'redo' }));
  // Ctrl+Z / Ctrl+Shift+Z (or Ctrl+Y) undo and redo edits, outside text fields.
  window.addEventListener('keydown', (e) => {
    if ($('edit').hidden || !(e.ctrlKey || e.metaKey) || e.target.closest('input, select, textarea')) return;
    const key = e.key.toLowerCase();
    if (key === 'z' || key === 'y') {
      e.preventDefault();
      send({ type: key === 'y' || e.shiftKey ? 'redo' : 'undo' });
    }
  });
  showRegionInputs();
}
