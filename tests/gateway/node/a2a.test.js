// agentd-gateway against the official A2A JavaScript SDK (@a2a-js/sdk 1.3.0, A2A 1.0, JSON-RPC
// binding): a real gateway in front of a real as_server (harness.js). The client resolves each
// agent's card from its base URL /a2a/E/ and finds the JSON-RPC endpoint in the card.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { TaskNotCancelableError, TaskNotFoundError } from "@a2a-js/sdk/errors";

import { startStack } from "./harness.js";

let stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack?.close();
});

// The SDK's way to authenticate: a fetch that adds the Authorization header, used for the card and
// for the JSON-RPC calls.
function bearerFetch(token) {
  return createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({ Authorization: `Bearer ${token}` }),
    shouldRetryWithHeaders: async () => undefined,
  });
}

function factory(fetchImpl, clientConfig = {}) {
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
      clientConfig,
    }),
  );
}

function client(agent, clientConfig) {
  return factory(bearerFetch(stack.token), clientConfig).createFromUrl(`${stack.base}/a2a/${agent}/`);
}

function message(text, extra = {}) {
  return {
    message: {
      messageId: randomUUID(),
      role: Role.ROLE_USER,
      parts: [{ content: { $case: "text", value: text } }],
      ...extra,
    },
  };
}

const textOf = (parts) => parts.map((p) => p.content.value).join("");

test("the client resolves the card from the base URL and takes the JSON-RPC endpoint from it", async () => {
  const c = await client("echo");
  assert.equal(c.agentCard.name, "echo");
  assert.equal(c.protocolVersion, "1.0");
  const iface = c.agentCard.supportedInterfaces.find((i) => i.protocolVersion === "1.0");
  assert.equal(iface.url, `${stack.base}/a2a/echo/`);
  assert.equal(iface.protocolBinding, "JSONRPC");
  assert.equal(c.transport.endpoint, `${stack.base}/a2a/echo/`);
  assert.equal(c.agentCard.capabilities.streaming, true);
});

test("SendMessage answers the completed task with the reply as its artifact", async () => {
  const c = await client("echo");
  const task = await c.sendMessage(message("hello from the SDK"));
  assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(task.artifacts.length, 1);
  assert.equal(textOf(task.artifacts[0].parts), "hello from the SDK");
  assert.ok(task.id && task.contextId);
  assert.equal(textOf(task.history[0].parts), "hello from the SDK");
  assert.equal(task.history[0].role, Role.ROLE_USER);
});

test("a context id given by the client is kept", async () => {
  const c = await client("echo");
  const contextId = randomUUID();
  const task = await c.sendMessage(message("in a context", { contextId }));
  assert.equal(task.contextId, contextId);
});

test("SendStreamingMessage streams the task, the working status, the chunks and the final status", async () => {
  const c = await client("stream");
  const events = [];
  for await (const e of c.sendMessageStream(message("one two three"))) events.push(e.payload);
  const kinds = events.map((e) => e.$case);
  assert.equal(kinds[0], "task");
  assert.equal(events[0].value.status.state, TaskState.TASK_STATE_WORKING);
  assert.equal(kinds[1], "statusUpdate");
  assert.equal(events[1].value.status.state, TaskState.TASK_STATE_WORKING);
  const chunks = events.filter((e) => e.$case === "artifactUpdate").map((e) => e.value);
  assert.deepEqual(chunks.map((u) => textOf(u.artifact.parts)), ["one ", "two ", "three", ""]);
  assert.deepEqual(chunks.map((u) => u.append), [false, true, true, true]);
  assert.equal(chunks.at(-1).lastChunk, true);
  const last = events.at(-1);
  assert.equal(last.$case, "statusUpdate");
  assert.equal(last.value.status.state, TaskState.TASK_STATE_COMPLETED);
  const taskId = events[0].value.id;
  assert.ok(chunks.every((u) => u.taskId === taskId) && last.value.taskId === taskId);

  // The finished task holds the whole reply.
  const task = await c.getTask({ id: taskId });
  assert.equal(task.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(textOf(task.artifacts[0].parts), "one two three");
});

test("GetTask answers the task, and TaskNotFoundError for an unknown id", async () => {
  const c = await client("echo");
  const sent = await c.sendMessage(message("keep me"));
  const got = await c.getTask({ id: sent.id });
  assert.equal(got.id, sent.id);
  assert.equal(got.status.state, TaskState.TASK_STATE_COMPLETED);
  assert.equal(textOf(got.artifacts[0].parts), "keep me");
  const bare = await c.getTask({ id: sent.id, historyLength: 0 });
  assert.deepEqual(bare.history, []);
  await assert.rejects(c.getTask({ id: "no-such-task" }), (e) => e instanceof TaskNotFoundError);
});

test("CancelTask cancels a working task; canceling it again is TaskNotCancelableError", async () => {
  const c = await client("slow", { polling: true });
  const task = await c.sendMessage(message("take your time"));
  assert.equal(task.status.state, TaskState.TASK_STATE_WORKING);
  const canceled = await c.cancelTask({ id: task.id });
  assert.equal(canceled.status.state, TaskState.TASK_STATE_CANCELED);
  assert.equal((await c.getTask({ id: task.id })).status.state, TaskState.TASK_STATE_CANCELED);
  await assert.rejects(c.cancelTask({ id: task.id }), (e) => e instanceof TaskNotCancelableError);
});

test("a stream of a task ends with the canceled status when the task is canceled", async () => {
  const c = await client("slow", { polling: true });
  const task = await c.sendMessage(message("watch me"));
  const events = [];
  const watching = (async () => {
    for await (const e of c.resubscribeTask({ id: task.id })) events.push(e.payload);
  })();
  for (const deadline = Date.now() + 10000; events.length < 2; await new Promise((r) => setTimeout(r, 20)))
    assert.ok(Date.now() < deadline, "the stream did not start");
  await c.cancelTask({ id: task.id });
  await watching;
  assert.equal(events[0].$case, "task");
  assert.equal(events.at(-1).$case, "statusUpdate");
  assert.equal(events.at(-1).value.status.state, TaskState.TASK_STATE_CANCELED);
});

test("SubscribeToTask follows a working task to its end", async () => {
  const c = await client("slow", { polling: true });
  const task = await c.sendMessage(message("later"));
  const events = [];
  for await (const e of c.resubscribeTask({ id: task.id })) events.push(e.payload);
  assert.equal(events[0].$case, "task");
  const chunks = events.filter((e) => e.$case === "artifactUpdate");
  assert.equal(textOf(chunks.at(-1).value.artifact.parts), "later");
  assert.equal(events.at(-1).value.status.state, TaskState.TASK_STATE_COMPLETED);
});

test("a failing agent gives a failed task whose status message carries the typed error", async () => {
  const c = await client("flaky");
  const task = await c.sendMessage(message("fail"));
  assert.equal(task.status.state, TaskState.TASK_STATE_FAILED);
  const m = task.status.message;
  assert.equal(m.role, Role.ROLE_AGENT);
  assert.match(textOf(m.parts), /asked to fail/);
  const info = m.metadata.agentd.error;
  assert.equal(info.reason, "AGENT_FAILED");
  assert.equal(info.metadata.code, "agent_failed");

  const events = [];
  for await (const e of c.sendMessageStream(message("fail"))) events.push(e.payload);
  assert.equal(events.at(-1).value.status.state, TaskState.TASK_STATE_FAILED);
  assert.match(textOf(events.at(-1).value.status.message.parts), /asked to fail/);
});

test("ListTasks lists the agent's tasks", async () => {
  const c = await client("echo");
  const contextId = randomUUID();
  const sent = await c.sendMessage(message("listed", { contextId }));
  // The request's fields as the SDK's types have them (tenant, contextId and status are required).
  const page = await c.listTasks({ tenant: "", contextId, status: TaskState.TASK_STATE_UNSPECIFIED });
  assert.deepEqual(page.tasks.map((t) => t.id), [sent.id]);
  const completed = await c.listTasks({ tenant: "", contextId, status: TaskState.TASK_STATE_COMPLETED });
  assert.deepEqual(completed.tasks.map((t) => t.id), [sent.id]);
  const working = await c.listTasks({ tenant: "", contextId, status: TaskState.TASK_STATE_WORKING });
  assert.deepEqual(working.tasks, []);
});

test("without the bearer token the card and the calls are refused", async () => {
  await assert.rejects(factory(fetch).createFromUrl(`${stack.base}/a2a/echo/`), /401/);
  // A client made from the card (fetched with the token) but calling without it.
  const card = (await client("echo")).agentCard;
  const bare = await factory(fetch).createFromAgentCard(card);
  await assert.rejects(bare.sendMessage(message("no token")), /401/);
  // The header given per call, as a service parameter, is sent.
  const task = await bare.sendMessage(message("token per call"), {
    serviceParameters: { Authorization: `Bearer ${stack.token}` },
  });
  assert.equal(textOf(task.artifacts[0].parts), "token per call");
});

test("an auth handler that adds the token after a 401 gets through", async () => {
  let retried = 0;
  const retrying = createAuthenticatingFetchWithRetry(fetch, {
    headers: async () => ({}),
    shouldRetryWithHeaders: async (_init, response) => {
      if (response.status !== 401) return undefined;
      retried += 1;
      return { Authorization: `Bearer ${stack.token}` };
    },
  });
  const c = await factory(retrying).createFromUrl(`${stack.base}/a2a/echo/`);
  const task = await c.sendMessage(message("after a retry"));
  assert.equal(textOf(task.artifacts[0].parts), "after a retry");
  assert.equal(retried, 2);  // the card, then the call
});
