// Real processes for the console browser test: two as_server processes (A and B) with the echo
// and dialog plugins (and the asynchronous agents', with the project's MCP tool server
// tests/mcp/fault_server.py as tool server "faults"), an agentd-gateway in front of both (--cluster A,B --token-file
// --console-send), and the work of workload.py done on them through the Python client, all on free
// loopback ports. CTest sets the paths (tests/console/CMakeLists.txt): AGENTD_AS_SERVER, AGENTD_GATEWAY,
// AGENTD_AGENTCTL, AGENTD_ECHO_PLUGIN, AGENTD_DIALOG_PLUGIN, AGENTD_ASYNC_PLUGIN, AGENTD_PYTHON_DIR, and
// AGENTD_PY_PRELOAD (the sanitizer runtimes python3 needs to load a sanitized module; only
// python3 gets it, never node or chromium).
import { spawn, execFile } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

const here = dirname(fileURLToPath(import.meta.url));

export const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this test through ctest (ctest -R console_browser)`);
  return v;
};

// Starts args[0] and resolves once it prints a line containing marker followed by HOST:PORT.
function startProcess(args, marker) {
  return new Promise((resolve, reject) => {
    const proc = spawn(args[0], args.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    proc.stderr.on("data", (d) => (stderr += d));
    const lines = createInterface({ input: proc.stdout });
    const timer = setTimeout(() => reject(new Error(`${args.join(" ")} printed no ready line in 60 s: ${stderr}`)), 60000);
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${args.join(" ")} exited ${code ?? signal} before it was ready: ${stderr}`));
    });
    lines.on("line", (line) => {
      const at = line.indexOf(marker);
      if (at < 0) return;
      clearTimeout(timer);
      const address = line.slice(at + marker.length).split(/\s/)[0];
      resolve({ proc, address, stderr: () => stderr });
    });
  });
}

// Stops a process with SIGTERM; rejects if it does not exit 0 or printed a sanitizer report.
function stopProcess(p) {
  return new Promise((resolve, reject) => {
    if (p.proc.exitCode !== null || p.proc.signalCode !== null) return resolve();
    p.proc.removeAllListeners("exit");
    const timer = setTimeout(() => p.proc.kill("SIGKILL"), 30000);
    p.proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`exited ${code ?? signal} on SIGTERM: ${p.stderr().slice(-3000)}`));
      if (p.stderr().includes("Sanitizer")) return reject(new Error(p.stderr().slice(-3000)));
      resolve();
    });
    p.proc.kill("SIGTERM");
  });
}

function run(file, args, options = {}) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 120000, maxBuffer: 1 << 24, ...options }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${file} ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      resolve(stdout);
    });
  });
}

// Runs workload.py against servers A and B; resolves with the JSON it prints.
function runWorkload(a, b) {
  const pyEnv = {
    ...process.env,
    PYTHONPATH: env("AGENTD_PYTHON_DIR"),
    PYTHONDONTWRITEBYTECODE: "1",
  };
  if (process.env.AGENTD_PY_PRELOAD) {
    pyEnv.LD_PRELOAD = process.env.AGENTD_PY_PRELOAD;
    pyEnv.ASAN_OPTIONS = "detect_leaks=0";  // CPython keeps much of its memory until exit
  }
  const python = process.env.AGENTD_PYTHON || "python3";
  return run(python, [join(here, "workload.py"), a, b], { env: pyEnv }).then((out) => {
    const last = out.trim().split("\n").pop();
    return JSON.parse(last);
  });
}

// The whole stack. Returns { base, token, servers: [A, B], work (workload.py's JSON), agentctl(address,
// ...args), close() }.
export async function startStack() {
  const dir = mkdtempSync(join(tmpdir(), "agentd-console-"));
  const procs = [];
  const close = async () => {
    const errors = [];
    for (const p of procs.reverse()) await stopProcess(p).catch((e) => errors.push(e));
    rmSync(dir, { recursive: true, force: true });
    if (errors.length) throw new Error(`a process did not stop cleanly: ${errors.map((e) => e.message).join("\n")}`);
  };
  try {
    const models = join(dir, "models.yaml");
    writeFileSync(models, "- config_name: echo\n  model_type: echo\n" +
                          "- config_name: echo-slow\n  model_type: echo\n  delay_ms: 150\n");
    const tools = join(dir, "tools.yaml");
    writeFileSync(tools, "mcpServers:\n  faults:\n    command: python3\n    args: [" +
                         JSON.stringify(join(here, "..", "mcp", "fault_server.py")) + "]\n");
    const servers = [];
    for (let i = 0; i < 2; ++i) {
      const s = await startProcess(
        [env("AGENTD_AS_SERVER"), "--host", "127.0.0.1", "--port", "0", "--log-level", "warn",
         "--plugin", env("AGENTD_ECHO_PLUGIN"), "--plugin", env("AGENTD_DIALOG_PLUGIN"),
         "--plugin", env("AGENTD_ASYNC_PLUGIN"), "--tool-config-path", tools,
         "--model-config-path", models],
        "as_server ready: listening on ");
      procs.push(s);
      servers.push(s.address);
    }
    const token = randomBytes(32).toString("hex");
    const tokens = join(dir, "tokens");
    writeFileSync(tokens, token + "\n", { mode: 0o600 });
    const gateway = await startProcess(
      [env("AGENTD_GATEWAY"), "--listen", "127.0.0.1:0", "--cluster", servers.join(","),
       "--token-file", tokens, "--console-send"],
      "agentd-gateway ready: listening on ");
    procs.push(gateway);
    // The work runs with the gateway up, so its sampler sees it (the charts have it).
    const work = await runWorkload(servers[0], servers[1]);
    return {
      base: `http://${gateway.address}`,
      token,
      servers,
      work,
      agentctl: (address, ...args) => {
        const colon = address.lastIndexOf(":");
        return run(env("AGENTD_AGENTCTL"), ["--host", address.slice(0, colon), "--port", address.slice(colon + 1), ...args]);
      },
      close,
    };
  } catch (e) {
    await close().catch(() => {});
    throw e;
  }
}
