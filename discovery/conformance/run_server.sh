#!/usr/bin/env bash
# Starts a cluster-discovery server on a free port in the background.
# Usage: run_server.sh BINARY NAME [server options...]
# Writes the server's URL to $DIR/NAME.url and its pid to $DIR/NAME.pid (DIR defaults to /tmp).
set -euo pipefail
bin=$1; name=$2; shift 2
dir=${DIR:-/tmp}
"$bin" serve --port 0 "$@" >"$dir/$name.out" 2>"$dir/$name.log" &
echo $! >"$dir/$name.pid"
for _ in $(seq 1 100); do
  if grep -q '^listening on ' "$dir/$name.out" 2>/dev/null; then
    sed -n 's/^listening on //p' "$dir/$name.out" >"$dir/$name.url"
    exit 0
  fi
  sleep 0.1
done
echo "server $name did not start; its log:" >&2
cat "$dir/$name.log" >&2
exit 1
