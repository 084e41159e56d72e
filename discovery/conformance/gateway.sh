#!/usr/bin/env bash
# The gateway's conformance run alone (run.sh runs it too): installs py-eureka-client in a
# virtualenv here (git-ignored), then gateway.py drives a registry server, three upstreams
# registered by py-eureka-client, and the gateway, each a process of its own.
# Usage: discovery/conformance/gateway.sh PATH/TO/cluster-discovery
set -euo pipefail
bin=$(realpath "$1")
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install --disable-pip-version-check --quiet -r requirements.txt
log=$(mktemp)
trap 'rm -f "$log"' EXIT
.venv/bin/python gateway.py "$bin" 2>"$log" || { tail -40 "$log"; exit 1; }
