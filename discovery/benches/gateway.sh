#!/usr/bin/env bash
# The gateway's benchmark (docs/benchmarks.md, "The gateway"): wrk against one upstream called
# directly, through nginx's proxy_pass, and through `cluster-discovery gateway`, at 1 and 64
# connections; p50, p99 and requests per second, each round measuring the three in turn so that
# a change in the machine's load falls on all of them.
#
# The upstream is nginx itself (`return 200`), the fastest server at hand, so that what is
# measured is the proxies. nginx proxies with keep-alive connections to the upstream, as the
# gateway does. Installs Debian's wrk and nginx-light when missing (apt-get; root or sudo).
#
# Usage: discovery/benches/gateway.sh [ROUNDS [SECONDS]]   (default 3 rounds of 10 s)
# CLUSTER_DISCOVERY=path uses that binary instead of building the release one.
set -euo pipefail
rounds=${1:-3}
secs=${2:-10}
cd "$(dirname "$0")/../.."

if ! command -v wrk >/dev/null || { ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; }; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q wrk nginx-light >/dev/null
fi
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
  [ -f "$dir/nginx.pid" ] && kill "$(cat "$dir/nginx.pid")" 2>/dev/null || true
  sleep 0.5
  rm -rf "$dir"
}
trap cleanup EXIT

# Three free ports from the OS (a short race with other processes, acceptable here).
read -r up px gw < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])
[x.close() for x in s]')

mkdir -p "$dir/tmp"
cat >"$dir/nginx.conf" <<CONF
user $(id -un);
worker_processes auto;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 1000000;
  upstream orders { server 127.0.0.1:$up; keepalive 64; }
  # The upstream.
  server { listen 127.0.0.1:$up; location / { return 200 "ok\n"; } }
  # nginx as the gateway: the same route, prefix stripped, keep-alive to the upstream.
  server {
    listen 127.0.0.1:$px;
    location /api/orders/ {
      proxy_pass http://orders/orders/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Host \$host;
    }
  }
}
CONF
"$nginx" -c "$dir/nginx.conf" -p "$dir"

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
# nginx keeps 64 idle connections to the upstream per worker (\`keepalive 64\` above): so does
# the gateway, per worker. At its default (32) the 64-connection runs would close and reopen
# connections to the upstream, which nginx does not.
max_idle_per_instance = 64
CONF
RUST_LOG=warn "$bin" gateway --config "$dir/gateway.toml" >"$dir/gateway.out" 2>"$dir/gateway.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on ' "$dir/gateway.out" && break; sleep 0.1; done

declare -A url=(
  [direct]="http://127.0.0.1:$up/orders/1"
  [nginx]="http://127.0.0.1:$px/api/orders/1"
  [gateway]="http://127.0.0.1:$gw/api/orders/1"
)
for target in direct nginx gateway; do
  body=$(curl -sf "${url[$target]}") || { echo "$target does not answer"; cat "$dir"/*.log; exit 1; }
  [ "$body" = "ok" ] || { echo "$target answered $body"; exit 1; }
done

# wrk's latency in µs from "50%  123.45us" / "1.20ms" / "1.00s".
us() { awk -v v="$1" 'BEGIN {
  n = v + 0; u = v; sub(/^[0-9.]+/, "", u);
  if (u == "us") print n; else if (u == "ms") print n * 1000; else if (u == "s") print n * 1e6; else print n }'; }

echo "machine: $(nproc) cores, $(awk '/MemTotal/ {print int($2/1024/1024) " GiB"}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | connections | target | p50 µs | p99 µs | requests/s | errors |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq 1 "$rounds"); do
  for c in 1 64; do
    t=$([ "$c" = 1 ] && echo 1 || echo 2)
    # A short warm-up per target (keep-alive connections opened, caches warm).
    for target in direct nginx gateway; do wrk -t"$t" -c"$c" -d1s "${url[$target]}" >/dev/null; done
    for target in direct nginx gateway; do
      out=$(wrk -t"$t" -c"$c" -d"${secs}s" --latency "${url[$target]}")
      p50=$(us "$(echo "$out" | awk '$1 == "50%" {print $2}')")
      p99=$(us "$(echo "$out" | awk '$1 == "99%" {print $2}')")
      rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
      errors=$(echo "$out" | awk '/Non-2xx|Socket errors/' | tr -s ' ' | tr '\n' ' ')
      echo "| $round | $c | $target | $p50 | $p99 | $rps | ${errors:-none} |"
      echo "$round $c $target $p50 $p99 $rps" >>"$dir/rows"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Medians over the rounds, and the gateway's figures over nginx's, round by round (then their
# median): requests/s (the target is at least 1.0) and p99 (at most 1.5).
echo
echo "| connections | target | median p50 µs | median p99 µs | median requests/s |"
echo "|---|---|---|---|---|"
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for c in 1 64; do
  for target in direct nginx gateway; do
    m() { awk -v c="$c" -v t="$target" -v f="$1" '$2 == c && $3 == t {print $f}' "$dir/rows" | median; }
    echo "| $c | $target | $(m 4) | $(m 5) | $(m 6) |"
  done
done
echo
echo "| connections | gateway/nginx requests/s, per round | median | gateway/nginx p99, per round | median |"
echo "|---|---|---|---|---|"
for c in 1 64; do
  ratios() { # FIELD: the gateway's over nginx's, per round
    awk -v c="$c" -v f="$1" '$2 == c && $3 == "nginx" {n[$1] = $f} $2 == c && $3 == "gateway" {g[$1] = $f}
      END {for (r in g) printf "%d %.2f\n", r, g[r] / n[r]}' "$dir/rows" | sort -n | cut -d' ' -f2
  }
  rps=$(ratios 6); p99=$(ratios 5)
  echo "| $c | $(echo $rps) | $(echo "$rps" | median) | $(echo $p99) | $(echo "$p99" | median) |"
done
