#!/usr/bin/env bash
# Browser tests of the web console against the real `madeira` binary: one
# `madeira serve` with three tokens (operator, viewer, admin), a builtin flow and
# three flows waiting for each other (the estate page), a slow flow to backfill,
# one `madeira dev` running the daily-settlement example on its in-process
# sidecar. Headless Chromium is Debian's (/usr/bin/chromium), driven by
# playwright-core (npm ci here). Screenshots go to docs/screenshots/.
#   MADEIRA_BIN   the binary (default: target/debug/madeira)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${MADEIRA_BIN:-$root/target/debug/madeira}"
[ -x "$bin" ] || { echo "no madeira binary at $bin (cargo build first)"; exit 1; }
[ -x /usr/bin/chromium ] || { echo "no /usr/bin/chromium (apt-get install chromium)"; exit 1; }
[ -d "$here/node_modules/playwright-core" ] || (cd "$here" && npm ci --no-audit --no-fund)

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits (at most 60 s) for the banner line `$2` in log `$1`; prints the URL after it.
banner_url() {
  local log="$1" prefix="$2" deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    local line
    line="$(grep -m1 -F "$prefix" "$log" 2>/dev/null || true)"
    if [ -n "$line" ]; then echo "${line#*"$prefix"}" | awk '{print $1}' | sed 's#/api/v1$##'; return 0; fi
    sleep 0.2
  done
  echo "no banner \`$prefix\` in $log within 60 s:" >&2; cat "$log" >&2; return 1
}

export T_OPERATOR="op-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export T_VIEWER="view-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export T_ADMIN="admin-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
mkdir -p "$work/flows" "$work/dev-flows"
cp "$here/fixtures/payout-approval.yaml" "$here"/fixtures/estate-*.yaml "$here"/fixtures/backfill-*.yaml "$work/flows/"
cp "$root/examples/daily-settlement.yaml" "$root/examples/stock-sync.yaml" "$here/fixtures/ticker.yaml" "$work/dev-flows/"
cat "$root/examples/jobs/local.yaml" "$here/fixtures/ticker-job.yaml" > "$work/jobs.yaml"
cat > "$work/serve.yaml" <<YAML
http: 127.0.0.1:0
store: sqlite://$work/serve.db
flows: $work/flows
auth:
  tokens:
    - {name: ops-alice, role: operator, token_env: T_OPERATOR}
    - {name: grafana, role: viewer, token_env: T_VIEWER}
    - {name: root, role: admin, token_env: T_ADMIN}
YAML

"$bin" serve --config "$work/serve.yaml" >"$work/serve.log" 2>&1 &
pids+=($!)
"$bin" dev --http 127.0.0.1:0 --grpc 127.0.0.1:0 --data "$work/dev" --flows "$work/dev-flows" \
  --jobs "$work/jobs.yaml" >"$work/dev.log" 2>&1 &
pids+=($!)
MADEIRA_SERVE_URL="$(banner_url "$work/serve.log" "madeira serve: API on ")"
MADEIRA_DEV_URL="$(banner_url "$work/dev.log" "madeira dev: API on ")"
SCREENSHOTS="$root/docs/screenshots"
export MADEIRA_SERVE_URL MADEIRA_DEV_URL SCREENSHOTS
mkdir -p "$SCREENSHOTS"
echo "serve on $MADEIRA_SERVE_URL, dev on $MADEIRA_DEV_URL"
status=0
(cd "$here" && node --test --test-concurrency=1 console.test.mjs) || status=$?
if [ $status -ne 0 ]; then
  echo "== serve log"; tail -n 40 "$work/serve.log"
  echo "== dev log"; tail -n 40 "$work/dev.log"
fi
# No token may reach a log.
for t in "$T_OPERATOR" "$T_VIEWER" "$T_ADMIN"; do
  if grep -qF "$t" "$work/serve.log"; then echo "a token appears in the serve log"; status=1; fi
done
exit $status
