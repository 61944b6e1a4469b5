// agentd-gateway's OpenAI-compatible API through the official `openai` npm client (pinned in
// package.json): model listing, completions plain and streamed, usage from a real (fake)
// OpenAI-compatible model server that a DialogAgent asks, the SDK's typed errors, and the trace
// id round trip (withResponse()).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI, { APIError, AuthenticationError, NotFoundError } from "openai";

import { startStack } from "./harness.js";

const here = dirname(fileURLToPath(import.meta.url));
const KEY = "node-openai";

// tests/unit/models/fake_model_server.py on a free port: prints "PORT n", exits when stdin closes.
function startModelServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn("python3", [join(here, "..", "..", "unit", "models", "fake_model_server.py")], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    const lines = createInterface({ input: proc.stdout });
    proc.on("exit", (code) => reject(new Error(`fake_model_server.py exited ${code}`)));
    lines.once("line", (line) => {
      const m = /^PORT (\d+)$/.exec(line);
      if (!m) return reject(new Error(`fake_model_server.py printed ${line}`));
      proc.removeAllListeners("exit");
      resolve({
        proc,
        base: `http://127.0.0.1:${m[1]}`,
        close() {
          proc.stdin.end();
          proc.kill("SIGTERM");
        },
      });
    });
  });
}

let stack;
let model;
let dir;
let client;

before(async () => {
  model = await startModelServer();
  dir = mkdtempSync(join(tmpdir(), "agentd-gw-openai-"));
  const config = join(dir, "models.yaml");
  writeFileSync(
    config,
    `- config_name: fake
  model_type: openai_chat
  model_name: test-model
  api_key: test-key
  client_args:
    base_url: ${model.base}/s/${KEY}/ok/v1
    max_retries: 0
`);
  stack = await startStack({
    serverArgs: ["--plugin", process.env.AGENTD_DIALOG_PLUGIN, "--model-config-path", config],
    agents: { dialog: ["DialogAgent", '{"model_config_name": "fake"}'] },
  });
  // maxRetries 0: a 502 is the answer, not something to try again.
  client = new OpenAI({ baseURL: `${stack.base}/v1`, apiKey: stack.token, maxRetries: 0 });
});

after(async () => {
  await stack?.close();
  model?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// What the fake model server received, in order.
async function modelRequests() {
  const r = await fetch(`${model.base}/requests/${KEY}`);
  return r.json();
}

// The usage the fake model server answered a request with: the words of every message in, the
// words of "echo: <last message>" out.
function usageOf(request) {
  const words = (t) => t.split(/\s+/).filter(Boolean).length;
  const messages = request.body.messages;
  const prompt = messages.reduce((n, m) => n + (typeof m.content === "string" ? words(m.content) : 0), 0);
  const completion = words("echo: " + messages[messages.length - 1].content);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

test("models.list lists the agents by id", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  for (const id of ["echo", "stream", "flaky", "dialog"]) assert.ok(ids.includes(id), `${id} in ${ids}`);
});

test("chat.completions.create answers with the agent's reply", async () => {
  const c = await client.chat.completions.create({
    model: "echo",
    messages: [{ role: "user", content: "hello from node" }],
  });
  assert.equal(c.object, "chat.completion");
  assert.equal(c.choices[0].message.content, "hello from node");
  assert.equal(c.choices[0].finish_reason, "stop");
  // An agent that asks no model used no tokens.
  assert.deepEqual(c.usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
});

test("usage carries the tokens the agent's model server reported", async () => {
  const seen = (await modelRequests()).length;
  const c = await client.chat.completions.create({
    model: "dialog",
    messages: [{ role: "user", content: "count my tokens please" }],
  });
  assert.equal(c.choices[0].message.content, "echo: count my tokens please");
  const requests = await modelRequests();
  assert.equal(requests.length, seen + 1);
  assert.deepEqual(c.usage, usageOf(requests[seen]));
  assert.ok(c.usage.prompt_tokens >= 4 && c.usage.completion_tokens === 5);
});

test("a streamed completion yields the agent's chunks, then usage when asked", async () => {
  const seen = (await modelRequests()).length;
  const stream = await client.chat.completions.create({
    model: "dialog",
    messages: [{ role: "user", content: "stream it to me" }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      finish = choice.finish_reason ?? finish;
    }
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, []);
      usage = chunk.usage;
    }
  }
  assert.equal(text, "echo: stream it to me");
  assert.equal(finish, "stop");
  assert.deepEqual(usage, usageOf((await modelRequests())[seen]));

  // The echo plugin's StreamEchoAgent: one chunk per word, no usage chunk unless asked.
  const plain = await client.chat.completions.create({
    model: "stream",
    messages: [{ role: "user", content: "one two three" }],
    stream: true,
  });
  const pieces = [];
  for await (const chunk of plain) {
    assert.equal(chunk.usage ?? null, null);
    for (const choice of chunk.choices) if (choice.delta.content) pieces.push(choice.delta.content);
  }
  assert.deepEqual(pieces, ["one ", "two ", "three"]);
});

test("errors surface as the SDK's typed errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "nobody", messages: [{ role: "user", content: "hi" }] }),
    (e) => e instanceof NotFoundError && e.status === 404 && e.code === "model_not_found");

  const wrong = new OpenAI({ baseURL: `${stack.base}/v1`, apiKey: "not-the-token", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof AuthenticationError && e.status === 401);

  await assert.rejects(
    client.chat.completions.create({ model: "flaky", messages: [{ role: "user", content: "fail" }] }),
    (e) => e instanceof APIError && e.status === 502 && e.code === "agent_failed" && /asked to fail/.test(e.message));

  // A stream that fails after it started: the SDK throws the error event while iterating.
  const stream = await client.chat.completions.create({
    model: "flaky",
    messages: [{ role: "user", content: "fail" }],
    stream: true,
  });
  await assert.rejects(
    (async () => {
      for await (const _ of stream); // eslint-disable-line no-unused-vars
    })(),
    (e) => e instanceof APIError && /asked to fail/.test(e.message));
});

test("the trace id round trip: traceparent in, X-Trace-Id out", async () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const { data, response } = await client.chat.completions
    .create(
      { model: "echo", messages: [{ role: "user", content: "traced" }] },
      { headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } })
    .withResponse();
  assert.equal(data.choices[0].message.content, "traced");
  assert.equal(response.headers.get("x-trace-id"), traceId);

  // Without one, each request gets its own.
  const a = await client.models.list().withResponse();
  const b = await client.models.list().withResponse();
  assert.match(a.response.headers.get("x-trace-id"), /^[0-9a-f]{32}$/);
  assert.notEqual(a.response.headers.get("x-trace-id"), b.response.headers.get("x-trace-id"));
});
