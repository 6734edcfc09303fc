#!/usr/bin/env bash
# What the full test command needs from the machine, checked before anything is installed or run, so a
# missing part is named at once with how to get it (instead of a skip, or a failure twenty minutes in).
# The test command runs the real parts a user has: engines from the npm registry inside `unshare -n`,
# Debian's Chromium, another uid (setpriv), tmux servers; that takes root on Debian/Ubuntu.
set -uo pipefail
missing=()
need() {  # need COMMAND HOW
  command -v "$1" >/dev/null 2>&1 || missing+=("$1: $2")
}
python=${PYTHON:-python3}
if ! "$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  missing+=("$python 3.11+ with venv: apt-get install -y python3 python3-venv (or set PYTHON=...)")
fi
need tmux "apt-get install -y tmux"
need ip "apt-get install -y iproute2"
need unshare "apt-get install -y util-linux"
need setpriv "apt-get install -y util-linux"
need node "install Node.js 20 (https://nodejs.org or apt-get install -y nodejs npm)"
need npm "install npm with Node.js"
if [ "$(id -u)" != 0 ]; then
  missing+=("root: the tests create network namespaces (unshare -n), act as another uid and install Chromium with apt")
elif ! unshare -n true 2>/dev/null; then
  missing+=("unshare -n: this machine (container) forbids network namespaces; run with CAP_SYS_ADMIN")
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then
  missing+=("chromium and chromium-driver: no apt-get here to install them")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "harness tests: this machine lacks what the test command needs:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
