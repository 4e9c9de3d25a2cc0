// The overlay over the render: the dataset cameras when "Show cameras" is on (where the view
// shows them and which one the pointer is on; overlay.js projects and draws the frustums), the
// region an edit is being set up with (edit.js), and the axes and ground grid (gizmo.js).

import { add, apply, translationOf } from '/geometry.js';
import { $, canvas, overlay, stage } from '/dom.js';
import { regionColour, regionLines } from '/edit.js';
import { drawAxes, gridLines } from '/gizmo.js';
import { drawFrustums, drawLines, projectFrustums } from '/overlay.js';
import { renderCamera } from '/render.js';
import { cam, state } from '/state.js';

const FRUSTUM_RADII = 0.12;      // a drawn camera's depth, in scene radii

// World point -> CSS pixel of the view through the camera the full frame uses (letterboxed
// as `draw` in view.js shows frames), or null behind it.
function projector() {
  const c = renderCamera('full');
  const t = translationOf(c.rotation, cam.eye);
  const dpr = window.devicePixelRatio || 1;
  const s = Math.min(canvas.width / c.width, canvas.height / c.height);
  const left = (canvas.width - c.width * s) / 2, top = (canvas.height - c.height * s) / 2;
  const near = 1e-3 * state.scene.radius;
  return (p) => {
    const q = add(apply(c.rotation, p), t);
    if (q[2] <= near) return null;
    return [(left + (c.fx * q[0] / q[2] + c.cx) * s) / dpr, (top + (c.fy * q[1] / q[2] + c.cy) * s) / dpr, q[2]];
  };
}

// Each dataset camera as a frustum, FRUSTUM_RADII scene radii deep, and the edit's region.
export function drawOverlay() {
  if (overlay.width !== canvas.width || overlay.height !== canvas.height) {
    overlay.width = canvas.width;
    overlay.height = canvas.height;
  }
  const g = overlay.getContext('2d');
  g.clearRect(0, 0, overlay.width, overlay.height);
  state.overlayCameras = [];
  const { scene } = state;
  if (!scene) return;
  const project = projector();
  const dpr = window.devicePixelRatio || 1;
  drawLines(g, gridLines(), project, 'rgba(200, 200, 210, 0.35)', dpr);
  drawLines(g, regionLines(), project, regionColour(), dpr);
  drawAxes(g, overlay.width, overlay.height, dpr);
  // Beside a photo (compare) the frustums would cover the very view being compared.
  const comparing = stage.classList.contains('compare');
  if (!$('show-cameras').checked || comparing) return;
  const shown = scene.cameras.filter((c) => c.index !== state.datasetIndex);
  state.overlayCameras = projectFrustums(shown, FRUSTUM_RADII * scene.radius, project);
  const css = getComputedStyle(document.documentElement);
  const colour = (index) => {
    if (index === state.hovered) return '#ffffff';
    const c = scene.cameras.find((cc) => cc.index === index);
    return css.getPropertyValue(c.split === 'test' ? '--eval' : '--train').trim();
  };
  drawFrustums(g, state.overlayCameras, colour, state.hovered, window.devicePixelRatio || 1);
}

export function hover(index, x, y) {
  const changed = state.hovered !== index;
  state.hovered = index;
  const tip = $('camera-tip');
  tip.hidden = index === null;
  if (index !== null) {
    const c = state.scene.cameras.find((cc) => cc.index === index);
    if ($('camera-tip-img').getAttribute('src') !== `/thumb/${index}`) $('camera-tip-img').src = `/thumb/${index}`;
    $('camera-tip-name').textContent = `${c.split}: ${c.name}`;
    const pane = canvas.getBoundingClientRect();
    tip.style.left = `${Math.min(x + 14, pane.width - 200)}px`;
    tip.style.top = `${Math.min(y + 14, pane.height - 220)}px`;
  }
  canvas.style.cursor = index === null ? '' : 'pointer';
  if (changed) drawOverlay();
}
