"""Conformance: the gateway (`cluster-discovery gateway`) in front of instances that the real
py-eureka-client (PyPI) registered in our registry server (`cluster-discovery serve`).

Usage: python gateway.py PATH/TO/cluster-discovery

Starts, each in a process of its own: a registry server, three upstream HTTP servers
(upstream.py), and the gateway with a `discovery` resolver. Registers the three with
py-eureka-client's EurekaClient (heartbeats every second), then checks through the gateway:
routing and stripping, the spread over three instances, an instance set OUT_OF_SERVICE
receiving nothing, a service with no instance answering 503 with its name, one whose only
instance serves HTTPS alone (plain port disabled) answering 503 too, a slow instance 504, one
instance killed under load (no GET fails; a POST either succeeds or is a 502), and the
registry stopped by SIGTERM (it exits 0; the gateway's cache keeps routing). Exits non-zero
on the first failed check; tears everything down in any case.

The registry runs with --no-warm-up: it is new, not restarted (run.sh's first server shows
the warm-up to py-eureka-client). It runs with credentials (--user app, the password from
DISCOVERY_PASSWORD), as a registry should: py-eureka-client writes with `app:PASSWORD@` in its
URL and the operator's status override sends HTTP Basic; the gateway only reads, which needs
none (reads are open unless --protect-reads).
"""

import asyncio
import base64
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import py_eureka_client.eureka_client as eureka_client
import py_eureka_client.logger as eureka_logger
import logging

eureka_logger.set_handler(logging.StreamHandler(sys.stderr))
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.abspath(sys.argv[1])
# py-eureka-client's URL parser takes only [A-Za-z0-9-_~!.%] in a password.
USER, PASSWORD = "app", "gateway-conformance-pw"
CHECKS = 0
PROCS = []


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1
    print(f"ok - {what}", flush=True)


def spawn(args, **kw):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, **kw)
    PROCS.append(p)
    return p


def listening(p):
    """The URL a `cluster-discovery` process prints once it accepts requests."""
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise AssertionError(f"did not start: {line!r}")
    return line.strip().removeprefix("listening on ")


def request(method, url, body=None, auth=None):
    """(status, text); a refused or broken connection is (0, why). `auth`: (user, password),
    sent as HTTP Basic."""
    req = urllib.request.Request(url, method=method, data=body)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, str(e)


def port_of(text):
    first = text.split("\n", 1)[0]
    return int(first.removeprefix("port=")) if first.startswith("port=") else None


def until(what, condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        time.sleep(0.2)


async def main():
    registry = spawn([BIN, "serve", "--port", "0", "--no-warm-up", "--user", USER],
                     stderr=subprocess.DEVNULL, env={**os.environ, "DISCOVERY_PASSWORD": PASSWORD})
    server = listening(registry)  # http://127.0.0.1:PORT/eureka/
    writer = server.replace("://", f"://{USER}:{PASSWORD}@", 1)  # what the clients write with
    upstreams = [spawn([sys.executable, os.path.join(HERE, "upstream.py")]) for _ in range(3)]
    ports = [int(u.stdout.readline()) for u in upstreams]
    clients = []
    for port in ports:
        c = eureka_client.EurekaClient(
            eureka_server=writer, app_name="orders", instance_id=f"orders-{port}",
            instance_host="127.0.0.1", instance_ip="127.0.0.1", instance_port=port,
            renewal_interval_in_secs=1, duration_in_secs=30)
        await c.start()
        clients.append(c)
    check(True, "three upstreams registered by py-eureka-client")
    # An instance serving HTTPS only: its plain port disabled, its securePort enabled. Its plain
    # port is a live upstream's, so an address resolved from it would answer 200.
    tls_only = eureka_client.EurekaClient(
        eureka_server=writer, app_name="vault", instance_id="vault-1",
        instance_host="127.0.0.1", instance_ip="127.0.0.1", instance_port=ports[2],
        instance_unsecure_port_enabled=False, instance_secure_port=8443,
        instance_secure_port_enabled=True, renewal_interval_in_secs=1, duration_in_secs=30)
    await tls_only.start()
    clients.append(tls_only)
    status, text = request("GET", f"{server}apps/VAULT/vault-1")
    check(status == 200 and f'<port enabled="false">{ports[2]}</port>' in text
          and '<securePort enabled="true">8443</securePort>' in text,
          f"py-eureka-client registered vault-1 with its plain port disabled ({status})")

    config = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
    config.write(f"""
listen = "127.0.0.1:0"
cool_down_ms = 1000

[resolvers.eureka]
kind = "discovery"
servers = ["{server}"]
refresh_secs = 1

[[routes]]
path = "/api/orders/*"
service = "orders"
resolver = "eureka"
strip = "/api"

[[routes]]
path = "/api/slow/*"
service = "orders"
resolver = "eureka"
strip = "/api"
timeout_ms = 500

[[routes]]
path = "/api/billing/*"
service = "billing"
resolver = "eureka"

[[routes]]
path = "/api/vault/*"
service = "vault"
resolver = "eureka"
""")
    config.close()
    gateway = spawn([BIN, "gateway", "--config", config.name], stderr=subprocess.DEVNULL)
    url = listening(gateway)
    loop = asyncio.get_running_loop()

    def run(f, *a):
        return loop.run_in_executor(None, f, *a)

    status, text = await run(request, "GET", f"{url}/api/orders/7?x=1")
    check(status == 200 and "GET /orders/7?x=1" in text, f"routed by name, prefix stripped ({status})")

    seen = set()
    for _ in range(60):
        status, text = await run(request, "GET", f"{url}/api/orders/1")
        assert status == 200, text
        seen.add(port_of(text))
    check(seen == set(ports), f"60 GETs spread over all three instances ({sorted(seen)})")

    status, text = await run(request, "GET", f"{url}/api/billing/1")
    check(status == 503 and "billing" in text, f"no instance of billing: 503 naming it ({status})")

    status, text = await run(request, "GET", f"{url}/api/vault/1")
    check(status == 503 and "vault" in text,
          f"an instance registered with its secure port only is not routed to: 503 ({status})")

    status, _ = await run(request, "GET", f"{url}/api/slow/1")
    check(status == 504, f"an instance slower than the route's timeout: 504 ({status})")

    # OUT_OF_SERVICE, as an operator sets it; the gateway's cache refreshes every second.
    out = ports[1]
    override = f"{server}apps/ORDERS/orders-{out}/status?value=OUT_OF_SERVICE"
    status, _ = await run(request, "PUT", override)
    check(status == 401, f"a status override without credentials: 401 ({status})")
    status, _ = await run(request, "PUT", override, None, (USER, PASSWORD))
    check(status == 200, "status override set with the client credentials")

    def none_reach_out():
        return all(port_of(request("GET", f"{url}/api/orders/1")[1]) != out for _ in range(30))
    await run(until, "the gateway stops sending to the instance out of service", none_reach_out)
    hits = [port_of((await run(request, "GET", f"{url}/api/orders/1"))[1]) for _ in range(60)]
    check(out not in hits, "an instance OUT_OF_SERVICE receives nothing")
    status, _ = await run(request, "DELETE", f"{server}apps/ORDERS/orders-{out}/status?value=UP",
                          None, (USER, PASSWORD))
    check(status == 200, "status override removed")

    # One instance killed (SIGKILL) under load; it stays registered, heartbeats go on from here.
    pool = concurrent.futures.ThreadPoolExecutor(16)
    gets = [pool.submit(request, "GET", f"{url}/api/orders/g") for _ in range(300)]
    posts = [pool.submit(request, "POST", f"{url}/api/orders/p", b"order") for _ in range(300)]
    until("the load is under way", lambda: sum(f.done() for f in gets) >= 50)
    upstreams[0].kill()
    left = sum(not f.done() for f in gets + posts)
    check(left > 100, f"instance killed with {left} of 600 requests still to go")
    get_status = [f.result()[0] for f in gets]
    post_status = [f.result()[0] for f in posts]
    check(all(s == 200 for s in get_status), f"no GET failed with an instance killed under load "
          f"({sorted(set(get_status))})")
    check(all(s in (200, 502) for s in post_status),
          f"each POST succeeded or was a 502 ({post_status.count(502)} of 300 were 502)")

    # The registry goes away: the gateway's copy keeps routing to the instances it knew.
    registry.send_signal(signal.SIGTERM)
    check(registry.wait(timeout=10) == 0, "SIGTERM: the registry server stops and exits 0")
    time.sleep(2.5)  # a few refresh intervals: each read now fails
    results = [(await run(request, "GET", f"{url}/api/orders/1"))[0] for _ in range(30)]
    check(all(s == 200 for s in results), "the registry down: the gateway's cache keeps routing")

    gateway.send_signal(signal.SIGTERM)
    check(gateway.wait(timeout=40) == 0, "SIGTERM: the gateway drains and exits 0")
    for c in clients:
        try:
            await asyncio.wait_for(c.stop(), 5)
        except Exception:
            pass  # the registry is down: deregistration fails, as it should
    os.unlink(config.name)
    print(f"gateway conformance: {CHECKS} checks passed", flush=True)


try:
    asyncio.run(main())
finally:
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
