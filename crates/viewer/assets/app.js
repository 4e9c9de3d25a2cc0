'use strict';

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
  const MOVE_KEYS = new Set(['KeyW', 'KeyA', 'KeyS', 'KeyD', 'KeyQ', 'KeyE']);

  // ---- vectors (arrays of 3) and 3x3 row-major matrices (arrays of 9) ----
  const add = (a, b) => [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
  const sub = (a, b) => [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
  const mul = (a, s) => [a[0] * s, a[1] * s, a[2] * s];
  const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
  const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
  const length = (a) => Math.hypot(a[0], a[1], a[2]);
  const normalize = (a) => { const l = length(a); return l > 1e-12 ? mul(a, 1 / l) : a.slice(); };
  const row = (m, i) => [m[3 * i], m[3 * i + 1], m[3 * i + 2]];
  const apply = (m, v) => [dot(row(m, 0), v), dot(row(m, 1), v), dot(row(m, 2), v)];
  // A camera's centre from its world-to-camera rotation and translation (-R^T t), and back.
  const centerOf = (c) => mul(add(add(mul(row(c.rotation, 0), c.translation[0]),
    mul(row(c.rotation, 1), c.translation[1])), mul(row(c.rotation, 2), c.translation[2])), -1);
  const translationOf = (r, eye) => mul(apply(r, eye), -1);
  const clamp = (x, lo, hi) => Math.min(hi, Math.max(lo, x));
  const radians = (deg) => (deg * Math.PI) / 180;

  // Right-handed rotation by `angle` about the unit `axis` (Rodrigues).
  function axisRotation([x, y, z], angle) {
    const c = Math.cos(angle), s = Math.sin(angle), t = 1 - c;
    return [
      t * x * x + c, t * x * y - s * z, t * x * z + s * y,
      t * x * y + s * z, t * y * y + c, t * y * z - s * x,
      t * x * z - s * y, t * y * z + s * x, t * z * z + c,
    ];
  }

  // Rows x (right), y (down), z (forward) of a world-to-camera rotation looking at `target`.
  function lookAt(eye, target, up) {
    const z = normalize(sub(target, eye));
    let x = cross(z, up);
    if (length(x) < 1e-9) x = cross(z, Math.abs(z[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0]);
    x = normalize(x);
    return [...x, ...cross(z, x), ...z];
  }

  // Repeated small rotations drift; the server rejects R whose rows are off by 1e-3.
  function orthonormalize(r) {
    const z = normalize(row(r, 2));
    const x = normalize(cross(row(r, 1), z));
    return [...x, ...cross(z, x), ...z];
  }

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
  });

  let scene = null;                // from hello: {target, up, radius, cameras, home}
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

  let history = [];                // {step, loss, psnr}
  let evals = [];                  // eval messages, by step
  let curveTimer = 0;

  const canvas = $('view');
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

  function orbitHome() {
    const { up, target: t } = scene;
    const seed = Math.abs(up[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0];
    const side = normalize(sub(seed, mul(up, dot(seed, up))));
    const e = radians(25);
    cam.dist = Math.max(minDist(), 2 * scene.radius);
    cam.eye = add(t, mul(add(mul(side, Math.cos(e)), mul(up, Math.sin(e))), cam.dist));
    cam.rot = lookAt(cam.eye, t, up);
    datasetIndex = null;
    setFov(DEFAULT_FOV);
    updateCameraUi();
  }

  function resetCamera() {
    if (scene.home === null) orbitHome();
    else jumpTo(scene.home);
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

  function sendRender(kind) {
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
    if (!send(message)) return null;
    nextId = message.id;
    lastSentAt = performance.now();
    return message.id;
  }

  // Sends now, dropping whatever the animation frame would have sent.
  function sendNow(kind) {
    clearTimeout(sched.settle);
    sched.settle = 0;
    sched.quick = sched.full = false;
    return sendRender(kind);
  }

  // The camera moved: small frames each animation frame, a full one once it rests.
  function moved() {
    if (datasetIndex !== null) { datasetIndex = null; updateCameraUi(); }
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

  // A frame is one image, or horizontal strips encoded in parallel by the server (`strips`:
  // their byte lengths, top first, `strip_height` rows each), decoded in parallel here and
  // stacked into one bitmap.
  async function decodeFrame(header, bytes) {
    const type = `image/${header.format}`;
    const lengths = header.strips || [];
    if (lengths.length === 0) return createImageBitmap(new Blob([bytes], { type }));
    let offset = 0;
    const parts = lengths.map((length) => {
      const part = bytes.subarray(offset, offset + length);
      offset += length;
      return createImageBitmap(new Blob([part], { type }));
    });
    if (offset > bytes.length) throw new Error('frame shorter than its strips');
    const strips = await Promise.all(parts);
    const stacked = new OffscreenCanvas(header.width, header.height);
    const context = stacked.getContext('2d');
    strips.forEach((strip, i) => {
      context.drawImage(strip, 0, i * header.strip_height);
      strip.close();
    });
    return stacked.transferToImageBitmap();
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

  function saveScreenshot(bytes) {
    shotId = null;
    const url = URL.createObjectURL(new Blob([bytes], { type: 'image/png' }));
    const a = document.createElement('a');
    a.href = url;
    a.download = 'ember-screenshot.png';
    document.body.append(a);
    a.click();
    a.remove();
    // The download reads the URL asynchronously; give it time before freeing the blob.
    setTimeout(() => URL.revokeObjectURL(url), 10000);
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
    const up = h.up && length(h.up) > 1e-9 ? normalize(h.up) : [0, 0, 1];
    const cameras = h.cameras || [];
    const train = cameras.find((c) => c.split === 'train') || cameras[0];
    scene = { target: h.target, up, radius: h.radius > 0 ? h.radius : 1, cameras,
      home: train ? train.index : null };

    $('scene-name').textContent = h.name;
    $('scene-mode').textContent = h.mode;
    $('scene-gaussians').textContent = h.gaussians.toLocaleString('en-US');
    $('scene-sh').textContent = String(h.sh_degree);
    fillSelects(h);

    history = (h.history || []).map(({ step, loss, psnr }) => ({ step, loss, psnr }));
    const measured = history.filter((p) => Number.isFinite(p.psnr));
    lastPsnr = measured.length ? measured[measured.length - 1].psnr : null;
    evals = [];
    (h.evals || []).forEach(addEval);
    ember.lastStatus = null;
    if (h.status) onStatus(h.status);
    $('training').hidden = !(h.mode === 'training' || ember.lastStatus);
    renderEvals();
    scheduleCurves();

    if (fresh) resetCamera();
    else updateCameraUi();
    log(`connected to ${h.name}`);
    sendNow('full');
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
    $('eval-summary').textContent = `step ${latest.step} · PSNR ${fmt(latest.psnr, 2)} dB · SSIM ${fmt(latest.ssim, 4)}`;
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
      li.textContent = `step ${e.step}: ${fmt(e.psnr, 2)} dB, SSIM ${fmt(e.ssim, 4)}`;
      return li;
    }));
  }

  function scheduleCurves() {
    if (!curveTimer) curveTimer = setTimeout(() => { curveTimer = 0; drawCurves(); }, CURVE_REDRAW_MS);
  }

  function drawCurves() {
    const css = getComputedStyle(document.documentElement);
    const colour = (name) => css.getPropertyValue(name).trim();
    drawCurve($('loss-curve'), [
      { points: history.map((p) => [p.step, p.loss]), colour: colour('--loss') },
    ], true, (y) => y.toPrecision(3));
    drawCurve($('psnr-curve'), [
      { points: history.filter((p) => p.psnr !== null).map((p) => [p.step, p.psnr]), colour: colour('--train') },
      { points: evals.map((e) => [e.step, e.psnr]), colour: colour('--eval'), dots: true },
    ], false, (y) => y.toFixed(1));
  }

  function drawCurve(el, series, logY, label) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.round(el.clientWidth * dpr), h = Math.round(el.clientHeight * dpr);
    if (!w || !h) return;
    if (el.width !== w || el.height !== h) { el.width = w; el.height = h; }
    const g = el.getContext('2d');
    g.clearRect(0, 0, w, h);
    g.font = `${10 * dpr}px system-ui, sans-serif`;
    g.fillStyle = '#8a93a3';
    const ty = logY ? Math.log10 : (y) => y;
    const lines = series.map((s) => ({ ...s,
      points: s.points.filter(([, y]) => Number.isFinite(y) && (!logY || y > 0)).map(([x, y]) => [x, ty(y)]) }));
    const all = lines.flatMap((s) => s.points);
    if (!all.length) { g.fillText('no data yet', 6 * dpr, h / 2); return; }
    let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
    for (const [x, y] of all) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
    const stepText = `step ${x1}`;
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const pad = 6 * dpr, top = 14 * dpr;
    const px = (x) => pad + ((x - x0) / (x1 - x0)) * (w - 2 * pad);
    const py = (y) => h - pad - ((y - y0) / (y1 - y0)) * (h - pad - top);
    const untransform = logY ? (y) => 10 ** y : (y) => y;
    g.fillText(`${label(untransform(y0))} – ${label(untransform(y1))}`, pad, 10 * dpr);
    g.fillText(stepText, w - pad - g.measureText(stepText).width, 10 * dpr);
    g.lineWidth = 1.5 * dpr;
    for (const s of lines) {
      g.strokeStyle = g.fillStyle = s.colour;
      if (s.dots) {
        for (const [x, y] of s.points) { g.beginPath(); g.arc(px(x), py(y), 2.5 * dpr, 0, 2 * Math.PI); g.fill(); }
        continue;
      }
      g.beginPath();
      s.points.forEach(([x, y], i) => (i ? g.lineTo(px(x), py(y)) : g.moveTo(px(x), py(y))));
      g.stroke();
    }
  }

  // ---- panel, status line, log ----
  function updateCameraUi() {
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
    drag = { id: e.pointerId, x: e.clientX, y: e.clientY, mode: panning ? 'pan' : flyMode ? 'look' : 'orbit' };
    // Synthetic pointers (scripted events) cannot be captured; the drag still works inside.
    try { canvas.setPointerCapture(e.pointerId); } catch { /* not a live pointer */ }
    canvas.classList.add('dragging');
  });

  canvas.addEventListener('pointermove', (e) => {
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
  };
  canvas.addEventListener('pointerup', endDrag);
  canvas.addEventListener('pointercancel', endDrag);
  canvas.addEventListener('lostpointercapture', endDrag);
  canvas.addEventListener('contextmenu', (e) => e.preventDefault());

  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    if (!scene) return;
    const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? canvas.clientHeight : 1;
    zoom(Math.exp(e.deltaY * unit * ZOOM_PER_PX));
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
    else if (e.code === 'KeyH') $('help').hidden = !$('help').hidden;
  });
  window.addEventListener('keyup', (e) => { fast = e.shiftKey; held.delete(e.code); });
  window.addEventListener('blur', () => held.clear());

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
  $('compare').addEventListener('change', updateCameraUi);
  $('fly').addEventListener('change', (e) => setFly(e.target.checked));
  fovInput.addEventListener('input', () => {
    setFov(Number(fovInput.value));
    if (scene) moved();
  });
  $('background').addEventListener('input', invalidate);
  shSelect.addEventListener('change', invalidate);
  $('centres').addEventListener('change', invalidate);
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
  new ResizeObserver(() => { if (syncCanvasSize() && scene) invalidate(); }).observe(canvas);
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
    return { position: cam.eye.slice(), rotation: cam.rot.slice(), target: target(), datasetCamera: datasetIndex };
  }

  connect();
})();
