// Talking to /console/api: the token, JSON requests, and a reader for text/event-stream bodies.
//
// The token lives in sessionStorage only (gone when the tab closes; never in the URL or
// localStorage) and goes out as "Authorization: Bearer ..." on every request. Any 401 calls the
// handler set with on_unauthorized (the app shows the login form).

const TOKEN_KEY = 'agentd.console.token';

let unauthorized_handler = () => {};

export function on_unauthorized(fn) { unauthorized_handler = fn; }

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function set_token(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clear_token() { sessionStorage.removeItem(TOKEN_KEY); }

export function headers(extra) {
  const h = Object.assign({}, extra);
  const t = token();
  if (t) h['Authorization'] = 'Bearer ' + t;
  return h;
}

// An API failure: HTTP status, the gateway's error code (e.g. "console_read_only") and message.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Builds "/console/api/PATH?k=v" leaving out empty parameters.
export function url(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const qs = q.toString();
  return '/console/api/' + path + (qs ? '?' + qs : '');
}

async function error_of(res) {
  let code = '', message = `HTTP ${res.status}`;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || '';
      message = body.error.message || message;
    }
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(res.status, code, message);
}

// fetch() with the token; throws ApiError for any status but 2xx (and reports 401).
export async function request(path_or_url, init = {}) {
  const u = path_or_url.startsWith('/') ? path_or_url : url(path_or_url);
  const res = await fetch(u, Object.assign({}, init, {
    headers: headers(init.headers),
    cache: 'no-store',
    credentials: 'omit',
  }));
  if (res.status === 401) {
    unauthorized_handler();
    throw await error_of(res);
  }
  if (!res.ok) throw await error_of(res);
  return res;
}

// GET a JSON document.
export async function get_json(path, params, init) {
  const res = await request(url(path, params), init);
  return res.json();
}

// Reads a text/event-stream body and calls on_event(name, data_text) for each event.
// Comments (": keep-alive") and events without data are skipped. Resolves when the body ends;
// rejects when it fails or the signal aborts. on_bytes() is called on any input (for watchdogs).
export async function read_sse(res, on_event, on_bytes = () => {}) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let event = '', data = [];
  const dispatch = () => {
    if (data.length) on_event(event || 'message', data.join('\n'));
    event = '';
    data = [];
  };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    on_bytes();
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      if (buf[nl] === '\r' && nl === buf.length - 1) break;  // maybe half of a CRLF: wait
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
      if (line === '') { dispatch(); continue; }
      if (line[0] === ':') continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val[0] === ' ') val = val.slice(1);
      if (field === 'event') event = val;
      else if (field === 'data') data.push(val);
    }
  }
  dispatch();
}
