#!/usr/bin/env bash
# Generates docs/<provider> with tfplugindocs from templates/<provider> and
# examples/, using the terraform on PATH (nothing is downloaded).
#   scripts/docs.sh generate   write docs/
#   scripts/docs.sh check      fail if docs/ is not what generate writes now
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

if ! command -v terraform >/dev/null; then
  echo "ERROR: tfplugindocs needs terraform on PATH (it must not download one)." >&2
  exit 1
fi

generate() {
  # qod's examples sit at the root of examples/, aperio's under examples/aperio.
  go tool tfplugindocs generate --provider-dir . --provider-name qod \
    --website-source-dir templates/qod --rendered-website-dir docs/qod \
    --examples-dir examples >/dev/null
  go tool tfplugindocs generate --provider-dir . --provider-name aperio \
    --website-source-dir templates/aperio --rendered-website-dir docs/aperio \
    --examples-dir examples/aperio >/dev/null
}

case "${1:-}" in
  generate)
    generate
    echo "docs/ regenerated"
    ;;
  check)
    generate
    if ! git diff --quiet -- docs || [ -n "$(git status --porcelain -- docs)" ]; then
      echo "ERROR: docs/ is stale: it differs from what tfplugindocs generates from templates/ and examples/ now." >&2
      git status --short -- docs >&2
      git --no-pager diff --stat -- docs >&2
      echo "Run 'make docs' and commit the result." >&2
      exit 1
    fi
    echo "docs/ is up to date"
    ;;
  *)
    echo "usage: $0 generate|check" >&2
    exit 2
    ;;
esac
