#!/usr/bin/env python3
"""Structural checks of the Kubernetes manifests in packaging/kubernetes.

There is no Kubernetes schema validator in Debian 12, so this checks what ties the objects
together and to as_server itself:
  - every document has apiVersion, kind and metadata.name; kustomization.yaml lists every
    manifest and only existing files; objects sit in the Namespace of the set;
  - the StatefulSet's serviceName names a headless Service (clusterIP: None) of the set, whose
    selector matches the pod template's labels and whose ports are the container's ports;
  - every --flag of the as_server container is an option `as_server --help` prints; --port,
    --metrics-port and --advertise-address agree with the ports and the Service; $(VAR)s are
    defined; the files named by path flags lie on mounted volumes (and are keys of the mounted
    ConfigMap/Secret);
  - every volume's configMap/secret names an object of the set, every volume is mounted, secret
    volumes are private to their owner and group; containers are hardened and sized;
  - terminationGracePeriodSeconds is longer than as_server's --shutdown-grace;
  - the ConfigMap's models.yaml is loaded by as_server; the Secrets carry no credential;
  - cluster.yaml names the headless Service and one of its ports.
Usage: check_manifests.py MANIFEST_DIR AS_SERVER. Prints each failure; exits 1 on any.
"""
import base64
import os
import re
import subprocess
import sys
import tempfile
import threading

import yaml

NOT_OBJECTS = {"kustomization.yaml", "cluster.yaml"}
CLUSTER_KEYS = {"servers", "token_file", "tls_ca", "tls_cert", "tls_key", "placement"}
PATH_FLAGS = {"config", "model-config-path", "auth-token-file", "peer-token-file", "tls-cert",
              "tls-key", "tls-client-ca", "peer-tls-ca"}
NON_NAMESPACED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                  "StorageClass", "CustomResourceDefinition"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        fail(f"{os.path.basename(path)}: {e}")
        return []


def help_options(as_server):
    """{option: takes_value} and the --shutdown-grace default from `as_server --help`."""
    out = subprocess.run([as_server, "--help"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    opts = {}
    # Options start in column 3; wrapped descriptions are indented further.
    for m in re.finditer(r"^  (?:-\w \[ )?--([a-z0-9-]+)( [A-Z]+)?", out, re.M):
        opts.setdefault(m.group(1), bool(m.group(2)))
    grace = re.search(r"--shutdown-grace \w+ \(=([0-9.]+)\)", out)
    if not opts or not grace:
        raise SystemExit(f"FAIL: cannot read the options of `{as_server} --help`")
    return opts, float(grace.group(1))


def parse_argv(argv, opts, where):
    """The as_server flags of argv as {flag: value}; unknown flags are failures."""
    flags = {}
    i = 0
    while i < len(argv):
        arg = str(argv[i])
        i += 1
        if not arg.startswith("--"):
            fail(f"{where}: '{arg}' is not an option (a value without its flag?)")
            continue
        name, eq, value = arg[2:].partition("=")
        if name not in opts:
            fail(f"{where}: --{name} is not an option of as_server --help")
            continue
        if opts[name] and not eq:
            if i >= len(argv):
                fail(f"{where}: --{name} has no value")
                continue
            value = str(argv[i])
            i += 1
        flags[name] = value if opts[name] else True
    return flags


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_models(text, as_server, where):
    """The models.yaml of the ConfigMap parses, and as_server loads it (with no API key set)."""
    try:
        models = yaml.safe_load(text)
    except yaml.YAMLError as e:
        fail(f"{where}: not YAML: {e}")
        return
    if not isinstance(models, list) or not all(
            isinstance(m, dict) and "config_name" in m and "model_type" in m for m in models):
        fail(f"{where}: expected a list of configs with config_name and model_type")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "models.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        proc = subprocess.Popen([as_server, "--host", "127.0.0.1", "--port", "0",
                                 "--model-config-path", path, "--stop-on-stdin-eof"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        timer = threading.Timer(30, proc.kill)
        timer.start()
        line = proc.stdout.readline()
        try:  # closes stdin: --stop-on-stdin-eof stops the server
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        timer.cancel()
        if not line.startswith("as_server ready:"):
            fail(f"{where}: as_server does not start with it: {err.strip()}")


def check_cluster_file(mdir, path, services):
    doc = load(os.path.join(mdir, path))
    doc = doc[0] if len(doc) == 1 else None
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), list) or not doc["servers"]:
        fail(f"{path}: expected a mapping with a non-empty list 'servers'")
        return
    for key in set(doc) - CLUSTER_KEYS:
        fail(f"{path}: unknown key '{key}' (keys: {', '.join(sorted(CLUSTER_KEYS))})")
    if doc.get("placement", "round_robin") not in ("round_robin", "least_loaded"):
        fail(f"{path}: placement must be round_robin or least_loaded")
    names = {}
    for svc in services:
        if svc["spec"].get("clusterIP") == "None":
            fqdn = f"{svc['metadata']['name']}.{svc['metadata'].get('namespace', 'default')}" \
                   ".svc.cluster.local"
            names[fqdn] = {p["port"] for p in svc["spec"].get("ports", [])}
    for entry in doc["servers"]:
        if isinstance(entry, dict) and "dns" in entry:
            host, _, port = str(entry["dns"]).rpartition(":")
            if host not in names:
                fail(f"{path}: dns {entry['dns']}: {host} is no headless Service of the set "
                     f"({', '.join(sorted(names)) or 'none'})")
            elif not port.isdigit() or int(port) not in names[host]:
                fail(f"{path}: dns {entry['dns']}: port {port} is not a port of {host}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: check_manifests.py MANIFEST_DIR AS_SERVER")
    mdir, as_server = sys.argv[1], sys.argv[2]
    opts, default_grace = help_options(as_server)

    # ---- files, documents, kustomization ----
    kust = (load(os.path.join(mdir, "kustomization.yaml")) or [{}])[0]
    listed = list(kust.get("resources", []))
    present = sorted(f for f in os.listdir(mdir) if f.endswith((".yaml", ".yml")))
    for f in present:
        if f not in NOT_OBJECTS and f not in listed:
            fail(f"{f}: not listed in kustomization.yaml resources")
    objs = []
    for f in listed:
        if not os.path.isfile(os.path.join(mdir, f)):
            fail(f"kustomization.yaml: resource {f} does not exist")
            continue
        for i, doc in enumerate(load(os.path.join(mdir, f))):
            name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind") \
                    or not name:
                fail(f"{f}: document {i + 1} lacks apiVersion, kind or metadata.name")
                continue
            doc["_file"] = f
            objs.append(doc)

    def of_kind(kind):
        return [o for o in objs if o["kind"] == kind]

    def find(kind, name):
        return next((o for o in of_kind(kind) if o["metadata"]["name"] == name), None)

    namespaces = {o["metadata"]["name"] for o in of_kind("Namespace")}
    for o in objs:
        ns = o["metadata"].get("namespace")
        if o["kind"] not in NON_NAMESPACED and namespaces and ns not in namespaces:
            fail(f"{o['_file']}: {o['kind']} {o['metadata']['name']} is in namespace {ns}, "
                 f"not in the set's ({', '.join(sorted(namespaces))})")

    # ---- the StatefulSet and its Service ----
    sets = of_kind("StatefulSet")
    if not sets:
        fail("no StatefulSet in the set")
    for sts in sets:
        where = f"{sts['_file']}: StatefulSet {sts['metadata']['name']}"
        spec = sts["spec"]
        pod = spec["template"]["spec"]
        labels = spec["template"]["metadata"].get("labels", {})
        if not labels_match(spec.get("selector", {}).get("matchLabels"), labels):
            fail(f"{where}: selector.matchLabels do not match the pod template's labels")
        svc = find("Service", spec.get("serviceName"))
        if svc is None:
            fail(f"{where}: serviceName {spec.get('serviceName')} names no Service of the set")
        elif svc["spec"].get("clusterIP") != "None":
            fail(f"{where}: Service {svc['metadata']['name']} is not headless (clusterIP: None)")
        if svc is not None and not labels_match(svc["spec"].get("selector"), labels):
            fail(f"{where}: Service {svc['metadata']['name']}'s selector does not match the pod "
                 f"template's labels")

        containers = pod.get("containers", [])
        init = pod.get("initContainers", [])
        servers = [c for c in containers
                   if not c.get("command") or os.path.basename(c["command"][0]) == "as_server"]
        if len(servers) != 1:
            fail(f"{where}: expected one container running as_server, found {len(servers)}")
            continue
        c = servers[0]
        cwhere = f"{where}: container {c['name']}"
        ports = c.get("ports", [])
        by_name = {p["name"]: p for p in ports if "name" in p}
        by_number = {p["containerPort"]: p for p in ports}

        def container_port(ref, ports_where):
            p = by_name.get(ref) if isinstance(ref, str) else by_number.get(ref)
            if p is None:
                fail(f"{ports_where}: port {ref} is no port of container {c['name']}")
            return p

        # Service ports <-> container ports, both ways.
        if svc is not None:
            exposed = set()
            for sp in svc["spec"].get("ports", []):
                p = container_port(sp.get("targetPort", sp["port"]),
                                   f"{svc['_file']}: Service port {sp.get('name', sp['port'])}")
                if p is not None:
                    exposed.add(p["containerPort"])
                    if sp.get("protocol", "TCP") != p.get("protocol", "TCP"):
                        fail(f"{svc['_file']}: Service port {sp['port']}: protocol differs from "
                             f"the container's")
            for p in ports:
                if p["containerPort"] not in exposed:
                    fail(f"{cwhere}: port {p['containerPort']} is not in Service "
                         f"{svc['metadata']['name']}")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            for kind in ("tcpSocket", "httpGet"):
                if kind in c.get(probe, {}):
                    container_port(c[probe][kind]["port"], f"{cwhere}: {probe}")

        # The command line.
        argv = list(c.get("command", []))[1:] + list(c.get("args", []))
        flags = parse_argv(argv, opts, cwhere)
        env = {e["name"] for e in c.get("env", [])}
        for var in re.findall(r"\$\((\w+)\)", " ".join(map(str, argv))):
            if var not in env:
                fail(f"{cwhere}: $({var}) in the command line is not defined in env")
        port = flags.get("port")
        if port is None or not port.isdigit() or int(port) not in by_number:
            fail(f"{cwhere}: --port {port} is not a containerPort")
        metrics = flags.get("metrics-port", "0")
        if metrics != "0" and (not metrics.isdigit() or int(metrics) not in by_number):
            fail(f"{cwhere}: --metrics-port {metrics} is not a containerPort")
        adv = flags.get("advertise-address")
        if adv:
            host, _, aport = adv.rpartition(":")
            if aport != port:
                fail(f"{cwhere}: --advertise-address {adv} has another port than --port {port}")
            if host.startswith("$(POD_NAME).") and svc is not None and \
                    host.split(".")[1] != svc["metadata"]["name"]:
                fail(f"{cwhere}: --advertise-address {adv} is not a name of Service "
                     f"{svc['metadata']['name']} (POD.SERVICE.NAMESPACE.svc...)")
        else:
            fail(f"{cwhere}: no --advertise-address (peers could not reach this pod by name)")
        grace = float(flags.get("shutdown-grace", default_grace))
        if pod.get("terminationGracePeriodSeconds", 30) <= grace:
            fail(f"{where}: terminationGracePeriodSeconds "
                 f"{pod.get('terminationGracePeriodSeconds', 30)} is not longer than "
                 f"--shutdown-grace {grace:g}")

        # Volumes: they exist, they are mounted, the files the flags name are on them.
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        # A StatefulSet's volumeClaimTemplates are volumes of every pod too.
        for t in spec.get("volumeClaimTemplates", []):
            volumes[t["metadata"]["name"]] = {"persistentVolumeClaim": {}}
        mounted = set()
        for cc in containers + init:
            for m in cc.get("volumeMounts", []):
                mounted.add(m["name"])
                if m["name"] not in volumes:
                    fail(f"{where}: container {cc['name']} mounts unknown volume {m['name']}")
        for name, v in volumes.items():
            if name not in mounted:
                fail(f"{where}: volume {name} is mounted by no container")
            if "configMap" in v and find("ConfigMap", v["configMap"]["name"]) is None:
                fail(f"{where}: volume {name}: ConfigMap {v['configMap']['name']} is not in "
                     f"the set")
            if "secret" in v:
                if find("Secret", v["secret"]["secretName"]) is None:
                    fail(f"{where}: volume {name}: Secret {v['secret']['secretName']} is not in "
                         f"the set")
                if v["secret"].get("defaultMode", 0o644) & 0o007:
                    fail(f"{where}: volume {name}: secret files readable by others "
                         f"(defaultMode {v['secret'].get('defaultMode', 0o644):04o})")
        for flag in sorted(PATH_FLAGS & set(flags)):
            path = flags[flag]
            mount = max((m for m in c.get("volumeMounts", [])
                         if path.startswith(m["mountPath"].rstrip("/") + "/")),
                        key=lambda m: len(m["mountPath"]), default=None)
            if mount is None:
                fail(f"{cwhere}: --{flag} {path} is on no mounted volume")
                continue
            v = volumes.get(mount["name"], {})
            key = path[len(mount["mountPath"].rstrip("/")) + 1:]
            if flag.endswith("token-file"):
                # A Secret volume's files belong to root; with fsGroup the kubelet makes them
                # group-readable (whatever defaultMode says). as_server refuses both.
                if "secret" in v or "projected" in v:
                    fail(f"{cwhere}: --{flag} {path} is on Secret volume {mount['name']}: "
                         f"as_server cannot use it (root's file, or group-readable with "
                         f"fsGroup); copy it to an emptyDir as a 0400 file in an init container")
                elif "emptyDir" in v and not any(m["name"] == mount["name"] for ic in init
                                                 for m in ic.get("volumeMounts", [])):
                    fail(f"{cwhere}: --{flag} {path} is on emptyDir {mount['name']}, which no init "
                         f"container fills")
            src = v.get("configMap") or v.get("secret")
            if src is not None:
                obj = find("ConfigMap" if "configMap" in v else "Secret",
                           src.get("name", src.get("secretName")))
                keys = {i["path"] for i in src["items"]} if "items" in src else \
                    set((obj or {}).get("data") or {}) | set((obj or {}).get("stringData") or {})
                if obj is not None and key not in keys:
                    fail(f"{cwhere}: --{flag} {path}: {key} is no key of volume {mount['name']}")

        # Every container: hardened and sized.
        for cc in containers + init:
            ccw = f"{where}: container {cc['name']}"
            sc = cc.get("securityContext", {})
            if sc.get("allowPrivilegeEscalation") is not False:
                fail(f"{ccw}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                fail(f"{ccw}: readOnlyRootFilesystem is not true")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                fail(f"{ccw}: capabilities do not drop ALL")
            if not sc.get("runAsNonRoot", pod.get("securityContext", {}).get("runAsNonRoot")):
                fail(f"{ccw}: runAsNonRoot is not true")
            res = cc.get("resources", {})
            if not res.get("requests") or not res.get("limits"):
                fail(f"{ccw}: no resources requests and limits")
        for e in c.get("envFrom", []):
            ref = e.get("secretRef") or e.get("configMapRef") or {}
            kind = "Secret" if "secretRef" in e else "ConfigMap"
            if not ref.get("optional") and find(kind, ref.get("name")) is None:
                fail(f"{cwhere}: envFrom {kind} {ref.get('name')} is not in the set nor optional")

    # ---- ConfigMaps, Secrets, the cluster file ----
    for cm in of_kind("ConfigMap"):
        for key, text in (cm.get("data") or {}).items():
            if key.endswith("models.yaml"):
                check_models(text, as_server, f"{cm['_file']}: ConfigMap "
                                              f"{cm['metadata']['name']} {key}")
    for sec in of_kind("Secret"):
        values = dict(sec.get("stringData") or {})
        for key, b64 in (sec.get("data") or {}).items():
            values[key] = base64.b64decode(b64).decode("utf-8", "replace")
        for key, text in values.items():
            if any(line.strip() and not line.strip().startswith("#")
                   for line in str(text).splitlines()):
                fail(f"{sec['_file']}: Secret {sec['metadata']['name']} {key}: holds a value; "
                     f"the examples carry placeholders (comments) only")
    if os.path.isfile(os.path.join(mdir, "cluster.yaml")):
        check_cluster_file(mdir, "cluster.yaml", of_kind("Service"))

    if failures:
        print(f"{len(failures)} problem(s) in {mdir}")
        return 1
    print(f"ok: {len(objs)} objects in {mdir} hang together; as_server accepts their options")
    return 0


if __name__ == "__main__":
    sys.exit(main())
