"""A Python client (requests) calling typed Rust functions through the gateway's function
routes, against discovery/examples/gateway_functions.rs: two services, a nested call behind
one, a timeout, an at-most-once write retried by the call path, arguments by name, and the
refusals.

Usage: functions.py PATH/TO/gateway_functions (the example binary). Starts it, reads the
gateway's URL and API keys from its first lines, and closes its standard input at the end,
which stops it.
"""

import subprocess
import sys
import time

import requests


def check(what, condition, detail=""):
    if not condition:
        print(f"not ok - {what}: {detail}")
        sys.exit(1)
    print(f"ok - {what}")


def main():
    example = subprocess.Popen(
        [sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        url, shop_key, ops_key = (example.stdout.readline().strip() for _ in range(3))
        run(url, shop_key, ops_key)
    finally:
        example.stdin.close()
        try:
            example.wait(timeout=30)
        except subprocess.TimeoutExpired:
            example.kill()


def call(url, key, target, args, headers=None, timeout=10):
    service, function = target.split(".")
    return requests.post(
        f"{url}/api/{service}/{function}",
        json=args,
        headers={"authorization": f"Bearer {key}", **(headers or {})},
        timeout=timeout,
    )


def run(url, shop_key, ops_key):
    session_ops = lambda *a, **k: call(url, ops_key, *a, **k)

    r = call(url, shop_key, "inventory.reserve", ["apple", 3])
    check("inventory.reserve answers its value", r.status_code == 200 and r.json() == 97, r.text)
    check(
        "the answer names its request",
        len(r.headers.get("x-cluster-request-id", "")) == 32,
        r.headers,
    )

    r = call(url, shop_key, "inventory.reserve", ["apple", 1000])
    body = r.json()["error"]
    check(
        "an Err is 422 naming its variant",
        r.status_code == 422 and body["variant"] == "OutOfStock" and body["value"] == {"left": 97},
        r.text,
    )

    r = call(url, shop_key, "shop.order", ["apple", 2])
    check(
        "shop.order, whose handler calls inventory.reserve",
        r.status_code == 200 and r.json() == "2 apple ordered, 95 left",
        r.text,
    )

    started = time.monotonic()
    r = call(url, shop_key, "inventory.slow", [5000], headers={"grpc-timeout": "300m"})
    elapsed = time.monotonic() - started
    check(
        "past its grpc-timeout a call is 504, without waiting for the function",
        r.status_code == 504 and r.json()["error"]["reason"] == "timeout" and elapsed < 3,
        f"{r.status_code} after {elapsed:.1f} s: {r.text}",
    )

    # The first deposit outlasts its 300 ms attempt: the call path asks the same process again,
    # which answers from its record instead of running it twice.
    r = session_ops("bank.deposit", [7])
    check(
        "an at-most-once deposit whose first attempt timed out answers",
        r.status_code == 200
        and r.json() == 1
        and "x-cluster-call-id" in r.headers
        and r.headers.get("x-cluster-attempts") == "2",
        f"{r.status_code} {r.headers} {r.text}",
    )
    r = session_ops("bank.deposit", [8])
    check("a second deposit", r.status_code == 200 and r.json() == 2, r.text)
    r = session_ops("bank.deposits", [])
    check("each deposit ran once", r.json() == [7, 8], r.text)

    r = call(url, shop_key, "bank.deposit", [9])
    check(
        "an edge caller not allowed the function gets 403",
        r.status_code == 403 and r.json()["error"]["reason"] == "not allowed",
        r.text,
    )
    check("and it never ran", session_ops("bank.deposits", []).json() == [7, 8])
    r = call(url, "no-such-key-0123456789", "inventory.reserve", ["apple", 1])
    check("an unknown key gets 401", r.status_code == 401, r.text)
    r = call(url, shop_key, "inventory.reserve", ["apple", "three"])
    check(
        "arguments of the wrong shape get 400 naming the argument",
        r.status_code == 400
        and "argument 2: expected a non-negative integer (u32), found the string \"three\""
        in r.json()["error"]["message"],
        r.text,
    )

    r = requests.get(f"{url}/api/_describe", headers={"x-api-key": shop_key}, timeout=10)
    services = {s["name"]: s for s in r.json()["services"]}
    check("_describe lists what the caller may call", sorted(services) == ["inventory", "shop"], r.text)
    reserve = next(f for f in services["inventory"]["functions"] if f["name"] == "reserve")
    check("with each function's shapes", reserve["args"] == ["Str", {"Uint": 32}], reserve)
    check("and its parameters' names", reserve["params"] == ["item", "count"], reserve)

    r = call(url, shop_key, "inventory.reserve", {"count": 1, "item": "apple"})
    check("arguments by parameter name", r.status_code == 200 and r.json() == 94, r.text)


if __name__ == "__main__":
    main()
