// Calls view: a waterfall of the servers' recent spans. One row per call; its bar is the queue
// wait (light) then the run (solid), colored by outcome. A curve runs from the producer of each
// consumed placeholder (the span whose call_id is in another span's `consumed`) to the start of
// its consumer's run, so a program's dataflow and where it waited show. Filters by agent and
// trace (also taken from #/calls?agent=&trace=), a details panel, and the Chrome trace download.

import { h, s, replace, debounce } from './dom.js';
import { get_json, request, url } from './api.js';
import { int, num, us, stamp } from './format.js';
import { error_slot, on_change, kv, mono, text_block, outcome_class, agent_href } from './ui.js';

const REFRESH_MS = 3000;
const LIMIT = 500;
const ROW = 20;          // px per call
const AXIS = 22;         // px for the time axis on top
const LABEL = 250;       // px for the row labels
const WINDOWS = [['all recent', 0], ['last 10 s', 10e6], ['last 1 min', 60e6], ['last 5 min', 300e6]];

function span_key(sp) { return sp.server + '#' + sp.seq; }
function span_end(sp) { return sp.enqueued_unix_us + (sp.queue_wait_us || 0) + (sp.run_us || 0); }
function kind_text(sp) { return sp.kind + (sp.method ? ':' + sp.method : ''); }

function cut(str, n) {
  str = String(str || '');
  return str.length > n ? str.slice(0, n - 1) + '…' : str;
}

// A 1/2/5 x 10^n step giving about `want` ticks over `range`.
function tick_step(range, want) {
  const raw = range / want;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

export function mount(root, { params, live }) {
  const err = error_slot();
  const f_agent = h('input', { type: 'search', class: 'input', testid: 'calls-agent-filter', placeholder: 'agent id', value: params.get('agent') || '', 'aria-label': 'filter by agent id', spellcheck: 'false' });
  const f_trace = h('input', { type: 'search', class: 'input', testid: 'calls-trace-filter', placeholder: 'trace id', value: params.get('trace') || '', 'aria-label': 'filter by trace id', spellcheck: 'false' });
  const f_window = h('select', { class: 'input', testid: 'calls-window', 'aria-label': 'time window' }, WINDOWS.map(([t, v]) => h('option', { value: v }, t)));
  const auto = h('input', { type: 'checkbox', checked: true, testid: 'calls-auto' });
  const download = h('button', { type: 'button', class: 'btn btn-small', testid: 'download-trace', title: 'the shown spans as Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing)' }, 'Download trace (Chrome/Perfetto)');
  const summary = h('span', { class: 'muted', testid: 'calls-summary' });
  const scroller = h('div', { class: 'timeline-scroll' });
  const details = h('aside', { class: 'card call-details-card' }, h('p', { class: 'muted' }, 'Click a call to see its details.'));

  root.append(
    h('div', { class: 'view-head' }, h('h1', null, 'Calls'),
      h('div', { class: 'toolbar' }, f_agent, f_trace, f_window,
        h('label', { class: 'check' }, auto, ' auto-refresh'), download)),
    err.el,
    h('div', { class: 'timeline-meta' }, summary,
      h('span', { class: 'legend' },
        h('span', { class: 'legend-item' }, h('span', { class: 'swatch bar-wait oc-ok' }), 'queue wait'),
        h('span', { class: 'legend-item' }, h('span', { class: 'swatch bar-run oc-ok' }), 'run ok'),
        h('span', { class: 'legend-item' }, h('span', { class: 'swatch bar-run oc-fail' }), 'failed'),
        h('span', { class: 'legend-item' }, h('span', { class: 'swatch bar-run oc-timeout' }), 'timed out'),
        h('span', { class: 'legend-item' }, h('span', { class: 'swatch swatch-link' }), 'placeholder → consumer'))),
    h('div', { class: 'calls-layout' }, scroller, details));

  let spans = [];
  let last_json = '';
  let selected = null;    // span_key of the selected call
  let seq = 0;
  let alive = true;
  let first = true;

  function shown() {
    const w = Number(f_window.value);
    if (!w || !spans.length) return spans;
    const end = Math.max(...spans.map(span_end));
    return spans.filter(sp => span_end(sp) >= end - w);
  }

  function draw() {
    const list = shown();
    const servers = [...new Set(list.map(sp => sp.server))];
    const width = Math.max(640, scroller.clientWidth || 900);
    const height = AXIS + list.length * ROW + 4;
    const svg = s('svg', { class: 'timeline', testid: 'timeline', 'data-count': list.length, width, height, viewBox: `0 0 ${width} ${height}` });
    svg.appendChild(s('defs', null,
      s('marker', { id: 'tl-arrow', viewBox: '0 0 8 8', refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto', markerUnits: 'userSpaceOnUse' },
        s('path', { d: 'M0,0 L8,4 L0,8 z', class: 'arrow-head' }))));
    if (!list.length) {
      svg.appendChild(s('text', { x: 12, y: AXIS + 14, class: 'tick' }, 'No calls recorded (for these filters).'));
      return svg;
    }
    const t0 = Math.min(...list.map(sp => sp.enqueued_unix_us));
    let t1 = Math.max(...list.map(span_end));
    if (t1 <= t0) t1 = t0 + 1000;
    const plot_w = width - LABEL - 12;
    const x = t => LABEL + (t - t0) / (t1 - t0) * plot_w;
    const y = i => AXIS + i * ROW;

    // Time axis and grid.
    const step = tick_step(t1 - t0, Math.max(3, Math.floor(plot_w / 110)));
    const grid = s('g', { class: 'tl-grid' });
    for (let t = 0; t <= t1 - t0 + 1e-9; t += step) {
      const xx = x(t0 + t);
      grid.appendChild(s('line', { x1: xx, x2: xx, y1: AXIS - 4, y2: height, class: 'grid' }));
      grid.appendChild(s('text', { x: xx, y: AXIS - 8, 'text-anchor': t === 0 ? 'start' : 'middle', class: 'tick' }, t === 0 ? stamp(t0 / 1000).slice(11) : '+' + us(t)));
    }
    svg.appendChild(grid);

    const index = new Map();
    list.forEach((sp, i) => { if (sp.call_id) index.set(sp.call_id, i); });
    const sel_i = list.findIndex(sp => span_key(sp) === selected);

    const rows = s('g', { class: 'tl-rows' });
    list.forEach((sp, i) => {
      const oc = outcome_class(sp.outcome);
      const qs = x(sp.enqueued_unix_us);
      const rs = x(sp.enqueued_unix_us + (sp.queue_wait_us || 0));
      const re = x(span_end(sp));
      const si = servers.indexOf(sp.server);
      const g = s('g', {
        class: 'tl-row' + (i === sel_i ? ' selected' : ''), testid: 'timeline-bar',
        'data-call-id': sp.call_id || '', 'data-outcome': sp.outcome || 'ok', 'data-agent-id': sp.agent_id,
        on: { click: () => select(sp) },
      },
        s('title', null, `${sp.agent_id} ${kind_text(sp)} — ${sp.outcome || 'ok'}\nwait ${us(sp.queue_wait_us)}, run ${us(sp.run_us)}\n${sp.call_id || ''}`),
        s('rect', { x: 0, y: y(i), width, height: ROW, class: 'row-bg' + (i % 2 ? ' odd' : '') }),
        s('rect', { x: 2, y: y(i) + 3, width: 3, height: ROW - 6, class: 'srv srv' + (si % 6) }),
        s('text', { x: 9, y: y(i) + ROW / 2 + 4, class: 'row-label' }, cut(sp.agent_id, 22) + ' ', s('tspan', { class: 'row-kind' }, cut(sp.method || sp.kind, 12))),
        s('rect', { x: qs, y: y(i) + 5, width: Math.max(1, rs - qs), height: ROW - 10, class: 'bar-wait oc-' + oc }),
        s('rect', { x: rs, y: y(i) + 4, width: Math.max(2, re - rs), height: ROW - 8, class: 'bar-run oc-' + oc }));
      rows.appendChild(g);
    });
    svg.appendChild(rows);

    const links = s('g', { class: 'tl-links' });
    list.forEach((sp, j) => {
      for (const cid of sp.consumed || []) {
        const i = index.get(cid);
        if (i === undefined) continue;
        const p = list[i];
        const x1 = x(span_end(p)), y1 = y(i) + ROW / 2;
        const x2 = x(sp.enqueued_unix_us + (sp.queue_wait_us || 0)), y2 = y(j) + ROW / 2;
        const dx = Math.max(16, Math.abs(x2 - x1) / 2);
        const hl = i === sel_i || j === sel_i;
        links.appendChild(s('path', {
          d: `M${x1.toFixed(1)},${y1} C${(x1 + dx).toFixed(1)},${y1} ${(x2 - dx).toFixed(1)},${y2} ${x2.toFixed(1)},${y2}`,
          class: 'tl-link' + (hl ? ' hl' : ''), testid: 'timeline-link', 'data-from': cid, 'data-to': sp.call_id || '',
          'marker-end': 'url(#tl-arrow)',
        }));
      }
    });
    svg.appendChild(links);
    return svg;
  }

  function render() {
    const at_bottom = scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - 8;
    replace(scroller, draw());
    if (first || at_bottom) scroller.scrollTop = scroller.scrollHeight;
    first = false;
    const list = shown();
    const ids = new Set(list.map(sp => sp.call_id).filter(Boolean));
    const nlinks = list.reduce((n, sp) => n + (sp.consumed || []).filter(c => ids.has(c)).length, 0);
    const nserv = new Set(list.map(sp => sp.server)).size;
    summary.textContent = `${int(list.length)} calls on ${int(nserv)} server${nserv === 1 ? '' : 's'} · ${int(nlinks)} placeholder links` +
      (spans.length >= LIMIT ? ` · the newest ${LIMIT}` : '');
    render_details();
  }

  function select(sp) {
    selected = sp ? span_key(sp) : null;
    render();
  }

  function render_details() {
    const sp = spans.find(x => span_key(x) === selected);
    if (!sp) {
      replace(details, h('p', { class: 'muted' }, 'Click a call to see its details.'));
      return;
    }
    const by_id = new Map(spans.filter(x => x.call_id).map(x => [x.call_id, x]));
    const consumers = sp.call_id ? spans.filter(x => (x.consumed || []).includes(sp.call_id)) : [];
    const jump = (cid, target) => target
      ? h('button', { type: 'button', class: 'link-btn mono', on: { click: () => select(target) } }, cid)
      : h('span', { class: 'mono muted', title: 'not among the shown spans' }, cid);
    const oc = outcome_class(sp.outcome);
    replace(details, h('div', { testid: 'call-details', 'data-call-id': sp.call_id || '' },
      h('div', { class: 'card-head' }, h('span', { class: 'pill pill-' + oc }, sp.outcome || 'ok'), ' ', mono(kind_text(sp)),
        h('button', { type: 'button', class: 'btn btn-small close', title: 'close', on: { click: () => select(null) } }, '×')),
      kv([
        ['call id', sp.call_id ? mono(sp.call_id, 'id') : h('span', { class: 'muted' }, 'none')],
        ['agent', [h('a', { href: agent_href(sp.agent_id), class: 'mono' }, sp.agent_id), ' ', mono(sp.agent_class, 'muted')]],
        ['server', [mono(sp.server), ` #${sp.seq}`]],
        ['trace', sp.trace_id ? h('a', { href: '#/calls?trace=' + encodeURIComponent(sp.trace_id), class: 'mono', on: { click: () => { f_trace.value = sp.trace_id; } } }, sp.trace_id) : h('span', { class: 'muted' }, 'none')],
        ['enqueued', stamp(sp.enqueued_unix_us / 1000)],
        ['queue wait', us(sp.queue_wait_us)],
        ['run', us(sp.run_us)],
        ['model calls', int(sp.model_calls)],
        ['tokens', `${num(sp.prompt_tokens)} prompt · ${num(sp.completion_tokens)} completion`],
        ['consumed', (sp.consumed || []).length ? (sp.consumed || []).map(c => [jump(c, by_id.get(c)), ' ']) : h('span', { class: 'muted' }, 'none')],
        ['consumed by', consumers.length ? consumers.map(c => [jump(c.call_id || `#${c.seq}`, c), ' ']) : h('span', { class: 'muted' }, 'none')],
      ]),
      (sp.tool_calls || []).length ? [h('h3', null, 'Tool calls'), h('ul', { class: 'tool-calls', testid: 'call-tool-calls' },
        sp.tool_calls.map(t => h('li', null, mono(t.tool), ' ', us(t.duration_us), ' ',
          h('span', { class: 'pill pill-' + outcome_class(t.outcome) }, t.outcome),
          t.error_message ? [' ', h('span', { class: 'muted' }, t.error_message)] : null)))] : null,
      h('h3', null, 'Input'), text_block(sp.input, { class: 'text-block clamp-tall' }),
      h('h3', null, 'Output'), text_block(sp.output, { class: 'text-block clamp-tall' }),
      sp.error_message ? [h('h3', null, 'Error'), text_block(sp.error_message, { class: 'text-block clamp-tall text-fail' })] : null));
  }

  function filters() {
    return { agent: f_agent.value.trim(), trace: f_trace.value.trim() };
  }

  async function load(force) {
    const my = ++seq;
    try {
      const d = await get_json('calls', Object.assign(filters(), { limit: LIMIT }));
      if (my !== seq || !alive) return;
      err.show(null);
      const j = JSON.stringify(d);
      if (force || j !== last_json) {
        last_json = j;
        spans = (d.spans || []).slice().sort((a, b) => a.enqueued_unix_us - b.enqueued_unix_us);
        render();
      }
    } catch (e) {
      if (my !== seq || !alive) return;
      err.show(e);
      return;
    }
    root.dataset.loaded = 'true';
  }

  const refilter = debounce(() => {
    const f = filters();
    const q = new URLSearchParams();
    if (f.agent) q.set('agent', f.agent);
    if (f.trace) q.set('trace', f.trace);
    const qs = q.toString();
    history.replaceState(null, '', '#/calls' + (qs ? '?' + qs : ''));
    first = true;
    load(true);
  }, 300);
  f_agent.addEventListener('input', refilter);
  f_trace.addEventListener('input', refilter);
  f_window.addEventListener('change', () => { first = true; render(); });

  download.addEventListener('click', async () => {
    download.disabled = true;
    try {
      const res = await request(url('trace.json', filters()));
      const blob = await res.blob();
      const href = URL.createObjectURL(blob);
      const a = document.createElement('a');
      a.href = href;        // a blob: URL made here, not data from the API
      a.download = 'agentd-trace.json';
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(href), 10000);
      err.show(null);
    } catch (e) {
      err.show(e);
    } finally {
      download.disabled = false;
    }
  });

  let resize_t = 0;
  const on_resize = () => { clearTimeout(resize_t); resize_t = setTimeout(() => { if (spans.length) render(); }, 150); };
  window.addEventListener('resize', on_resize);

  load(true);
  const stop = on_change(live, REFRESH_MS, () => auto.checked ? load(false) : null);
  return { unmount() { alive = false; stop(); window.removeEventListener('resize', on_resize); } };
}
