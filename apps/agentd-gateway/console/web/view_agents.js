// Agents view: one server-side page of agents (the server filters, sorts and cuts, so this
// stays fast with a million agents). Search, class and server filters, sortable headers, a pager.
// Read again when the live stream shows agents or calls changed (ui.js on_change).

import { h, replace, debounce } from './dom.js';
import { get_json } from './api.js';
import { int, num, ago, stamp } from './format.js';
import { error_slot, on_change, agent_href, mono } from './ui.js';

const REFRESH_MS = 3000;
const PAGE_SIZES = [50, 100, 200, 500];

// Kept across navigation so going back to the list shows the same page.
const state = { q: '', class: '', server: '', sort: 'id', order: 'asc', offset: 0, limit: 100 };

const COLUMNS = [
  { key: 'class', label: 'Class' },
  { key: 'name', label: 'Name' },
  { key: 'id', label: 'Id' },
  { key: 'calls', label: 'Calls', num: true },
  { key: 'errors', label: 'Errors', num: true },
  { key: 'queued', label: 'Queued', num: true },
  { key: 'last_call', label: 'Last call', num: true },
  { key: 'tokens', label: 'Tokens', num: true },
];

function row(a, show_server) {
  const go = () => { location.hash = agent_href(a.id); };
  const tokens = (a.prompt_tokens || 0) + (a.completion_tokens || 0);
  return h('tr', { testid: 'agent-row', 'data-id': a.id, class: 'clickable', on: { click: ev => { if (!ev.target.closest('a')) go(); } } },
    h('td', null, mono(a.class)),
    h('td', { class: 'cell-name' }, h('a', { href: agent_href(a.id), testid: 'agent-link' }, a.name || a.id)),
    h('td', null, mono(a.id, 'id')),
    h('td', { class: 'num' }, int(a.calls)),
    h('td', { class: 'num' + (a.errors ? ' text-fail' : '') }, int(a.errors)),
    h('td', { class: 'num' + (a.queued ? ' text-warn' : '') }, int(a.queued)),
    h('td', { class: 'num', title: a.last_call_unix_ms ? stamp(a.last_call_unix_ms) : null }, ago(a.last_call_unix_ms)),
    h('td', { class: 'num', title: `${int(a.prompt_tokens)} prompt + ${int(a.completion_tokens)} completion; ${int(a.model_calls)} model calls` }, num(tokens)),
    show_server ? h('td', null, mono(a.server)) : null);
}

export function mount(root, { live }) {
  const err = error_slot();
  const search = h('input', { type: 'search', class: 'input', testid: 'agents-search', placeholder: 'Search id, name or class', value: state.q, 'aria-label': 'search agents', spellcheck: 'false' });
  const cls = h('select', { class: 'input', testid: 'agents-class', 'aria-label': 'class' });
  const srv = h('select', { class: 'input', testid: 'agents-server', 'aria-label': 'server' });
  const srv_wrap = h('span', { hidden: true }, srv);
  const size = h('select', { class: 'input', 'aria-label': 'page size' },
    PAGE_SIZES.map(n => h('option', { value: n, selected: n === state.limit }, `${n} / page`)));
  const pager_text = h('span', { class: 'pager-text', testid: 'agents-total' });
  const prev = h('button', { type: 'button', class: 'btn btn-small', testid: 'agents-prev' }, '‹ Prev');
  const next = h('button', { type: 'button', class: 'btn btn-small', testid: 'agents-next' }, 'Next ›');
  const thead_row = h('tr');
  const tbody = h('tbody');
  const table = h('table', { class: 'table', testid: 'agents-table' }, h('thead', null, thead_row), tbody);

  root.append(
    h('div', { class: 'view-head' }, h('h1', null, 'Agents'),
      h('div', { class: 'toolbar' }, search, cls, srv_wrap, size)),
    err.el,
    h('div', { class: 'table-wrap' }, table),
    h('div', { class: 'pager' }, pager_text, prev, next));

  let seq = 0;            // answers to older requests are dropped
  let show_server = false;
  let last_page = null;
  let last_json = '';      // a refresh that changed nothing leaves the table (and any selection) alone

  function headers() {
    replace(thead_row,
      COLUMNS.map(c => {
        const active = state.sort === c.key;
        return h('th', {
          class: 'sortable' + (c.num ? ' num' : '') + (active ? ' sorted' : ''), testid: 'agents-sort', 'data-sort': c.key,
          'aria-sort': active ? (state.order === 'asc' ? 'ascending' : 'descending') : 'none', tabindex: 0,
          title: 'sort by ' + c.label.toLowerCase(),
          on: {
            click: () => sort_by(c.key),
            keydown: ev => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); sort_by(c.key); } },
          },
        }, c.label, h('span', { class: 'sort-mark' }, active ? (state.order === 'asc' ? ' ▲' : ' ▼') : ''));
      }),
      show_server ? h('th', null, 'Server') : null);
  }

  function sort_by(key) {
    if (state.sort === key) state.order = state.order === 'asc' ? 'desc' : 'asc';
    else { state.sort = key; state.order = COLUMNS.find(c => c.key === key).num ? 'desc' : 'asc'; }
    state.offset = 0;
    headers();
    load();
  }

  function fill_filters(ov) {
    const classes = [...new Set((ov.servers || []).flatMap(s => s.classes || []))].sort();
    const want = [''].concat(classes);
    const have = [...cls.options].map(o => o.value);
    if (want.join('\n') !== have.join('\n')) {
      replace(cls, h('option', { value: '' }, 'all classes'), classes.map(c => h('option', { value: c }, c)));
    }
    cls.value = state.class;
    const servers = (ov.servers || []).map(s => s.address);
    srv_wrap.hidden = servers.length < 2;
    const have_s = [...srv.options].map(o => o.value);
    if ([''].concat(servers).join('\n') !== have_s.join('\n')) {
      replace(srv, h('option', { value: '' }, 'all servers'), servers.map(a => h('option', { value: a }, a)));
    }
    srv.value = state.server;
    const ss = servers.length > 1;
    if (ss !== show_server) { show_server = ss; headers(); if (last_page) render(last_page); }

  }

  function render(page) {
    last_page = page;
    const agents = page.agents || [];
    replace(tbody, agents.length ? agents.map(a => row(a, show_server))
      : h('tr', null, h('td', { colspan: COLUMNS.length + 1, class: 'empty' }, page.matched === 0 && page.total > 0 ? 'No agent matches.' : 'No agents.')));
    const from = agents.length ? page.offset + 1 : 0;
    const to = page.offset + agents.length;
    const down = page.servers_down || [];
    pager_text.textContent = `${int(from)}–${int(to)} of ${int(page.matched)} matched · ${int(page.total)} total` +
      (down.length ? ` · not counting ${down.join(', ')} (down)` : '');
    pager_text.dataset.total = page.total;
    pager_text.dataset.matched = page.matched;
    prev.disabled = page.offset <= 0;
    // Across a cluster the gateway merges pages up to max_depth agents deep: past it, filter or
    // pick a server.
    const deepest = page.max_depth == null ? Infinity : page.max_depth;
    next.disabled = to >= page.matched || to + state.limit > deepest;
    next.title = next.disabled && to < page.matched ? `pages go ${int(deepest)} agents deep across servers: search, or pick a server` : '';
  }

  async function load() {
    const my = ++seq;
    try {
      const page = await get_json('agents', {
        offset: state.offset, limit: state.limit, q: state.q, class: state.class,
        sort: state.sort, order: state.order, server: state.server,
      });
      if (my !== seq) return;
      err.show(null);
      // The half-minute bucket redraws an unchanged page now and then so "last call" ages.
      const j = JSON.stringify(page) + Math.floor(Date.now() / 30000);
      if (j !== last_json || !last_page) { last_json = j; render(page); }
      root.dataset.loaded = 'true';
    } catch (e) {
      if (my !== seq) return;
      err.show(e);
    }
  }

  const on_search = debounce(() => { state.q = search.value.trim(); state.offset = 0; load(); }, 250);
  search.addEventListener('input', on_search);
  cls.addEventListener('change', () => { state.class = cls.value; state.offset = 0; load(); });
  srv.addEventListener('change', () => { state.server = srv.value; state.offset = 0; load(); });
  size.addEventListener('change', () => { state.limit = Number(size.value); state.offset = 0; load(); });
  prev.addEventListener('click', () => { state.offset = Math.max(0, state.offset - state.limit); load(); });
  next.addEventListener('click', () => { state.offset += state.limit; load(); });

  const unsub = live.subscribe(ov => fill_filters(ov));
  headers();
  load();
  const stop = on_change(live, REFRESH_MS, load);
  return { unmount() { unsub(); stop(); seq++; } };
}
