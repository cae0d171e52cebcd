#!/usr/bin/env bash
# The quickstart, end to end: start the API server on a fresh SQLite file,
# create the pool acme/acme_sales/bi, declare its autoscale band with
# `terraform apply` of examples/quickstart, show that a second plan is empty
# and that the server refuses a manual scale outside the band, import the
# band, then report load and watch the sweep add a node, and stop.
# Run by `make quickstart` (which builds and installs the providers first).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ADDR=${QOD_QUICKSTART_ADDR:-127.0.0.1:20900}
WORK=$(mktemp -d)
KEEP=${KEEP_RUNNING:-}
trap 'stop_server; rm -rf "$WORK"' EXIT

export QOD_ENDPOINT="http://$ADDR"
export QOD_API_KEY="quickstart-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

# Quick sweeps for the demo: every 30 s (the floor), one busy sweep is
# enough, over a one-minute window.
export QOD_AUTOSCALE_SWEEP_SEC=30 QOD_AUTOSCALE_OUT_STREAK=1 QOD_AUTOSCALE_WINDOW_MINUTES=1

say "Starting the API server on $ADDR (database: $WORK/autoscaled.db, sweeps every 30 s)"
start_server "$WORK" "$ADDR" "$QOD_API_KEY"

say "Creating the pool acme/acme_sales/bi: one writer, one reader"
curl -fsS -X POST "$QOD_ENDPOINT/api/pool/create" -H "X-API-Key: $QOD_API_KEY" \
  -H 'Content-Type: application/json' \
  -d '{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,"roleDistribution":{"writeonly":1,"readonly":1,"dual":0}}'
echo

cp examples/quickstart/main.tf "$WORK/"
cd "$WORK"
say "terraform init (offline: the providers come from the local plugin dir)"
terraform init -input=false -no-color | grep -E 'Installing|Installed|initialized' || true

say "terraform apply: declare the band [2, 6]"
terraform apply -input=false -auto-approve -no-color

say "terraform plan again: nothing to change"
terraform plan -input=false -detailed-exitcode -no-color | tail -3

say "A manual scale outside the band is refused by the server"
curl -sS -X POST "$QOD_ENDPOINT/api/pool/scale" -H "X-API-Key: $QOD_API_KEY" \
  -d '{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":8}'
echo

say "Importing the band into a fresh state with an import block"
mkdir import && cd import
cp ../main.tf . && sed -i '/^resource "qod_pool_autoscale"/,/^}/d; /^data "qod_pool"/,/^}/d; /^output/,/^}/d' main.tf
cat >> main.tf <<'HCL'
import {
  to = qod_pool_autoscale.bi
  id = "acme/acme_sales/bi"
}
HCL
terraform init -input=false -no-color >/dev/null
terraform plan -input=false -no-color -generate-config-out=generated.tf | grep -E 'import|Plan:' || true
echo "--- generated.tf:"; grep -v '^#' generated.tf
cd ..

say "Reporting load: four minute-long statements a minute (demand 4 against capacity 4)"
# In the last minute and in this one, so that whichever minute the next
# sweep's one-minute window covers holds the load.
for at in "$(date -u -d '-60 seconds' +%Y-%m-%dT%H:%M:%SZ)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
  stmt='{"durationMs":60000,"at":"'$at'"}'
  curl -fsS -X POST "$QOD_ENDPOINT/api/pool/load" -H "X-API-Key: $QOD_API_KEY" \
    -d '{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","statements":['"$stmt,$stmt,$stmt,$stmt"']}'
  echo
done
status() {
  curl -fsS "$QOD_ENDPOINT/api/pool/autoscaleStatus?tenant=acme&tenantDb=acme_sales&pool=bi" -H "X-API-Key: $QOD_API_KEY"
}
say "Waiting for the next sweep (at most 30 s)"
before=$(status | sed -n 's/.*"sweptAt":\("[^"]*"\|null\).*/\1/p')
for _ in $(seq 1 40); do
  now=$(status | sed -n 's/.*"sweptAt":\("[^"]*"\|null\).*/\1/p')
  if [ "$now" != "$before" ] && [ "$now" != "null" ]; then break; fi
  printf '.'; sleep 1
done
echo
say "What the sweep decided, and why (GET /api/pool/autoscaleStatus)"
status | tr ',' '\n' | grep -E '"(size|decision|rule|demand|capacity|utilization|acted)"'
say "Its trace in the server log"
grep 'autoscale: acme/acme_sales/bi' "$WORK/server.log" || true

if [ -n "$KEEP" ]; then
  say "Server still running on $ADDR (key: $QOD_API_KEY); Ctrl-C stops it"
  wait "$SERVER_PID"
fi
say "Done: the band is declared, planned empty, enforced, and acted on. Stopping the server."
