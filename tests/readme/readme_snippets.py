#!/usr/bin/env python3
"""Builds and runs the README's code blocks that are marked to be tested, against a build tree.

A block is tested when the line before its opening fence is `<!-- readme-test: KIND -->`:
  plugin   a C++ agent plugin: built as a shared object, then loaded in local mode through the
           Python package; its class is asked once (WebAgent must answer "Answer from W0").
  main     a C++ main program: built and run as written, then again with each commented
           `// auto c = ...` line in place of the first one (another mode), the independent
           mode's port replaced by a server this script starts. It must exit 0 and print
           "Answer from".
  python   a Python program: run with the package on PYTHONPATH; it must exit 0.
Programs run in a fresh directory with neither $AGENTD_AS_SERVER nor the build's bin/ on $PATH:
the snippets must find as_server and the example plugins by themselves, as a user's would.
Exit status 0 ok, 1 a snippet failed (its output is shown), 77 skipped.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

READY = "as_server ready: listening on "


def blocks(readme):
    """(kind, line number, code) of every marked block."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*<!--\s*readme-test:\s*(\w+)\s*-->\s*$", line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            sys.exit(f"README.md:{i + 1}: a readme-test marker must be right before a ``` fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            sys.exit(f"README.md:{i + 2}: the marked block has no closing fence")
        out.append((m.group(1), i + 3, "\n".join(lines[i + 2:end]) + "\n"))
    return out


def run(cmd, what, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240, **kw)
    if r.returncode != 0:
        print(f"FAIL: {what} (exit {r.returncode}):\n{r.stdout}")
        sys.exit(1)
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    for a in ("--readme", "--cxx", "--include", "--as-server", "--python-dir"):
        ap.add_argument(a, required=True)
    # A sanitized build: the flags its consumers compile and link with, and the runtime python3
    # (not sanitized) must preload to load the sanitized module.
    ap.add_argument("--cxx-flags", default="")
    ap.add_argument("--preload", default="")
    # libagentd and the client library it is built on (a plugin links both).
    ap.add_argument("--lib", required=True, action="append")
    o = ap.parse_args()
    found = blocks(o.readme)
    kinds = sorted({k for k, _, _ in found})
    if kinds != ["main", "plugin", "python"]:
        print(f"FAIL: expected marked blocks of kinds main, plugin, python; found {kinds}")
        return 1
    libdir = os.path.dirname(o.lib[0])
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTD_AS_SERVER", "LD_LIBRARY_PATH")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env["PYTHONPATH"] = o.python_dir
    if o.preload:
        env["LD_PRELOAD"] = o.preload
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    cxx = [o.cxx, "-std=c++20"] + o.cxx_flags.split() + ["-I", o.include, "-o"]
    link = o.lib + [f"-Wl,-rpath,{libdir}"]
    with tempfile.TemporaryDirectory() as work:
        for n, (kind, line, code) in enumerate(found):
            where = f"the {kind} block at README.md:{line}"
            ext = "py" if kind == "python" else "cpp"
            src = os.path.join(work, f"snippet{n}.{ext}")
            if kind == "plugin":
                so = os.path.join(work, f"libsnippet{n}.so")
                open(src, "w").write(code)
                run(cxx + [so, "-shared", "-fPIC", src] + link, f"building {where}")
                out = run([sys.executable, "-c",
                           "import agentd, sys\n"
                           "with agentd.Client.local(plugins=[sys.argv[1]]) as c:\n"
                           "    print(c.create_agent('WebAgent', 'W0')(agentd.Msg('user', 'q')).content)\n",
                           so], f"running {where} in local mode", env=env, cwd=work)
                if "Answer from W0" not in out:
                    print(f"FAIL: {where} answered {out!r}")
                    return 1
            elif kind == "main":
                modes = re.findall(r"^\s*// (auto c = .*)$", code, re.M)
                first = re.search(r"(?<=^  )auto c = .*$", code, re.M)
                if not first or not modes:
                    print(f"FAIL: {where} has no `auto c = ...` line and commented alternatives")
                    return 1
                variants = [code] + [code.replace(first.group(0), "// " + first.group(0), 1)
                                     .replace("// " + alt, alt, 1) for alt in modes]
                server = None
                try:
                    for v, text in enumerate(variants):
                        if "Client::connect(" in re.search(r"(?<=^  )auto c = .*$", text, re.M).group(0):
                            server = subprocess.Popen(
                                [o.as_server, "--host", "127.0.0.1", "--port", "0",
                                 "--plugin-dir", os.path.join(os.path.dirname(libdir), "plugins")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                            port = None
                            for out_line in server.stdout:
                                if READY in out_line:
                                    port = out_line.split(READY, 1)[1].split()[0].rsplit(":", 1)[1]
                                    break
                            if port is None:
                                print("FAIL: as_server for the independent mode did not start")
                                return 1
                            text = re.sub(r"Client::connect\(\"127\.0\.0\.1\", \d+\)",
                                          f'Client::connect("127.0.0.1", {port})', text)
                        exe = os.path.join(work, f"snippet{n}_{v}")
                        open(src, "w").write(text)
                        mode = re.search(r"(?<=^  )auto c = .*$", text, re.M).group(0)
                        run(cxx + [exe, src] + link, f"building {where} ({mode})")
                        out = run([exe], f"running {where} ({mode})", env=env, cwd=work)
                        if "Answer from" not in out:
                            print(f"FAIL: {where} ({mode}) printed {out!r}")
                            return 1
                        print(f"ok: {where}: {mode}")
                finally:
                    if server is not None:
                        server.kill()
                        server.wait()
                continue
            else:
                open(src, "w").write(code)
                run([sys.executable, src], f"running {where}", env=env, cwd=work)
            print(f"ok: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
