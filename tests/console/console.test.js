// agentd-gateway's /console in a real browser: Debian's chromium, headless, driven by
// puppeteer-core (pinned in package.json; it downloads no browser), against a gateway in front of
// two real as_server processes on which workload.py's agents have worked (harness.js).
//
// The tests run in order on one browser tab (a later one needs the earlier login, which keeps the
// token in that tab's sessionStorage); each still logs in again if it finds the login form, so one
// failure does not hide the rest. The page's hooks are the data-testid attributes of
// /work/console-spec/TESTIDS.md (the FE part). Screenshots of each view go to
// $AGENTD_CONSOLE_SCREENSHOTS (CTest: <build>/tests/console/screenshots), with failure-*.png
// beside them when a wait times out.
//
//   ctest -R console_browser --output-on-failure
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

import { startStack } from "./harness.js";

const CHROMIUM = process.env.AGENTD_CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.AGENTD_CONSOLE_SCREENSHOTS || join(process.cwd(), "screenshots");
const WAIT_MS = 20000;

let stack;    // harness.js startStack()
let work;     // what workload.py made
let browser;
let page;
const requests = [];    // every URL the page asked for
const pageErrors = [];  // uncaught exceptions in the page

const tid = (id, more = "") => `[data-testid="${id}"]${more}`;
const viewSel = (view) => `${tid("view")}[data-view="${view}"][data-loaded="true"]`;

// The gateway's API, as the page uses it (the token in a header, never in the URL).
async function api(path, { token = stack.token, ...options } = {}) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return fetch(stack.base + path, { ...options, headers: { ...headers, ...options.headers } });
}
async function apiJson(path) {
  const r = await api(path);
  assert.equal(r.status, 200, `GET ${path}: ${r.status} ${await r.clone().text()}`);
  return r.json();
}

async function shot(name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
}

// Waits for selector (or fn with args: a page-side predicate); on a timeout, saves
// failure-<name>.png and fails saying what was awaited and where the page was.
async function waitFor(what, selectorOrFn, ...args) {
  try {
    if (typeof selectorOrFn === "string") return await page.waitForSelector(selectorOrFn, { timeout: WAIT_MS });
    return await page.waitForFunction(selectorOrFn, { timeout: WAIT_MS, polling: 100 }, ...args);
  } catch (e) {
    const name = `failure-${what.replace(/[^a-z0-9]+/gi, "-").slice(0, 60)}`;
    await shot(name).catch(() => {});
    const banner = await page.$eval(tid("error-banner"), (el) => el.textContent).catch(() => null);
    throw new Error(`${what}: waited ${WAIT_MS / 1000} s for ${typeof selectorOrFn === "string" ? selectorOrFn : "a condition"} ` +
                    `on ${page.url()}${banner ? ` (error-banner: ${banner.trim()})` : ""}; see ${join(SHOTS, name)}.png\n${e.message}`);
  }
}

// Clicks selector once it is there (a clear failure naming it otherwise).
async function click(what, selector) {
  await waitFor(what, selector);
  await page.click(selector);
}

async function logIn(token) {
  await page.locator(tid("token-input")).fill(token);
  await page.click(tid("login-button"));
}

// Goes to a hash route, logging in again if the page asks; resolves once the view has its data.
async function go(hash, view) {
  await page.evaluate((h) => (location.hash = h), hash);
  await waitFor(`${hash} or the login form`, (v) =>
    document.querySelector(`[data-testid="view"][data-view="${v}"][data-loaded="true"]`) ||
    document.querySelector('[data-testid="login-form"]'), view);
  if (await page.$(tid("login-form"))) {
    await logIn(stack.token);
    await page.evaluate((h) => (location.hash = h), hash);
  }
  await waitFor(`the ${view} view`, viewSel(view));
}

async function viewText() {
  return page.$eval(tid("view"), (el) => el.textContent);
}

before(async () => {
  stack = await startStack();
  work = stack.work;
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--window-size=1280,800"],
    defaultViewport: { width: 1280, height: 800 },
  });
  page = await browser.newPage();
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => pageErrors.push(e.message));
  mkdirSync(SHOTS, { recursive: true });
}, { timeout: 240000 });

after(async () => {
  await browser?.close();
  await stack?.close();
});

test("console assets are public and carry the security headers", async () => {
  for (const path of ["/console", "/console/"]) {
    const r = await api(path, { token: null });
    assert.equal(r.status, 200, `GET ${path} without a token`);
    assert.match(r.headers.get("content-type") ?? "", /^text\/html/, `${path} content type`);
    const csp = r.headers.get("content-security-policy") ?? "";
    for (const part of ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"])
      assert.ok(csp.includes(part), `${path} Content-Security-Policy has ${part}: ${csp}`);
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    assert.equal(r.headers.get("referrer-policy"), "no-referrer");
  }
  const r = await api("/console/api/overview", { token: null });
  assert.equal(r.status, 401, "/console/api/overview without a token");
});

test("login: form shown, wrong token refused with a message, right token kept in sessionStorage only", async () => {
  await page.goto(`${stack.base}/console`);
  await waitFor("the login form", tid("login-form"));
  await shot("login");

  await logIn("not-the-token");
  await waitFor("the refusal message", tid("login-error"));
  const message = await page.$eval(tid("login-error"), (el) => el.textContent.trim());
  assert.ok(message.length > 0, "login-error has a message");
  assert.ok(await page.$(tid("login-form")), "the login form stays after a wrong token");

  await logIn(stack.token);
  await waitFor("the cluster view after login", viewSel("cluster"));
  assert.equal(await page.$(tid("login-form")), null, "the login form is gone after the right token");

  const storage = await page.evaluate(() => ({
    session: Object.keys(sessionStorage).map((k) => sessionStorage.getItem(k)),
    local: Object.keys(localStorage).map((k) => localStorage.getItem(k)),
  }));
  assert.ok(storage.session.some((v) => v.includes(stack.token)), "the token is in sessionStorage");
  assert.ok(!storage.local.some((v) => v.includes(stack.token)), "the token is not in localStorage");
  assert.ok(!page.url().includes(stack.token), `the token is not in the URL: ${page.url()}`);
  const leaked = requests.filter((u) => u.includes(stack.token) || u.includes("not-the-token"));
  assert.deepEqual(leaked, [], "no request URL carries a token");
  assert.ok(await page.$(tid("logout-button")), "a logout button once logged in");

  // A reload in the same tab stays logged in (sessionStorage).
  await page.reload();
  await waitFor("the cluster view after a reload", viewSel("cluster"));
});

test("cluster view: both servers up with their addresses, live numbers following the calls", async () => {
  await click("the cluster link", tid("nav-cluster"));
  await waitFor("the cluster view", viewSel("cluster"));
  await waitFor("the live indicator", `${tid("live-status")}[data-state="live"]`);
  const cards = await page.$$eval(tid("server-card"), (els) =>
    els.map((el) => ({ address: el.dataset.address, up: el.dataset.up, text: el.textContent })));
  assert.equal(cards.length, 2, `two server cards: ${JSON.stringify(cards.map((c) => c.address))}`);
  for (const address of stack.servers) {
    const card = cards.find((c) => c.address === address);
    assert.ok(card, `a card for ${address}: ${JSON.stringify(cards.map((c) => c.address))}`);
    assert.equal(card.up, "true", `${address} is up`);
    assert.ok(card.text.includes(address), `${address}'s card shows its address`);
  }
  assert.ok(await page.$(tid("cluster-totals")), "the totals strip");

  // Calls made now on A show on its card at a later tick, without reloading the page.
  const a = stack.servers[0];
  for (let i = 0; i < 3; ++i) await stack.agentctl(a, "call", "pinger", `tick ${i}`);
  const overview = await apiJson("/console/api/overview");
  const server = overview.servers.find((s) => s.address === a);
  assert.ok(server && server.calls_completed > 0, `overview has ${a} with calls_completed: ${JSON.stringify(server)}`);
  // The card's "completed" figure (its title holds the exact count) reaches the API's at a later
  // tick; later ticks may count more, so at least that many.
  await waitFor(`${a}'s card showing at least ${server.calls_completed} calls completed`, (addr, least) => {
    const card = document.querySelector(`[data-testid="server-card"][data-address="${addr}"]`);
    if (!card) return false;
    const stat = [...card.querySelectorAll(".stat")].find((el) => el.querySelector(".stat-label")?.textContent === "completed");
    const exact = stat && Number(String(stat.title || stat.querySelector(".stat-value").textContent).replace(/[^0-9]/g, ""));
    return exact >= least;
  }, a, server.calls_completed);
  await waitFor("a chart", tid("chart"));
  await shot("cluster");
});

test("agents view: total, server-side search, sorting, and one agent's memory and calls", async () => {
  await click("the agents link", tid("nav-agents"));
  await waitFor("the agents view", viewSel("agents"));
  const agents = Object.keys(work.agents);
  await waitFor(`agents-total data-total=${agents.length}`, (n) =>
    document.querySelector('[data-testid="agents-total"]')?.dataset.total === String(n), agents.length);
  const rows = await page.$$eval(tid("agent-row"), (els) => els.map((el) => el.dataset.id));
  assert.deepEqual([...rows].sort(), [...agents].sort(), "every agent has a row");
  await shot("agents");

  // Search: the server filters (a request with q=), the table shows the matches only.
  const workers = Object.keys(work.worker_calls);
  await page.locator(tid("agents-search")).fill("worker");
  await waitFor(`agents-total data-matched=${workers.length} after searching "worker"`, (n) => {
    const total = document.querySelector('[data-testid="agents-total"]');
    const ids = [...document.querySelectorAll('[data-testid="agent-row"]')].map((el) => el.dataset.id);
    return total?.dataset.matched === String(n) && ids.length === n && ids.every((id) => id.startsWith("worker-"));
  }, workers.length);
  assert.ok(requests.some((u) => u.includes("/console/api/agents?") && new URL(u).searchParams.get("q") === "worker"),
            "the search went to the server as q=worker");

  // Sorting by calls: the rows follow the calls each worker got (never the id order, either way).
  await click("the calls column header", `${tid("agents-sort")}[data-sort="calls"]`);
  await waitFor("the calls header sorted", () =>
    ["ascending", "descending"].includes(document.querySelector('[data-testid="agents-sort"][data-sort="calls"]')?.getAttribute("aria-sort")));
  const direction = await page.$eval(`${tid("agents-sort")}[data-sort="calls"]`, (el) => el.getAttribute("aria-sort"));
  const expected = [...workers].sort((x, y) => work.worker_calls[x] - work.worker_calls[y]);
  if (direction === "descending") expected.reverse();
  await waitFor(`rows sorted by calls ${direction}`, (ids) =>
    JSON.stringify([...document.querySelectorAll('[data-testid="agent-row"]')].map((el) => el.dataset.id)) === JSON.stringify(ids),
    expected).catch(async (e) => {
    const got = await page.$$eval(tid("agent-row"), (els) => els.map((el) => el.dataset.id));
    throw new Error(`${e.message}\nexpected ${expected.join(" ")}\ngot      ${got.join(" ")}`);
  });
  assert.ok(requests.some((u) => u.includes("/console/api/agents?") && new URL(u).searchParams.get("sort") === "calls"),
            "the sort went to the server as sort=calls");

  // One agent: planner (memory: its rounds' inputs and replies; calls: one per round).
  await page.locator(tid("agents-search")).fill("planner");
  await waitFor("the planner row", `${tid("agent-row")}[data-id="planner"]`);
  await page.click(`${tid("agent-row")}[data-id="planner"]`);
  await waitFor("planner's view", `${viewSel("agent")} ${tid("agent-info")}[data-id="planner"]`);
  assert.ok(page.url().endsWith("#/agent/planner"), `the URL names the agent: ${page.url()}`);
  // Its replies are the calls with call ids (reading its memory may add spans without one).
  const replies = (await apiJson("/console/api/calls?agent=planner")).spans.filter((s) => s.kind === "reply");
  assert.equal(replies.length, work.rounds, `planner made ${work.rounds} replies: ${JSON.stringify(replies)}`);
  await waitFor(`planner's ${2 * work.rounds} memory messages and its ${work.rounds} reply calls`, (n, ids) => {
    const shown = new Set([...document.querySelectorAll('[data-testid="agent-call"]')].map((el) => el.dataset.callId));
    return document.querySelectorAll('[data-testid="memory-message"]').length >= 2 * n && ids.every((id) => shown.has(id));
  }, work.rounds, replies.map((s) => String(s.call_id)));
  const memory = await page.$eval(tid("agent-memory"), (el) => el.textContent);
  for (let r = 0; r < work.rounds; ++r)
    assert.ok(memory.includes(`plan step ${r}: book the train`), `planner's memory shows round ${r}'s input`);
  const calls = await page.$eval(tid("agent-calls"), (el) => el.textContent);
  assert.ok(/plan step \d: book the train/.test(calls), "its calls show their inputs");
});

test("one agent: a message sent from the page, its reply streamed in", async () => {
  await go("#/agent/chatty", "agent");
  await waitFor("the send form, enabled (--console-send)", `${tid("send-form")}[data-enabled="true"]`);
  const message = "hello from the browser test, please echo me";
  await page.locator(tid("send-input")).fill(message);
  // Record every state send-output goes through, and any text it showed before the end.
  await page.$eval(tid("send-output"), (el) => {
    window.__sendStates = [el.dataset.state];
    window.__streamedText = "";
    new MutationObserver(() => {
      const last = window.__sendStates[window.__sendStates.length - 1];
      if (last !== el.dataset.state) window.__sendStates.push(el.dataset.state);
      if (el.dataset.state === "streaming" && el.textContent.length > window.__streamedText.length)
        window.__streamedText = el.textContent;
    }).observe(el, { attributes: true, childList: true, subtree: true, characterData: true });
  });
  await page.click(tid("send-button"));
  await waitFor("send-output data-state=done", `${tid("send-output")}[data-state="done"]`);
  const states = await page.evaluate(() => window.__sendStates);
  assert.ok(states.includes("streaming") && states.indexOf("streaming") < states.lastIndexOf("done"),
            `send-output went through streaming before done: ${states.join(" -> ")}`);
  const output = await page.$eval(tid("send-output"), (el) => el.textContent);
  assert.ok(output.includes(message), `the reply (the echo model repeats the message) is shown: ${output}`);
  const usage = await page.$eval(tid("send-usage"), (el) => el.textContent.trim());
  assert.ok(usage.length > 0, "a usage line after the reply");
  assert.ok(requests.some((u) => u.endsWith("/console/api/agents/chatty/send")), "the page posted to .../chatty/send");
  await shot("agent");

  const streamed = await page.evaluate(() => window.__streamedText);
  if (!streamed) console.log("# note: the chunks and the end arrived together; the page showed no partial text");
  const memory = (await apiJson("/console/api/agents/chatty")).memory.messages;
  assert.ok(memory.some((m) => m.content === message), "chatty's memory has the sent message");

  // What the page read: chunk events with the reply's words, then done.
  const r = await api("/console/api/agents/chatty/send", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: "one two three" }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type") ?? "", /^text\/event-stream/);
  const events = [...(await r.text()).matchAll(/^event: (\w+)\ndata: (.*)$/gm)].map((m) => [m[1], JSON.parse(m[2])]);
  const names = events.map(([e]) => e);
  assert.ok(names.includes("chunk") && names.at(-1) === "done", `chunk events then done: ${names.join(" ")}`);
  assert.equal(events.filter(([e]) => e === "chunk").map(([, d]) => d.text).join(""), "one two three", "the chunks make the reply");
});

test("calls view: timeline bars, producer -> consumer links across servers, filter by agent", async () => {
  const spans = (await apiJson("/console/api/calls?limit=500")).spans;
  const byId = new Map(spans.map((s) => [String(s.call_id), s]));
  const links = [];
  for (const s of spans)
    for (const c of s.consumed ?? [])
      if (s.agent_id === "reviewer" && byId.get(String(c))?.agent_id === "planner") links.push([String(c), String(s.call_id)]);
  assert.equal(links.length, work.rounds, `the API has ${work.rounds} planner -> reviewer links: ${JSON.stringify(links)}`);

  await click("the calls link", tid("nav-calls"));
  await waitFor("the calls view", viewSel("calls"));
  await waitFor("the timeline with bars", () => +document.querySelector('[data-testid="timeline"]')?.dataset.count > 0);
  for (const [from, to] of links) {
    await waitFor(`bars for calls ${from} and ${to}`, (f, t) =>
      document.querySelector(`[data-testid="timeline-bar"][data-call-id="${f}"]`) &&
      document.querySelector(`[data-testid="timeline-bar"][data-call-id="${t}"]`), from, to);
    assert.ok(await page.$(`${tid("timeline-link")}[data-from="${from}"][data-to="${to}"]`),
              `a timeline link from planner's call ${from} to reviewer's call ${to}`);
  }
  const bars = await page.$$eval(tid("timeline-bar"), (els) => els.map((el) => el.dataset.outcome));
  assert.ok(bars.some((o) => o && o !== "ok" && o !== "success"), `the failed flaky call has its outcome: ${[...new Set(bars)]}`);

  // Details of one call: its input. The screenshot shows the program's chain with it selected.
  const [from] = links[0];
  await page.click(`${tid("timeline-bar")}[data-call-id="${from}"]`);
  await waitFor("call-details for the clicked call", `${tid("call-details")}[data-call-id="${from}"]`);
  const details = await page.$eval(tid("call-details"), (el) => el.textContent);
  assert.ok(/plan step \d: book the train/.test(details), `call-details shows the call's input: ${details.slice(0, 300)}`);
  await page.$eval(tid("timeline"), (svg) => { svg.parentElement.scrollTop = 0; });
  await shot("calls");

  const plannerCalls = (await apiJson("/console/api/calls?agent=planner")).spans.length;
  await page.locator(tid("calls-agent-filter")).fill("planner");
  await waitFor(`only planner's ${plannerCalls} bars after filtering`, (n) => {
    const ids = [...document.querySelectorAll('[data-testid="timeline-bar"]')].map((el) => el.dataset.agentId);
    return ids.length === n && ids.every((id) => id === "planner");
  }, plannerCalls);
  await shot("calls-filtered");

  // A call that used an MCP tool lists its tool calls in its details.
  await page.locator(tid("calls-agent-filter")).fill("tooler");
  await waitFor("tooler's one bar after filtering", () => {
    const bars = [...document.querySelectorAll('[data-testid="timeline-bar"]')];
    return bars.length === 1 && bars[0].dataset.agentId === "tooler";
  });
  await page.click(tid("timeline-bar"));
  await waitFor("tooler's call-details with its tool calls", tid("call-tool-calls"));
  const toolCalls = await page.$eval(tid("call-tool-calls"), (el) => el.textContent);
  assert.ok(/faults\/echo/.test(toolCalls) && /\bok\b/.test(toolCalls), `the tool call and its outcome: ${toolCalls}`);
  await page.locator(tid("calls-agent-filter")).fill("");
});

test("models view: the model configs the agents used, per server", async () => {
  await click("the models link", tid("nav-models"));
  await waitFor("the models view", viewSel("models"));
  const models = (await apiJson("/console/api/models")).models;
  const rows = await page.$$eval(tid("model-row"), (els) => els.map((el) => `${el.dataset.server} ${el.dataset.config}`));
  assert.deepEqual([...rows].sort(), models.map((m) => `${m.server} ${m.config_name}`).sort(), "one row per server and config");
  for (const config of work.model_configs) {
    for (const server of stack.servers)
      assert.ok(rows.includes(`${server} ${config}`), `a row for ${config} on ${server}: ${rows}`);
  }
  const used = models.filter((m) => m.calls > 0).map((m) => m.config_name);
  assert.ok(used.includes("echo") && used.includes("echo-slow"), `both configs have calls: ${used}`);
  await shot("models");
});

// Fails when the page made an element or ran code from agent data.
async function assertNoInjection(where) {
  const dom = await page.evaluate(() => ({
    pwned: typeof window.__pwned,
    onerror: document.querySelectorAll("[onerror]").length,
    images: [...document.querySelectorAll("img")].map((el) => el.getAttribute("src")),
    scripts: [...document.scripts].map((el) => el.getAttribute("src") ?? `inline: ${el.textContent.slice(0, 60)}`),
    bold: [...document.querySelectorAll("b")].filter((el) => el.textContent === "bold").length,
  }));
  assert.equal(dom.pwned, "undefined", `${where}: window.__pwned was set`);
  assert.equal(dom.onerror, 0, `${where}: an element with an onerror attribute exists`);
  assert.ok(!dom.images.includes("x"), `${where}: an <img src=x> from agent data exists`);
  assert.equal(dom.bold, 0, `${where}: a <b> from agent data exists`);
  for (const s of dom.scripts)
    assert.ok(!s.startsWith("inline:") && !s.includes("__pwned"), `${where}: a script that is not the console's own: ${s}`);
}

test("markup and script in agent data are shown as text, never run", async () => {
  await go("#/agents", "agents");
  await page.locator(tid("agents-search")).fill("hostile");
  await waitFor("the hostile agent's row", `${tid("agent-row")}[data-id="hostile"]`);
  const row = await page.$eval(`${tid("agent-row")}[data-id="hostile"]`, (el) => el.textContent);
  assert.ok(row.includes(work.hostile_name), `its name is shown as text in the row: ${row}`);
  await assertNoInjection("agents view");
  await shot("injection-agents");

  await go("#/agent/hostile", "agent");
  await waitFor("hostile's memory", tid("memory-message"));
  const memory = await page.$eval(tid("agent-memory"), (el) => el.textContent);
  assert.ok(memory.includes(work.hostile_text), `its messages are shown as text: ${memory.slice(0, 300)}`);
  const info = await page.$eval(tid("agent-info"), (el) => el.textContent);
  assert.ok(info.includes(work.hostile_name), "its name is shown as text in the info block");
  await assertNoInjection("one-agent view");
  await shot("injection-agent");

  await go("#/calls?agent=hostile", "calls");
  await waitFor("hostile's bar", `${tid("timeline-bar")}[data-agent-id="hostile"]`);
  await page.click(`${tid("timeline-bar")}[data-agent-id="hostile"]`);
  await waitFor("call-details", tid("call-details"));
  const details = await page.$eval(tid("call-details"), (el) => el.textContent);
  assert.ok(details.includes("<script>window.__pwned=1</script>"), `the call's input is shown as text: ${details.slice(0, 300)}`);
  await assertNoInjection("calls view");

  await go("#/cluster", "cluster");
  await go("#/models", "models");
  await assertNoInjection("after every view");
});

test("trace download: Chrome trace JSON, by the API and by the page's button", async () => {
  assert.equal((await api("/console/api/trace.json", { token: null })).status, 401, "trace.json without a token");
  const r = await api("/console/api/trace.json");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-disposition") ?? "", /attachment; filename="agentd-trace\.json"/);
  const trace = await r.json();
  assert.ok(Array.isArray(trace.traceEvents), "a traceEvents array");
  const complete = trace.traceEvents.filter((e) => e.ph === "X");
  assert.ok(complete.length >= 2 * work.rounds, `complete (ph X) events for the calls: ${complete.length}`);
  for (const e of complete.slice(0, 20)) {
    assert.equal(typeof e.ts, "number", `ts of ${JSON.stringify(e)}`);
    assert.equal(typeof e.dur, "number", `dur of ${JSON.stringify(e)}`);
  }
  assert.ok(trace.traceEvents.some((e) => e.ph === "s" || e.ph === "f" || e.ph === "t"),
            "flow events for the consumed placeholders");

  const dir = mkdtempSync(join(tmpdir(), "agentd-console-download-"));
  try {
    const cdp = await browser.target().createCDPSession();
    await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: dir });
    await go("#/calls", "calls");
    await click("the download button", tid("download-trace"));
    const deadline = Date.now() + WAIT_MS;
    while (!existsSync(join(dir, "agentd-trace.json")) && Date.now() < deadline) await new Promise((ok) => setTimeout(ok, 100));
    assert.ok(existsSync(join(dir, "agentd-trace.json")), `the button saved agentd-trace.json: ${readdirSync(dir)}`);
    const saved = JSON.parse(readFileSync(join(dir, "agentd-trace.json"), "utf8"));
    assert.ok(saved.traceEvents.some((e) => e.ph === "X"), "the saved file is a Chrome trace");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the page threw no uncaught exceptions", () => {
  assert.deepEqual(pageErrors, []);
});
