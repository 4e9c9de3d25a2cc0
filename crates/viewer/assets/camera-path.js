// The camera path panel: key views recorded from the view (`path` in state.js, a KeyViews of
// path.js) and saved as the JSON file `trainer render --path` reads, at a chosen frame size and
// with how the page draws (background, SH degree, level of detail).

import { translationOf } from '/geometry.js';
import { $, shSelect } from '/dom.js';
import { log } from '/panel.js';
import { viewSize } from '/render.js';
import { MAX_LOD_PX, cam, path, state } from '/state.js';
import { download } from '/view.js';

const PATH_FPS = 30;

function pathSeconds() {
  const v = Number($('path-seconds').value);
  return Number.isFinite(v) && v > 0 ? v : 2;
}

export function addKeyView() {
  if (!state.scene) return;
  path.add(cam.rot, translationOf(cam.rot, cam.eye), state.fovDeg, viewSize(), pathSeconds());
  updatePathUi();
}

// The frame size the "Size" control asks for (null: the view's, when the first key view was
// added).
function chosenSize() {
  const [w, h] = $('path-size').value.split('x').map(Number);
  return w > 0 && h > 0 ? { width: w, height: h } : null;
}

// How the page draws now, as the path file's `render`.
function renderSettings() {
  const bg = $('background').value;
  const render = { background: [1, 3, 5].map((i) => Number((parseInt(bg.slice(i, i + 2), 16) / 255).toFixed(4))) };
  if (shSelect.value !== '') render.sh_degree = Number(shSelect.value);
  if (state.scene && state.scene.lod) {
    const lod = Number($('lod').value);
    render.lod_threshold = Number.isFinite(lod) ? Math.min(Math.max(lod, 0), MAX_LOD_PX) : state.scene.lod.threshold;
  }
  return render;
}

export const pathJson = () => path.json(PATH_FPS, chosenSize(), renderSettings());

export function updatePathUi() {
  const n = path.keys.length;
  const { width, height } = path.size(chosenSize());
  $('path-summary').textContent = n === 0 ? 'no key views'
    : `${n} key view${n === 1 ? '' : 's'} · ${path.duration().toFixed(1)} s · ${width}×${height}`;
  $('path-undo').disabled = $('path-clear').disabled = $('path-save').disabled = n === 0;
}

export function savePath() {
  download(new Blob([JSON.stringify(pathJson(), null, 1)], { type: 'application/json' }), 'path.json');
  log(`path of ${path.keys.length} key views saved: trainer render SCENE --path path.json --out DIR`);
}
