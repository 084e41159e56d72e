#!/usr/bin/env bash
# Runs the real Eureka clients against our server: py-eureka-client (PyPI) and
# eureka-js-client (npm), then two peered servers, then the gateway (gateway.sh) in front of
# instances py-eureka-client registered. Installs both clients here (git-ignored).
# The servers run with credentials (--user, --peer-user; passwords from the environment): the
# clients send HTTP Basic from the `user:password@` in their server URL, and the checks show
# that a write without credentials is 401 and changes nothing.
# Fails, loudly, if pip or npm cannot reach their registries.
# Usage: discovery/conformance/run.sh PATH/TO/cluster-discovery
set -euo pipefail
bin=$(realpath "$1") # before the cd: the path may be relative to the caller's directory
cd "$(dirname "$0")"
export DIR=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

echo "--- installing py-eureka-client and eureka-js-client"
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/pip install --disable-pip-version-check --quiet -r requirements.txt
npm ci --no-audit --no-fund --loglevel=error

start() { # name [options...]
  local name=$1; shift
  ./run_server.sh "$bin" "$name" "$@"
  pids+=("$(cat "$DIR/$name.pid")")
}

# The passwords reach the servers through the environment (not `ps`); py-eureka-client's URL
# parser takes only [A-Za-z0-9-_~!.%] in them.
export DISCOVERY_PASSWORD=conformance-app-pw DISCOVERY_PEER_PASSWORD=conformance-peer-pw
secured=(--user app --peer-user peer)
with_credentials() { sed "s#://#://app:$DISCOVERY_PASSWORD@#" "$1"; }

show_logs() { for f in "$DIR"/*.log; do echo "--- $f"; tail -40 "$f"; done; }

echo "--- py-eureka-client"
# A short warm-up (the default is 30 s): py_client.py checks it first, then works on a served
# registry.
start single "${secured[@]}" --warm-up 3
grep -q 'the passwords cross the network in clear' "$DIR/single.log" \
  || { echo "no WARN about credentials without TLS"; show_logs; exit 1; }
echo "ok - credentials without TLS: the server WARNs that the passwords cross the network in clear"
.venv/bin/python py_client.py "$(with_credentials "$DIR/single.url")" 2>"$DIR/py-client.log" || { show_logs; cat "$DIR/py-client.log"; exit 1; }

echo "--- eureka-js-client"
node js_client.js "$(with_credentials "$DIR/single.url")" || { show_logs; exit 1; }

echo "--- two peered servers"
# Each names the other, so each needs the other's port before it starts: ask the OS for two
# free ports (a short race with other processes, acceptable here).
read -r pa pb < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])
[x.close() for x in s]')
# Started together, neither gets a registry from the other (a's peer is not up yet, b's is
# warming up and answers 503): both warm up, briefly here, and the first registration, on a,
# reaches b during its warm-up.
start peer-a --port "$pa" --peer "http://127.0.0.1:$pb/eureka/" "${secured[@]}" --warm-up 2
start peer-b --port "$pb" --peer "http://127.0.0.1:$pa/eureka/" "${secured[@]}" --warm-up 2
.venv/bin/python peers.py "$(with_credentials "$DIR/peer-a.url")" "$(with_credentials "$DIR/peer-b.url")" || { show_logs; exit 1; }

echo "--- the gateway in front of instances py-eureka-client registered"
./gateway.sh "$bin"
