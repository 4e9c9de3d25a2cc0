// Vectors (arrays of 3) and 3x3 row-major matrices (arrays of 9): the camera math of the page.
// Cameras are world-to-camera rotations in OpenCV axes (rows: x right, y down, z forward).

export const add = (a, b) => [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
export const sub = (a, b) => [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
export const mul = (a, s) => [a[0] * s, a[1] * s, a[2] * s];
export const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
export const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
export const length = (a) => Math.hypot(a[0], a[1], a[2]);
export const normalize = (a) => { const l = length(a); return l > 1e-12 ? mul(a, 1 / l) : a.slice(); };
export const row = (m, i) => [m[3 * i], m[3 * i + 1], m[3 * i + 2]];
export const apply = (m, v) => [dot(row(m, 0), v), dot(row(m, 1), v), dot(row(m, 2), v)];
// A camera's centre from its world-to-camera rotation and translation (-R^T t), and back.
export const centerOf = (c) => mul(add(add(mul(row(c.rotation, 0), c.translation[0]),
  mul(row(c.rotation, 1), c.translation[1])), mul(row(c.rotation, 2), c.translation[2])), -1);
export const translationOf = (r, eye) => mul(apply(r, eye), -1);
export const clamp = (x, lo, hi) => Math.min(hi, Math.max(lo, x));
export const radians = (deg) => (deg * Math.PI) / 180;

// Right-handed rotation by `angle` about the unit `axis` (Rodrigues).
export function axisRotation([x, y, z], angle) {
  const c = Math.cos(angle), s = Math.sin(angle), t = 1 - c;
  return [
    t * x * x + c, t * x * y - s * z, t * x * z + s * y,
    t * x * y + s * z, t * y * y + c, t * y * z - s * x,
    t * x * z - s * y, t * y * z + s * x, t * z * z + c,
  ];
}

// Rows x (right), y (down), z (forward) of a world-to-camera rotation looking at `target`.
export function lookAt(eye, target, up) {
  const z = normalize(sub(target, eye));
  let x = cross(z, up);
  if (length(x) < 1e-9) x = cross(z, Math.abs(z[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0]);
  x = normalize(x);
  return [...x, ...cross(z, x), ...z];
}

// Repeated small rotations drift; the server rejects R whose rows are off by 1e-3.
export function orthonormalize(r) {
  const z = normalize(row(r, 2));
  const x = normalize(cross(row(r, 1), z));
  return [...x, ...cross(z, x), ...z];
}

// The rotation `rot`'s turn about its own axis (radians): the angle of its right axis from the
// level one (horizontal for `up`, perpendicular to the view) towards the level down axis.
export function rollOf(rot, up) {
  const forward = row(rot, 2);
  let level = cross(forward, up);
  if (length(level) < 1e-9) return 0;
  level = normalize(level);
  const down = cross(forward, level);
  return Math.atan2(dot(row(rot, 0), down), dot(row(rot, 0), level));
}

// `rot` turned about its own axis to the roll `angle` (see rollOf); unchanged when it looks
// along `up`.
export function withRoll(rot, up, angle) {
  const forward = row(rot, 2);
  let level = cross(forward, up);
  if (length(level) < 1e-9) return rot;
  level = normalize(level);
  const down = cross(forward, level);
  const x = add(mul(level, Math.cos(angle)), mul(down, Math.sin(angle)));
  return orthonormalize([...x, ...cross(forward, x), ...forward]);
}
