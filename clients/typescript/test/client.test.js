// The client against a real `postbox serve` (POSTBOX_BIN, default
// target/debug/postbox), started per test on a free port.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { Client, PostboxError, PullConsumer, Terminal, verifyWebhook, WebhookVerificationError } from "../src/index.js";

const root = resolve(fileURLToPath(import.meta.url), "../../../..");
const CATALOG = `
[[event_types]]
name = "PAYMENT_COMPLETED"
producers = ["shop"]
[[producers]]
name = "shop"
emits = ["PAYMENT_COMPLETED"]
[[subscriptions]]
name = "billing"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "pull"
retry = { max_attempts = 3, backoff_ms = 100 }
`;

async function serve(t) {
  const dir = mkdtempSync(join(tmpdir(), "postbox-ts-"));
  writeFileSync(join(dir, "catalog.toml"), CATALOG);
  const bin = process.env.POSTBOX_BIN ?? join(root, "target/debug/postbox");
  const child = spawn(bin, ["serve", "--catalog", join(dir, "catalog.toml"), "--listen", "127.0.0.1:0", "--data", join(dir, "data")], {
    env: { ...process.env, POSTBOX_LOG: "warn" },
    stdio: ["ignore", "pipe", "ignore"],
  });
  const line = await new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", ok);
    child.once("exit", () => fail(new Error("postbox serve exited")));
  });
  const base = line.split(" ")[3];
  const admin = readFileSync(join(dir, "data/admin-token"), "utf8").trim();
  t.after(async () => {
    child.kill("SIGTERM");
    await new Promise((ok) => child.once("exit", ok));
    rmSync(dir, { recursive: true, force: true });
  });
  const token = async (tenant) => (await new Client(base, admin).request("POST", "/v1/tokens", { tenant })).token;
  return { base, admin, token };
}

const payment = (i) => ({ order_id: `A-${i}`, amount: 100 * i });

test("emit reads back in order and an idempotency key emits once", async (t) => {
  const s = await serve(t);
  const client = new Client(s.base, await s.token("acme"));
  const first = await client.emit("PAYMENT_COMPLETED", payment(1), { idempotencyKey: "pay-A-1" });
  const again = await client.emit("PAYMENT_COMPLETED", payment(1), { idempotencyKey: "pay-A-1" });
  assert.equal(again.event.id, first.event.id);
  await client.emit("PAYMENT_COMPLETED", payment(2));
  const page = await client.events();
  assert.deepEqual(page.events.map((e) => e.event.seq), [1, 2]);
  await assert.rejects(client.emit("NO_SUCH_TYPE", {}), (e) => e instanceof PostboxError && e.status === 400 && e.code === "unknown_event_type");
});

test("follow yields the log and then new events as they commit", async (t) => {
  const s = await serve(t);
  const client = new Client(s.base, await s.token("acme"));
  await client.emit("PAYMENT_COMPLETED", payment(1));
  const abort = new AbortController();
  const seen = [];
  const following = (async () => {
    for await (const e of client.follow(1, abort.signal)) {
      seen.push(e.event.seq);
      if (seen.length === 3) break;
    }
  })();
  await new Promise((r) => setTimeout(r, 300));
  await client.emit("PAYMENT_COMPLETED", payment(2));
  await client.emit("PAYMENT_COMPLETED", payment(3));
  await following;
  abort.abort();
  assert.deepEqual(seen, [1, 2, 3]);
});

test("a retried emit keeps its idempotency key", async () => {
  const keys = [];
  const flaky = createServer((req, res) => {
    keys.push(req.headers["idempotency-key"]);
    req.resume();
    req.on("end", () => {
      if (keys.length === 1) {
        res.writeHead(503, { "retry-after": "0" }).end('{"error":{"code":"unavailable","message":"busy"}}');
      } else {
        res.writeHead(201).end('{"event":{"id":"E1"}}');
      }
    });
  });
  await new Promise((r) => flaky.listen(0, "127.0.0.1", r));
  try {
    const client = new Client(`http://127.0.0.1:${flaky.address().port}`, "t", { backoffMs: 5 });
    assert.equal((await client.emit("X", {})).event.id, "E1");
  } finally {
    flaky.close();
  }
  assert.equal(keys.length, 2);
  assert.ok(keys[0] && keys[0] === keys[1]);
});

test("a pull consumer completes, retries, dead-letters and keeps its lease", async (t) => {
  const s = await serve(t);
  const acme = new Client(s.base, await s.token("acme"));
  const ids = [];
  for (let i = 1; i <= 4; i++) ids.push((await acme.emit("PAYMENT_COMPLETED", payment(i))).event.id);
  const seen = [];
  const consumer = new PullConsumer(
    acme,
    "billing",
    async (d) => {
      seen.push([d.event.id, d.attempt]);
      const n = ids.indexOf(d.event.id);
      if (n === 1 && d.attempt === 1) throw new Error("card network down");
      if (n === 2) throw new Terminal("no such card");
      if (n === 3) await new Promise((r) => setTimeout(r, 2500)); // longer than the lease
    },
    { leaseSeconds: 1.5, waitSeconds: 1 },
  );
  const running = consumer.run({ signals: false });
  const deadline = Date.now() + 30_000;
  while (consumer.completed + consumer.failed < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  consumer.stop();
  await running;
  assert.deepEqual(seen, [[ids[0], 1], [ids[1], 1], [ids[1], 2], [ids[2], 1], [ids[3], 1]]);
  assert.deepEqual([consumer.completed, consumer.failed], [3, 2]);
  const dead = await new Client(s.base, s.admin).request("GET", "/v1/dead-letters");
  assert.deepEqual(dead.dead_letters.map((d) => d.event_id), [ids[2]]);
  assert.match(dead.dead_letters[0].error, /no such card/);
});

test("verifyWebhook takes the specification's example and refuses a changed body", () => {
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const headers = {
    "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
    "webhook-timestamp": "1614265330",
    "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
  };
  const body = '{"test": 2432232314}';
  assert.deepEqual(verifyWebhook(secret, headers, body, { now: 1614265330 }), { test: 2432232314 });
  assert.throws(() => verifyWebhook(secret, headers, '{"test": 2432232315}', { now: 1614265330 }), WebhookVerificationError);
  assert.throws(() => verifyWebhook(secret, headers, body, { now: 1614265330 + 3600 }), WebhookVerificationError);
  assert.ok(verifyWebhook(`whsec_AAAA ${secret}`, headers, body, { now: 1614265330 }));
});
