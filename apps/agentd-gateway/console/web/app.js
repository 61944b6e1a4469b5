// The console's entry module: login, the live stream, the top bar and hash routing
// (#/cluster, #/agents, #/agent/ID, #/calls?agent=&trace=, #/models).
//
// Modules (all served flat from /console/assets/, no build step):
//   app.js       this: boot, login/logout, router, top bar
//   api.js       token (sessionStorage), fetch with Authorization, ApiError, SSE body reader
//   live.js      the one /console/api/events stream (reconnects), history, tick subscribers
//   dom.js       h()/s() element builders (text only, vetted attributes), replace, debounce
//   format.js    numbers, bytes, durations, relative times
//   chart.js     SVG line charts of samples
//   ui.js        shared view pieces (error banner, key/value list, refresh timer)
//   view_*.js    one module per route
// The browser tests' hooks are data-testid attributes; keep them stable (the list is in the
// console's contract notes, TESTIDS.md).
//
// A view module exports mount(root, ctx) -> {unmount()}; ctx = {live, arg, params}.
// root is a fresh <section data-testid="view" data-view=NAME>; the view sets data-loaded="true"
// on it once its first data is on screen.

import { h, replace } from './dom.js';
import { get_json, on_unauthorized, token, set_token, clear_token } from './api.js';
import { Live } from './live.js';
import * as cluster from './view_cluster.js';
import * as agents from './view_agents.js';
import * as agent from './view_agent.js';
import * as calls from './view_calls.js';
import * as models from './view_models.js';

const VIEWS = { cluster, agents, agent, calls, models };

const live = new Live();
const main = document.getElementById('main');
const nav = document.getElementById('nav');
const status = document.getElementById('live-status');
const logout = document.getElementById('logout');
const gw_info = document.getElementById('gateway-info');

let current = null;    // the mounted view: {unmount}
let signed_in = false;
let logging_in = false;

function parse_hash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const qi = raw.indexOf('?');
  const path = qi < 0 ? raw : raw.slice(0, qi);
  const params = new URLSearchParams(qi < 0 ? '' : raw.slice(qi + 1));
  const slash = path.indexOf('/');
  const name = slash < 0 ? path : path.slice(0, slash);
  let arg = slash < 0 ? '' : path.slice(slash + 1);
  try { arg = decodeURIComponent(arg); } catch (_) { /* keep it raw */ }
  return { name: VIEWS[name] ? name : 'cluster', arg, params };
}

function unmount() {
  if (current) {
    try { current.unmount(); } catch (e) { console.error(e); }
    current = null;
  }
}

function route() {
  if (!signed_in) return;
  unmount();
  const r = parse_hash();
  for (const a of nav.querySelectorAll('a')) {
    const on = a.dataset.route === r.name || (r.name === 'agent' && a.dataset.route === 'agents');
    if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const root = h('section', { class: 'view view-' + r.name, testid: 'view', 'data-view': r.name });
  replace(main, root);
  current = VIEWS[r.name].mount(root, { live, arg: r.arg, params: r.params });
  window.scrollTo(0, 0);
}

function show_login(message) {
  signed_in = false;
  unmount();
  live.stop();
  nav.hidden = true;
  status.hidden = true;
  logout.hidden = true;
  gw_info.textContent = '';
  const input = h('input', {
    type: 'password', name: 'token', testid: 'token-input', autocomplete: 'current-password',
    placeholder: 'gateway token', 'aria-label': 'gateway token', spellcheck: 'false',
  });
  const form = h('form', { class: 'login card', testid: 'login-form', on: { submit: ev => { ev.preventDefault(); login(input.value.trim()); } } },
    h('h1', null, 'Sign in'),
    h('p', { class: 'muted' }, 'This gateway wants a token (the one its clients use for /v1 and /a2a). ' +
      'It is kept for this browser tab only.'),
    message ? h('p', { class: 'login-error', testid: 'login-error', role: 'alert' }, message) : null,
    h('label', { class: 'field' }, h('span', null, 'Token'), input),
    h('button', { type: 'submit', class: 'btn btn-primary', testid: 'login-button' }, 'Sign in'));
  replace(main, h('div', { class: 'login-wrap' }, form));
  input.focus();
}

async function login(t) {
  if (!t) return;
  set_token(t);
  logging_in = true;
  try {
    const ov = await get_json('overview');
    enter(ov);
  } catch (e) {
    if (e.status === 401) {
      clear_token();
      show_login('The gateway refused this token.');
    } else {
      show_login(`Could not reach the gateway: ${e.message}`);
    }
  } finally {
    logging_in = false;
  }
}

function enter(ov) {
  signed_in = true;
  nav.hidden = false;
  status.hidden = false;
  logout.hidden = !token();
  live.set_overview(ov);
  live.start();
  route();
}

on_unauthorized(() => {
  if (logging_in) return;   // login() reports it
  const had = !!token();
  clear_token();
  show_login(had ? 'The token is no longer accepted; sign in again.' : '');
});

live.on_state(st => {
  status.dataset.state = st;
  status.textContent = st;
  status.title = st === 'live' ? 'receiving updates every second' : st === 'reconnecting' ? 'the update stream broke; retrying' : 'connecting to the update stream';
});

live.subscribe(ov => {
  const g = ov.gateway || {};
  gw_info.textContent = `gateway ${g.version || ''} · ${g.upstream || ''}`.trim();
  gw_info.title = `listening on ${g.listen || '?'}; up ${Math.floor(g.uptime_seconds || 0)} s; TLS ${g.tls ? 'on' : 'off'}; auth ${g.auth ? 'on' : 'off'}; send ${g.send_enabled ? 'enabled' : 'disabled'}`;
});

logout.addEventListener('click', () => {
  clear_token();
  show_login('');
});

window.addEventListener('hashchange', route);

(async function boot() {
  try {
    const ov = await get_json('overview');
    enter(ov);
  } catch (e) {
    if (e.status === 401) return;   // on_unauthorized showed the login form
    replace(main, h('div', { class: 'error-banner', role: 'alert', testid: 'error-banner' },
      `Could not load the console: ${e.message}`),
      h('button', { type: 'button', class: 'btn', on: { click: () => location.reload() } }, 'Retry'));
  }
})();
