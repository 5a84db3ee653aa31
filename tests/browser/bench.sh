#!/usr/bin/env bash
# Console figures on the release binary (not part of CI): a 1,000-node flow's
# layout and run page (server time and Chromium), runs search over many runs,
# server memory per SSE subscriber. Prints a summary; see the README's figures.
#   MADEIRA_BIN  default target/release/madeira     BENCH_RUNS  runs to create (default 100000)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${MADEIRA_BIN:-$root/target/release/madeira}"
[ -x "$bin" ] || { echo "no release binary at $bin (cargo build --release)"; exit 1; }
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$pid" ] && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/flows"
python3 - "$work/flows" <<'PY'
import sys
out = sys.argv[1]
lines = ["flow: big", "description: 1,000 nodes in 20 layers of 50", "nodes:"]
for v in range(1000):
    layer, i = divmod(v, 50)
    if layer == 0:
        lines.append(f"  n{v:04d}: {{run: {{builtin: noop}}}}")
    else:
        ups = sorted({(layer - 1) * 50 + i, (layer - 1) * 50 + (i * 7) % 50})
        needs = ", ".join(f"n{u:04d}" for u in ups)
        lines.append(f"  n{v:04d}: {{needs: [{needs}], run: {{builtin: noop}}}}")
open(f"{out}/big.yaml", "w").write("\n".join(lines) + "\n")
open(f"{out}/tiny.yaml", "w").write("flow: tiny\nrate_limit: 100000/s\nnodes:\n  a: {run: {builtin: noop}}\n")
PY
"$bin" dev --http 127.0.0.1:0 --grpc 127.0.0.1:0 --data "$work/data" --flows "$work/flows" >"$work/dev.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 60))
until grep -q "madeira dev: API on " "$work/dev.log"; do
  [ $SECONDS -lt $deadline ] || { cat "$work/dev.log"; exit 1; }
  sleep 0.2
done
export MADEIRA_DEV_URL="$(grep -m1 -F "madeira dev: API on " "$work/dev.log" | awk '{print $5}' | sed 's#/api/v1$##')"
export MADEIRA_PID="$pid" BENCH_RUNS="${BENCH_RUNS:-100000}"
(cd "$here" && node bench.mjs)
grep -m3 "dag layout computed" "$work/dev.log" || true
