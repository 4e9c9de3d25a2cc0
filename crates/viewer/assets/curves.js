// The training panel's curves: drawing one on a canvas, and smoothing a noisy one.

// The exponential moving average of positive `points` ([x, y] pairs), taken of log y (a curve
// drawn on a log scale), debiased at the start: `weight` is the past's share at each point.
export function smoothedLog(points, weight) {
  let average = 0, total = 0;
  return points.map(([x, y]) => {
    average = weight * average + (1 - weight) * Math.log(y);
    total = weight * total + (1 - weight);
    return [x, Math.exp(average / total)];
  });
}

// `series`: [{points: [[x, y]], colour, dots?, faint?}], on a log y axis when `logY`; `label`
// formats the y range shown.
export function drawCurve(el, series, logY, label) {
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
    g.globalAlpha = s.faint ? 0.3 : 1;
    if (s.dots) {
      for (const [x, y] of s.points) { g.beginPath(); g.arc(px(x), py(y), 2.5 * dpr, 0, 2 * Math.PI); g.fill(); }
      continue;
    }
    g.beginPath();
    s.points.forEach(([x, y], i) => (i ? g.lineTo(px(x), py(y)) : g.moveTo(px(x), py(y))));
    g.stroke();
  }
  g.globalAlpha = 1;
}
