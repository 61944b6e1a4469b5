// Pieces shared by the views: error banners, key/value lists, outcome classes, refresh timers.

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

// Runs fn every ms while the page is visible (and once when it becomes visible again).
// fn may be async; a run is skipped while the previous one is still going. Returns stop().
export function every(ms, fn) {
  let busy = false;
  const run = async () => {
    if (busy || document.hidden) return;
    busy = true;
    try { await fn(); } catch (e) { /* the view shows its own errors */ } finally { busy = false; }
  };
  const timer = setInterval(run, ms);
  const vis = () => { if (!document.hidden) run(); };
  document.addEventListener('visibilitychange', vis);
  return () => { clearInterval(timer); document.removeEventListener('visibilitychange', vis); };
}

// The agent page's route for an id.
export function agent_href(id) {
  return '#/agent/' + encodeURIComponent(id);
}
