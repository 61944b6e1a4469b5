// Real processes for the client-library tests: an as_server with the echo plugin's agents and an
// agentd-gateway in front of it, on free loopback ports. CTest sets AGENTD_AS_SERVER,
// AGENTD_GATEWAY, AGENTD_AGENTCTL and AGENTD_ECHO_PLUGIN (tests/gateway/CMakeLists.txt).
import { spawn, execFileSync } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through ctest (ctest -R gateway_clients)`);
  return v;
};

// The agents the tests call, by id: [class, args].
export const AGENTS = {
  echo: ["EchoAgent", "{}"],
  stream: ["StreamEchoAgent", "{}"],
  flaky: ["FlakyAgent", "{}"],
  slow: ["EchoAgent", '{"sleep_ms": 2500}'],
};

// Starts args[0] and resolves once it prints a line containing marker followed by HOST:PORT.
function startProcess(args, marker) {
  return new Promise((resolve, reject) => {
    const proc = spawn(args[0], args.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    proc.stderr.on("data", (d) => (stderr += d));
    const lines = createInterface({ input: proc.stdout });
    const timer = setTimeout(() => reject(new Error(`${args[0]} printed no ready line: ${stderr}`)), 60000);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${args[0]} exited ${code} before it was ready: ${stderr}`));
    });
    lines.on("line", (line) => {
      const at = line.indexOf(marker);
      if (at < 0) return;
      clearTimeout(timer);
      const address = line.slice(at + marker.length).split(/\s/)[0];
      const colon = address.lastIndexOf(":");
      resolve({
        proc,
        host: address.slice(0, colon),
        port: Number(address.slice(colon + 1)),
        stderr: () => stderr,
      });
    });
  });
}

// Stops a process with SIGTERM; rejects if it does not exit 0 or printed a sanitizer report.
function stopProcess(p) {
  return new Promise((resolve, reject) => {
    if (p.proc.exitCode !== null) return resolve();
    p.proc.removeAllListeners("exit");
    p.proc.on("exit", (code, signal) => {
      if (code !== 0) return reject(new Error(`exited ${code ?? signal} on SIGTERM: ${p.stderr().slice(-3000)}`));
      if (p.stderr().includes("Sanitizer")) return reject(new Error(p.stderr().slice(-3000)));
      resolve();
    });
    p.proc.kill("SIGTERM");
  });
}

// An as_server with AGENTS (and `agents`, more of the same shape) created, and a gateway in front
// of it that requires a bearer token (unless open). serverArgs: more as_server options (another
// --plugin, --model-config-path, ...). Returns { base, token, server, gateway, close() }.
export async function startStack({ open = false, gatewayArgs = [], serverArgs = [], agents = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "agentd-gw-node-"));
  const server = await startProcess(
    [env("AGENTD_AS_SERVER"), "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
     "--plugin", env("AGENTD_ECHO_PLUGIN"), ...serverArgs],
    "as_server ready: listening on ");
  for (const [id, [cls, args]] of Object.entries({ ...AGENTS, ...agents })) {
    execFileSync(env("AGENTD_AGENTCTL"), ["--host", server.host, "--port", String(server.port), "create", cls, id,
                                          "--id", id, "--args", args], { timeout: 60000 });
  }
  const token = randomBytes(32).toString("hex");
  const extra = [...gatewayArgs];
  if (!open) {
    const file = join(dir, "tokens");
    writeFileSync(file, token + "\n", { mode: 0o600 });
    extra.push("--token-file", file);
  }
  const gateway = await startProcess(
    [env("AGENTD_GATEWAY"), "--listen", "127.0.0.1:0", "--server", `${server.host}:${server.port}`, ...extra],
    "agentd-gateway ready: listening on ");
  return {
    base: `http://${gateway.host}:${gateway.port}`,
    token: open ? undefined : token,
    server,
    gateway,
    async close() {
      try {
        await stopProcess(gateway);
      } finally {
        await stopProcess(server).catch(() => {});
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
