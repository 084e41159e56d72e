"""Conformance: py-eureka-client (PyPI) against a running cluster-discovery server.

Usage: python py_client.py http://USER:PASSWORD@127.0.0.1:PORT/eureka/

The client sends HTTP Basic from the `user:password@` in its server URL, as with Spring's
secured Eureka servers. Asserts on what the client itself reads (it parses XML: it sends no Accept header), not on the
server's logs. Exits non-zero on the first failed check.
"""

import asyncio
import base64
import logging
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import py_eureka_client.eureka_basic as eb
import py_eureka_client.logger as eureka_logger
import py_eureka_client.eureka_client as eureka_client
from py_eureka_client import http_client

# The client logs the forced 404s with tracebacks: to stderr, which run.sh keeps in a file.
eureka_logger.set_handler(logging.StreamHandler(sys.stderr))
SERVER = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8761/eureka/"
CHECKS = 0


def check(condition, what):
    global CHECKS
    if not condition:
        raise AssertionError(what)
    CHECKS += 1
    print(f"ok - {what}", flush=True)


def raw(method, path, anonymous=False, headers=None):
    """A request the client library does not make for us (to force a 404, say), with the
    credentials of SERVER's URL unless `anonymous`; its status and headers."""
    url = urllib.parse.urlsplit(SERVER)
    plain = url._replace(netloc=url.hostname + (f":{url.port}" if url.port else ""))
    req = urllib.request.Request(urllib.parse.urlunsplit(plain) + path, method=method,
                                 headers=dict(headers or {}))
    if url.username and not anonymous:
        pair = f"{urllib.parse.unquote(url.username)}:{urllib.parse.unquote(url.password)}"
        req.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def until(what, condition, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        await asyncio.sleep(0.2)


async def status_code_of(coro):
    try:
        await coro
        return 200
    except http_client.HTTPError as e:
        return e.code


async def anonymous_writes_are_refused():
    """Without credentials, every write is 401 (with Basic's challenge) and changes nothing."""
    body = b'{"instance": {"app": "INTRUDER", "instanceId": "x-1", "hostName": "h", "ipAddr": "1.2.3.4", "port": {"$": 1, "@enabled": "true"}, "status": "UP"}}'
    url = urllib.parse.urlsplit(SERVER)
    plain = url._replace(netloc=url.hostname + f":{url.port}")
    req = urllib.request.Request(urllib.parse.urlunsplit(plain) + "apps/INTRUDER", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=5)
        code, challenge = 200, None
    except urllib.error.HTTPError as e:
        code, challenge = e.code, e.headers.get("WWW-Authenticate")
    check(code == 401 and challenge == 'Basic realm="eureka"',
          f"an anonymous registration is 401 with Basic's challenge (got {code}, {challenge!r})")
    check(await status_code_of(eb.get_application(SERVER, "INTRUDER")) == 404, "and registered nothing")
    check(raw("POST", "apps/INTRUDER?isReplication=true", headers={"Content-Type": "application/json"}) == 403,
          "isReplication=true with the client credentials is 403 (only peers replicate)")


async def warm_up():
    """run.sh starts this server with --warm-up 3: empty, it answers reads 503 for 3 s however
    many instances register meanwhile (registrations and heartbeats go through), then serves
    the registry whole."""
    check(await status_code_of(eb.get_applications(SERVER)) == 503, "a server started empty answers reads 503")
    now = str(int(time.time() * 1000))
    inst = eb.Instance(instanceId="py-0", app="PY-WARM", hostName="127.0.0.1", ipAddr="127.0.0.1",
                       port=eb.PortWrapper(9090, True), vipAddress="py-warm", status="UP",
                       overriddenstatus="UNKNOWN", lastUpdatedTimestamp=now, lastDirtyTimestamp=now)
    await eb.register(SERVER, inst)
    check(await status_code_of(eb.send_heartbeat(SERVER, "PY-WARM", "py-0", now)) == 200,
          "registration and heartbeat go through while warming up")
    check(await status_code_of(eb.get_applications(SERVER)) == 503, "a registration does not end the warm-up")
    check(await status_code_of(eb.get_application(SERVER, "PY-WARM")) == 503,
          "nor is the instance registered again readable before the window ends")

    async def served():
        return await status_code_of(eb.get_applications(SERVER)) == 200
    await until("the warm-up window ends", served, seconds=10)
    app = (await eb.get_applications(SERVER)).get_application("PY-WARM")
    check(app is not None and app.get_instance("py-0") is not None,
          "after the window the registry is served, with what registered during it")
    await eb.cancel(SERVER, "PY-WARM", "py-0")


async def low_level():
    now = str(int(time.time() * 1000))
    inst = eb.Instance(instanceId="py-1", app="PY-APP", hostName="127.0.0.1", ipAddr="127.0.0.1",
                       port=eb.PortWrapper(9091, True), vipAddress="py-app", secureVipAddress="py-app-s",
                       status="UP", overriddenstatus="UNKNOWN", lastUpdatedTimestamp=now,
                       lastDirtyTimestamp=now, metadata={"team": "x", "zone_name": "a"})
    await eb.register(SERVER, inst)
    check(await status_code_of(eb.send_heartbeat(SERVER, "PY-APP", "py-1", now)) == 200, "heartbeat answers 200")

    apps = await eb.get_applications(SERVER)
    check(apps.appsHashcode == "UP_1_", f"full fetch hashcode is UP_1_ (got {apps.appsHashcode!r})")
    app = apps.get_application("PY-APP")
    check(len(app.instances) == 1, "full fetch shows the instance")
    seen = app.instances[0]
    check(seen.instanceId == "py-1" and seen.port.port == 9091 and seen.port.enabled, "instance id and port read back")
    # XStream writes `_` in element names as `__`; this client reads tag names as they are.
    check(seen.metadata.get("team") == "x" and seen.metadata.get("zone__name") == "a",
          "metadata read back, an underscore key in XStream's escaping")

    delta = await eb.get_delta(SERVER)
    added = [i for a in delta.applications for i in a.instances if i.instanceId == "py-1"]
    check(added and added[-1].actionType == "ADDED", "delta shows the registration as ADDED")
    check(delta.appsHashcode == "UP_1_", "delta carries the hashcode of the whole registry")

    vip = await eb.get_vip(SERVER, "py-app")
    check([i.instanceId for i in vip.get_application("PY-APP").instances] == ["py-1"], "lookup by VIP")
    svip = await eb.get_secure_vip(SERVER, "py-app-s")
    check(len(svip.get_application("PY-APP").instances) == 1, "lookup by secure VIP")
    check(len((await eb.get_vip(SERVER, "nobody")).applications) == 0, "an unknown VIP is an empty list")
    one = await eb.get_application(SERVER, "py-app")
    check(one.name == "PY-APP" and len(one.instances) == 1, "lookup by app, case-insensitive")
    single = await eb.get_app_instance(SERVER, "PY-APP", "py-1")
    check(single.instanceId == "py-1", "lookup of one instance")

    await eb.status_update(SERVER, "PY-APP", "py-1", now, "OUT_OF_SERVICE")
    one = await eb.get_application(SERVER, "PY-APP")
    check(one.instances[0].status == "OUT_OF_SERVICE" and one.instances[0].overriddenstatus == "OUT_OF_SERVICE",
          "status override is what the client reads")
    check(await status_code_of(eb.send_heartbeat(SERVER, "PY-APP", "py-1", now)) == 200,
          "heartbeat under an override answers 200")
    await eb.delete_status_override(SERVER, "PY-APP", "py-1", now)
    one = await eb.get_application(SERVER, "PY-APP")
    check(one.instances[0].overriddenstatus == "UNKNOWN", "override removed")
    check(await status_code_of(eb.send_heartbeat(SERVER, "PY-APP", "py-1", now)) == 404,
          "heartbeat after the override is removed without a status is 404 (re-register)")
    await eb.register(SERVER, inst)
    check((await eb.get_application(SERVER, "PY-APP")).instances[0].status == "UP", "re-registration brings it back UP")

    for method, path in [("DELETE", "apps/PY-APP/py-1"), ("PUT", "apps/PY-APP/py-1/status?value=OUT_OF_SERVICE"),
                         ("PUT", "apps/PY-APP/py-1")]:
        check(raw(method, path, anonymous=True) == 401, f"anonymous {method} {path} is 401")
    one = await eb.get_application(SERVER, "PY-APP")
    check(len(one.instances) == 1 and one.instances[0].status == "UP", "and changed nothing")

    await eb.cancel(SERVER, "PY-APP", "py-1")
    check(await status_code_of(eb.send_heartbeat(SERVER, "PY-APP", "py-1", now)) == 404, "heartbeat after cancel is 404")
    check(await status_code_of(eb.get_application(SERVER, "PY-APP")) == 404, "a cancelled app is gone (404)")
    delta = await eb.get_delta(SERVER)
    gone = [i for a in delta.applications for i in a.instances if i.instanceId == "py-1"]
    check(gone and gone[-1].actionType == "DELETED", "delta shows the cancel as DELETED")


async def lifecycle():
    client = eureka_client.EurekaClient(
        eureka_server=SERVER, app_name="py-demo", instance_id="py-demo-1",
        instance_host="127.0.0.1", instance_ip="127.0.0.1", instance_port=9090,
        renewal_interval_in_secs=1, duration_in_secs=30, metadata={"team": "x"})
    await client.start()

    def mine():
        app = client.applications.get_application("PY-DEMO")
        return app.get_instance("py-demo-1") if app else None

    check(mine() is not None and mine().status == "UP", "after start the client sees itself in its full fetch")

    # Another instance appears: the client learns it through its delta fetches.
    now = str(int(time.time() * 1000))
    other = eb.Instance(instanceId="py-demo-2", app="PY-DEMO", hostName="127.0.0.1", ipAddr="127.0.0.1",
                        port=eb.PortWrapper(9092, True), vipAddress="py-demo", status="UP",
                        overriddenstatus="UNKNOWN", lastUpdatedTimestamp=now, lastDirtyTimestamp=now)
    await eb.register(SERVER, other)

    async def sees_other():
        app = client.applications.get_application("PY-DEMO")
        return app is not None and app.get_instance("py-demo-2") is not None
    await until("the client sees py-demo-2 through a delta", sees_other)
    check(True, "the client picked up a new instance from the delta")

    # A forced 404: the server forgets the instance; the next heartbeat re-registers it.
    check(raw("DELETE", "apps/PY-DEMO/py-demo-1") == 200, "out-of-band cancel (forces a 404)")

    async def back():
        try:
            app = await eb.get_application(SERVER, "PY-DEMO")
            return app.get_instance("py-demo-1") is not None
        except http_client.HTTPError:
            return False
    await until("the client re-registers after its heartbeat got 404", back)
    check(True, "the client re-registered after a 404 heartbeat")

    # An operator takes it out of service; the client sees that in its own registry copy.
    check(raw("PUT", "apps/PY-DEMO/py-demo-1/status?value=OUT_OF_SERVICE") == 200, "status override set")

    async def out_of_service():
        i = mine()
        return i is not None and i.status == "OUT_OF_SERVICE"
    await until("the client sees OUT_OF_SERVICE", out_of_service)
    check(True, "the client sees the override in its registry copy")

    # Removing the override without a status makes the next heartbeat 404: it re-registers UP.
    check(raw("DELETE", "apps/PY-DEMO/py-demo-1/status") == 200, "status override removed")

    async def up_again():
        i = mine()
        return i is not None and i.status == "UP" and i.overriddenstatus == "UNKNOWN"
    await until("the client is UP again", up_again)
    check(True, "after the override is removed the client is UP again")

    await client.stop()
    app = await eb.get_application(SERVER, "PY-DEMO")
    check(app.get_instance("py-demo-1") is None, "stop deregisters the client")
    await eb.cancel(SERVER, "PY-DEMO", "py-demo-2")


async def main():
    await warm_up()  # first: the server has just started, empty
    await low_level()
    await anonymous_writes_are_refused()
    await lifecycle()
    print(f"{CHECKS} passed, 0 failed")


if __name__ == "__main__":
    asyncio.run(main())
