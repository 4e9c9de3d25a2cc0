// Orientation aids over the render: the world's axes in a corner of the view ("Show axes"), and
// a grid on the ground ("Show grid"): the plane through the scene's lowest point along its up,
// centred under the orbit target.

import { add, cross, dot, mul, normalize, row, sub } from '/geometry.js';
import { target } from '/camera.js';
import { $ } from '/dom.js';
import { cam, state } from '/state.js';

const AXIS_PX = 32;              // the drawn length of an axis seen side on, CSS pixels
const CORNER_PX = 52;            // the axes' centre from the bottom-right corner
const AXES = [['X', [1, 0, 0], '#ef5350'], ['Y', [0, 1, 0], '#66bb6a'], ['Z', [0, 0, 1], '#42a5f5']];
const GRID_LINES = 20;           // lines each way
const GRID_SEGMENTS = 24;        // pieces per line (a piece behind the view is left out)

// The world axes as the view sees them: {name, colour, x, y (CSS offsets from the gizmo's
// centre, y down), away (pointing away from the viewer)}, farthest first.
export function axesInView() {
  return AXES.map(([name, axis, colour]) => {
    const d = [dot(row(cam.rot, 0), axis), dot(row(cam.rot, 1), axis), dot(row(cam.rot, 2), axis)];
    return { name, colour, x: d[0] * AXIS_PX, y: d[1] * AXIS_PX, away: d[2] > 0, depth: d[2] };
  }).sort((a, b) => b.depth - a.depth);
}

// Draws the axes in the bottom-right corner of the 2D context `g` (`dpr` backing pixels per
// CSS pixel, `width` and `height` the backing size).
export function drawAxes(g, width, height, dpr) {
  if (!$('show-axes').checked) return;
  const cx = width - CORNER_PX * dpr, cy = height - CORNER_PX * dpr;
  g.font = `${11 * dpr}px sans-serif`;
  g.textAlign = 'center';
  g.textBaseline = 'middle';
  for (const a of axesInView()) {
    g.globalAlpha = a.away ? 0.45 : 1;
    g.strokeStyle = g.fillStyle = a.colour;
    g.lineWidth = 2 * dpr;
    g.beginPath();
    g.moveTo(cx, cy);
    g.lineTo(cx + a.x * dpr, cy + a.y * dpr);
    g.stroke();
    g.fillText(a.name, cx + a.x * dpr * 1.3, cy + a.y * dpr * 1.3);
  }
  g.globalAlpha = 1;
}

// A round grid spacing near `size`: 1, 2 or 5 times a power of ten.
export function gridSpacing(size) {
  const power = 10 ** Math.floor(Math.log10(size));
  const steps = [1, 2, 5, 10].map((k) => k * power);
  return steps.find((s) => s >= size) || steps[steps.length - 1];
}

// The ground grid as world-space polylines (none when "Show grid" is off): GRID_LINES lines each
// way, a round spacing apart, on the plane perpendicular to up through the lowest corner of the
// scene's bounds (through the orbit target without bounds).
export function gridLines() {
  const { scene } = state;
  if (!scene || !$('show-grid').checked) return [];
  const up = normalize(scene.up);
  const b = scene.bounds;
  const corners = b ? [0, 1, 2, 3, 4, 5, 6, 7].map((i) => [i & 1 ? b.max[0] : b.min[0], i & 2 ? b.max[1] : b.min[1], i & 4 ? b.max[2] : b.min[2]]) : [target()];
  const ground = Math.min(...corners.map((c) => dot(c, up)));
  const at = target();
  const centre = add(sub(at, mul(up, dot(at, up))), mul(up, ground));
  let u = cross(up, Math.abs(up[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0]);
  u = normalize(u);
  const v = cross(up, u);
  const spacing = gridSpacing((4 * scene.radius) / GRID_LINES);
  // Lines at whole multiples of the spacing in the plane's own coordinates, so they stay put as
  // the target moves.
  const origin = mul(up, ground);
  const offset = sub(centre, origin);
  const [cu, cv] = [Math.round(dot(offset, u) / spacing), Math.round(dot(offset, v) / spacing)];
  const half = GRID_LINES / 2;
  const point = (a, b2) => add(origin, add(mul(u, a * spacing), mul(v, b2 * spacing)));
  const lines = [];
  for (let i = -half; i <= half; i++) {
    for (const along of [true, false]) {
      const line = [];
      for (let k = 0; k <= GRID_SEGMENTS; k++) {
        const t = -half + (2 * half * k) / GRID_SEGMENTS;
        line.push(along ? point(cu + i, cv + t) : point(cu + t, cv + i));
      }
      lines.push(line);
    }
  }
  return lines;
}

// The grid's spacing, world units (null before the scene is known).
export const gridSize = () => (state.scene ? gridSpacing((4 * state.scene.radius) / GRID_LINES) : null);
