// Models view: a row per model config of each server (counted since the server started, from
// /console/api/models, read again when the live stream shows calls finished) and charts per config over time
// from the live samples' `models` map (summed over servers).

import { h, replace } from './dom.js';
import { get_json } from './api.js';
import { int, num, secs } from './format.js';
import { line_chart, pick } from './chart.js';
import { error_slot, on_change, mono } from './ui.js';

// A model's latency is counted in whole milliseconds (and its histogram's first bucket ends at
// 1 ms): an estimate within that bucket says only "under a millisecond".
function model_secs(sec) {
  return sec !== null && sec !== undefined && sec <= 0.001 ? '≤ 1 ms' : secs(sec);
}

const REFRESH_MS = 5000;

function row(m) {
  const lat = m.latency || {};
  return h('tr', { testid: 'model-row', 'data-config': m.config_name, 'data-server': m.server },
    h('td', null, mono(m.server)),
    h('td', null, mono(m.config_name)),
    h('td', null, m.model_type),
    h('td', null, mono(m.model_name)),
    h('td', { class: 'num' }, int(m.calls)),
    h('td', { class: 'num' + (m.errors ? ' text-fail' : '') }, int(m.errors)),
    h('td', { class: 'num' }, model_secs(lat.p50)),
    h('td', { class: 'num' }, model_secs(lat.p95)),
    h('td', { class: 'num' }, model_secs(lat.p99)),
    h('td', { class: 'num', title: int(m.prompt_tokens) }, num(m.prompt_tokens)),
    h('td', { class: 'num', title: int(m.completion_tokens) }, num(m.completion_tokens)));
}

function model_charts(name, samples) {
  const of = key => pick(samples, x => (x.models && x.models[name] ? x.models[name][key] : null));
  const rate = v => num(v) + '/s';
  const attrs = { 'data-model': name };
  return h('div', { class: 'model-block' },
    h('h3', null, mono(name)),
    h('div', { class: 'charts charts-3' },
      line_chart({ id: 'model-calls_per_s', title: 'Calls /s', fmt: rate, attrs,
        series: [{ name: 'calls', cls: 's1', values: of('calls_per_s') }, { name: 'errors', cls: 's4', values: of('errors_per_s') }] }),
      line_chart({ id: 'model-latency', title: 'Latency', fmt: secs, attrs,
        series: [{ name: 'p50', cls: 's1', values: of('latency_p50') }, { name: 'p95', cls: 's2', values: of('latency_p95') }] }),
      line_chart({ id: 'model-tokens_per_s', title: 'Tokens /s', fmt: rate, attrs,
        series: [{ name: 'prompt', cls: 's1', values: of('prompt_tokens_per_s') }, { name: 'completion', cls: 's3', values: of('completion_tokens_per_s') }] })));
}

export function mount(root, { live }) {
  const err = error_slot();
  const tbody = h('tbody');
  const table = h('table', { class: 'table', testid: 'models-table' },
    h('thead', null, h('tr', null,
      ['Server', 'Config', 'Type', 'Model', 'Calls', 'Errors', 'p50', 'p95', 'p99', 'Tokens in', 'Tokens out'].map(
        (t, i) => h('th', { class: i >= 4 ? 'num' : null }, t)))),
    tbody);
  const charts_el = h('div');
  root.append(h('div', { class: 'view-head' }, h('h1', null, 'Models')), err.el,
    h('div', { class: 'table-wrap' }, table), h('h2', null, 'Over time (all servers)'), charts_el);

  let alive = true;

  async function load() {
    try {
      const d = await get_json('models');
      if (!alive) return;
      err.show(null);
      const ms = d.models || [];
      replace(tbody, ms.length ? ms.map(row) : h('tr', null, h('td', { colspan: 11, class: 'empty' }, 'No model configs on any server.')));
      root.dataset.loaded = 'true';
    } catch (e) {
      if (alive) err.show(e);
    }
  }

  const unsub = live.subscribe((ov, samples) => {
    const names = [...new Set(samples.flatMap(x => Object.keys(x.models || {})))].sort();
    replace(charts_el, names.length ? names.map(n => model_charts(n, samples))
      : h('p', { class: 'muted' }, 'No model samples yet.'));
  });
  load();
  const stop = on_change(live, REFRESH_MS, load);
  return { unmount() { alive = false; unsub(); stop(); } };
}
