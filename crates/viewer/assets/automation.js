// The automation hooks: window.ember, through which tests drive the page and read what it
// received. Its counters and messages are `ember` in state.js, kept by the other modules;
// this adds the functions.

import { rollOf } from '/geometry.js';
import { jumpTo, setCamera, target } from '/camera.js';
import { pathJson } from '/camera-path.js';
import { axesInView, gridSize } from '/gizmo.js';
import { openFile } from '/open-file.js';
import { renderCamera, sendNow } from '/render.js';
import { cam, ember, state } from '/state.js';
import { curveSeries } from '/training.js';

function jumpToCamera(index) {
  if (!state.scene) return null;
  jumpTo(index);
  return sendNow('full');
}

function requestFrame() {
  return sendNow('full');
}

// The last frame at its own size, as a PNG data URL: what tests compare with the renderer.
function lastFramePng() {
  const { lastBitmap } = state;
  if (!lastBitmap) return null;
  const c = document.createElement('canvas');
  c.width = lastBitmap.width;
  c.height = lastBitmap.height;
  c.getContext('2d').drawImage(lastBitmap, 0, 0);
  return c.toDataURL('image/png');
}

function cameraState() {
  const { scene } = state;
  return { position: cam.eye.slice(), rotation: cam.rot.slice(), target: target(), datasetCamera: state.datasetIndex,
    up: scene ? scene.up.slice() : null, roll: scene ? rollOf(cam.rot, scene.up) : 0, fov: state.fovDeg };
}

// Called first by app.js: window.ember is there before the page listens or connects.
export function installHooks() {
  window.ember = Object.assign(ember, {
    jumpToCamera,
    requestFrame,
    cameraState,
    lastFramePng,
    viewCamera: () => renderCamera('full'),
    setCamera,
    cameraOverlay: () => state.overlayCameras.map(({ index, x, y }) => ({ index, x, y })),
    pathJson,
    curves: curveSeries,
    axes: axesInView,
    gridSpacing: gridSize,
    openFile,
  });
}
