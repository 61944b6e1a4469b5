// Cluster view: a card per server, the totals, and charts of the samples. Redrawn on every tick
// from the live stream; it fetches nothing itself.

import { h, replace } from './dom.js';
import { int, num, bytes, secs, uptime, ago, stamp } from './format.js';
import { line_chart, pick } from './chart.js';
import { kv, mono } from './ui.js';

function onoff(label, b) {
  return h('span', { class: 'pill ' + (b ? 'pill-on' : 'pill-off') }, `${label} ${b ? 'on' : 'off'}`);
}

function stat(label, value, title) {
  return h('div', { class: 'stat', title: title || null }, h('div', { class: 'stat-value' }, value), h('div', { class: 'stat-label' }, label));
}

function server_card(sv) {
  const up = !!sv.up;
  const head = h('div', { class: 'card-head' },
    h('span', { class: 'dot ' + (up ? 'dot-up' : 'dot-down'), title: up ? 'up' : 'down' }),
    mono(sv.address, 'card-title'),
    h('span', { class: 'pill ' + (up ? 'pill-ok' : 'pill-fail') }, up ? 'up' : 'down'));
  if (!up) {
    return h('article', { class: 'card server-card server-down', testid: 'server-card', 'data-address': sv.address, 'data-up': 'false' },
      head,
      h('p', { class: 'down-reason', testid: 'server-down-reason' }, sv.down_reason || 'unreachable'));
  }
  const stats = h('div', { class: 'stats' },
    stat('agents', num(sv.agents), int(sv.agents)),
    stat('running', num(sv.calls_running)),
    stat('queued', num(sv.calls_queued)),
    stat('completed', num(sv.calls_completed), int(sv.calls_completed)),
    stat('failed', num(sv.calls_failed), `${int(sv.calls_failed)} failed, ${int(sv.calls_timed_out)} timed out`),
    stat('workers', `${int(sv.workers_busy)}/${int(sv.workers_max)}`, `${int(sv.workers)} threads now, ${int(sv.workers_busy)} busy, at most ${int(sv.workers_max)}`));
  const state = sv.state_dir
    ? [mono(sv.state_dir), ' · last commit ', h('span', { title: stamp(sv.state_last_commit_unix_ms) }, ago(sv.state_last_commit_unix_ms))]
    : h('span', { class: 'muted' }, 'in memory (no state dir)');
  return h('article', { class: 'card server-card', testid: 'server-card', 'data-address': sv.address, 'data-up': 'true' },
    head,
    stats,
    kv([
      ['server id', mono(sv.server_id)],
      ['version', sv.version],
      ['uptime', uptime(sv.uptime_seconds)],
      ['RSS / CPU', `${bytes(sv.rss_bytes)} · ${secs(sv.cpu_seconds)} CPU`],
      ['state', state],
      sv.state_error ? ['state error', h('span', { class: 'text-fail' }, sv.state_error)] : null,
      ['security', [onoff('TLS', sv.tls), ' ', onoff('auth', sv.auth)]],
      ['model calls', `${int(sv.model_calls)} · ${num(sv.prompt_tokens)} in / ${num(sv.completion_tokens)} out tokens`],
      ['classes', (sv.classes || []).length ? (sv.classes || []).map(c => mono(c, 'tag')) : h('span', { class: 'muted' }, 'none')],
      ['models', (sv.model_configs || []).length ? (sv.model_configs || []).map(c => mono(c, 'tag')) : h('span', { class: 'muted' }, 'none')],
    ]));
}

function totals(t) {
  return h('div', { class: 'totals', testid: 'cluster-totals' },
    stat('servers up', `${int(t.servers_up)}/${int(t.servers)}`),
    stat('agents', num(t.agents), int(t.agents)),
    stat('calls running', num(t.calls_running)),
    stat('calls queued', num(t.calls_queued)),
    stat('completed', num(t.calls_completed), int(t.calls_completed)),
    stat('failed', num(t.calls_failed), int(t.calls_failed)));
}

export function charts(samples) {
  const rate = v => num(v) + '/s';
  return [
    line_chart({ id: 'calls_per_s', title: 'Calls /s', fmt: rate,
      series: [{ name: 'calls', cls: 's1', values: pick(samples, 'calls_per_s') }] }),
    line_chart({ id: 'failed_per_s', title: 'Failed /s', fmt: rate,
      series: [{ name: 'failed', cls: 's4', values: pick(samples, 'failed_per_s') }] }),
    line_chart({ id: 'latency', title: 'Call latency', fmt: secs,
      series: [{ name: 'p50', cls: 's1', values: pick(samples, 'latency_p50') },
               { name: 'p95', cls: 's2', values: pick(samples, 'latency_p95') }] }),
    line_chart({ id: 'tokens_per_s', title: 'Tokens /s', fmt: rate,
      series: [{ name: 'prompt', cls: 's1', values: pick(samples, 'prompt_tokens_per_s') },
               { name: 'completion', cls: 's3', values: pick(samples, 'completion_tokens_per_s') }] }),
  ];
}

export function mount(root, { live }) {
  const totals_el = h('div');
  const charts_el = h('div', { class: 'charts' });
  const cards_el = h('div', { class: 'cards' });
  root.append(
    h('div', { class: 'view-head' }, h('h1', null, 'Cluster')),
    totals_el, charts_el, h('h2', null, 'Servers'), cards_el);
  const unsub = live.subscribe((ov, samples) => {
    replace(totals_el, totals(ov.totals || {}));
    replace(charts_el, charts(samples));
    replace(cards_el, (ov.servers || []).map(server_card));
    root.dataset.loaded = 'true';
  });
  return { unmount: unsub };
}
