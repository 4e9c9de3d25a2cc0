// The page's shared state: what more than one module reads and changes, kept here alone. A
// module cannot assign to a binding it imports, so what the page replaces is a field of
// `state`; the objects it only changes in place are exported as they are.

import { KeyViews } from '/path.js';

export const DEFAULT_FOV = 50;
// The largest level-of-detail threshold a render may ask for, pixels (the server's
// MAX_LOD_THRESHOLD).
export const MAX_LOD_PX = 64;

// window.ember's counters and messages (automation.js adds its functions and puts it on the
// window). Tests read them live, so this object is the one the modules change.
export const ember = {
  framesReceived: 0,
  lastFrame: null,
  hello: null,
  lastStatus: null,
  errors: [],
  ended: null,
  finished: null,
  copiedCamera: null,
  edits: null,                // the server's last `edits` message
  editPreview: null,          // its last `edit_preview` answer
};

// The camera: centre, world-to-camera rotation and the distance to the orbit target, which
// lies on the forward axis; keeping the target implicit keeps it in front whatever moves.
export const cam = { eye: [0, 0, 0], rot: [1, 0, 0, 0, 1, 0, 0, 0, 1], dist: 1 };
export const held = new Set();          // movement keys down, in fly mode
export const sched = { quick: false, full: false, settle: 0, raf: 0, flyTime: null };
export const frameTimes = [];
export const path = new KeyViews();     // the camera path being recorded

export const state = {
  scene: null,                // from hello: {target, up, sceneUp, radius, bounds, front, cameras, home, lod}
  datasetIndex: null,         // the dataset camera the view is exactly on
  lastDataset: null,          // where previous/next step from once the view has moved
  fovDeg: DEFAULT_FOV,
  flyMode: false,
  drag: null,
  fast: false,

  ws: null,
  conn: 'connecting',
  nextId: 0,
  lastDrawnId: 0,
  lastSentAt: 0,              // performance.now() of the last render request
  lastPsnr: null,             // the training PSNR last measured (not every step measures it)
  ended: null,                // the server's word that the run ended: nothing to reconnect to
  finished: null,             // the server's word that training ended and it shows the final field
  lastBitmap: null,
  shotId: null,

  overlayCameras: [],         // the dataset cameras drawn: {index, x, y, corners} in CSS pixels
  hovered: null,              // the drawn camera under the pointer

  history: [],                // {step, loss, psnr}
  evals: [],                  // eval messages, by step
};
