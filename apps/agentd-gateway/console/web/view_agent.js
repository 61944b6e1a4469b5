// One agent: its info, its memory (paged, newest last), its recent calls, and a form that sends
// it a message and shows the reply as it streams in. Info, memory and calls are read again when
// the live stream shows calls finished (ui.js on_change); the send form is left alone by that.

import { h, replace } from './dom.js';
import { get_json, request, read_sse, url } from './api.js';
import { int, num, ago, stamp, us } from './format.js';
import { error_slot, on_change, kv, mono, text_block, outcome_class } from './ui.js';

const REFRESH_MS = 5000;
const MEM_LIMIT = 50;
const READ_ONLY_REASON = 'Sending is disabled: the console is read-only unless the gateway is started with --console-send.';

function content_text(c) {
  if (c === undefined || c === null) return '';
  return typeof c === 'string' ? c : JSON.stringify(c, null, 2);
}

function info(a) {
  return kv([
    ['id', mono(a.id, 'id')],
    ['name', a.name],
    ['class', mono(a.class)],
    ['server', mono(a.server)],
    ['calls', `${int(a.calls)} (${int(a.errors)} failed)`],
    ['queued', int(a.queued)],
    ['last call', h('span', { title: stamp(a.last_call_unix_ms) }, ago(a.last_call_unix_ms))],
    ['model calls', int(a.model_calls)],
    ['tokens', `${num(a.prompt_tokens)} prompt · ${num(a.completion_tokens)} completion`],
  ], { testid: 'agent-info', 'data-id': a.id });
}

function memory_message(m) {
  return h('li', { class: 'msg msg-' + (['user', 'assistant', 'system'].includes(m.role) ? m.role : 'other'), testid: 'memory-message', 'data-role': m.role },
    h('div', { class: 'msg-head' }, h('span', { class: 'msg-role' }, m.role || '?'), ' ', h('span', { class: 'msg-name' }, m.name || '')),
    text_block(content_text(m.content), { class: 'text-block msg-content' }),
    m.metadata !== null && m.metadata !== undefined
      ? h('details', { class: 'msg-meta' }, h('summary', null, 'metadata'), text_block(JSON.stringify(m.metadata, null, 2)))
      : null);
}

function call_row(c) {
  const oc = outcome_class(c.outcome);
  return h('tr', { testid: 'agent-call', 'data-call-id': c.call_id || '' },
    h('td', { class: 'nowrap', title: stamp(c.enqueued_unix_us / 1000) }, ago(c.enqueued_unix_us / 1000)),
    h('td', null, mono(c.kind + (c.method ? ' ' + c.method : '')), c.call_id ? h('div', { class: 'mono small muted' }, c.call_id) : null),
    h('td', null, h('span', { class: 'pill pill-' + oc }, c.outcome || 'ok')),
    h('td', { class: 'num' }, us(c.queue_wait_us)),
    h('td', { class: 'num' }, us(c.run_us)),
    h('td', { class: 'num', title: `${int(c.model_calls)} model calls` }, `${num(c.prompt_tokens)} / ${num(c.completion_tokens)}`),
    h('td', { class: 'cell-text' }, text_block(c.input, { class: 'text-block clamp' })),
    h('td', { class: 'cell-text' },
      c.error_message ? text_block(c.error_message, { class: 'text-block clamp text-fail' }) : text_block(c.output, { class: 'text-block clamp' })),
    h('td', null, c.trace_id ? h('a', { href: '#/calls?trace=' + encodeURIComponent(c.trace_id), class: 'mono small', title: 'show this trace in the timeline' }, c.trace_id.slice(0, 8)) : ''));
}

export function mount(root, { live, arg: id }) {
  const err = error_slot();
  const title = h('h1', null, 'Agent ', mono(id, 'id'));
  const info_el = h('div', { class: 'card' });
  const mem_list = h('ol', { class: 'memory', testid: 'agent-memory' });
  const mem_range = h('span', { class: 'pager-text', testid: 'memory-range' });
  const older = h('button', { type: 'button', class: 'btn btn-small', testid: 'memory-older' }, '‹ Older');
  const newer = h('button', { type: 'button', class: 'btn btn-small', testid: 'memory-newer' }, 'Newer ›');
  const calls_body = h('tbody');
  const calls_table = h('table', { class: 'table', testid: 'agent-calls' },
    h('thead', null, h('tr', null, ['When', 'Call', 'Outcome', 'Wait', 'Run', 'Tokens in/out', 'Input', 'Output / error', 'Trace'].map(
      (t, i) => h('th', { class: [3, 4, 5].includes(i) ? 'num' : null }, t)))),
    calls_body);

  // The send form.
  const input = h('textarea', { class: 'input', testid: 'send-input', rows: 4, placeholder: 'Message to this agent (Ctrl+Enter sends)', 'aria-label': 'message', spellcheck: 'false' });
  const button = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'send-button' }, 'Send');
  const reason = h('p', { class: 'send-reason', testid: 'send-disabled-reason', hidden: true });
  const out = h('pre', { class: 'text-block send-output', testid: 'send-output', 'data-state': 'idle' });
  const out_head = h('div', { class: 'send-head muted' });
  const usage = h('div', { class: 'send-usage' });
  const form = h('form', { class: 'send-form', testid: 'send-form', 'data-enabled': 'true' }, input, h('div', { class: 'send-actions' }, button, reason));

  root.append(
    h('div', { class: 'view-head' }, title,
      h('div', { class: 'toolbar' },
        h('a', { href: '#/calls?agent=' + encodeURIComponent(id), class: 'btn btn-small' }, 'Calls in timeline'),
        h('a', { href: '#/agents', class: 'btn btn-small' }, 'All agents'))),
    err.el,
    h('div', { class: 'agent-grid' },
      h('div', { class: 'col' },
        h('h2', null, 'Info'), info_el,
        h('h2', null, 'Send a message'),
        h('div', { class: 'card' }, form, out_head, out, usage)),
      h('div', { class: 'col' },
        h('div', { class: 'section-head' }, h('h2', null, 'Memory'), h('div', { class: 'pager' }, mem_range, older, newer)),
        h('div', { class: 'card memory-card' }, mem_list))),
    h('h2', null, 'Recent calls'),
    h('div', { class: 'table-wrap' }, calls_table));

  let mem_offset = null;      // null: the newest page
  let last_json = '';
  let mem_info = null;
  let read_only = false;
  let sending = false;
  let alive = true;

  function set_enabled() {
    const ov = live.overview;
    const disabled = read_only || (ov && ov.gateway && ov.gateway.send_enabled === false);
    form.dataset.enabled = disabled ? 'false' : 'true';
    input.disabled = !!disabled;
    button.disabled = !!disabled || sending;
    reason.hidden = !disabled;
    reason.textContent = disabled ? READ_ONLY_REASON : '';
  }

  function render(d) {
    const a = d.agent || {};
    replace(title, 'Agent ', h('span', { class: 'agent-title-name' }, a.name || a.id || id), ' ', mono(a.id || id, 'id muted'));
    replace(info_el, info(a));
    const m = d.memory || { total: 0, offset: 0, limit: MEM_LIMIT, messages: [] };
    mem_info = m;
    const msgs = m.messages || [];
    replace(mem_list, m.unavailable
      ? h('li', { class: 'empty', testid: 'memory-unavailable' }, 'Memory not read: the agent is busy (' + m.unavailable + '); it is read again when its calls finish.')
      : msgs.length ? msgs.map(memory_message) : h('li', { class: 'empty' }, 'No messages in memory.'));
    mem_range.textContent = msgs.length ? `${int(m.offset + 1)}–${int(m.offset + msgs.length)} of ${int(m.total)}` : `0 of ${int(m.total)}`;
    older.disabled = m.offset <= 0;
    newer.disabled = m.offset + msgs.length >= m.total;
    const calls = d.calls || [];
    replace(calls_body, calls.length ? calls.map(call_row) : h('tr', null, h('td', { colspan: 9, class: 'empty' }, 'No recent calls.')));
  }

  async function load() {
    try {
      const d = await get_json('agents/' + encodeURIComponent(id),
        mem_offset === null ? { mem_limit: MEM_LIMIT } : { mem_offset, mem_limit: MEM_LIMIT });
      if (!alive) return;
      err.show(null);
      const j = JSON.stringify(d);
      if (j !== last_json) {
        const stick = mem_list.scrollTop + mem_list.clientHeight >= mem_list.scrollHeight - 4;
        last_json = j;
        render(d);
        if (mem_offset === null && stick) mem_list.scrollTop = mem_list.scrollHeight;
      }
    } catch (e) {
      if (!alive) return;
      if (e.code === 'unknown_agent' || e.status === 404) {
        err.show({ code: 'unknown_agent', message: `No agent with id "${id}".` });
      } else {
        err.show(e);
      }
    }
    root.dataset.loaded = 'true';
  }

  older.addEventListener('click', () => {
    if (!mem_info) return;
    mem_offset = Math.max(0, mem_info.offset - MEM_LIMIT);
    load();
  });
  newer.addEventListener('click', () => {
    if (!mem_info) return;
    const n = mem_info.offset + MEM_LIMIT;
    mem_offset = n + MEM_LIMIT >= mem_info.total ? null : n;
    load();
  });

  async function send() {
    const text = input.value;
    if (!text.trim() || sending) return;
    sending = true;
    set_enabled();
    out.textContent = '';
    out.dataset.state = 'streaming';
    out_head.textContent = 'reply (streaming)…';
    usage.replaceChildren();
    try {
      const res = await request(url('agents/' + encodeURIComponent(id) + '/send'), {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
        body: JSON.stringify({ content: text }),
      });
      let ended = false;
      await read_sse(res, (name, data) => {
        let d = {};
        try { d = JSON.parse(data); } catch (_) { return; }
        if (name === 'chunk') {
          out.textContent += d.text || '';
          out.scrollTop = out.scrollHeight;
        } else if (name === 'done') {
          ended = true;
          const m = d.message || {};
          out.textContent = content_text(m.content);
          out.dataset.state = 'done';
          out_head.textContent = `reply from ${m.name || '?'} (${m.role || '?'})`;
          const u = d.usage || {};
          replace(usage, h('span', { testid: 'send-usage' },
            `${int(u.model_calls)} model calls · ${int(u.prompt_tokens)} prompt / ${int(u.completion_tokens)} completion tokens`,
            d.trace_id ? [' · trace ', h('a', { href: '#/calls?trace=' + encodeURIComponent(d.trace_id), class: 'mono' }, d.trace_id)] : null));
        } else if (name === 'error') {
          ended = true;
          out.dataset.state = 'error';
          out_head.textContent = 'the call failed';
          replace(usage, h('span', { class: 'text-fail' }, h('code', null, d.code || 'error'), ' ', d.message || ''));
        }
      });
      if (!ended) {
        out.dataset.state = 'error';
        out_head.textContent = 'the stream ended without a reply';
      } else {
        input.value = '';
      }
    } catch (e) {
      out.dataset.state = 'error';
      if (e.code === 'console_read_only' || e.status === 403) {
        read_only = e.code === 'console_read_only' || read_only;
        out_head.textContent = e.code === 'console_read_only' ? READ_ONLY_REASON : `refused: ${e.message}`;
      } else {
        out_head.textContent = `send failed: ${e.message}`;
      }
    } finally {
      sending = false;
      if (alive) { set_enabled(); load(); }
    }
  }

  form.addEventListener('submit', ev => { ev.preventDefault(); send(); });
  input.addEventListener('keydown', ev => { if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); send(); } });

  const unsub = live.subscribe(() => set_enabled());
  set_enabled();
  load();
  const stop = on_change(live, REFRESH_MS, load);
  return { unmount() { alive = false; unsub(); stop(); } };
}
