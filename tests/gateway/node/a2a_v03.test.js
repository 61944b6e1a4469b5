// agentd-gateway against the official A2A JavaScript SDK at 0.3 (a2a-sdk-v03: @a2a-js/sdk 0.3.14,
// the A2A 0.3 wire, which sends no A2A-Version header), and against the 1.0 SDK's own 0.3
// transport: a real gateway in front of a real as_server (harness.js). The card the 0.3 client
// reads is the one the 1.0 client reads (a2a.test.js).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import {
  A2AClient,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  TaskNotCancelableError,
  TaskNotFoundError,
  createAuthenticatingFetchWithRetry,
} from "a2a-sdk-v03/client";

import { startStack } from "./harness.js";

let stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack?.close();
});

function bearerFetch(token) {
  return createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
}

function client(agent, clientConfig = {}, fetchImpl = bearerFetch(stack.token)) {
  const f = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
      clientConfig,
    }),
  );
  return f.createFromUrl(`${stack.base}/a2a/${agent}/`);
}

function message(text, extra = {}) {
  return {
    message: { kind: "message", messageId: randomUUID(), role: "user", parts: [{ kind: "text", text }], ...extra },
  };
}

const textOf = (parts) => parts.map((p) => (assert.equal(p.kind, "text"), p.text)).join("");

test("the 0.3 client reads the card (protocolVersion, url, preferredTransport) and calls its url", async () => {
  const c = await client("echo");
  assert.equal(c.agentCard.protocolVersion, "0.3.0");
  assert.equal(c.agentCard.url, `${stack.base}/a2a/echo/`);
  assert.equal(c.agentCard.preferredTransport, "JSONRPC");
  assert.equal(c.agentCard.securitySchemes.bearer.type, "http");
  assert.deepEqual(c.agentCard.security, [{ bearer: [] }]);
  assert.equal(c.transport.endpoint, `${stack.base}/a2a/echo/`);
});

test("message/send answers the completed task in 0.3's shape", async () => {
  const c = await client("echo");
  const task = await c.sendMessage(message("hello over 0.3"));
  assert.equal(task.kind, "task");
  assert.equal(task.status.state, "completed");
  assert.equal(textOf(task.artifacts[0].parts), "hello over 0.3");
  assert.equal(task.history[0].kind, "message");
  assert.equal(task.history[0].role, "user");
  assert.equal(textOf(task.history[0].parts), "hello over 0.3");
});

test("message/stream streams the task, status updates (the last final) and the artifact chunks", async () => {
  const c = await client("stream");
  const events = [];
  for await (const e of c.sendMessageStream(message("one two three"))) events.push(e);
  assert.equal(events[0].kind, "task");
  assert.equal(events[0].status.state, "working");
  assert.equal(events[1].kind, "status-update");
  assert.equal(events[1].status.state, "working");
  assert.equal(events[1].final, false);
  const chunks = events.filter((e) => e.kind === "artifact-update");
  assert.deepEqual(chunks.map((u) => textOf(u.artifact.parts)), ["one ", "two ", "three", ""]);
  assert.deepEqual(chunks.map((u) => u.append), [false, true, true, true]);
  assert.equal(chunks.at(-1).lastChunk, true);
  const last = events.at(-1);
  assert.equal(last.kind, "status-update");
  assert.equal(last.status.state, "completed");
  assert.equal(last.final, true);
  assert.ok(events.slice(1).every((e) => e.taskId === events[0].id));

  const task = await c.getTask({ id: events[0].id });
  assert.equal(task.status.state, "completed");
  assert.equal(textOf(task.artifacts[0].parts), "one two three");
});

test("tasks/get answers the task, and TaskNotFoundError for an unknown id", async () => {
  const c = await client("echo");
  const sent = await c.sendMessage(message("keep me"));
  const got = await c.getTask({ id: sent.id });
  assert.equal(got.id, sent.id);
  assert.equal(got.kind, "task");
  assert.equal(got.status.state, "completed");
  assert.equal((await c.getTask({ id: sent.id, historyLength: 0 })).history, undefined);
  await assert.rejects(c.getTask({ id: "no-such-task" }), (e) => e instanceof TaskNotFoundError);
});

test("tasks/cancel cancels a working task; again is TaskNotCancelableError", async () => {
  const c = await client("slow", { polling: true });
  const task = await c.sendMessage(message("take your time"));
  assert.equal(task.status.state, "working");
  const canceled = await c.cancelTask({ id: task.id });
  assert.equal(canceled.status.state, "canceled");
  await assert.rejects(c.cancelTask({ id: task.id }), (e) => e instanceof TaskNotCancelableError);
});

test("tasks/resubscribe follows a working task to its final status", async () => {
  const c = await client("slow", { polling: true });
  const task = await c.sendMessage(message("later"));
  const events = [];
  for await (const e of c.resubscribeTask({ id: task.id })) events.push(e);
  assert.equal(events[0].kind, "task");
  const chunks = events.filter((e) => e.kind === "artifact-update");
  assert.equal(textOf(chunks.at(-1).artifact.parts), "later");
  assert.equal(events.at(-1).status.state, "completed");
  assert.equal(events.at(-1).final, true);
});

test("a failing agent gives a failed task whose status message carries the typed error", async () => {
  const c = await client("flaky");
  const task = await c.sendMessage(message("fail"));
  assert.equal(task.status.state, "failed");
  const m = task.status.message;
  assert.equal(m.kind, "message");
  assert.equal(m.role, "agent");
  assert.match(textOf(m.parts), /asked to fail/);
  assert.equal(m.metadata.agentd.error.reason, "AGENT_FAILED");

  const events = [];
  for await (const e of c.sendMessageStream(message("fail"))) events.push(e);
  assert.equal(events.at(-1).status.state, "failed");
  assert.equal(events.at(-1).final, true);
});

test("the older A2AClient class works from the card's url too", async () => {
  const fetchImpl = bearerFetch(stack.token);
  const c = await A2AClient.fromCardUrl(`${stack.base}/a2a/echo/.well-known/agent-card.json`, { fetchImpl });
  const r = await c.sendMessage(message("from A2AClient"));
  assert.equal(r.error, undefined);
  assert.equal(r.result.kind, "task");
  assert.equal(textOf(r.result.artifacts[0].parts), "from A2AClient");
});

test("without the bearer token the 0.3 client is refused", async () => {
  await assert.rejects(client("echo", {}, fetch), /401/);
});

test("a task made over 0.3 reads the same over 1.0, and the 1.0 SDK's 0.3 transport works", async () => {
  const c = await client("echo");
  const sent = await c.sendMessage(message("both ways"));
  // Over 1.0, by hand.
  const res = await fetch(`${stack.base}/a2a/echo/`, {
    method: "POST",
    headers: { Authorization: `Bearer ${stack.token}`, "A2A-Version": "1.0", "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "GetTask", params: { id: sent.id } }),
  });
  assert.equal(res.headers.get("A2A-Version"), "1.0");
  const got = (await res.json()).result;
  assert.equal(got.status.state, "TASK_STATE_COMPLETED");
  assert.deepEqual(got.history[0].parts, [{ text: "both ways" }]);
  assert.equal(got.history[0].role, "ROLE_USER");

  // @a2a-js/sdk 1.x speaking 0.3 (its legacy transport sends A2A-Version: 0.3).
  const v1 = await import("@a2a-js/sdk/client");
  const { Role, TaskState } = await import("@a2a-js/sdk");
  const fetchImpl = bearerFetch(stack.token);
  const transport = await new v1.JsonRpcTransportFactory({ fetchImpl, legacyCompat: { enabled: true } }).create(
    `${stack.base}/a2a/echo/`,
    { supportedInterfaces: [{ url: `${stack.base}/a2a/echo/`, protocolBinding: "JSONRPC", protocolVersion: "0.3" }] },
  );
  assert.equal(transport.protocolVersion, "0.3");
  const legacy = new v1.Client(transport, { capabilities: { streaming: true } }, {});
  const task = await legacy.sendMessage({
    message: { messageId: randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: "text", value: "legacy" } }] },
  });
  assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(task.artifacts[0].parts[0].content.value, "legacy");
});
