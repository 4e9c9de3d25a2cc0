// The dataset cameras drawn over the render as frustums, and which one the pointer is on; lines
// of the scene (an edit's region) drawn the same way.

import { add, centerOf, mul, row } from '/geometry.js';

// The frustums of `cameras` (their JSON form with `index`), `depth` world units deep, through
// `project` (world point -> [x, y, depth] in CSS pixels of the view, or null behind it): for
// each camera wholly in front, {index, x, y (the centre of its image's rectangle), apex,
// corners (four [x, y, depth]), depth}.
export function projectFrustums(cameras, depth, project) {
  const drawn = [];
  for (const c of cameras) {
    const centre = centerOf(c);
    const corners = [[0, 0], [c.width, 0], [c.width, c.height], [0, c.height]].map(([u, v]) => {
      const d = [((u - c.cx) / c.fx) * depth, ((v - c.cy) / c.fy) * depth, depth];
      // World = centre + R^T d.
      return add(centre, add(add(mul(row(c.rotation, 0), d[0]), mul(row(c.rotation, 1), d[1])), mul(row(c.rotation, 2), d[2])));
    }).map(project);
    const apex = project(centre);
    if (!apex || corners.some((p) => p === null)) continue;
    const x = corners.reduce((a, p) => a + p[0], 0) / 4, y = corners.reduce((a, p) => a + p[1], 0) / 4;
    drawn.push({ index: c.index, x, y, apex, corners, depth: apex[2] });
  }
  return drawn;
}

// Strokes `frustums` (from projectFrustums) on the 2D context `g` of a canvas `dpr` backing
// pixels per CSS pixel; `colour(index)` picks each one's colour, the `hovered` one is thicker.
export function drawFrustums(g, frustums, colour, hovered, dpr) {
  for (const { index, apex, corners } of frustums) {
    g.strokeStyle = colour(index);
    g.lineWidth = (index === hovered ? 2.5 : 1.2) * dpr;
    g.beginPath();
    corners.forEach((p, i) => (i ? g.lineTo(p[0] * dpr, p[1] * dpr) : g.moveTo(p[0] * dpr, p[1] * dpr)));
    g.closePath();
    for (const p of corners) { g.moveTo(apex[0] * dpr, apex[1] * dpr); g.lineTo(p[0] * dpr, p[1] * dpr); }
    g.stroke();
  }
}

// Strokes world-space polylines `lines` through `project` (see projectFrustums) in `colour`,
// leaving out the segments with an end behind the view.
export function drawLines(g, lines, project, colour, dpr) {
  if (!lines.length) return;
  g.strokeStyle = colour;
  g.lineWidth = 1.5 * dpr;
  g.beginPath();
  for (const line of lines) {
    const points = line.map(project);
    for (let i = 1; i < points.length; i++) {
      const a = points[i - 1], b = points[i];
      if (!a || !b) continue;
      g.moveTo(a[0] * dpr, a[1] * dpr);
      g.lineTo(b[0] * dpr, b[1] * dpr);
    }
  }
  g.stroke();
}

// The index of the nearest of `frustums` whose image rectangle holds the CSS point (x, y), or
// whose centre is within `reach` pixels of it; null for none.
export function cameraAt(frustums, x, y, reach) {
  const inside = (q) => {
    let sign = 0;
    for (let i = 0; i < 4; i++) {
      const a = q[i], b = q[(i + 1) % 4];
      const z = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
      if (z !== 0) {
        if (sign && Math.sign(z) !== sign) return false;
        sign = Math.sign(z);
      }
    }
    return true;
  };
  const hits = frustums.filter((c) => inside(c.corners) || Math.hypot(c.apex[0] - x, c.apex[1] - y) < reach);
  hits.sort((a, b) => a.depth - b.depth);
  return hits.length ? hits[0].index : null;
}
