#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests, listening only on a Unix
# socket in its own temporary directory.
#   scripts/pgcluster.sh start   prints the directory, then the URL
#   scripts/pgcluster.sh stop DIR stops it and removes the directory
# As root it runs the server as the postgres user (initdb refuses root).
set -euo pipefail
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case "${1:-}" in
start)
  command -v initdb >/dev/null || { echo "pgcluster: initdb is not on PATH (PostgreSQL 15 binaries)" >&2; exit 1; }
  dir=$(mktemp -d /tmp/pgci.XXXXXX)
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg initdb -D "$dir/data" -A trust -U postgres -E UTF8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  as_pg pg_ctl -D "$dir/data" -o "-k $dir -c listen_addresses='' -c max_connections=300" -w -l "$dir/log" start >/dev/null ||
    { cat "$dir/log" >&2; exit 1; }
  echo "$dir"
  echo "postgres://postgres@/postgres?host=$dir&sslmode=disable"
  ;;
stop)
  dir=${2:?usage: pgcluster.sh stop DIR}
  as_pg pg_ctl -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
  ;;
*) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
