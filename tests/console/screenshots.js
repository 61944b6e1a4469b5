// The README's console screenshots (apps/agentd-gateway/console/screenshots/) of a running gateway:
// cluster, agents, agent (console_demo.py's planner), calls (a planner -> reviewer placeholder
// link selected), models and, when the gateway wants a token, login. Debian's chromium, headless,
// 1280x800, driven by puppeteer-core (tests/console/node_modules, as console.test.js).
// scripts/console_screenshots.sh starts the system and runs this; by hand:
//
//   node tests/console/screenshots.js http://127.0.0.1:8080 OUTDIR [TOKEN]
//
// TOKEN (else $CONSOLE_TOKEN): the gateway's --token-file token; with it, login.png is the login
// form before it is used, without it the console must open directly and login.png is not written.
// $AGENTD_CHROMIUM overrides /usr/bin/chromium. Every wait is on the page's data-testid hooks, as
// in console.test.js (a view's data-loaded, its rows), and each screenshot follows a short settle.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const [url, outDir, tokenArg] = process.argv.slice(2);
if (!url || !outDir) {
  console.error("usage: node tests/console/screenshots.js URL OUTDIR [TOKEN]   (TOKEN also from $CONSOLE_TOKEN)");
  process.exit(2);
}
const base = url.replace(/\/+$/, "");
const token = tokenArg || process.env.CONSOLE_TOKEN || "";
const CHROMIUM = process.env.AGENTD_CHROMIUM || "/usr/bin/chromium";
const WAIT_MS = 20000;
const SETTLE_MS = 1500;  // a tick or two of the live stream after the view has its data

const tid = (id, more = "") => `[data-testid="${id}"]${more}`;
const viewSel = (view) => `${tid("view")}[data-view="${view}"][data-loaded="true"]`;
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

let page;

async function api(path) {
  const r = await fetch(base + path, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function waitFor(what, selectorOrFn, ...args) {
  try {
    if (typeof selectorOrFn === "string") return await page.waitForSelector(selectorOrFn, { timeout: WAIT_MS });
    return await page.waitForFunction(selectorOrFn, { timeout: WAIT_MS, polling: 100 }, ...args);
  } catch (e) {
    await page.screenshot({ path: join(outDir, "failure.png") }).catch(() => {});
    throw new Error(`${what}: nothing after ${WAIT_MS / 1000} s on ${page.url()} (see ${join(outDir, "failure.png")}): ${e.message}`);
  }
}

async function shot(name) {
  await page.mouse.move(1279, 799);  // no hover highlight where the last click was
  await sleep(SETTLE_MS);
  const path = join(outDir, `${name}.png`);
  await page.screenshot({ path });
  console.log(`screenshots.js: ${path}`);
}

async function go(hash, view) {
  await page.evaluate((h) => (location.hash = h), hash);
  await waitFor(`the ${view} view`, viewSel(view));
}

async function main() {
  mkdirSync(outDir, { recursive: true });
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--headless=new", "--disable-gpu", "--window-size=1280,800"],
    defaultViewport: { width: 1280, height: 800 },
  });
  try {
    page = await browser.newPage();
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    await page.goto(`${base}/console`);

    if (token) {
      await waitFor("the login form", tid("login-form"));
      await shot("login");
      await page.locator(tid("token-input")).fill(token);
      await page.click(tid("login-button"));
    }
    await waitFor("the cluster view", viewSel("cluster"));
    await waitFor("the live stream", `${tid("live-status")}[data-state="live"]`);
    await shot("cluster");

    await go("#/agents", "agents");
    await waitFor("the agents' rows", tid("agent-row"));
    await shot("agents");

    // console_demo.py's planner: the first DialogAgent named Planner.
    const planner = (await api("/console/api/agents?q=Planner")).agents.find((a) => a.name === "Planner");
    if (!planner) throw new Error("no agent named Planner: is examples/python/console_demo.py running?");
    await go(`#/agent/${encodeURIComponent(planner.id)}`, "agent");
    await waitFor("the planner's memory and calls", (id) =>
      document.querySelector(`[data-testid="agent-info"][data-id="${id}"]`) &&
      document.querySelector('[data-testid="memory-message"]') &&
      document.querySelector('[data-testid="agent-call"]'), planner.id);
    // The send form (--console-send): a message, its reply streamed in.
    if (await page.$(`${tid("send-form")}[data-enabled="true"]`)) {
      await page.locator(tid("send-input")).fill("What is the plan so far?");
      await page.click(tid("send-button"));
      await waitFor("the reply to the message sent", `${tid("send-output")}[data-state="done"]`);
    }
    await shot("agent");

    // Calls: auto-refresh off (on a busy system the newest 500 calls change under the selection
    // every few seconds), then the first placeholder link that fits under the time axis at the
    // top, else the newest, its producer selected.
    await go("#/calls", "calls");
    await waitFor("a placeholder link in the timeline", tid("timeline-link"));
    if (await page.$eval(tid("calls-auto"), (el) => el.checked)) await page.click(tid("calls-auto"));
    await sleep(SETTLE_MS);  // a load already under way
    const from = await page.$eval(tid("timeline"), (svg) => {
      const scroller = svg.parentElement;
      scroller.scrollTop = 0;
      const bottom = scroller.getBoundingClientRect().bottom;
      const shown = (id) =>
        svg.querySelector(`[data-testid="timeline-bar"][data-call-id="${id}"]`)?.getBoundingClientRect().bottom <= bottom;
      const links = [...svg.querySelectorAll('[data-testid="timeline-link"]')].map((el) => el.dataset);
      return (links.find((l) => shown(l.from) && shown(l.to)) ?? links.at(-1)).from;
    });
    const bar = `${tid("timeline-bar")}[data-call-id="${from}"]`;
    await page.$eval(bar, (el) => el.scrollIntoView({ block: "nearest" }));
    await page.click(bar);
    await waitFor("the clicked call's details", `${tid("call-details")}[data-call-id="${from}"]`);
    await shot("calls");

    await go("#/models", "models");
    await waitFor("the model rows", tid("model-row"));
    await shot("models");

    if (pageErrors.length) throw new Error(`the page threw: ${pageErrors.join("\n")}`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error(`screenshots.js: ${e.message}`);
  process.exit(1);
});
