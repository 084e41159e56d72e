"""Conformance: two peered servers, seen through py-eureka-client.

Usage: python peers.py http://USER:PASSWORD@HOST:PORT_A/eureka/ http://USER:PASSWORD@HOST:PORT_B/eureka/

The servers run with client and peer credentials: the client writes with the client's (from its
URL), the servers replicate with the peers'. An instance registered on A (by the real client) is
visible on B; the replicated write is not echoed back (A forwarded one write per client write, B
forwarded none); the client credentials cannot post a replication batch to B.
"""

import asyncio
import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import py_eureka_client.eureka_basic as eb
from py_eureka_client import http_client

A, B = sys.argv[1], sys.argv[2]
CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1
    print(f"ok - {what}", flush=True)


def request(server, path, data=None, anonymous=False):
    """urllib does not take credentials from a URL: they go in the header, unless `anonymous`."""
    url = urllib.parse.urlsplit(server)
    plain = urllib.parse.urlunsplit(url._replace(netloc=f"{url.hostname}:{url.port}"))
    req = urllib.request.Request(plain + path, data=data, method="POST" if data else "GET",
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    if not anonymous:
        pair = f"{urllib.parse.unquote(url.username)}:{urllib.parse.unquote(url.password)}"
        req.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    return req


def status(server):
    with urllib.request.urlopen(request(server, "status"), timeout=5) as r:
        return json.load(r)


def refused(req):
    try:
        urllib.request.urlopen(req, timeout=5)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


async def until(what, condition, seconds=20):
    deadline = time.monotonic() + seconds
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        await asyncio.sleep(0.1)


async def on_b(instance_id):
    try:
        apps = await eb.get_applications(B)
    except http_client.HTTPError as e:
        if e.code == 503:
            return False  # warming up: run.sh starts both servers with --warm-up 2
        raise
    app = apps.get_application("PEERED")
    return app is not None and app.get_instance(instance_id) is not None


async def main():
    now = str(int(time.time() * 1000))
    inst = eb.Instance(instanceId="peered-1", app="PEERED", hostName="127.0.0.1", ipAddr="127.0.0.1",
                       port=eb.PortWrapper(9100, True), vipAddress="peered", status="UP",
                       overriddenstatus="UNKNOWN", lastUpdatedTimestamp=now, lastDirtyTimestamp=now)
    await eb.register(A, inst)
    await until("B shows what was registered on A", lambda: on_b("peered-1"))
    check(True, "registered on A while both warmed up, visible on B once its window ended")

    await eb.status_update(A, "PEERED", "peered-1", now, "OUT_OF_SERVICE")

    async def b_out_of_service():
        app = (await eb.get_applications(B)).get_application("PEERED")
        return app is not None and app.get_instance("peered-1").status == "OUT_OF_SERVICE"
    await until("B shows the override made on A", b_out_of_service)
    check(True, "a status override on A reaches B")

    await eb.cancel(A, "PEERED", "peered-1")

    async def gone_on_b():
        return not await on_b("peered-1")
    await until("B drops what was cancelled on A", gone_on_b)
    check(True, "a cancel on A reaches B")

    batch = json.dumps({"replicationList": [{"appName": "PEERED", "id": "forged-1", "action": "Register",
                                              "instanceInfo": {"instanceId": "forged-1", "app": "PEERED",
                                                               "hostName": "h", "ipAddr": "1.2.3.4"}}]}).encode()
    check(refused(request(B, "peerreplication/batch/", batch, anonymous=True)) == 401, "an anonymous batch is 401")
    check(refused(request(B, "peerreplication/batch/", batch)) == 403, "a batch with the client credentials is 403")
    check(not await on_b("forged-1"), "and neither registered anything on B")

    a, b = status(A), status(B)
    check(a["forwarded"] == 3, f"A forwarded its 3 client writes once each (got {a['forwarded']})")
    check(b["replicatedApplied"] == 3, f"B applied 3 replicated writes (got {b['replicatedApplied']})")
    check(b["forwarded"] == 0, f"B forwarded nothing back (got {b['forwarded']})")
    check(a["replicatedApplied"] == 0, f"nothing was echoed to A (got {a['replicatedApplied']})")
    print(f"{CHECKS} passed, 0 failed")


asyncio.run(main())
