#!/usr/bin/env bash
# A Python client (requests, from PyPI) calling typed functions through the gateway's function
# routes: functions.py against the example discovery/examples/gateway_functions.rs.
# Usage: discovery/conformance/functions.sh PATH/TO/gateway_functions
set -euo pipefail
bin=$(realpath "$1") # before the cd: the path may be relative to the caller's directory
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install --disable-pip-version-check --quiet -r requirements.txt
timeout 120 .venv/bin/python functions.py "$bin"
