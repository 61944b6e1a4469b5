// Pieces shared by the views: error banners, key/value lists, outcome classes, refreshing on change.

import { h, replace } from './dom.js';

// A slot that shows an API error (or nothing). show(err|null).
export function error_slot() {
  const el = h('div', { class: 'error-slot' });
  return {
    el,
    show(err) {
      if (!err) { el.replaceChildren(); return; }
      replace(el, h('div', { class: 'error-banner', testid: 'error-banner', role: 'alert' },
        err.code ? h('code', null, err.code) : null, err.code ? ' ' : null, String(err.message || err)));
    },
  };
}

// <dl> of [label, value-node-or-text] pairs.
export function kv(pairs, attrs) {
  return h('dl', Object.assign({ class: 'kv' }, attrs || {}),
    pairs.filter(p => p).map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

// "ok" -> ok, "timeout" -> timeout, any other error code -> fail (classes in style.css).
export function outcome_class(outcome) {
  if (!outcome || outcome === 'ok') return 'ok';
  if (outcome === 'timeout') return 'timeout';
  return 'fail';
}

export function mono(text, cls) {
  return h('span', { class: 'mono' + (cls ? ' ' + cls : '') }, text);
}

// A block of agent-provided text (input, output, memory content); shown as text, never markup.
export function text_block(text, attrs) {
  return h('pre', Object.assign({ class: 'text-block' }, attrs || {}), text === undefined || text === null ? '' : String(text));
}

// Runs fn again when the live stream shows the system changed (agents, calls finished, queued or
// running: each tick's totals), at most once per ms, and when the page becomes visible again: a
// view's data follows what happens, with no request while nothing does. fn may be async; a run
// is skipped while the previous one is still going. Returns stop().
export function on_change(live, ms, fn) {
  let busy = false;
  let last_key = null;
  let last_run = Date.now();  // the view has just loaded itself
  let pending = false;
  const run = async () => {
    if (busy || document.hidden) { pending = true; return; }
    busy = true;
    pending = false;
    last_run = Date.now();
    try { await fn(); } catch (e) { /* the view shows its own errors */ } finally { busy = false; }
  };
  let timer = 0;
  const unsub = live.subscribe(ov => {
    const t = (ov && ov.totals) || {};
    const key = [t.agents, t.calls_completed, t.calls_failed, t.calls_queued, t.calls_running, t.servers_up].join('/');
    if (last_key === null) { last_key = key; return; }  // the view loaded itself when mounted
    if (key === last_key && !pending) return;
    last_key = key;
    const wait = Math.max(0, last_run + ms - Date.now());
    clearTimeout(timer);
    if (wait === 0) run(); else timer = setTimeout(run, wait);
  });
  const vis = () => { if (!document.hidden) run(); };
  document.addEventListener('visibilitychange', vis);
  return () => { unsub(); clearTimeout(timer); document.removeEventListener('visibilitychange', vis); };
}

// The agent page's route for an id.
export function agent_href(id) {
  return '#/agent/' + encodeURIComponent(id);
}
