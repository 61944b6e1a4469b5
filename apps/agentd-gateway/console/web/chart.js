// Small hand-drawn SVG line charts of the samples (numbers over time).

import { h, s } from './dom.js';
import { clock } from './format.js';

const W = 320, H = 120;                  // viewBox; the SVG scales to its box
const PAD = { l: 46, r: 6, t: 8, b: 16 };

// A rounded-up axis maximum: 1, 2, 5 x 10^n.
function nice_max(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// line_chart({id, title, fmt, series: [{name, cls, values: [[t_ms, v|null], ...]}], attrs})
// -> a <figure data-testid="chart" data-chart=id>. cls is a series class (s1..s4) from style.css.
// null values leave a gap. The legend shows each series' latest value.
export function line_chart({ id, title, fmt, series, attrs }) {
  const all = series.flatMap(x => x.values);
  const ts = all.map(p => p[0]);
  const t0 = ts.length ? Math.min(...ts) : Date.now() - 60000;
  let t1 = ts.length ? Math.max(...ts) : Date.now();
  if (t1 <= t0) t1 = t0 + 1000;
  const vmax = nice_max(Math.max(0, ...all.map(p => p[1]).filter(v => v !== null && v !== undefined && !Number.isNaN(v))));
  const x = t => PAD.l + (t - t0) / (t1 - t0) * (W - PAD.l - PAD.r);
  const y = v => H - PAD.b - v / vmax * (H - PAD.t - PAD.b);

  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img', 'aria-label': title });
  for (const f of [0, 0.5, 1]) {
    const yy = y(vmax * f);
    svg.appendChild(s('line', { x1: PAD.l, x2: W - PAD.r, y1: yy, y2: yy, class: f === 0 ? 'axis' : 'grid' }));
    svg.appendChild(s('text', { x: PAD.l - 4, y: yy + 3, 'text-anchor': 'end', class: 'tick' }, fmt(vmax * f)));
  }
  svg.appendChild(s('text', { x: PAD.l, y: H - 4, class: 'tick' }, clock(t0)));
  svg.appendChild(s('text', { x: W - PAD.r, y: H - 4, 'text-anchor': 'end', class: 'tick' }, clock(t1)));

  for (const ser of series) {
    // A run of one point between gaps draws no line: it gets a dot instead.
    let d = '', run = [];
    const dots = [];
    const end_run = () => { if (run.length === 1) dots.push(run[0]); run = []; };
    for (const [t, v] of ser.values) {
      if (v === null || v === undefined || Number.isNaN(v)) { end_run(); continue; }
      const p = [x(t).toFixed(1), y(v).toFixed(1)];
      d += `${run.length ? 'L' : 'M'}${p[0]},${p[1]}`;
      run.push(p);
    }
    end_run();
    if (d) svg.appendChild(s('path', { d, class: 'line ' + (ser.cls || 's1') }));
    for (const [cx, cy] of dots) svg.appendChild(s('circle', { cx, cy, r: 1.6, class: 'dot-point ' + (ser.cls || 's1') }));
  }

  const legend = h('div', { class: 'legend' }, series.map(ser => {
    const vals = ser.values.filter(p => p[1] !== null && p[1] !== undefined);
    const last = vals.length ? vals[vals.length - 1][1] : null;
    return h('span', { class: 'legend-item' },
      h('span', { class: 'swatch ' + (ser.cls || 's1') }), ser.name + ' ',
      h('b', null, last === null ? '–' : fmt(last)));
  }));

  return h('figure', Object.assign({ class: 'chart', testid: 'chart', 'data-chart': id }, attrs || {}),
    h('figcaption', null, h('span', { class: 'chart-title' }, title), legend),
    svg);
}

// [[t, sample[key]], ...] from samples; f(sample) may be given instead of a key.
export function pick(samples, key_or_fn) {
  const f = typeof key_or_fn === 'function' ? key_or_fn : (x => x[key_or_fn]);
  return samples.map(x => [x.t, f(x) ?? null]);
}
