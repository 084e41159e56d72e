#!/usr/bin/env bash
# What one proxied request costs the gateway and nginx (docs/benchmarks.md, "The gateway against
# nginx"): figures that depend less on the machine's other load than wrk's requests/s.
#
# 1. CPU time per request: `perf stat -e task-clock` on the proxy's processes while wrk runs
#    (1 connection, then 64), divided by the requests wrk counted; the upstream (an nginx of
#    its own, 1 worker, `return 200`) is measured the same way, apart.
# 2. User-space instructions per request (with `--instructions`): the gateway under valgrind's
#    callgrind, counters zeroed after a warm-up, wrk at 8 connections; instructions count the
#    same whatever else the machine runs (the kernel's share is not in them).
#
# Usage: discovery/benches/gateway_cost.sh [SECONDS] [--instructions]
# Needs wrk, nginx, perf (Debian's linux-perf) and, for --instructions, valgrind.
# CLUSTER_DISCOVERY=path uses that binary instead of building the release one.
set -euo pipefail
secs=${1:-5}
instructions=${2:-}
cd "$(dirname "$0")/../.."
nginx=$(command -v nginx || echo /usr/sbin/nginx)
bin=${CLUSTER_DISCOVERY:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p cluster-discovery --bin cluster-discovery
  bin=${CARGO_TARGET_DIR:-target}/release/cluster-discovery
fi

dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for f in "$dir"/up.pid "$dir"/px.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 0.5
  rm -rf "$dir"
}
trap cleanup EXIT

read -r up px gw < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])
[x.close() for x in s]')

# nginx, as the upstream (1 worker) or as the proxy (one worker per core).
nginx_conf() { # NAME WORKERS SERVER-BLOCKS
  mkdir -p "$dir/$1"
  cat >"$dir/$1.conf" <<CONF
user $(id -un);
worker_processes $2;
pid $dir/$1.pid;
error_log $dir/$1.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/$1/body; proxy_temp_path $dir/$1/proxy;
  fastcgi_temp_path $dir/$1/fastcgi; uwsgi_temp_path $dir/$1/uwsgi; scgi_temp_path $dir/$1/scgi;
  keepalive_requests 1000000;
  $3
}
CONF
  "$nginx" -c "$dir/$1.conf" -p "$dir"
}
nginx_conf up 1 "server { listen 127.0.0.1:$up; location / { return 200 \"ok\\n\"; } }"
nginx_conf px auto "upstream orders { server 127.0.0.1:$up; keepalive 64; }
  server { listen 127.0.0.1:$px; location /api/orders/ {
    proxy_pass http://orders/orders/; proxy_http_version 1.1; proxy_set_header Connection \"\";
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto \$scheme; proxy_set_header X-Forwarded-Host \$host; } }"

cat >"$dir/gateway.toml" <<CONF
listen = "127.0.0.1:$gw"
[resolvers.fixed]
kind = "static"
services = { orders = ["127.0.0.1:$up"] }
[[routes]]
path = "/api/orders/*"
service = "orders"
resolver = "fixed"
strip = "/api"
[limits]
max_idle_per_instance = 64   # as nginx's keepalive 64, per worker
CONF

start_gateway() { # COMMAND...
  RUST_LOG=warn "$@" gateway --config "$dir/gateway.toml" >"$dir/gateway.out" 2>"$dir/gateway.log" &
  pids+=($!)
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$gw/api/orders/1" >/dev/null && return; sleep 0.1; done
  echo "the gateway did not start"; cat "$dir/gateway.log"; exit 1
}
workers() { pgrep -P "$(cat "$dir/$1.pid")" | paste -sd, -; }

echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
start_gateway "$bin"
gateway_pid=${pids[-1]}
echo "| connections | proxy | requests/s | proxy CPU µs / request | upstream CPU µs / request |"
echo "|---|---|---|---|---|"
for c in 1 64; do
  t=$([ "$c" = 1 ] && echo 1 || echo 2)
  for target in nginx gateway; do
    if [ "$target" = nginx ]; then pid=$(workers px); port=$px; else pid=$gateway_pid; port=$gw; fi
    url="http://127.0.0.1:$port/api/orders/1"
    wrk -t"$t" -c"$c" -d1s "$url" >/dev/null
    perf stat -x, -e task-clock -p "$pid" -o "$dir/proxy.stat" -- sleep "$secs" &
    stat_proxy=$!
    perf stat -x, -e task-clock -p "$(workers up)" -o "$dir/up.stat" -- sleep "$secs" &
    stat_up=$!
    out=$(wrk -t"$t" -c"$c" -d"${secs}s" "$url")
    wait "$stat_proxy" "$stat_up" || true
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
    proxy_ms=$(awk -F, '/task-clock/ {print $1}' "$dir/proxy.stat")
    up_ms=$(awk -F, '/task-clock/ {print $1}' "$dir/up.stat")
    echo "| $c | $target | $rps | $(awk -v m="$proxy_ms" -v n="$n" 'BEGIN {printf "%.1f", m * 1000 / n}') | $(awk -v m="$up_ms" -v n="$n" 'BEGIN {printf "%.1f", m * 1000 / n}') |"
  done
done

if [ "$instructions" = --instructions ]; then
  kill "$gateway_pid"; wait "$gateway_pid" 2>/dev/null || true
  start_gateway valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%p" "$bin"
  wrk -t1 -c8 -d2s "http://127.0.0.1:$gw/api/orders/1" >/dev/null
  callgrind_control -z >/dev/null 2>&1
  n=$(wrk -t1 -c8 -d"${secs}s" "http://127.0.0.1:$gw/api/orders/1" | awk '/requests in/ {print $1}')
  callgrind_control -d >/dev/null 2>&1
  sleep 1
  dump=$(ls "$dir"/callgrind.*.* | head -1)
  ir=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  echo "gateway, user-space instructions per request (callgrind, $n requests): $((ir / n))"
fi
