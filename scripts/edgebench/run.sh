#!/usr/bin/env bash
# Edge vs nginx, side by side on loopback, rounds alternated: both proxy to
# the same Go backend (scripts/edgebench/backend), nginx as a keep-alive
# reverse proxy (upstream keepalive, HTTP/1.1, access log off), the edge as
# `autoscaled serve` with the backend registered as a client of one hostname
# (limiter and routing on). Each round runs `wrk -t2 -c64 -d10s --latency`
# against each. It installs nginx and wrk with apt-get when they are
# missing, and leaves nothing running.
#
#   scripts/edgebench/run.sh            # 3 rounds of 10 s each
#   ROUNDS=5 DURATION=20s scripts/edgebench/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
# A Debian install may start the packaged service; this benchmark runs its
# own nginx only.
pkill -x nginx 2>/dev/null || true

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

BACKEND=127.0.0.1:18180 NGINXADDR=127.0.0.1:18181 API=127.0.0.1:18190 EDGE=127.0.0.1:18182
KEY="bench-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

go build -o "$WORK/backend" ./scripts/edgebench/backend
go build -o "$WORK/autoscaled" ./apiserver/cmd/autoscaled

"$WORK/backend" -listen "$BACKEND" & PIDS+=($!)

cat > "$WORK/nginx.conf" <<CONF
worker_processes $(nproc);
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream backend { server $BACKEND; keepalive 128; }
  server {
    listen $NGINXADDR;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
    }
  }
}
CONF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" & PIDS+=($!)

(cd "$WORK" && exec env ${EDGE_ENV:-} QOD_API_KEY="$KEY" APERIO_EDGE_LISTEN_ADDR="$EDGE" ./autoscaled serve --listen "$API" --log-level warn >"$WORK/serve.log" 2>&1) & PIDS+=($!)
SERVE_PID=$!

for _ in $(seq 50); do curl -fsS "http://$API/readyz" >/dev/null 2>&1 && curl -fsS "http://$NGINXADDR/" >/dev/null 2>&1 && break; sleep 0.2; done
EDGE_PID=$(pgrep -f "autoscaled serve --listen $API" | head -1)

register() {
  curl -fsS -X POST "http://$API/api/clients/heartbeat" -H "X-API-Key: $KEY" \
    -d "{\"client_id\":\"bench\",\"hostname\":\"bench.local\",\"target\":\"http://$BACKEND\"}" >/dev/null
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# run NAME URL PID: one wrk run; prints "rps p99_ms requests cpu_ticks"
run() {
  local url=$1 pid=$2 t0 t1 out
  t0=$(cpu_ticks "$pid")
  out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -H 'Host: bench.local' "$url")
  t1=$(cpu_ticks "$pid")
  echo "$out" | awk -v ticks=$((t1 - t0)) '
    /Requests\/sec/ {rps=$2}
    $1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; p99=v}
    /requests in/ {n=$1}
    /Non-2xx/ {bad=$NF}
    END {printf "%s %s %s %s %s\n", rps, p99, n, ticks, (bad==""?0:bad)}'
}

register
echo "warming up"
wrk -t2 -c"$CONNS" -d2s "http://$NGINXADDR/" >/dev/null
wrk -t2 -c"$CONNS" -d2s -H 'Host: bench.local' "http://$EDGE/" >/dev/null

HZ=$(getconf CLK_TCK)
printf "\n%-6s %12s %9s %12s %9s %11s %11s %9s\n" round nginx_req/s nginx_p99 edge_req/s edge_p99 rps_ratio p99_ratio edge_us/req
RATIOS=() P99S=() CPUS=()
for r in $(seq "$ROUNDS"); do
  read -r nrps np99 _ _ nbad < <(run "http://$NGINXADDR/" "$SERVE_PID")
  register
  read -r erps ep99 en eticks ebad < <(run "http://$EDGE/" "$EDGE_PID")
  if [ "$nbad" != 0 ] || [ "$ebad" != 0 ]; then echo "round $r: non-2xx answers (nginx $nbad, edge $ebad)" >&2; exit 1; fi
  ratio=$(awk -v a="$erps" -v b="$nrps" 'BEGIN{printf "%.2f", a/b}')
  pr=$(awk -v a="$ep99" -v b="$np99" 'BEGIN{printf "%.2f", a/b}')
  us=$(awk -v t="$eticks" -v n="$en" -v hz="$HZ" 'BEGIN{printf "%.1f", t/hz*1e6/n}')
  printf "%-6s %12s %8sms %12s %8sms %11s %11s %9s\n" "$r" "$nrps" "$np99" "$erps" "$ep99" "${ratio}x" "${pr}x" "$us"
  RATIOS+=("$ratio") P99S+=("$pr") CPUS+=("$us")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo
echo "median: edge/nginx req/s $(median "${RATIOS[@]}")x (target >= 0.5), p99 $(median "${P99S[@]}")x (target <= 1.5), edge CPU $(median "${CPUS[@]}") us/request (target <= 45)"
