#!/usr/bin/env bash
# Offline checks of deploy/: every YAML file parses; Kubernetes manifests match
# their schemas (kubernetes-validate, from PyPI, when installed); the compose file
# has the services it promises and passes `docker compose config` (or v1's
# `docker-compose config`) where installed; systemd units pass `systemd-analyze verify` where
# systemd-analyze exists. Prints what it could not check.
set -euo pipefail
cd "$(dirname "$0")"

python3 - <<'PY'
import glob, sys, yaml
files = sorted(glob.glob("**/*.yaml", recursive=True) + glob.glob("**/*.yml", recursive=True))
for f in files:
    with open(f) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    print(f"yaml ok: {f} ({len(docs)} document(s))")
compose = yaml.safe_load(open("compose/docker-compose.yaml"))
want = {"postgres", "redis", "madeira-1", "madeira-2", "sidecar", "prometheus", "grafana", "otel-collector"}
missing = want - set(compose["services"])
if missing:
    sys.exit(f"compose: missing services {sorted(missing)}")
mysql = yaml.safe_load(open("compose/docker-compose.mysql.yaml"))
assert "mariadb" in mysql["services"], "compose (mysql): no mariadb service"
for replica in ["madeira-1", "madeira-2"]:
    r = mysql["services"][replica]
    assert r["environment"]["MADEIRA_STORE"].startswith("mysql://"), f"compose (mysql): {replica} store"
    assert "mariadb" in r["depends_on"], f"compose (mysql): {replica} waits for mariadb"
print("compose (mysql variant) structure ok")
kinds = {}
for f in sorted(glob.glob("k8s/*.yaml")):
    for d in yaml.safe_load_all(open(f)):
        if d and "kind" in d and "metadata" in d:
            kinds.setdefault(d["kind"], []).append(d["metadata"]["name"])
for kind in ["Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "DaemonSet"]:
    if kind not in kinds:
        sys.exit(f"k8s: no {kind}")
cp = [d for f in glob.glob("k8s/*.yaml") for d in yaml.safe_load_all(open(f))
      if d and d.get("kind") == "Deployment" and d["metadata"]["name"] == "madeira"][0]
assert cp["spec"]["replicas"] >= 2, "control plane needs 2+ replicas"
c = cp["spec"]["template"]["spec"]["containers"][0]
assert "readinessProbe" in c and "livenessProbe" in c, "probes"
print("compose and k8s structure ok:", {k: len(v) for k, v in kinds.items()})
PY

if python3 -c 'import kubernetes_validate' 2>/dev/null; then
    for f in k8s/namespace.yaml k8s/configmap.yaml k8s/secret.yaml k8s/control-plane.yaml \
             k8s/sidecar-daemonset.yaml k8s/app-with-sidecar.yaml; do
        python3 -m kubernetes_validate --strict -k 1.30 "$f"
    done
else
    echo "skipped: Kubernetes schema check (pip install kubernetes-validate)"
fi

# The compose file against Compose's own schema and interpolation. docker-compose
# v1 (Debian's package) predates the top-level `name:`; it checks a copy without it.
if docker compose version >/dev/null 2>&1; then
    (cd compose && docker compose -f docker-compose.yaml config -q)
    (cd compose && docker compose -f docker-compose.yaml -f docker-compose.mysql.yaml config -q)
    echo "compose ok: docker compose config (and with the MySQL variant)"
elif command -v docker-compose >/dev/null 2>&1; then
    check=compose/.compose-check.yaml
    sed '/^name: /d' compose/docker-compose.yaml > "$check"
    (cd compose && docker-compose -f .compose-check.yaml config -q) || { rm -f "$check"; exit 1; }
    (cd compose && docker-compose -f .compose-check.yaml -f docker-compose.mysql.yaml config -q) \
        || { rm -f "$check"; exit 1; }
    rm -f "$check"
    echo "compose ok: docker-compose config (v1, without the top-level name; and with the MySQL variant)"
else
    echo "skipped: compose schema check (apt-get install docker-compose)"
fi

if command -v systemd-analyze >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp systemd/madeira-sidecar.service "$tmp/"
    # verify checks ExecStart's binary exists: point it at a stand-in.
    sed -i "s|/usr/local/bin/madeira[a-z-]*|/bin/true|" "$tmp/madeira-sidecar.service"
    sed -i "/^User=/d; /^Group=/d" "$tmp/madeira-sidecar.service"
    SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$tmp/madeira-sidecar.service"
    echo "systemd ok: madeira-sidecar.service"
else
    echo "skipped: systemd-analyze not installed"
fi
