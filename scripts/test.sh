#!/usr/bin/env bash
# The one test command: set up, lint, type-check strictly, then run the whole suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/requirements.sh  # names what the machine lacks before anything runs
bash scripts/setup.sh
bash scripts/install_browser.sh
export PATH="$root/.venv/bin:$PATH"
export HARNESS_REQUIRE_ALL=1  # a test that would skip for a missing part fails instead (tests/conftest.py)
export HARNESS_FUZZ_EXAMPLES=2000  # issue 17: the CLI fuzz drives each command 2,000 times
export HARNESS_FUZZ_DERANDOMIZE=1  # the same 2,000 for the same code: what passed before a push passes in CI
echo "== ruff"
ruff check core io cli models tests scripts
echo "== mypy --strict"
bash scripts/typecheck.sh
echo "== pytest"
python -m pytest --durations=25 "$@"  # the slowest tests named: where a loaded run spends its time
