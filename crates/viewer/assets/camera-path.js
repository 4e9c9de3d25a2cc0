// The camera path panel: key views recorded from the view (`path` in state.js, a KeyViews of
// path.js) and saved as the JSON file `trainer render --path` reads.

import { translationOf } from '/geometry.js';
import { $ } from '/dom.js';
import { log } from '/panel.js';
import { viewSize } from '/render.js';
import { cam, path, state } from '/state.js';
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

export const pathJson = () => path.json(PATH_FPS);

export function updatePathUi() {
  const n = path.keys.length;
  $('path-summary').textContent = n === 0 ? 'no key views'
    : `${n} key view${n === 1 ? '' : 's'} · ${path.duration().toFixed(1)} s · ${path.width}×${path.height}`;
  $('path-undo').disabled = $('path-clear').disabled = $('path-save').disabled = n === 0;
}

export function savePath() {
  download(new Blob([JSON.stringify(pathJson(), null, 1)], { type: 'application/json' }), 'path.json');
  log(`path of ${path.keys.length} key views saved: trainer render SCENE --path path.json --out DIR`);
}
