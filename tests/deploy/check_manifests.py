#!/usr/bin/python3
"""Parses every deployment file (Dockerfile, .dockerignore, deploy/**.yaml) and checks the fields
that matter: images, ports, probes, GPU limits, secrets, flags and the drain timing, and that
the files agree with each other and with the server's flags.
Exit 0 = all good, 1 = problems (each printed). Run with /usr/bin/python3 (python3-yaml).
"""

import argparse
import fnmatch
import glob
import json
import os
import re
import sys

import yaml

GRPC_PORT, METRICS_PORT = 50051, 9464
NAMESPACE = "kernelserve"
CLUSTER_KINDS = {"Namespace"}
NEEDED_IN_CONTEXT = ["CMakeLists.txt", "core", "kernels", "proto", "server", "client", "tools"]


class Report:
    def __init__(self):
        self.errors, self.checks = [], 0

    def expect(self, ok, message):
        self.checks += 1
        if not ok:
            self.errors.append(message)
        return ok


def load_yaml_files(paths, report):
    """{path: [documents]} of every file; a parse error is reported."""
    docs = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                docs[path] = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            report.expect(False, f"{path}: not valid YAML: {e}")
    return docs


def parse_duration(text):
    """Seconds of an absl/Go duration like '30s', '1m30s', '500ms', '40s'."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"duration '{text}': expected e.g. 30s or 1m30s")
    return sum(float(n) * units[u] for n, u in parts)


def server_flags(root):
    """The server's flag names with dashes, from server/options.cc."""
    path = os.path.join(root, "server", "options.cc")
    with open(path, encoding="utf-8") as f:
        names = re.findall(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,", f.read())
    return {n.replace("_", "-") for n in names}


def check_flags(args, known, where, report):
    for arg in args:
        if isinstance(arg, str) and arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].replace("_", "-")
            report.expect(name in known, f"{where}: unknown server flag '--{name}'; the server "
                          f"has {sorted(known)}")


def flag_value(args, name):
    value = None
    for arg in args:
        if isinstance(arg, str) and arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


# ---------------------------------------------------------------- Dockerfile and context

def dockerfile_instructions(path):
    """[(INSTRUCTION, text)] with continuation lines joined."""
    out, current = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.rstrip().endswith("\\"):
                current += line.rstrip()[:-1] + " "
                continue
            current += line
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def cmake_default_architectures(path):
    """The CMAKE_CUDA_ARCHITECTURES the top-level CMakeLists.txt sets when none is given."""
    with open(path, encoding="utf-8") as f:
        m = re.search(r"set\(CMAKE_CUDA_ARCHITECTURES\s+([^)]*)\)", f.read())
    return m.group(1).replace('"', "").replace(";", " ").split() if m else []


def check_dockerfile(root, flags, install_deps, report):
    path = os.path.join(root, "Dockerfile")
    instructions = dockerfile_instructions(path)
    args = {}
    stages = []
    for word, rest in instructions:
        if word == "ARG" and "=" in rest and not stages:
            k, v = rest.split("=", 1)
            args[k.strip()] = v.strip()
        if word == "FROM":
            stages.append({"from": rest, "lines": []})
        elif stages:
            stages[-1]["lines"].append((word, rest))
    report.expect(len(stages) >= 2, "Dockerfile: expected a build stage and a runtime stage")
    if len(stages) < 2:
        return {}

    def image(stage):
        text = stage["from"].split()[0]
        return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)

    build, runtime = image(stages[0]), image(stages[-1])
    m_build = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(cudnn-)?devel-(.+)", build)
    m_run = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(cudnn-)?runtime-(.+)", runtime)
    if report.expect(m_build and m_run, f"Dockerfile: expected nvidia/cuda devel -> runtime, got "
                     f"{build} -> {runtime}"):
        report.expect(m_build.groups() == m_run.groups(),
                      f"Dockerfile: build {build} and runtime {runtime} differ in CUDA or OS")
        report.expect(m_build.group(1) == "13", f"Dockerfile: expected CUDA 13, got {build}")
    build_text = " ".join(r for _, r in stages[0]["lines"])
    report.expect("CMAKE_CUDA_ARCHITECTURES" in build_text and "KERNELSERVE_CUDA=ON" in build_text,
                  "Dockerfile: the build must turn CUDA on with CMAKE_CUDA_ARCHITECTURES")
    build_args = " ".join(f"{w} {r}" for w, r in stages[0]["lines"])
    image_arches = re.search(r"ARG CUDA_ARCHITECTURES=(\S+)", build_args)
    image_arches = image_arches.group(1).strip('"').replace(";", " ").split() if image_arches \
        else []
    default_arches = cmake_default_architectures(os.path.join(root, "CMakeLists.txt"))
    report.expect(image_arches and sorted(image_arches) == sorted(default_arches),
                  f"Dockerfile: CUDA_ARCHITECTURES {image_arches} differ from the default build's "
                  f"{default_arches} (CMakeLists.txt): the image would lack kernels we measure")
    dev_packages = set(re.findall(r"\b([\w.+-]+-dev)\b", build_text))
    for pkg in ["libgrpc++-dev", "libprotobuf-dev", "libabsl-dev", "libhiredis-dev",
                "prometheus-cpp-dev", "libssl-dev"]:
        report.expect(pkg in dev_packages, f"Dockerfile: build stage does not install {pkg}")
    for pkg in sorted(dev_packages):
        report.expect(pkg in install_deps, f"Dockerfile: {pkg} is not in scripts/install-deps.sh")

    run_lines = stages[-1]["lines"]
    run_text = " ".join(r for _, r in run_lines)
    report.expect(not re.search(r"apt-get install[^&]*-dev\b", run_text),
                  "Dockerfile: the runtime stage must not install -dev packages")
    report.expect("runtime-packages" in run_text or "libgrpc++" in run_text,
                  "Dockerfile: the runtime stage must install the runtime libraries")
    for lib in ["grpc", "protobuf", "absl", "hiredis", "prometheus-cpp", "ssl"]:
        report.expect(lib in build_text + run_text,
                      f"Dockerfile: nothing installs {lib} at run time")
    users = [r for w, r in run_lines if w == "USER"]
    report.expect(users and users[-1].split(":")[0] not in ("root", "0"),
                  f"Dockerfile: the runtime stage must run as a non-root USER, got {users}")
    exposed = {int(p.split("/")[0]) for w, r in run_lines if w == "EXPOSE" for p in r.split()}
    report.expect({GRPC_PORT, METRICS_PORT} <= exposed,
                  f"Dockerfile: EXPOSE {GRPC_PORT} {METRICS_PORT}, got {sorted(exposed)}")
    health = [r for w, r in run_lines if w == "HEALTHCHECK"]
    health_cmd = []
    if report.expect(health, "Dockerfile: no HEALTHCHECK"):
        cmd = health[-1].split(" CMD ", 1)[-1].strip()
        health_cmd = json.loads(cmd) if cmd.startswith("[") else cmd.split()
        report.expect(health_cmd[:1] == ["kernelserve"] and "health" in health_cmd and
                      f"127.0.0.1:{GRPC_PORT}" in health_cmd,
                      f"Dockerfile: HEALTHCHECK must run `kernelserve health` on port {GRPC_PORT}, "
                      f"got {health_cmd}")
    entry = [json.loads(r) for w, r in run_lines if w == "ENTRYPOINT"]
    cmd = [json.loads(r) for w, r in run_lines if w == "CMD"]
    if report.expect(entry, "Dockerfile: no ENTRYPOINT (exec form)"):
        argv = entry[-1] + (cmd[-1] if cmd else [])
        report.expect(flag_value(argv, "listen") == f"0.0.0.0:{GRPC_PORT}" and
                      flag_value(argv, "metrics-listen") == f"0.0.0.0:{METRICS_PORT}",
                      f"Dockerfile: the server must listen on 0.0.0.0:{GRPC_PORT} and "
                      f"0.0.0.0:{METRICS_PORT}, got {argv}")
        check_flags(argv[1:], flags, "Dockerfile ENTRYPOINT/CMD", report)
        entry_copy = [r for w, r in run_lines if w == "COPY" and entry[-1][0] in r]
        if report.expect(entry_copy, f"Dockerfile: {entry[-1][0]} is not copied in"):
            src = os.path.join(root, entry_copy[-1].split()[0])
            report.expect(os.access(src, os.X_OK), f"Dockerfile: {src} missing or not executable")
            with open(src, encoding="utf-8") as f:
                report.expect("exec /usr/local/bin/kernelserve-server" in f.read(),
                              f"{src}: must exec kernelserve-server (so it gets SIGTERM)")
            check_dockerignore(root, [entry_copy[-1].split()[0]], report)
    uid = users[-1].split(":")[0] if users else ""
    return {"uid": int(uid) if uid.isdigit() else None, "health": health_cmd}


def check_dockerignore(root, also_needed, report):
    patterns = []
    with open(os.path.join(root, ".dockerignore"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line)

    def ignored(path):
        result = False
        for p in patterns:
            negate = p.startswith("!")
            p = p.lstrip("!").rstrip("/")
            parts = path.split("/")
            prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
            if any(fnmatch.fnmatch(x, p) for x in prefixes):
                result = not negate
        return result

    for path in NEEDED_IN_CONTEXT + also_needed:
        report.expect(not ignored(path), f".dockerignore: excludes '{path}', which the build needs")
    for path in [".git", "build", "build-h1"]:
        report.expect(ignored(path), f".dockerignore: should exclude '{path}'")


# ---------------------------------------------------------------- Kubernetes

def by_kind(docs):
    out = {}
    for path, items in docs.items():
        for d in items:
            out.setdefault(d.get("kind"), {})[d.get("metadata", {}).get("name")] = (path, d)
    return out


def queue_alert_threshold(alerts_path):
    with open(alerts_path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "KernelserveQueueNearFull":
                m = re.search(r">\s*(\d+)\s*$", rule["expr"].strip())
                return int(m.group(1)) if m else None
    return None


def check_probe(probe, name, report, service=None):
    if not report.expect(isinstance(probe, dict) and "grpc" in probe,
                         f"deployment: {name} must be a grpc probe (grpc.health.v1)"):
        return
    report.expect(probe["grpc"].get("port") == GRPC_PORT,
                  f"deployment: {name} port {probe['grpc'].get('port')}, expected {GRPC_PORT}")
    svc = probe["grpc"].get("service", "")
    report.expect(svc in ("", service), f"deployment: {name} service '{svc}', expected '' or "
                  f"'{service}'")


def check_k8s(k8s_dir, docs, ctx, report):
    kinds = by_kind(docs)
    for path, items in docs.items():
        for d in items:
            meta = d.get("metadata", {})
            if d.get("kind") == "Kustomization":
                continue
            report.expect(d.get("apiVersion") and d.get("kind") and meta.get("name"),
                          f"{path}: every document needs apiVersion, kind, metadata.name")
            if d.get("kind") not in CLUSTER_KINDS | {"Kustomization"}:
                report.expect(meta.get("namespace") == NAMESPACE,
                              f"{path}: {d.get('kind')} {meta.get('name')}: namespace "
                              f"{meta.get('namespace')}, expected {NAMESPACE}")
    kust = kinds.get("Kustomization", {}).get(None)
    files = {os.path.basename(p) for p in docs} - {"kustomization.yaml"}
    if report.expect(kust, "k8s: kustomization.yaml missing"):
        report.expect(set(kust[1]["resources"]) == files,
                      f"k8s: kustomization resources {sorted(kust[1]['resources'])} != files "
                      f"{sorted(files)}")

    deploy = kinds.get("Deployment", {}).get("kernelserve")
    if not report.expect(deploy, "k8s: Deployment 'kernelserve' missing"):
        return
    pod = deploy[1]["spec"]["template"]
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    report.expect(deploy[1]["spec"]["selector"]["matchLabels"].items() <= labels.items(),
                  "deployment: selector does not match the pod labels")
    c = spec["containers"][0]
    image = c.get("image", "")
    repo, _, tag = image.rpartition(":")
    report.expect(repo and tag and tag != "latest", f"deployment: image '{image}' must be pinned")
    if kust:
        pins = {i["name"]: i.get("newTag") for i in kust[1].get("images", [])}
        report.expect(pins.get(repo, tag) == tag, f"deployment: image tag {tag} != kustomization "
                      f"newTag {pins.get(repo)}")
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    report.expect(ports.get("grpc") == GRPC_PORT and ports.get("metrics") == METRICS_PORT,
                  f"deployment: ports {ports}, expected grpc {GRPC_PORT} metrics {METRICS_PORT}")
    ann = pod["metadata"].get("annotations", {})
    report.expect(ann.get("prometheus.io/port") == str(METRICS_PORT),
                  "deployment: prometheus.io/port annotation must be the metrics port")
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"]:
        check_probe(c.get(probe), probe, report, ctx["grpc_service"])
    res = c.get("resources", {})
    gpu = res.get("limits", {}).get("nvidia.com/gpu")
    report.expect(isinstance(gpu, int) and gpu >= 1, f"deployment: limits nvidia.com/gpu {gpu}")
    if "nvidia.com/gpu" in res.get("requests", {}):
        report.expect(res["requests"]["nvidia.com/gpu"] == gpu,
                      "deployment: nvidia.com/gpu requests must equal limits")
    report.expect({"cpu", "memory"} <= set(res.get("requests", {})),
                  "deployment: resource requests need cpu and memory")
    sec = spec.get("securityContext", {})
    report.expect(sec.get("runAsNonRoot") is True, "deployment: runAsNonRoot must be true")
    if ctx.get("uid") is not None:
        report.expect(sec.get("runAsUser") == ctx["uid"],
                      f"deployment: runAsUser {sec.get('runAsUser')} != image USER {ctx['uid']}")

    # Flags: known names, every $(VAR) defined, the ConfigMap values sane.
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    for ref in c.get("envFrom", []):
        name = ref.get("configMapRef", {}).get("name")
        cm = kinds.get("ConfigMap", {}).get(name)
        if report.expect(cm, f"deployment: envFrom ConfigMap '{name}' not defined"):
            env.update(cm[1]["data"])
    args = c.get("args", [])
    check_flags(args, ctx["flags"], "deployment args", report)
    expanded = []
    for arg in args:
        for var in re.findall(r"\$\((\w+)\)", arg):
            report.expect(var in env, f"deployment: args use $({var}), which no env defines")
        expanded.append(re.sub(r"\$\((\w+)\)", lambda m: str(env.get(m.group(1), "")), arg))

    # Drain timing: terminationGracePeriodSeconds covers preStop + --grace-period (+5..60 s).
    grace = parse_duration(flag_value(expanded, "grace-period") or "30s")
    stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    report.expect(stop[:1] in (["/bin/sleep"], ["sleep"]) and len(stop) == 2,
                  f"deployment: preStop must be a sleep, got {stop}")
    pre = parse_duration(stop[1] + "s") if len(stop) == 2 and stop[1].isdigit() else 0
    tgp = spec.get("terminationGracePeriodSeconds", 30)
    report.expect(pre + grace + 5 <= tgp <= pre + grace + 60,
                  f"deployment: terminationGracePeriodSeconds {tgp} must cover preStop {pre}s + "
                  f"--grace-period {grace}s with a 5..60 s margin")
    ctx["k8s_grace"] = grace

    # Secrets: the token and Redis password files lie in a mounted Secret that has the keys.
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    files = {}
    for v in spec.get("volumes", []):
        if "secret" in v and v["name"] in mounts:
            s = kinds.get("Secret", {}).get(v["secret"]["secretName"])
            if report.expect(s, f"deployment: Secret '{v['secret']['secretName']}' not defined"):
                keys = set(s[1].get("stringData", {})) | set(s[1].get("data", {}))
                for item in v["secret"].get("items", [{"key": k, "path": k} for k in keys]):
                    report.expect(item["key"] in keys, f"deployment: secret key {item['key']} "
                                  "not in the Secret")
                    files[os.path.join(mounts[v["name"]], item["path"])] = item["key"]
    token = flag_value(expanded, "auth-token-file")
    report.expect(token in files, f"deployment: --auth-token-file {token} is not a mounted secret")
    pw_file = env.get("KERNELSERVE_REDIS_PASSWORD_FILE")
    report.expect(pw_file in files, f"deployment: KERNELSERVE_REDIS_PASSWORD_FILE {pw_file} is "
                  "not a mounted secret")
    ctx["k8s_cache"] = flag_value(expanded, "cache")
    ctx["k8s_max_queue"] = flag_value(expanded, "max-queue")
    check_k8s_services(kinds, labels, ports, report)
    check_k8s_redis(kinds, ctx, report)
    check_k8s_scaling(kinds, labels, deploy[1], report)


def check_k8s_services(kinds, labels, ports, report):
    services = kinds.get("Service", {})
    headless = [s for _, s in services.values() if s["spec"].get("clusterIP") == "None" and
                s["spec"]["selector"].items() <= labels.items()]
    normal = [s for _, s in services.values() if s["spec"].get("clusterIP") != "None" and
              s["spec"]["selector"].items() <= labels.items()]
    report.expect(headless and normal, "k8s: kernelserve needs a Service and a headless Service")
    for s in headless + normal:
        by_port = {p["port"]: p for p in s["spec"]["ports"]}
        report.expect(GRPC_PORT in by_port, f"service {s['metadata']['name']}: no port {GRPC_PORT}")
        for p in s["spec"]["ports"]:
            report.expect(p.get("targetPort") in ports or p.get("targetPort") in ports.values(),
                          f"service {s['metadata']['name']}: targetPort {p.get('targetPort')} "
                          "is not a container port")


def check_k8s_redis(kinds, ctx, report):
    sts = kinds.get("StatefulSet", {}).get("kernelserve-redis")
    if not report.expect(sts, "k8s: StatefulSet 'kernelserve-redis' missing"):
        return
    spec = sts[1]["spec"]
    svc = kinds.get("Service", {}).get(spec["serviceName"])
    report.expect(svc and svc[1]["spec"].get("clusterIP") == "None",
                  f"redis: serviceName {spec['serviceName']} must be a headless Service")
    c = spec["template"]["spec"]["containers"][0]
    cmd = " ".join(c.get("command", []) + c.get("args", []))
    report.expect("--appendonly yes" in cmd and "--requirepass" in cmd,
                  "redis: needs --appendonly yes and --requirepass")
    claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    data = [m for m in c.get("volumeMounts", []) if m["name"] in claims]
    report.expect(data and data[0]["mountPath"] == "/data", "redis: a PVC must be mounted at /data")
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            s = kinds.get("Secret", {}).get(ref["name"])
            report.expect(s and ref["key"] in s[1].get("stringData", {}),
                          f"redis: secret {ref['name']}/{ref['key']} not defined")
    image = c.get("image", "")
    report.expect(":" in image and not image.endswith(":latest"),
                  f"redis: image '{image}' must be pinned")
    m = re.fullmatch(r"redis://(?::([^@]*)@)?([^:/]+):(\d+)(?:/\d+)?", ctx.get("k8s_cache") or "")
    if report.expect(m, f"deployment: --cache {ctx.get('k8s_cache')} is not a redis:// URL"):
        report.expect(m.group(1) == "{{REDIS_PASSWORD}}",
                      "deployment: the cache URL must take the password from the entrypoint")
        report.expect(m.group(2) == spec["serviceName"] and svc and
                      int(m.group(3)) in [p["port"] for p in svc[1]["spec"]["ports"]],
                      f"deployment: --cache host {m.group(2)}:{m.group(3)} is not the Redis "
                      "Service")


def check_k8s_scaling(kinds, labels, deployment, report):
    pdb = kinds.get("PodDisruptionBudget", {}).get("kernelserve")
    if report.expect(pdb, "k8s: PodDisruptionBudget missing"):
        report.expect(pdb[1]["spec"]["selector"]["matchLabels"].items() <= labels.items(),
                      "pdb: selector does not match the pods")
    hpa = kinds.get("HorizontalPodAutoscaler", {}).get("kernelserve")
    if report.expect(hpa, "k8s: HorizontalPodAutoscaler missing"):
        h = hpa[1]["spec"]
        report.expect(h["scaleTargetRef"]["kind"] == "Deployment" and
                      h["scaleTargetRef"]["name"] == deployment["metadata"]["name"],
                      "hpa: must target the kernelserve Deployment")
        report.expect(1 <= h.get("minReplicas", 1) <= h["maxReplicas"], "hpa: min > max")
        report.expect(h.get("metrics"), "hpa: no metrics")


# ---------------------------------------------------------------- compose, Prometheus, Grafana

def check_compose(compose_dir, doc, ctx, report):
    services = doc.get("services", {})
    for name in ["kernelserve", "redis", "prometheus", "grafana"]:
        report.expect(name in services, f"compose: service '{name}' missing")
    if not all(n in services for n in ["kernelserve", "redis", "prometheus", "grafana"]):
        return
    for name, s in services.items():
        image = s.get("image", "")
        report.expect("build" in s or (":" in image and not image.endswith(":latest")),
                      f"compose: {name}: image '{image}' must be pinned")
    ks = services["kernelserve"]
    context = os.path.normpath(os.path.join(compose_dir, ks["build"]["context"]))
    dockerfile = ks["build"].get("dockerfile", "Dockerfile")
    report.expect(os.path.isfile(os.path.join(context, dockerfile)),
                  f"compose: build context {context} has no Dockerfile")
    devices = ks.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    report.expect(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
                      for d in devices), "compose: kernelserve needs an nvidia GPU reservation")
    published = {int(str(p).split(":")[-1].split("/")[0]) for p in ks.get("ports", [])}
    report.expect({GRPC_PORT, METRICS_PORT} <= published,
                  f"compose: kernelserve ports {sorted(published)}")
    cmd = ks.get("command", [])
    check_flags(cmd, ctx["flags"], "compose kernelserve command", report)
    secrets = set(ks.get("secrets", []))
    top = doc.get("secrets", {})
    for s in secrets | set(services["redis"].get("secrets", [])):
        report.expect(s in top and "file" in top[s],
                      f"compose: secret '{s}' not defined with a file")
    token = flag_value(cmd, "auth-token-file") or ""
    report.expect(token.startswith("/run/secrets/") and token.rsplit("/", 1)[1] in secrets,
                  f"compose: --auth-token-file {token} is not one of the service's secrets")
    pw = ks.get("environment", {}).get("KERNELSERVE_REDIS_PASSWORD_FILE", "")
    report.expect(pw.startswith("/run/secrets/") and pw.rsplit("/", 1)[1] in secrets,
                  f"compose: KERNELSERVE_REDIS_PASSWORD_FILE {pw} is not a secret of the service")
    cache = flag_value(cmd, "cache") or ""
    report.expect(cache == "redis://:{{REDIS_PASSWORD}}@redis:6379/0",
                  f"compose: --cache {cache}, expected the redis service with the password filled "
                  "in by the entrypoint")
    grace = parse_duration(flag_value(cmd, "grace-period") or "30s")
    stop = parse_duration(ks.get("stop_grace_period", "10s"))
    report.expect(grace + 5 <= stop <= grace + 60,
                  f"compose: stop_grace_period {stop}s must cover --grace-period {grace}s")
    ctx["compose_max_queue"] = flag_value(cmd, "max-queue")
    redis = services["redis"]
    rcmd = " ".join(redis.get("command", []))
    report.expect(all(w in rcmd for w in ["--appendonly yes", "/run/secrets/", "--requirepass"]),
                  "compose: redis needs --appendonly yes and --requirepass from a secret")
    report.expect(any(str(v).endswith(":/data") for v in redis.get("volumes", [])),
                  "compose: redis needs a volume on /data")
    for name in ["prometheus", "grafana"]:
        for v in services[name].get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                report.expect(os.path.exists(os.path.join(compose_dir, src)),
                              f"compose: {name} mounts {src}, which does not exist")
    ctx["grafana_mounts"] = {v.split(":")[1] for v in services["grafana"].get("volumes", [])}


def check_prometheus(prom_docs, ctx, report):
    for path, docs in prom_docs.items():
        if "rules" in path or os.path.basename(path) in ("alerts.yml", "alerts_test.yml"):
            continue
        targets, dns = [], []
        for job in docs[0].get("scrape_configs", []):
            if job.get("job_name") != "kernelserve":
                continue
            for sc in job.get("static_configs", []):
                targets += sc.get("targets", [])
            for sd in job.get("dns_sd_configs", []):
                dns += [(n, sd.get("port")) for n in sd.get("names", [])]
        report.expect(targets or dns, f"{path}: no kernelserve scrape job")
        for t in targets:
            report.expect(t == f"kernelserve:{METRICS_PORT}", f"{path}: target {t}, expected "
                          f"the compose service kernelserve:{METRICS_PORT}")
        for name, port in dns:
            report.expect(name == f"kernelserve-headless.{NAMESPACE}.svc.cluster.local" and
                          port == METRICS_PORT, f"{path}: DNS discovery of {name}:{port} does "
                          "not match the headless Service")
    threshold = ctx.get("queue_threshold")
    for key in ["k8s_max_queue", "compose_max_queue"]:
        value = ctx.get(key)
        report.expect(value and threshold == int(int(value) * 0.8),
                      f"alerts: KernelserveQueueNearFull threshold {threshold} is not 80% of "
                      f"--max-queue {value} ({key})")


def check_grafana(grafana_docs, dashboards, ctx, report):
    providers = [p for docs in grafana_docs.values() for d in docs for p in d.get("providers", [])]
    sources = [s for docs in grafana_docs.values() for d in docs for s in d.get("datasources", [])]
    report.expect(any(s.get("type") == "prometheus" and s.get("url") == "http://prometheus:9090"
                      for s in sources), "grafana: no Prometheus data source at prometheus:9090")
    paths = [p.get("options", {}).get("path") for p in providers]
    report.expect(paths and all(p in ctx.get("grafana_mounts", set()) for p in paths),
                  f"grafana: dashboard provider paths {paths} are not mounted in compose")
    report.expect(dashboards, "grafana: no dashboard JSON")
    uids = {s.get("uid") for s in sources}
    for path in dashboards:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # ${DS_PROMETHEUS} is the dashboard's data source variable (check_dashboard.py).
        used = set(re.findall(r'"uid":\s*"([^"]+)"', text)) - {json.loads(text).get("uid"),
                                                              "${DS_PROMETHEUS}"}
        report.expect(used <= uids,
                      f"{path}: data source uids {sorted(used - uids)} not provisioned")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="repository root")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    deploy = os.path.join(root, "deploy")
    report = Report()
    yaml_paths = sorted(glob.glob(os.path.join(deploy, "**", "*.y*ml"), recursive=True))
    docs = load_yaml_files(yaml_paths, report)
    with open(os.path.join(root, "scripts", "install-deps.sh"), encoding="utf-8") as f:
        install_deps = set(re.findall(r"[\w.+-]+", f.read()))
    ctx = {"flags": server_flags(root)}
    with open(os.path.join(root, "proto", "kernelserve", "v1", "kernel_service.proto")) as f:
        proto = f.read()
    package = re.search(r"^package\s+([\w.]+);", proto, re.M).group(1)
    service = re.search(r"^service\s+(\w+)", proto, re.M).group(1)
    ctx["grpc_service"] = f"{package}.{service}"
    ctx.update(check_dockerfile(root, ctx["flags"], install_deps, report))
    ctx["queue_threshold"] = queue_alert_threshold(os.path.join(deploy, "prometheus", "alerts.yml"))
    check_k8s(os.path.join(deploy, "k8s"),
              {p: d for p, d in docs.items() if "/k8s/" in p}, ctx, report)
    compose = [p for p in docs if "/compose/" in p]
    if report.expect(len(compose) == 1, f"compose: expected one compose file, got {compose}"):
        check_compose(os.path.dirname(compose[0]), docs[compose[0]][0], ctx, report)
    check_prometheus({p: d for p, d in docs.items() if "/prometheus/" in p}, ctx, report)
    check_grafana({p: d for p, d in docs.items() if "/grafana/" in p},
                  sorted(glob.glob(os.path.join(deploy, "grafana", "dashboards", "*.json"))),
                  ctx, report)
    n_docs = sum(len(d) for d in docs.values())
    print(f"parsed {len(docs)} YAML files ({n_docs} documents) + Dockerfile + .dockerignore; "
          f"{report.checks} checks, {len(report.errors)} failed")
    for e in report.errors:
        print("FAIL:", e)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
