#!/usr/bin/env bash
# Branch coverage of core/ from the tests the mutation runner uses (scripts/mutate_core.py's CORE_TESTS, with
# the test_mutants_*/test_*_fire files it adds): what no core test even runs, before asking what none pins.
# Prints the total and, per module, the uncovered lines and branches ("12->15": line 12 never went to 15).
#   bash scripts/coverage_core.sh [pytest options]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=.venv/bin/python
mapfile -t tests < <("$python" -c '
import sys
sys.path.insert(0, "scripts")
import mutate_core
print("\n".join(dict.fromkeys(t for m in sorted(mutate_core.CORE_TESTS) for t in mutate_core.core_tests(m))))
')
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
export COVERAGE_FILE="$data/coverage"  # nothing is left in the checkout
"$python" -m coverage run --branch --source=core -m pytest -q -p no:cacheprovider --hypothesis-seed=0 \
  "${tests[@]}" "$@"
"$python" -m coverage report --show-missing --skip-covered --precision=1
