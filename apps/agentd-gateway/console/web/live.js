// The live data: one streaming GET of /console/api/events (fetch, because EventSource cannot send
// the Authorization header), reconnected with backoff, plus the history loaded at start.
// Views subscribe and get (overview, samples) on each tick; nothing else polls for it.

import { request, get_json, read_sse } from './api.js';

const MAX_SAMPLES = 300;
const WATCHDOG_MS = 15000;   // no bytes for this long (ticks are 1/s): the stream is stuck, reconnect
const BACKOFF_MS = [1000, 2000, 4000, 8000, 15000];

export class Live {
  constructor() {
    this.overview = null;
    this.samples = [];
    this.interval_ms = 1000;
    this.state = 'connecting';   // connecting | live | reconnecting
    this.subscribers = new Set();
    this.state_listeners = new Set();
    this.abort_ = null;
    this.running_ = false;
    this.retry_timer_ = 0;
    this.watchdog_ = 0;
    this.failures_ = 0;
    this.gen_ = 0;        // bumped by stop(): a stopped stream's retry must not run
  }

  // fn(overview, samples) on every tick (and at once if there is data). Returns an unsubscribe.
  subscribe(fn) {
    this.subscribers.add(fn);
    if (this.overview) fn(this.overview, this.samples);
    return () => this.subscribers.delete(fn);
  }

  on_state(fn) {
    this.state_listeners.add(fn);
    fn(this.state);
    return () => this.state_listeners.delete(fn);
  }

  set_overview(ov) {
    this.overview = ov;
    this.notify_();
  }

  async start() {
    if (this.running_) return;
    this.running_ = true;
    this.failures_ = 0;
    this.load_history_();
    this.connect_();
  }

  stop() {
    this.running_ = false;
    this.gen_++;
    clearTimeout(this.retry_timer_);
    clearTimeout(this.watchdog_);
    if (this.abort_) this.abort_.abort();
    this.abort_ = null;
    this.set_state_('connecting');
  }

  async load_history_() {
    try {
      const hist = await get_json('history');
      if (hist.interval_ms) this.interval_ms = hist.interval_ms;
      // Merge: ticks may have arrived while the history was on its way.
      const seen = new Set(this.samples.map(x => x.t));
      const merged = (hist.samples || []).filter(x => !seen.has(x.t)).concat(this.samples);
      merged.sort((a, b) => a.t - b.t);
      this.samples = merged.slice(-MAX_SAMPLES);
      if (this.overview) this.notify_();
    } catch (e) {
      console.warn('console: history:', e.message);
    }
  }

  connect_() {
    if (!this.running_) return;
    const gen = this.gen_;
    const ctl = new AbortController();
    this.abort_ = ctl;
    const kick = () => {
      clearTimeout(this.watchdog_);
      this.watchdog_ = setTimeout(() => ctl.abort(), WATCHDOG_MS);
    };
    kick();
    request('/console/api/events', { signal: ctl.signal, headers: { Accept: 'text/event-stream' } })
      .then(res => read_sse(res, (name, data) => {
        if (name !== 'tick') return;
        let msg;
        try { msg = JSON.parse(data); } catch (_) { return; }
        this.failures_ = 0;
        this.set_state_('live');
        this.on_tick_(msg);
      }, kick))
      .catch(e => {
        if (e && e.status === 401) this.running_ = false;  // the app shows the login form
      })
      .finally(() => {
        clearTimeout(this.watchdog_);
        if (this.abort_ === ctl) this.abort_ = null;
        if (!this.running_ || gen !== this.gen_) return;
        this.set_state_('reconnecting');
        const wait = BACKOFF_MS[Math.min(this.failures_, BACKOFF_MS.length - 1)];
        this.failures_++;
        this.retry_timer_ = setTimeout(() => this.connect_(), wait);
      });
  }

  on_tick_(msg) {
    if (msg.sample) {
      const last = this.samples[this.samples.length - 1];
      if (!last || msg.sample.t > last.t) {
        this.samples.push(msg.sample);
        if (this.samples.length > MAX_SAMPLES) this.samples.splice(0, this.samples.length - MAX_SAMPLES);
      }
    }
    if (msg.overview) this.overview = msg.overview;
    this.notify_();
  }

  notify_() {
    if (!this.overview) return;
    for (const fn of this.subscribers) {
      try { fn(this.overview, this.samples); } catch (e) { console.error(e); }
    }
  }

  set_state_(st) {
    if (st === this.state) return;
    this.state = st;
    for (const fn of this.state_listeners) fn(st);
  }
}
