#!/usr/bin/env bash
# Runs the whole pytest suite; "no tests collected" (pytest exit 5) is a failure, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
