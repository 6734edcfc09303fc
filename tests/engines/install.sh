#!/usr/bin/env bash
# Installs the real engine CLIs (Claude Code, Codex, Gemini CLI, Grok CLI) at the exact versions of package.json /
# package-lock.json into tests/engines/node_modules, so the engine tests drive the same TUIs every run.
# CI runs this every time: when node_modules already matches the lockfile (a stamp of the lockfile, the
# manifest and the node version) and the four entry points exist, it returns at once. Otherwise it runs
# `npm ci` from the lockfile, retrying transient registry errors with a back-off.
# Exit 0 = installed; non-zero = not installed (the engine tests then skip and say why).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

entry_points=(
  node_modules/@anthropic-ai/claude-code-linux-x64/claude
  node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
  node_modules/@google/gemini-cli/bundle/gemini.js
  node_modules/@vibe-kit/grok-cli/dist/index.js
)
stamp_file=node_modules/.harness-install-stamp

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install.sh: node and npm are needed to install the engines" >&2
  exit 2
fi

want_stamp() {
  { cat package.json package-lock.json; node --version; uname -m; } | sha256sum | cut -d' ' -f1
}

installed() {
  [ -f "$stamp_file" ] || return 1
  [ "$(cat "$stamp_file")" = "$(want_stamp)" ] || return 1
  local path
  for path in "${entry_points[@]}"; do
    [ -e "$path" ] || return 1
  done
}

# One install at a time (two test runs may start together); the second then finds it installed.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$here/.install.lock"
  flock -w 600 9
fi

if installed; then
  [ "${1:-}" = "--quiet" ] || echo "install.sh: engines already installed (node_modules matches the lockfile)"
  exit 0
fi

started=$(date +%s)
attempts=${ENGINES_INSTALL_ATTEMPTS:-3}
delay=5
for attempt in $(seq 1 "$attempts"); do
  rm -f "$stamp_file"
  if npm ci --no-audit --no-fund --loglevel=error \
      --fetch-retries=4 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=30000; then
    missing=0
    for path in "${entry_points[@]}"; do
      if [ ! -e "$path" ]; then
        echo "install.sh: npm ci succeeded but $path is missing" >&2
        missing=1
      fi
    done
    if [ "$missing" = 0 ]; then
      want_stamp >"$stamp_file"
      echo "install.sh: engines installed in $(($(date +%s) - started)) s ($(du -sh node_modules | cut -f1))"
      exit 0
    fi
  fi
  if [ "$attempt" -lt "$attempts" ]; then
    echo "install.sh: attempt $attempt of $attempts failed; retrying in ${delay} s" >&2
    sleep "$delay"
    delay=$((delay * 2))
  fi
done
echo "install.sh: could not install the engines after $attempts attempts" >&2
exit 1
