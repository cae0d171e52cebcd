#!/usr/bin/env bash
# Times `terraform apply` and `terraform destroy` of N qod_pool_autoscale
# resources (default 500) against a real API server on loopback, next to the
# same count of terraform_data resources (Terraform's built-in resource that
# stores nothing) as the baseline of Terraform core's own cost.
# Run by `make bench-apply`, which builds and installs the provider first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

N=${N:-500}
ADDR=${BENCH_ADDR:-127.0.0.1:20901}
WORK=$(mktemp -d)
trap 'stop_server; rm -rf "$WORK"' EXIT
export QOD_ENDPOINT="http://$ADDR"
export QOD_API_KEY="bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

say "Server on $ADDR; creating $N pools"
start_server "$WORK" "$ADDR" "$QOD_API_KEY"
seq 1 "$N" | xargs -P 4 -I{} curl -fsS -o /dev/null -X POST "$QOD_ENDPOINT/api/pool/create" \
  -H "X-API-Key: $QOD_API_KEY" -d '{"tenant":"bench","tenantDb":"db","pool":"p{}","size":2}'

mkdir "$WORK/qod" "$WORK/baseline"
cat > "$WORK/qod/main.tf" <<HCL
terraform {
  required_providers {
    qod = { source = "terraform.local/qodaperio/qod" }
  }
}
resource "qod_pool_autoscale" "p" {
  count     = $N
  tenant    = "bench"
  tenant_db = "db"
  pool      = "p\${count.index + 1}"
  min_nodes = 1
  max_nodes = 4
}
HCL
cat > "$WORK/baseline/main.tf" <<HCL
resource "terraform_data" "p" {
  count = $N
  input = { min_nodes = 1, max_nodes = 4, pool = "p\${count.index + 1}" }
}
HCL

declare -A T
for kind in baseline qod; do
  cd "$WORK/$kind"
  terraform init -input=false >/dev/null
  t0=$(now); terraform apply -input=false -auto-approve >/dev/null; t1=$(now)
  T[$kind-apply]=$(elapsed "$t0" "$t1")
  t0=$(now); terraform destroy -input=false -auto-approve >/dev/null; t1=$(now)
  T[$kind-destroy]=$(elapsed "$t0" "$t1")
  cd - >/dev/null
done

elastic=$(curl -fsS "$QOD_ENDPOINT/api/pool/list?tenant=bench" -H "X-API-Key: $QOD_API_KEY" | { grep -o '"elastic":true' || true; } | wc -l)
say "Results for $N resources (seconds of wall time, terraform -parallelism=10)"
printf '%-28s %8s %8s\n' "" apply destroy
printf '%-28s %8s %8s\n' "terraform_data (baseline)" "${T[baseline-apply]}" "${T[baseline-destroy]}"
printf '%-28s %8s %8s\n' "qod_pool_autoscale" "${T[qod-apply]}" "${T[qod-destroy]}"
awk -v q="${T[qod-apply]}" -v b="${T[baseline-apply]}" 'BEGIN { printf "apply ratio to baseline: %.2fx (target <= 1.5x, <= 4 s)\n", q / b }'
echo "pools still banded after destroy: $elastic (want 0)"
[ "$elastic" -eq 0 ]
