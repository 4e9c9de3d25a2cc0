// The camera and how it moves: orbit, look, pan, zoom and fly, and the views it is set to (a
// dataset camera, the scene's home, a fit of the whole scene, a new up).

import {
  add, sub, mul, dot, cross, length, normalize, row, apply, centerOf, clamp, radians,
  axisRotation, lookAt, orthonormalize, rollOf, withRoll,
} from '/geometry.js';
import { $, canvas, fovInput } from '/dom.js';
import { updateCameraUi } from '/panel.js';
import { moved, sendNow, viewSize } from '/render.js';
import { DEFAULT_FOV, cam, ember, held, sched, state } from '/state.js';

const ORBIT_RAD_PER_PX = 0.005;
const LOOK_RAD_PER_PX = 0.003;
const FLY_RADII_PER_S = 0.5;
const FLY_FAST = 4;
const MAX_ELEVATION = (85 * Math.PI) / 180;  // yaw about `up` degenerates at the poles
const MIN_DIST_RADII = 1e-3;
const HOME_ELEVATION = (20 * Math.PI) / 180;  // a scene without cameras is first seen from above by this much
const FIT_MARGIN = 1.05;         // "fit" leaves this much room around the scene's sphere
const AXES = { '+x': [1, 0, 0], '-x': [-1, 0, 0], '+y': [0, 1, 0], '-y': [0, -1, 0], '+z': [0, 0, 1], '-z': [0, 0, -1] };

export const target = () => add(cam.eye, mul(row(cam.rot, 2), cam.dist));
const minDist = () => MIN_DIST_RADII * state.scene.radius;

function rotateAbout(pivot, m) {
  cam.eye = add(pivot, apply(m, sub(cam.eye, pivot)));
  cam.rot = orthonormalize([...apply(m, row(cam.rot, 0)), ...apply(m, row(cam.rot, 1)), ...apply(m, row(cam.rot, 2))]);
}

// Yaw about `up`, then pitch about the horizontal right axis with the forward axis kept off
// the poles (a camera already past the limit may only move back towards the horizon).
function turn(yaw, pitch, pivot) {
  const up = state.scene.up;
  rotateAbout(pivot, axisRotation(up, yaw));
  const forward = row(cam.rot, 2);
  const elevation = Math.asin(clamp(dot(forward, up), -1, 1));
  const next = clamp(elevation + pitch, Math.min(-MAX_ELEVATION, elevation), Math.max(MAX_ELEVATION, elevation));
  let axis = cross(forward, up);
  if (length(axis) < 1e-9) axis = row(cam.rot, 0);
  rotateAbout(pivot, axisRotation(normalize(axis), next - elevation));
}

// Drags follow the convention of grabbing the scene: it turns and slides with the pointer.
export function orbit(dx, dy) { turn(-dx * ORBIT_RAD_PER_PX, -dy * ORBIT_RAD_PER_PX, target()); }
export function look(dx, dy) { turn(-dx * LOOK_RAD_PER_PX, -dy * LOOK_RAD_PER_PX, cam.eye); }

export function pan(dx, dy) {
  // World units per CSS pixel at the target's depth, so the target tracks the pointer.
  const s = (cam.dist * 2 * Math.tan(radians(state.fovDeg) / 2)) / Math.max(1, canvas.clientHeight);
  cam.eye = add(cam.eye, add(mul(row(cam.rot, 0), -dx * s), mul(row(cam.rot, 1), -dy * s)));
}

export function zoom(factor) {
  const t = target();
  cam.dist = Math.max(minDist(), cam.dist * factor);
  cam.eye = sub(t, mul(row(cam.rot, 2), cam.dist));
}

export function flyStep(now) {
  const { scene } = state;
  const dt = sched.flyTime === null ? 1 / 60 : Math.min(0.1, (now - sched.flyTime) / 1000);
  sched.flyTime = now;
  const axes = { KeyW: row(cam.rot, 2), KeyS: mul(row(cam.rot, 2), -1), KeyD: row(cam.rot, 0),
    KeyA: mul(row(cam.rot, 0), -1), KeyE: scene.up, KeyQ: mul(scene.up, -1) };
  let d = [0, 0, 0];
  for (const code of held) d = add(d, axes[code]);
  if (length(d) < 1e-9) return;
  const speed = FLY_RADII_PER_S * scene.radius * (state.fast ? FLY_FAST : 1);
  cam.eye = add(cam.eye, mul(normalize(d), speed * dt));
  moved();
}

export function datasetCamera() {
  return state.datasetIndex === null ? null : state.scene.cameras.find((c) => c.index === state.datasetIndex);
}

export function jumpTo(index) {
  const { scene } = state;
  const c = scene.cameras.find((cc) => cc.index === index);
  if (!c) throw new RangeError(`no dataset camera ${index}`);
  cam.rot = c.rotation.slice();
  cam.eye = centerOf(c);
  cam.dist = Math.max(minDist(), length(sub(cam.eye, scene.target)));
  state.datasetIndex = state.lastDataset = c.index;
  // Match the slider to the camera's vertical field of view, so moving off it keeps the framing.
  setFov(clamp((2 * Math.atan(c.height / 2 / c.fy) * 180) / Math.PI, 20, 120));
  updateCameraUi();
}

// A scene without dataset cameras: from the side the server names (`front`), a little above,
// framing the whole scene.
function orbitHome() {
  const { scene } = state;
  const { up } = scene;
  const front = normalize(sub(scene.front, mul(up, dot(scene.front, up))));
  const look = mul(add(mul(front, Math.cos(HOME_ELEVATION)), mul(up, Math.sin(HOME_ELEVATION))), -1);
  setFov(DEFAULT_FOV);
  cam.rot = lookAt([0, 0, 0], look, up);
  state.datasetIndex = null;
  fitScene();
}

// The first training camera's view, levelled when its photo is stored turned (a quarter
// turn, most often) against the scene's up.
export function resetCamera() {
  const { scene } = state;
  if (scene.home === null) { orbitHome(); return; }
  jumpTo(scene.home);
  if (Math.abs(rollOf(cam.rot, scene.up)) > radians(20)) {
    setRoll(0);
    state.datasetIndex = null;
    updateCameraUi();
  }
}

// The sphere around the scene's Gaussians (outliers left out), else around the orbit target.
function sceneSphere() {
  const { scene } = state;
  const b = scene.bounds;
  if (!b) return { centre: scene.target, r: scene.radius };
  return { centre: mul(add(b.min, b.max), 0.5), r: Math.max(1e-6, length(sub(b.max, b.min)) / 2) };
}

// The median distance of the dataset cameras from the orbit target: how far the photos stood.
function photoDistance() {
  const { scene } = state;
  const d = scene.cameras.map((c) => length(sub(centerOf(c), scene.target))).sort((a, b) => a - b);
  return d.length ? d[Math.floor(d.length / 2)] : null;
}

// Frames the scene from the current direction: a capture (with dataset cameras) as its photos
// frame it, looking at the point they look at from their median distance (its Gaussians reach
// far into the background: their bounds would back the view out behind them); a bare file, its
// sphere.
export function fitScene() {
  const { scene } = state;
  const distance = photoDistance();
  if (distance !== null && distance > minDist()) {
    cam.dist = distance;
    cam.eye = sub(scene.target, mul(row(cam.rot, 2), cam.dist));
    state.datasetIndex = null;
    updateCameraUi();
    return;
  }
  const { centre, r } = sceneSphere();
  const { w, h } = viewSize();
  const vertical = radians(state.fovDeg);
  const horizontal = 2 * Math.atan(Math.tan(vertical / 2) * (w / h));
  cam.dist = Math.max(minDist(), (FIT_MARGIN * r) / Math.sin(Math.min(vertical, horizontal) / 2));
  cam.eye = sub(centre, mul(row(cam.rot, 2), cam.dist));
  state.datasetIndex = null;
  updateCameraUi();
}

export function setRoll(angle) { cam.rot = withRoll(cam.rot, state.scene.up, angle); }

// A new up: the view keeps its eye and target and is levelled; remembered for this scene.
// Back to the scene's own up (the one the server found), forgetting a choice made here.
export function resetUp() {
  const { scene } = state;
  if (scene.upChoice === 'scene') return;
  scene.up = scene.sceneUp;
  scene.upChoice = 'scene';
  try { localStorage.removeItem(`ember.up:${ember.hello.name}`); } catch { /* not kept */ }
  $('up-axis').value = 'scene';
}

export function setUp(choice) {
  const { scene } = state;
  const up = choice === 'scene' ? scene.sceneUp : choice === 'view' ? mul(row(cam.rot, 1), -1) : AXES[choice];
  if (!up || length(up) < 1e-9) return;
  scene.up = normalize(up);
  scene.upChoice = choice;
  const t = target();
  cam.rot = lookAt(cam.eye, t, scene.up);
  try {
    localStorage.setItem(`ember.up:${ember.hello.name}`, JSON.stringify({ choice, up: scene.up }));
  } catch { /* storage refused (private mode): the choice lasts for this page */ }
  $('up-axis').value = choice;
  moved();
}

// Sets the view from an eye and a point to look at (level with up).
export function setCamera(eye, at) {
  cam.eye = eye.slice();
  cam.rot = lookAt(eye, at, state.scene.up);
  cam.dist = Math.max(minDist(), length(sub(at, eye)));
  state.datasetIndex = null;
  updateCameraUi();
  return sendNow('full');
}

// The orbit centre moves to `point`: the view turns to it (keeping its roll).
export function orbitAround(point) {
  const roll = rollOf(cam.rot, state.scene.up);
  cam.rot = lookAt(cam.eye, point, state.scene.up);
  setRoll(roll);
  cam.dist = Math.max(minDist(), length(sub(point, cam.eye)));
  moved();
}

// The view kept for a reload of this tab (sessionStorage: a new tab opens at home), per scene.
const keptViewKey = (name) => `ember.view:${name}`;

export function keepView() {
  if (!ember.hello) return;
  const view = { eye: cam.eye, rot: cam.rot, dist: cam.dist, fov: state.fovDeg, dataset: state.datasetIndex };
  try { sessionStorage.setItem(keptViewKey(ember.hello.name), JSON.stringify(view)); } catch { /* not kept */ }
}

// Puts back the view kept for scene `name` before a reload; false when there is none (or it
// does not read as a view).
export function restoreView(name) {
  let view;
  try { view = JSON.parse(sessionStorage.getItem(keptViewKey(name)) || 'null'); } catch { return false; }
  const numbers = (v, n) => Array.isArray(v) && v.length === n && v.every(Number.isFinite);
  if (!view || !numbers(view.eye, 3) || !numbers(view.rot, 9) || !(view.dist > 0) || !Number.isFinite(view.fov)) return false;
  cam.eye = view.eye.slice();
  cam.rot = view.rot.slice();
  cam.dist = view.dist;
  setFov(view.fov);
  const known = state.scene.cameras.some((c) => c.index === view.dataset);
  state.datasetIndex = known ? view.dataset : null;
  if (known) state.lastDataset = view.dataset;
  updateCameraUi();
  return true;
}

export function setFov(deg) {
  state.fovDeg = deg;
  fovInput.value = String(Math.round(deg));
  $('fov-value').textContent = `${Math.round(deg)}°`;
}
