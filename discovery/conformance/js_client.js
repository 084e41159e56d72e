// Conformance: eureka-js-client (npm) against a running cluster-discovery server.
//
// Usage: node js_client.js http://USER:PASSWORD@127.0.0.1:PORT/eureka/
//
// The client is given the URL with its `user:password@` (eureka.serviceUrls), from which its
// HTTP library sends Basic auth, as with Spring's secured Eureka servers.
//
// Asserts on what the client itself sees (its registry cache, its events), not on the server's
// logs. Exits non-zero on the first failed check.
'use strict';

const http = require('http');
const { Eureka } = require('eureka-js-client');

const SERVER = new URL(process.argv[2] || 'http://127.0.0.1:8761/eureka/');
let checks = 0;

function check(condition, what) {
  if (!condition) throw new Error(`not ok - ${what}`);
  checks += 1;
  console.log(`ok - ${what}`);
}

// A request the client library does not make for us (to force a 404, or to look at the server),
// with the credentials of SERVER's URL unless `anonymous`.
function raw(method, path, body, anonymous = false) {
  return new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : undefined;
    const auth = SERVER.username && !anonymous
      ? `${decodeURIComponent(SERVER.username)}:${decodeURIComponent(SERVER.password)}` : undefined;
    const req = http.request({
      host: SERVER.hostname, port: SERVER.port, method, auth,
      path: SERVER.pathname + path,
      headers: Object.assign({ Accept: 'application/json' },
        data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}),
    }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

async function until(what, condition, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`gave up waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const once = (emitter, event) => new Promise((resolve) => emitter.once(event, resolve));
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

function instance(id, port) {
  return {
    app: 'js-demo', instanceId: id, hostName: '127.0.0.1', ipAddr: '127.0.0.1',
    statusPageUrl: `http://127.0.0.1:${port}/info`,
    port: { $: port, '@enabled': 'true' }, vipAddress: 'js-demo',
    dataCenterInfo: { '@class': 'com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo', name: 'MyOwn' },
    metadata: { team: 'y' },
  };
}

function client(extra) {
  return new Eureka(Object.assign({
    logger: quiet,
    instance: instance('js-demo-1', 3000),
    eureka: {
      serviceUrls: { default: [`${SERVER.href}apps/`] },
      heartbeatInterval: 500, registryFetchInterval: 500, maxRetries: 0, filterUpInstances: false,
    },
    shouldUseDelta: true,
  }, extra));
}

const ids = (list) => list.map((i) => i.instanceId).sort();

async function main() {
  const js = client({});
  const registered = once(js, 'registered');
  await new Promise((resolve, reject) => js.start((err) => (err ? reject(err) : resolve())));
  await registered;
  check(true, 'register answered 204 (the client accepts nothing else)');
  check(ids(js.getInstancesByAppId('JS-DEMO')).includes('js-demo-1'), 'the full fetch shows the client itself');
  await once(js, 'heartbeat');
  check(true, 'heartbeat answered 200');

  // Another instance: the client learns it from a delta fetch.
  const other = await raw('POST', 'apps/JS-DEMO', { instance: Object.assign(instance('js-demo-2', 3001), { status: 'UP' }) });
  check(other.status === 204, 'a second instance registers (204)');
  await until('the client sees js-demo-2 by app', () => ids(js.getInstancesByAppId('JS-DEMO')).includes('js-demo-2'));
  check(true, 'delta fetch: the client sees the new instance by app');
  check(ids(js.getInstancesByVipAddress('js-demo')).join() === 'js-demo-1,js-demo-2', 'lookup by VIP');

  // A full-fetch-only client (no registration) sees the same registry.
  const reader = client({ shouldUseDelta: false, eureka: Object.assign({}, js.config.eureka, { registerWithEureka: false }) });
  await new Promise((resolve, reject) => reader.start((err) => (err ? reject(err) : resolve())));
  check(ids(reader.getInstancesByAppId('js-demo')).join() === 'js-demo-1,js-demo-2', 'full fetch by a second client');
  reader.stop();

  // A forced 404: the server forgets js-demo-1; its next heartbeat gets 404 and it re-registers.
  const reregistered = once(js, 'registered');
  check((await raw('DELETE', 'apps/JS-DEMO/js-demo-1')).status === 200, 'out-of-band cancel (forces a 404)');
  await reregistered;
  const back = await raw('GET', 'apps/JS-DEMO/js-demo-1');
  check(back.status === 200 && JSON.parse(back.body).instance.instanceId === 'js-demo-1',
    'the client re-registered after a 404 heartbeat');

  // Without credentials a write is 401 with Basic's challenge and changes nothing.
  const intruder = await raw('POST', 'apps/JS-DEMO', { instance: Object.assign(instance('js-intruder', 3002), { status: 'UP' }) }, true);
  check(intruder.status === 401 && intruder.headers['www-authenticate'] === 'Basic realm="eureka"',
    `an anonymous registration is 401 with Basic's challenge (got ${intruder.status})`);
  check((await raw('DELETE', 'apps/JS-DEMO/js-demo-1', undefined, true)).status === 401, 'an anonymous cancel is 401');
  check((await raw('GET', 'apps/JS-DEMO/js-intruder')).status === 404 && (await raw('GET', 'apps/JS-DEMO/js-demo-1')).status === 200,
    'and neither changed anything');

  // Status override: the client's own cache shows it.
  const mine = () => js.getInstancesByAppId('JS-DEMO').find((i) => i.instanceId === 'js-demo-1');
  check((await raw('PUT', 'apps/JS-DEMO/js-demo-1/status?value=OUT_OF_SERVICE')).status === 200, 'status override set');
  await until('the client sees OUT_OF_SERVICE', () => mine() && mine().status === 'OUT_OF_SERVICE');
  check(mine().overriddenStatus === 'OUT_OF_SERVICE', 'the client sees the override (status and overriddenStatus)');
  check((await raw('DELETE', 'apps/JS-DEMO/js-demo-1/status?value=UP')).status === 200, 'status override removed');
  await until('the client sees UP again', () => mine() && mine().status === 'UP');
  check(true, 'the client sees UP again');

  // Deregister.
  const deregistered = once(js, 'deregistered');
  await new Promise((resolve) => js.stop(resolve));
  await deregistered;
  check((await raw('GET', 'apps/JS-DEMO/js-demo-1')).status === 404, 'stop deregisters the client (200, then gone)');
  await raw('DELETE', 'apps/JS-DEMO/js-demo-2');
  console.log(`${checks} passed, 0 failed`);
}

main().then(() => process.exit(0), (e) => { console.error(e.message || e); process.exit(1); });
