// Live training: the status the server sends while a run trains, its evaluations, the loss
// and PSNR curves, and the run's end.

import { drawCurve, smoothedLog } from '/curves.js';
import { $ } from '/dom.js';
import { log, updateBanner } from '/panel.js';
import { invalidate } from '/render.js';
import { ember, held, sched, state } from '/state.js';

const MAX_CURVE_POINTS = 4000;
const CURVE_REDRAW_MS = 250;
const LIVE_REFRESH_MS = 1000;    // during training, a still view is redrawn at least this often
const LOSS_SMOOTHING = 0.9;      // weight of the past in the loss curve's moving average

let curveTimer = 0;

export const fmt = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : '–');

// The field changes under a still camera while it trains: redraw it from time to time, when no
// movement is under way and the last request was answered (or is long overdue).
function refreshLive(s) {
  const moving = state.drag || held.size || sched.settle || sched.quick || sched.full;
  const shown = ember.lastFrame ? ember.lastFrame.step ?? -1 : -1;
  const since = performance.now() - state.lastSentAt;
  const answered = state.lastDrawnId >= state.nextId || since > 5 * LIVE_REFRESH_MS;
  if (!moving && !s.paused && shown < s.step && answered && since > LIVE_REFRESH_MS) invalidate();
}

// Training is over and the server goes on showing the final field: the controls that act on
// the run go, and the banner says what the picture is.
export function onFinished(text) {
  state.finished = text;
  ember.finished = text;
  log(text);
  $('pause').disabled = true;
  $('checkpoint').disabled = true;
  $('train-state').textContent = 'finished';
  updateBanner();
}

// The run is over: the controls that act on it go, and the page says how to see the result.
export function onEnded(text) {
  state.ended = text;
  ember.ended = text;
  log(text);
  $('pause').disabled = true;
  $('checkpoint').disabled = true;
  $('train-state').textContent = 'ended';
}

export function onStatus(s) {
  ember.lastStatus = s;
  refreshLive(s);
  $('training').hidden = false;
  $('train-step').textContent = `${s.step.toLocaleString('en-US')} / ${s.total_steps.toLocaleString('en-US')}`;
  $('train-gaussians').textContent = s.gaussians.toLocaleString('en-US');
  $('scene-gaussians').textContent = s.gaussians.toLocaleString('en-US');
  // A run folder's record, or a run not yet timed, has no speed to show.
  $('train-speed').textContent = s.steps_per_second > 0 ? fmt(s.steps_per_second, 1) : '–';
  $('train-loss').textContent = Number.isFinite(s.loss) ? s.loss.toPrecision(4) : '–';
  if (Number.isFinite(s.psnr)) state.lastPsnr = s.psnr;
  $('train-psnr').textContent = state.lastPsnr === null ? '–' : `${fmt(state.lastPsnr, 2)} dB`;
  $('train-state').textContent = state.finished !== null || s.step >= s.total_steps ? 'finished' : s.paused ? 'paused' : 'running';
  $('pause').textContent = s.paused ? 'Resume' : 'Pause';
  const { history } = state;
  const last = history[history.length - 1];
  if ((!last || s.step > last.step) && Number.isFinite(s.loss)) {
    history.push({ step: s.step, loss: s.loss, psnr: s.psnr });
    // Thin rather than truncate, so the curve keeps its start.
    if (history.length > MAX_CURVE_POINTS) state.history = history.filter((_, i) => i % 2 === 0 || i === history.length - 1);
    scheduleCurves();
  }
}

export function addEval(e) {
  state.evals = state.evals.filter((x) => x.step !== e.step);
  state.evals.push(e);
  state.evals.sort((a, b) => a.step - b.step);
}

export function renderEvals() {
  const { evals } = state;
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

export function scheduleCurves() {
  if (!curveTimer) curveTimer = setTimeout(() => { curveTimer = 0; drawCurves(); }, CURVE_REDRAW_MS);
}

// The loss as logged, and its moving average.
export function curveSeries() {
  const raw = state.history.filter((p) => Number.isFinite(p.loss) && p.loss > 0).map((p) => [p.step, p.loss]);
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
    { points: state.history.filter((p) => p.psnr !== null).map((p) => [p.step, p.psnr]), colour: colour('--train') },
    { points: state.evals.map((e) => [e.step, e.psnr]), colour: colour('--eval'), dots: true },
  ], false, (y) => y.toFixed(1));
}
