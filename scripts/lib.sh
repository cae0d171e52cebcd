# Shared helpers for the scripts; sourced, not run.

# A CLI config variable that points at no file only makes terraform warn.
if [ -n "${TF_CLI_CONFIG_FILE:-}" ] && [ ! -e "$TF_CLI_CONFIG_FILE" ]; then
  unset TF_CLI_CONFIG_FILE
fi
export CHECKPOINT_DISABLE=1

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

# start_server DIR ADDR KEY: runs bin/autoscaled on DIR/autoscaled.db and
# waits until /healthz answers. Sets SERVER_PID.
start_server() {
  local dir=$1 addr=$2 key=$3
  QOD_API_KEY=$key ./bin/autoscaled serve --listen "$addr" --database-url "$dir/autoscaled.db" \
    >"$dir/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if curl -fsS "http://$addr/healthz" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "the server exited; its log:" >&2; cat "$dir/server.log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "the server did not answer on $addr within 10s; its log:" >&2
  cat "$dir/server.log" >&2
  return 1
}

stop_server() {
  if [ -n "${SERVER_PID:-}" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" && wait "$SERVER_PID" 2>/dev/null || true
  fi
}
