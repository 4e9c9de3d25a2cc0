import {
  add, sub, mul, dot, cross, length, normalize, row, apply, centerOf, translationOf, clamp, radians,
  axisRotation, lookAt, orthonormalize, rollOf, withRoll,
} from '/geometry.js';
import { decodeFrame } from '/frame.js';
import { drawCurve, smoothedLog } from '/curves.js';
import { cameraAt, drawFrustums, projectFrustums } from '/overlay.js';
import { KeyViews } from '/path.js';

// The Ember viewer page. It speaks the protocol in crates/viewer/PROTOCOL.md over one
// WebSocket: it owns the camera, asks the server for frames and draws what comes back.
(() => {
  const $ = (id) => document.getElementById(id);

  const DEFAULT_FOV = 50;
  const SETTLE_MS = 150;           // the full-size frame follows the last movement by this much
  const MAX_FULL_SIDE = 1920;      // long side of a full-size request
  const MIN_SIDE = 16;             // the server's limits per side
  const MAX_SIDE = 4096;
  const ORBIT_RAD_PER_PX = 0.005;
  const LOOK_RAD_PER_PX = 0.003;
  const ZOOM_PER_PX = 0.0015;      // wheel pixels to log-distance
  const FLY_RADII_PER_S = 0.5;
  const FLY_FAST = 4;
  const MAX_ELEVATION = (85 * Math.PI) / 180;  // yaw about `up` degenerates at the poles
  const MIN_DIST_RADII = 1e-3;
  const MAX_CURVE_POINTS = 4000;
  const CURVE_REDRAW_MS = 250;
  const LOG_LINES = 8;
  const RETRY_MIN_MS = 500;
  const RETRY_MAX_MS = 10000;
  const LIVE_REFRESH_MS = 1000;    // during training, a still view is redrawn at least this often
  const HOME_ELEVATION = (20 * Math.PI) / 180;  // a scene without cameras is first seen from above by this much
  const FIT_MARGIN = 1.05;         // "fit" leaves this much room around the scene's sphere
  const LOSS_SMOOTHING = 0.9;      // weight of the past in the loss curve's moving average
  const FRUSTUM_RADII = 0.12;      // a drawn camera's depth, in scene radii
  const HOVER_PX = 14;             // how near a drawn camera the pointer picks it
  const PATH_FPS = 30;
  const CLICK_SLOP_PX = 3;         // a press that moves less than this is a click, not a drag
  const AXES = { '+x': [1, 0, 0], '-x': [-1, 0, 0], '+y': [0, 1, 0], '-y': [0, -1, 0], '+z': [0, 0, 1], '-z': [0, 0, -1] };
  const MOVE_KEYS = new Set(['KeyW', 'KeyA', 'KeyS', 'KeyD', 'KeyQ', 'KeyE']);

  // ---- state ----
  const ember = (window.ember = {
    framesReceived: 0,
    lastFrame: null,
    hello: null,
    lastStatus: null,
    errors: [],
    ended: null,
    jumpToCamera,
    requestFrame,
    cameraState,
    lastFramePng,
    viewCamera: () => renderCamera('full'),
    setCamera,
    cameraOverlay: () => overlayCameras.map(({ index, x, y }) => ({ index, x, y })),
    pathJson: () => pathJson(),
    curves: () => curveSeries(),
  });

  let scene = null;                // from hello: {target, up, sceneUp, radius, bounds, front, cameras, home, lod}
  // The camera: centre, world-to-camera rotation and the distance to the orbit target, which
  // lies on the forward axis; keeping the target implicit keeps it in front whatever moves.
  const cam = { eye: [0, 0, 0], rot: [1, 0, 0, 0, 1, 0, 0, 0, 1], dist: 1 };
  let datasetIndex = null;         // the dataset camera the view is exactly on
  let lastDataset = null;          // where previous/next step from once the view has moved
  let fovDeg = DEFAULT_FOV;
  let flyMode = false;
  let drag = null;
  const held = new Set();          // movement keys down, in fly mode
  let fast = false;
  const sched = { quick: false, full: false, settle: 0, raf: 0, flyTime: null };

  let ws = null;
  let conn = 'connecting';
  let retryMs = RETRY_MIN_MS;
  let nextId = 0;
  let lastDrawnId = 0;
  let lastSentAt = 0;              // performance.now() of the last render request
  let lastPsnr = null;             // the training PSNR last measured (not every step measures it)
  let ended = null;                // the server's word that the run ended: nothing to reconnect to
  let lastBitmap = null;
  let shotId = null;
  const frameTimes = [];

  let overlayCameras = [];         // the dataset cameras drawn: {index, x, y, corners} in CSS pixels
  let hovered = null;              // the drawn camera under the pointer
  let press = null;                // where a press began, to tell a click from a drag
  const path = new KeyViews();     // the camera path being recorded

  let history = [];                // {step, loss, psnr}
  let evals = [];                  // eval messages, by step
  let curveTimer = 0;

  const canvas = $('view');
  const overlay = $('overlay');
  // Tests read the view's pixels back; this keeps Chrome from warning about repeated reads.
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  const stage = $('stage');
  const photo = $('photo');
  const cameraSelect = $('camera-select');
  const shSelect = $('sh-degree');
  const fovInput = $('fov');
  const logList = $('log');
  const statusLine = $('status-line');
  const decoder = new TextDecoder();

  // ---- camera moves ----
  const target = () => add(cam.eye, mul(row(cam.rot, 2), cam.dist));
  const minDist = () => MIN_DIST_RADII * scene.radius;

  function rotateAbout(pivot, m) {
    cam.eye = add(pivot, apply(m, sub(cam.eye, pivot)));
    cam.rot = orthonormalize([...apply(m, row(cam.rot, 0)), ...apply(m, row(cam.rot, 1)), ...apply(m, row(cam.rot, 2))]);
  }

  // Yaw about `up`, then pitch about the horizontal right axis with the forward axis kept off
  // the poles (a camera already past the limit may only move back towards the horizon).
  function turn(yaw, pitch, pivot) {
    const up = scene.up;
    rotateAbout(pivot, axisRotation(up, yaw));
    const forward = row(cam.rot, 2);
    const elevation = Math.asin(clamp(dot(forward, up), -1, 1));
    const next = clamp(elevation + pitch, Math.min(-MAX_ELEVATION, elevation), Math.max(MAX_ELEVATION, elevation));
    let axis = cross(forward, up);
    if (length(axis) < 1e-9) axis = row(cam.rot, 0);
    rotateAbout(pivot, axisRotation(normalize(axis), next - elevation));
  }

  // Drags follow the convention of grabbing the scene: it turns and slides with the pointer.
  function orbit(dx, dy) { turn(-dx * ORBIT_RAD_PER_PX, -dy * ORBIT_RAD_PER_PX, target()); }
  function look(dx, dy) { turn(-dx * LOOK_RAD_PER_PX, -dy * LOOK_RAD_PER_PX, cam.eye); }

  function pan(dx, dy) {
    // World units per CSS pixel at the target's depth, so the target tracks the pointer.
    const s = (cam.dist * 2 * Math.tan(radians(fovDeg) / 2)) / Math.max(1, canvas.clientHeight);
    cam.eye = add(cam.eye, add(mul(row(cam.rot, 0), -dx * s), mul(row(cam.rot, 1), -dy * s)));
  }

  function zoom(factor) {
    const t = target();
    cam.dist = Math.max(minDist(), cam.dist * factor);
    cam.eye = sub(t, mul(row(cam.rot, 2), cam.dist));
  }

  function flyStep(now) {
    const dt = sched.flyTime === null ? 1 / 60 : Math.min(0.1, (now - sched.flyTime) / 1000);
    sched.flyTime = now;
    const axes = { KeyW: row(cam.rot, 2), KeyS: mul(row(cam.rot, 2), -1), KeyD: row(cam.rot, 0),
      KeyA: mul(row(cam.rot, 0), -1), KeyE: scene.up, KeyQ: mul(scene.up, -1) };
    let d = [0, 0, 0];
    for (const code of held) d = add(d, axes[code]);
    if (length(d) < 1e-9) return;
    const speed = FLY_RADII_PER_S * scene.radius * (fast ? FLY_FAST : 1);
    cam.eye = add(cam.eye, mul(normalize(d), speed * dt));
    moved();
  }

  function datasetCamera() {
    return datasetIndex === null ? null : scene.cameras.find((c) => c.index === datasetIndex);
  }

  function jumpTo(index) {
    const c = scene.cameras.find((cc) => cc.index === index);
    if (!c) throw new RangeError(`no dataset camera ${index}`);
    cam.rot = c.rotation.slice();
    cam.eye = centerOf(c);
    cam.dist = Math.max(minDist(), length(sub(cam.eye, scene.target)));
    datasetIndex = lastDataset = c.index;
    // Match the slider to the camera's vertical field of view, so moving off it keeps the framing.
    setFov(clamp((2 * Math.atan(c.height / 2 / c.fy) * 180) / Math.PI, 20, 120));
    updateCameraUi();
  }

  // A scene without dataset cameras: from the side the server names (`front`), a little above,
  // framing the whole scene.
  function orbitHome() {
    const { up } = scene;
    const front = normalize(sub(scene.front, mul(up, dot(scene.front, up))));
    const look = mul(add(mul(front, Math.cos(HOME_ELEVATION)), mul(up, Math.sin(HOME_ELEVATION))), -1);
    setFov(DEFAULT_FOV);
    cam.rot = lookAt([0, 0, 0], look, up);
    datasetIndex = null;
    fitScene();
  }

  // The first training camera's view, levelled when its photo is stored turned (a quarter
  // turn, most often) against the scene's up.
  function resetCamera() {
    if (scene.home === null) { orbitHome(); return; }
    jumpTo(scene.home);
    if (Math.abs(rollOf(cam.rot, scene.up)) > radians(20)) {
      setRoll(0);
      datasetIndex = null;
      updateCameraUi();
    }
  }

  // The sphere around the scene's Gaussians (outliers left out), else around the orbit target.
  function sceneSphere() {
    const b = scene.bounds;
    if (!b) return { centre: scene.target, r: scene.radius };
    return { centre: mul(add(b.min, b.max), 0.5), r: Math.max(1e-6, length(sub(b.max, b.min)) / 2) };
  }

  // Frames the scene's sphere from the current direction.
  function fitScene() {
    const { centre, r } = sceneSphere();
    const { w, h } = viewSize();
    const vertical = radians(fovDeg);
    const horizontal = 2 * Math.atan(Math.tan(vertical / 2) * (w / h));
    cam.dist = Math.max(minDist(), (FIT_MARGIN * r) / Math.sin(Math.min(vertical, horizontal) / 2));
    cam.eye = sub(centre, mul(row(cam.rot, 2), cam.dist));
    datasetIndex = null;
    updateCameraUi();
  }

  function setRoll(angle) { cam.rot = withRoll(cam.rot, scene.up, angle); }

  // A new up: the view keeps its eye and target and is levelled; remembered for this scene.
  function setUp(choice) {
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
  function setCamera(eye, at) {
    cam.eye = eye.slice();
    cam.rot = lookAt(eye, at, scene.up);
    cam.dist = Math.max(minDist(), length(sub(at, eye)));
    datasetIndex = null;
    updateCameraUi();
    return sendNow('full');
  }

  // The orbit centre moves to `point`: the view turns to it (keeping its roll).
  function orbitAround(point) {
    const roll = rollOf(cam.rot, scene.up);
    cam.rot = lookAt(cam.eye, point, scene.up);
    setRoll(roll);
    cam.dist = Math.max(minDist(), length(sub(point, cam.eye)));
    moved();
  }

  function setFov(deg) {
    fovDeg = deg;
    fovInput.value = String(Math.round(deg));
    $('fov-value').textContent = `${Math.round(deg)}°`;
  }

  // ---- render requests ----
  // The full request size: the canvas's CSS size times devicePixelRatio, long side capped.
  function viewSize() {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth * dpr, h = canvas.clientHeight * dpr;
    const k = Math.min(1, MAX_FULL_SIDE / Math.max(w, h, 1));
    return { w: Math.max(MIN_SIDE, Math.round(w * k)), h: Math.max(MIN_SIDE, Math.round(h * k)) };
  }

  const side = (x) => clamp(Math.round(x), MIN_SIDE, MAX_SIDE);

  // kind: 'quick' (half size, while moving), 'full', or 'shot' (screenshot).
  function renderCamera(kind) {
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
    const f = height / 2 / Math.tan(radians(fovDeg) / 2);
    return { ...base, fx: f, fy: f, cx: width / 2, cy: height / 2, width, height };
  }

  function send(message) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(message));
    return true;
  }

  // `pick`, if given, maps the frame's camera to a pixel of it whose surface point the server
  // should find (a double click).
  function sendRender(kind, pick = null) {
    if (!scene) return null;
    syncCanvasSize();
    const bg = $('background').value;
    const message = {
      type: 'render',
      id: nextId + 1,
      camera: renderCamera(kind),
      background: [1, 3, 5].map((i) => parseInt(bg.slice(i, i + 2), 16) / 255),
      sh_degree: shSelect.value === '' ? null : Number(shSelect.value),
      centres: $('centres').checked,
      format: kind === 'shot' ? 'png' : 'jpeg',
    };
    if (scene.lod) {
      const lod = Number($('lod').value);
      message.lod_threshold = Number.isFinite(lod) ? Math.min(Math.max(lod, 0), 64) : null;
    }
    if (pick) message.pick = pick(message.camera);
    if (!send(message)) return null;
    nextId = message.id;
    lastSentAt = performance.now();
    return message.id;
  }

  // Sends now, dropping whatever the animation frame would have sent.
  function sendNow(kind, pick = null) {
    clearTimeout(sched.settle);
    sched.settle = 0;
    sched.quick = sched.full = false;
    return sendRender(kind, pick);
  }

  // The camera moved: small frames each animation frame, a full one once it rests.
  function moved() {
    datasetIndex = null;
    updateCameraUi();
    sched.quick = true;
    clearTimeout(sched.settle);
    sched.settle = setTimeout(() => { sched.settle = 0; invalidate(); }, SETTLE_MS);
    wake();
  }

  function invalidate() { sched.full = true; wake(); }
  function wake() { if (!sched.raf) sched.raf = requestAnimationFrame(tick); }

  function tick(now) {
    sched.raf = 0;
    if (flyMode && held.size && scene) flyStep(now);
    else sched.flyTime = null;
    if (sched.quick || sched.full) {
      sendRender(sched.settle ? 'quick' : 'full');
      sched.quick = sched.full = false;
    }
    if (held.size) wake();
  }

  // ---- drawing frames ----
  // Returns whether the backing store changed (which also clears it).
  function syncCanvasSize() {
    const { w, h } = viewSize();
    if (canvas.width === w && canvas.height === h) return false;
    canvas.width = w;
    canvas.height = h;
    draw();
    return true;
  }

  // Letterboxed, so a dataset camera's aspect lines up with the photo (object-fit: contain).
  function draw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    if (!lastBitmap) return;
    const s = Math.min(canvas.width / lastBitmap.width, canvas.height / lastBitmap.height);
    const w = lastBitmap.width * s, h = lastBitmap.height * s;
    ctx.imageSmoothingQuality = 'high';
    ctx.drawImage(lastBitmap, (canvas.width - w) / 2, (canvas.height - h) / 2, w, h);
  }

  async function onFrame(buffer) {
    const n = buffer.byteLength >= 4 ? new DataView(buffer).getUint32(0, true) : -1;
    if (n < 0 || 4 + n > buffer.byteLength) throw new Error('frame shorter than its header');
    const header = JSON.parse(decoder.decode(new Uint8Array(buffer, 4, n)));
    const bytes = new Uint8Array(buffer, 4 + n);
    if (shotId !== null && header.id === shotId) saveScreenshot(bytes);
    else if (shotId !== null && header.id > shotId) {
      log('screenshot skipped: the view moved before it was rendered', 'error');
      shotId = null;
    }
    if (header.pick) onPick(header.pick);
    if (header.id < lastDrawnId) return;
    const bitmap = await decodeFrame(header, bytes);
    // Decoding is asynchronous, so a newer frame may have been drawn meanwhile.
    if (header.id < lastDrawnId) { bitmap.close(); return; }
    lastDrawnId = header.id;
    if (lastBitmap) lastBitmap.close();
    lastBitmap = bitmap;
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
  function framePixel(camera, x, y) {
    const dpr = window.devicePixelRatio || 1;
    const s = Math.min(canvas.width / camera.width, canvas.height / camera.height);
    const left = (canvas.width - camera.width * s) / 2, top = (canvas.height - camera.height * s) / 2;
    const px = clamp((x * dpr - left) / s, 0, camera.width - 0.001);
    const py = clamp((y * dpr - top) / s, 0, camera.height - 0.001);
    return [px, py];
  }

  // Hands `blob` to the browser as a download named `name`.
  function download(blob, name) {
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
    shotId = null;
    download(new Blob([bytes], { type: 'image/png' }), 'ember-screenshot.png');
    log('screenshot saved');
  }

  function takeScreenshot() {
    const id = sendNow('shot');
    if (id === null) { log('screenshot: not connected', 'error'); return; }
    shotId = id;
    log('rendering screenshot…');
  }

  // ---- connection ----
  function connect() {
    // Retries stay 'disconnected' until one opens; only the first try reads 'connecting'.
    if (conn !== 'disconnected') setConn('connecting');
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    let socket;
    try {
      socket = new WebSocket(`${scheme}${location.host}/ws`);
    } catch (err) {
      log(`cannot open the socket: ${err.message}`, 'error');
      retry();
      return;
    }
    socket.binaryType = 'arraybuffer';
    socket.onopen = () => setConn('connected');
    socket.onmessage = (event) => {
      if (typeof event.data === 'string') onText(event.data);
      else onFrame(event.data).catch((err) => log(`bad frame: ${err.message}`, 'error'));
    };
    // A failed or dropped connection ends in close, which is where it is handled.
    socket.onerror = () => {};
    socket.onclose = () => {
      if (ws !== socket) return;
      ws = null;
      shotId = null;
      if (ended !== null) { setConn('ended'); return; }
      if (conn === 'connected') log('connection lost', 'error');
      retry();
    };
    ws = socket;
  }

  function retry() {
    setConn('disconnected');
    setTimeout(connect, retryMs);
    retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
  }

  function setConn(state) {
    conn = state;
    $('banner').textContent = state === 'ended' ? ended : 'Disconnected — reconnecting…';
    $('banner').hidden = state !== 'disconnected' && state !== 'ended';
    updateStatusLine();
  }

  function onText(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      log('unreadable message from the server', 'error');
      return;
    }
    switch (msg.type) {
      case 'hello': onHello(msg); break;
      case 'status': onStatus(msg); break;
      case 'eval': addEval(msg); renderEvals(); scheduleCurves(); break;
      case 'message': log(msg.text); break;
      case 'ended': onEnded(msg.text); break;
      case 'error':
        ember.errors.push(msg.message);
        log(msg.message, 'error');
        break;
      default: break;
    }
  }

  function onHello(h) {
    // A reconnect to the same scene keeps the user's view; a different scene starts afresh.
    const fresh = !ember.hello || ember.hello.name !== h.name;
    ember.hello = h;
    retryMs = RETRY_MIN_MS;
    const sceneUp = h.up && length(h.up) > 1e-9 ? normalize(h.up) : [0, 0, 1];
    const cameras = h.cameras || [];
    const train = cameras.find((c) => c.split === 'train') || cameras[0];
    const kept = fresh ? storedUp(h.name) : { choice: scene.upChoice, up: scene.up };
    scene = { target: h.target, up: kept ? kept.up : sceneUp, upChoice: kept ? kept.choice : 'scene', sceneUp,
      radius: h.radius > 0 ? h.radius : 1, bounds: h.bounds || null,
      front: h.front && length(h.front) > 1e-9 ? h.front : [1, 0, 0], cameras, home: train ? train.index : null,
      lod: h.lod || null };
    $('up-axis').value = scene.upChoice;
    $('up-axis').options[0].textContent = cameras.length ? 'from the cameras' : 'scene (−Y)';

    // The file's name; the whole path on hover.
    $('scene-name').textContent = h.name.split(/[\\/]/).filter(Boolean).pop() || h.name;
    $('scene-name').title = h.name;
    $('scene-mode').textContent = h.mode;
    $('scene-gaussians').textContent = h.gaussians.toLocaleString('en-US');
    $('scene-sh').textContent = String(h.sh_degree);
    fillSelects(h);
    // Level of detail: the control only where the server has a hierarchy, at its threshold.
    $('lod-row').hidden = !h.lod;
    if (h.lod) $('lod').value = String(h.lod.threshold);

    history = (h.history || []).map(({ step, loss, psnr }) => ({ step, loss, psnr }));
    const measured = history.filter((p) => Number.isFinite(p.psnr));
    lastPsnr = measured.length ? measured[measured.length - 1].psnr : null;
    evals = [];
    (h.evals || []).forEach(addEval);
    ember.lastStatus = null;
    if (h.status) onStatus(h.status);
    $('training').hidden = !(h.mode === 'training' || ember.lastStatus);
    // A fixed scene (a finished run's record) has no training to pause or checkpoint.
    $('pause').hidden = $('checkpoint').hidden = h.mode !== 'training';
    // During training the curves come first, in view on a laptop's screen.
    if (h.mode === 'training') $('panel').prepend($('training'), $('evals'));
    $('show-cameras').disabled = $('compare').disabled = !cameras.length;
    $('compare').parentElement.title = cameras.length ? '' : 'this scene has no dataset photos';
    renderEvals();
    scheduleCurves();

    if (fresh) resetCamera();
    else updateCameraUi();
    log(`connected to ${h.name}`);
    sendNow('full');
  }

  // The up a user chose for this scene before (see setUp), if any.
  function storedUp(name) {
    try {
      const kept = JSON.parse(localStorage.getItem(`ember.up:${name}`) || 'null');
      if (kept && Array.isArray(kept.up) && kept.up.length === 3 && kept.up.every(Number.isFinite) && length(kept.up) > 1e-9) {
        return { choice: String(kept.choice), up: normalize(kept.up) };
      }
    } catch { /* unreadable: not kept */ }
    return null;
  }

  function fillSelects(h) {
    const cams = scene.cameras.map((c) => new Option(`${c.split}: ${c.name}`, String(c.index)));
    cameraSelect.replaceChildren(new Option('free camera', ''), ...cams);
    cameraSelect.disabled = $('camera-prev').disabled = $('camera-next').disabled = !cams.length;
    const previous = shSelect.value;
    const degrees = Array.from({ length: h.sh_degree + 1 }, (_, d) => new Option(String(d), String(d)));
    shSelect.replaceChildren(new Option('all', ''), ...degrees);
    if ([...shSelect.options].some((o) => o.value === previous)) shSelect.value = previous;
  }

  // ---- live training ----
  const fmt = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : '–');

  // The field changes under a still camera while it trains: redraw it from time to time, when no
  // movement is under way and the last request was answered (or is long overdue).
  function refreshLive(s) {
    const moving = drag || held.size || sched.settle || sched.quick || sched.full;
    const shown = ember.lastFrame ? ember.lastFrame.step ?? -1 : -1;
    const since = performance.now() - lastSentAt;
    const answered = lastDrawnId >= nextId || since > 5 * LIVE_REFRESH_MS;
    if (!moving && !s.paused && shown < s.step && answered && since > LIVE_REFRESH_MS) invalidate();
  }

  // The run is over: the controls that act on it go, and the page says how to see the result.
  function onEnded(text) {
    ended = text;
    ember.ended = text;
    log(text);
    $('pause').disabled = true;
    $('checkpoint').disabled = true;
    $('train-state').textContent = 'ended';
  }

  function onStatus(s) {
    ember.lastStatus = s;
    refreshLive(s);
    $('training').hidden = false;
    $('train-step').textContent = `${s.step.toLocaleString('en-US')} / ${s.total_steps.toLocaleString('en-US')}`;
    $('train-gaussians').textContent = s.gaussians.toLocaleString('en-US');
    $('scene-gaussians').textContent = s.gaussians.toLocaleString('en-US');
    $('train-speed').textContent = fmt(s.steps_per_second, 1);
    $('train-loss').textContent = Number.isFinite(s.loss) ? s.loss.toPrecision(4) : '–';
    if (Number.isFinite(s.psnr)) lastPsnr = s.psnr;
    $('train-psnr').textContent = lastPsnr === null ? '–' : `${fmt(lastPsnr, 2)} dB`;
    $('train-state').textContent = s.step >= s.total_steps ? 'finished' : s.paused ? 'paused' : 'running';
    $('pause').textContent = s.paused ? 'Resume' : 'Pause';
    const last = history[history.length - 1];
    if ((!last || s.step > last.step) && Number.isFinite(s.loss)) {
      history.push({ step: s.step, loss: s.loss, psnr: s.psnr });
      // Thin rather than truncate, so the curve keeps its start.
      if (history.length > MAX_CURVE_POINTS) history = history.filter((_, i) => i % 2 === 0 || i === history.length - 1);
      scheduleCurves();
    }
  }

  function addEval(e) {
    evals = evals.filter((x) => x.step !== e.step);
    evals.push(e);
    evals.sort((a, b) => a.step - b.step);
  }

  function renderEvals() {
    $('evals').hidden = evals.length === 0;
    if (!evals.length) return;
    const latest = evals[evals.length - 1];
    const lpips = (e) => (Number.isFinite(e.lpips) ? ` · LPIPS ${fmt(e.lpips, 4)}` : '');
    $('eval-summary').textContent = `step ${latest.step} · PSNR ${fmt(latest.psnr, 2)} dB · SSIM ${fmt(latest.ssim, 4)}${lpips(latest)}`;
    $('eval-views').replaceChildren(...(latest.views || []).map((v) => {
      const a = document.createElement('a');
      a.href = v.url;
      a.target = '_blank';
      a.rel = 'noopener';
      a.title = v.name;
      const img = document.createElement('img');
      img.src = v.url;
      img.alt = v.name;
      img.loading = 'lazy';
      a.append(img);
      return a;
    }));
    $('eval-list').replaceChildren(...evals.slice(0, -1).reverse().slice(0, 8).map((e) => {
      const li = document.createElement('li');
      li.textContent = `step ${e.step}: ${fmt(e.psnr, 2)} dB, SSIM ${fmt(e.ssim, 4)}${lpips(e).replace(' ·', ',')}`;
      return li;
    }));
  }

  function scheduleCurves() {
    if (!curveTimer) curveTimer = setTimeout(() => { curveTimer = 0; drawCurves(); }, CURVE_REDRAW_MS);
  }

  // The loss as logged, and its moving average.
  function curveSeries() {
    const raw = history.filter((p) => Number.isFinite(p.loss) && p.loss > 0).map((p) => [p.step, p.loss]);
    return { loss: { raw, smoothed: smoothedLog(raw, LOSS_SMOOTHING) } };
  }

  function drawCurves() {
    const css = getComputedStyle(document.documentElement);
    const colour = (name) => css.getPropertyValue(name).trim();
    const { loss } = curveSeries();
    drawCurve($('loss-curve'), [
      { points: loss.raw, colour: colour('--loss'), faint: true },
      { points: loss.smoothed, colour: colour('--loss') },
    ], true, (y) => y.toPrecision(3));
    drawCurve($('psnr-curve'), [
      { points: history.filter((p) => p.psnr !== null).map((p) => [p.step, p.psnr]), colour: colour('--train') },
      { points: evals.map((e) => [e.step, e.psnr]), colour: colour('--eval'), dots: true },
    ], false, (y) => y.toFixed(1));
  }

  // ---- the dataset cameras over the render ----
  // World point -> CSS pixel of the view through the camera the full frame uses (letterboxed
  // as `draw` shows frames), or null behind it.
  function projector() {
    const c = renderCamera('full');
    const t = translationOf(c.rotation, cam.eye);
    const dpr = window.devicePixelRatio || 1;
    const s = Math.min(canvas.width / c.width, canvas.height / c.height);
    const left = (canvas.width - c.width * s) / 2, top = (canvas.height - c.height * s) / 2;
    const near = 1e-3 * scene.radius;
    return (p) => {
      const q = add(apply(c.rotation, p), t);
      if (q[2] <= near) return null;
      return [(left + (c.fx * q[0] / q[2] + c.cx) * s) / dpr, (top + (c.fy * q[1] / q[2] + c.cy) * s) / dpr, q[2]];
    };
  }

  // Each dataset camera as a frustum, FRUSTUM_RADII scene radii deep.
  function drawOverlay() {
    if (overlay.width !== canvas.width || overlay.height !== canvas.height) {
      overlay.width = canvas.width;
      overlay.height = canvas.height;
    }
    const g = overlay.getContext('2d');
    g.clearRect(0, 0, overlay.width, overlay.height);
    overlayCameras = [];
    if (!scene || !$('show-cameras').checked) return;
    const project = projector();
    const shown = scene.cameras.filter((c) => c.index !== datasetIndex);
    overlayCameras = projectFrustums(shown, FRUSTUM_RADII * scene.radius, project);
    const css = getComputedStyle(document.documentElement);
    const colour = (index) => {
      if (index === hovered) return '#ffffff';
      const c = scene.cameras.find((cc) => cc.index === index);
      return css.getPropertyValue(c.split === 'test' ? '--eval' : '--train').trim();
    };
    drawFrustums(g, overlayCameras, colour, hovered, window.devicePixelRatio || 1);
  }

  function hover(index, x, y) {
    const changed = hovered !== index;
    hovered = index;
    const tip = $('camera-tip');
    tip.hidden = index === null;
    if (index !== null) {
      const c = scene.cameras.find((cc) => cc.index === index);
      if ($('camera-tip-img').getAttribute('src') !== `/thumb/${index}`) $('camera-tip-img').src = `/thumb/${index}`;
      $('camera-tip-name').textContent = `${c.split}: ${c.name}`;
      const pane = canvas.getBoundingClientRect();
      tip.style.left = `${Math.min(x + 14, pane.width - 200)}px`;
      tip.style.top = `${Math.min(y + 14, pane.height - 220)}px`;
    }
    canvas.style.cursor = index === null ? '' : 'pointer';
    if (changed) drawOverlay();
  }

  // ---- camera path ----
  function pathSeconds() {
    const v = Number($('path-seconds').value);
    return Number.isFinite(v) && v > 0 ? v : 2;
  }

  function addKeyView() {
    if (!scene) return;
    path.add(cam.rot, translationOf(cam.rot, cam.eye), fovDeg, viewSize(), pathSeconds());
    updatePathUi();
  }

  const pathJson = () => path.json(PATH_FPS);

  function updatePathUi() {
    const n = path.keys.length;
    $('path-summary').textContent = n === 0 ? 'no key views'
      : `${n} key view${n === 1 ? '' : 's'} · ${path.duration().toFixed(1)} s · ${path.width}×${path.height}`;
    $('path-undo').disabled = $('path-clear').disabled = $('path-save').disabled = n === 0;
  }

  function savePath() {
    download(new Blob([JSON.stringify(pathJson(), null, 1)], { type: 'application/json' }), 'path.json');
    log(`path of ${path.keys.length} key views saved: trainer render SCENE --path path.json --out DIR`);
  }

  // ---- panel, status line, log ----
  function updateCameraUi() {
    if (!scene) return;
    const roll = Math.round((rollOf(cam.rot, scene.up) * 180) / Math.PI);
    $('roll').value = String(roll);
    $('roll-value').textContent = `${roll}°`;
    drawOverlay();
    cameraSelect.value = datasetIndex === null ? '' : String(datasetIndex);
    const show = $('compare').checked && datasetIndex !== null;
    stage.classList.toggle('compare', show);
    $('photo-pane').hidden = !show;
    if (show && photo.getAttribute('src') !== `/photo/${datasetIndex}`) photo.src = `/photo/${datasetIndex}`;
  }

  function stepCamera(delta) {
    if (!scene || !scene.cameras.length) return;
    const list = scene.cameras;
    const at = list.findIndex((c) => c.index === lastDataset);
    const next = at < 0 ? (delta > 0 ? 0 : list.length - 1) : (at + delta + list.length) % list.length;
    jumpTo(list[next].index);
    sendNow('full');
  }

  function updateStatusLine() {
    const now = performance.now();
    while (frameTimes.length && frameTimes[0] < now - 1000) frameTimes.shift();
    const parts = [conn];
    const f = ember.lastFrame;
    if (f) {
      parts.push(`${f.width}×${f.height}`, `${fmt(f.render_ms, 1)} ms`);
      if (f.step !== null) parts.push(`step ${f.step}`);
    }
    parts.push(`${frameTimes.length} fps`);
    statusLine.textContent = parts.join('  ·  ');
    statusLine.dataset.state = conn;
  }

  function log(text, kind = 'info') {
    const li = document.createElement('li');
    li.className = kind;
    li.textContent = `${new Date().toLocaleTimeString('en-GB')}  ${text}`;
    logList.prepend(li);
    while (logList.children.length > LOG_LINES) logList.lastElementChild.remove();
  }

  // ---- input ----
  canvas.addEventListener('pointerdown', (e) => {
    if (drag || !scene) return;
    const panning = e.button === 2 || (e.button === 0 && e.shiftKey);
    if (!panning && e.button !== 0) return;
    // Let the keys reach the view again after a control had the focus.
    if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
    hideHelp();
    press = { x: e.clientX, y: e.clientY, camera: hovered };
    hover(null, 0, 0);
    drag = { id: e.pointerId, x: e.clientX, y: e.clientY, mode: panning ? 'pan' : flyMode ? 'look' : 'orbit' };
    // Synthetic pointers (scripted events) cannot be captured; the drag still works inside.
    try { canvas.setPointerCapture(e.pointerId); } catch { /* not a live pointer */ }
    canvas.classList.add('dragging');
  });

  canvas.addEventListener('pointermove', (e) => {
    if (!drag && scene && $('show-cameras').checked) {
      const box = canvas.getBoundingClientRect();
      const x = e.clientX - box.left, y = e.clientY - box.top;
      hover(cameraAt(overlayCameras, x, y, HOVER_PX), x, y);
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

  const endDrag = (e) => {
    if (!drag || e.pointerId !== drag.id) return;
    drag = null;
    canvas.classList.remove('dragging');
    // A click (no drag) on a drawn camera flies to it.
    const still = press && Math.hypot(e.clientX - press.x, e.clientY - press.y) < CLICK_SLOP_PX;
    if (e.type === 'pointerup' && still && press.camera !== null) {
      jumpTo(press.camera);
      sendNow('full');
    }
    press = null;
  };
  canvas.addEventListener('pointerup', endDrag);
  canvas.addEventListener('pointercancel', endDrag);
  canvas.addEventListener('lostpointercapture', endDrag);
  canvas.addEventListener('contextmenu', (e) => e.preventDefault());
  canvas.addEventListener('pointerleave', () => { if (!drag) hover(null, 0, 0); });

  // Double click: the orbit centre goes to the surface under the cursor (the server finds it
  // in the depth of a frame rendered for the purpose).
  canvas.addEventListener('dblclick', (e) => {
    if (!scene) return;
    const box = canvas.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    if (sendNow('full', (camera) => framePixel(camera, x, y)) === null) log('not connected', 'error');
  });

  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    if (!scene) return;
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? canvas.clientHeight : 1;
    zoom(Math.exp(e.deltaY * unit * ZOOM_PER_PX));
    hideHelp();
    moved();
  }, { passive: false });

  // Keys go to the view unless a control that uses letters has the focus.
  const typing = (el) => el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement ||
    (el instanceof HTMLInputElement && !['checkbox', 'button', 'range', 'color'].includes(el.type));

  window.addEventListener('keydown', (e) => {
    fast = e.shiftKey;
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    if (MOVE_KEYS.has(e.code) && flyMode) {
      held.add(e.code);
      wake();
      e.preventDefault();
      return;
    }
    if (e.repeat) return;
    if (e.code === 'KeyF') setFly(!flyMode);
    else if (e.code === 'KeyR' && scene) { resetCamera(); sendNow('full'); }
    else if (e.code === 'KeyG' && scene) { fitScene(); sendNow('full'); }
    else if (e.code === 'KeyH') toggleHelp();
  });
  window.addEventListener('keyup', (e) => { fast = e.shiftKey; held.delete(e.code); });
  window.addEventListener('blur', () => held.clear());

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
    flyMode = on;
    $('fly').checked = on;
    held.clear();
  }

  cameraSelect.addEventListener('change', () => {
    if (!scene) return;
    if (cameraSelect.value === '') { datasetIndex = null; updateCameraUi(); }
    else jumpTo(Number(cameraSelect.value));
    sendNow('full');
    // The list keeps the keys (type-ahead) while focused: hand them back to the view.
    cameraSelect.blur();
  });
  $('camera-prev').addEventListener('click', () => stepCamera(-1));
  $('camera-next').addEventListener('click', () => stepCamera(1));
  $('reset').addEventListener('click', () => { if (scene) { resetCamera(); sendNow('full'); } });
  $('compare').addEventListener('change', () => {
    // The photos belong to the dataset cameras: from a free view, go to the nearest one.
    if ($('compare').checked && datasetIndex === null && scene && scene.cameras.length) {
      const forward = row(cam.rot, 2);
      const score = (c) => length(sub(centerOf(c), cam.eye)) / scene.radius + (1 - dot(row(c.rotation, 2), forward));
      const nearest = scene.cameras.reduce((a, b) => (score(b) < score(a) ? b : a));
      jumpTo(nearest.index);
      sendNow('full');
      log(`compare: moved to the nearest dataset camera, ${nearest.name}`);
    }
    updateCameraUi();
  });
  $('fit').addEventListener('click', () => { if (scene) { fitScene(); sendNow('full'); } });
  $('show-cameras').addEventListener('change', () => { hover(null, 0, 0); drawOverlay(); });
  $('up-axis').addEventListener('change', () => { if (scene) setUp($('up-axis').value); $('up-axis').blur(); });
  $('roll').addEventListener('input', () => {
    if (!scene) return;
    setRoll(radians(Number($('roll').value)));
    moved();
  });
  $('help-toggle').addEventListener('click', toggleHelp);
  $('path-add').addEventListener('click', addKeyView);
  $('path-undo').addEventListener('click', () => { path.keys.pop(); updatePathUi(); });
  $('path-clear').addEventListener('click', () => { path.clear(); updatePathUi(); });
  $('path-save').addEventListener('click', savePath);
  $('fly').addEventListener('change', (e) => setFly(e.target.checked));
  fovInput.addEventListener('input', () => {
    setFov(Number(fovInput.value));
    if (scene) moved();
  });
  $('background').addEventListener('input', invalidate);
  shSelect.addEventListener('change', invalidate);
  $('centres').addEventListener('change', invalidate);
  $('lod').addEventListener('change', invalidate);
  $('screenshot').addEventListener('click', takeScreenshot);
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
  new ResizeObserver(() => { if (syncCanvasSize() && scene) { drawOverlay(); invalidate(); } }).observe(canvas);
  new ResizeObserver(scheduleCurves).observe($('psnr-curve'));
  setInterval(updateStatusLine, 1000);

  // ---- automation hooks (window.ember) ----
  function jumpToCamera(index) {
    if (!scene) return null;
    jumpTo(index);
    return sendNow('full');
  }

  function requestFrame() {
    return sendNow('full');
  }

  // The last frame at its own size, as a PNG data URL: what tests compare with the renderer.
  function lastFramePng() {
    if (!lastBitmap) return null;
    const c = document.createElement('canvas');
    c.width = lastBitmap.width;
    c.height = lastBitmap.height;
    c.getContext('2d').drawImage(lastBitmap, 0, 0);
    return c.toDataURL('image/png');
  }

  function cameraState() {
    return { position: cam.eye.slice(), rotation: cam.rot.slice(), target: target(), datasetCamera: datasetIndex,
      up: scene ? scene.up.slice() : null, roll: scene ? rollOf(cam.rot, scene.up) : 0, fov: fovDeg };
  }

  try { $('help').hidden = localStorage.getItem('ember.helpSeen') === '1'; } catch { /* shown */ }
  updatePathUi();
  connect();
})();
