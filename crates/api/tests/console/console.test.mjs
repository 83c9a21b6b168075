// The operator console in headless Chromium (Debian's /usr/bin/chromium,
// or CHROMIUM), driven by playwright-core, against a real `postbox serve`
// (POSTBOX_BIN, default target/debug/postbox) whose two DURABLE
// subscriptions are webhooks to a receiver in this process. Screenshots of
// every page go to CONSOLE_ARTIFACTS (default target/console-screenshots).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const root = resolve(fileURLToPath(import.meta.url), "../../../../..");
const artifacts = process.env.CONSOLE_ARTIFACTS ?? join(root, "target/console-screenshots");

// A webhook receiver: /billing fails while `broken`, /email always works;
// every delivery is counted by path and event id.
async function receiver() {
  const r = { broken: true, seen: [] };
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      let id = "?";
      try {
        const v = JSON.parse(body);
        id = v.id ?? v.event?.id ?? "?";
      } catch {}
      r.seen.push({ path: req.url, id });
      res.statusCode = req.url === "/billing" && r.broken ? 500 : 200;
      res.end(res.statusCode === 200 ? "ok" : "billing is down");
    });
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  r.port = server.address().port;
  r.close = () => new Promise((ok) => server.close(ok));
  r.count = (path, id) => r.seen.filter((s) => s.path === path && s.id === id).length;
  return r;
}

async function serve(port) {
  const dir = mkdtempSync(join(tmpdir(), "postbox-console-"));
  writeFileSync(
    join(dir, "catalog.toml"),
    `
[[event_types]]
name = "PAYMENT_COMPLETED"
producers = ["shop"]
schema = { type = "object", required = ["order_id"], properties = { order_id = { type = "string" } } }
[[producers]]
name = "shop"
emits = ["PAYMENT_COMPLETED"]
[[subscriptions]]
name = "billing"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "http://127.0.0.1:${port}/billing"
retry = { max_attempts = 2, backoff_ms = 100 }
[[subscriptions]]
name = "email"
glob = "PAYMENT_*"
lane = "DURABLE"
handler = "http://127.0.0.1:${port}/email"
`,
  );
  const bin = process.env.POSTBOX_BIN ?? join(root, "target/debug/postbox");
  const child = spawn(bin, ["serve", "--catalog", join(dir, "catalog.toml"), "--listen", "127.0.0.1:0", "--data", join(dir, "data")], {
    env: { ...process.env, POSTBOX_LOG: process.env.POSTBOX_LOG ?? "error" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise((ok, fail) => {
    createInterface({ input: child.stdout }).once("line", ok);
    child.once("exit", () => fail(new Error("postbox serve exited")));
  });
  const base = line.split(" ")[3];
  const admin = readFileSync(join(dir, "data/admin-token"), "utf8").trim();
  const call = async (method, path, token, body) => {
    const res = await fetch(base + path, {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await res.json();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
    return data;
  };
  const stop = async () => {
    child.kill("SIGTERM");
    await new Promise((ok) => child.once("exit", ok));
    rmSync(dir, { recursive: true, force: true });
  };
  return { base, admin, call, stop };
}

async function until(what, check, ms = 15000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("the console: sign-in, live tail, dead letters and replay, tenant scope, every page", async (t) => {
  const r = await receiver();
  const s = await serve(r.port);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(async () => {
    await browser.close();
    await s.stop();
    await r.close();
  });
  mkdirSync(artifacts, { recursive: true });
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  // The failed calls a step makes on purpose (a refused token, another
  // tenant's event) log "Failed to load resource" with their status; any
  // other console error fails the test.
  const expectOnly = (status) => {
    const other = errors.splice(0).filter((e) => !e.includes(`status of ${status}`));
    assert.deepEqual(other, []);
  };
  const shot = (name) => page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true });

  const acme = (await s.call("POST", "/v1/tokens", s.admin, { tenant: "acme" })).token;
  const globex = (await s.call("POST", "/v1/tokens", s.admin, { tenant: "globex" })).token;
  const first = await s.call("POST", "/v1/events", acme, { type: "PAYMENT_COMPLETED", payload: { order_id: "A-1" } });
  await s.call("POST", "/v1/events", globex, { type: "PAYMENT_COMPLETED", payload: { order_id: "G-1" } });

  // `/` leads to the console; a wrong token is refused and nothing shows.
  await page.goto(s.base + "/");
  assert.equal(new URL(page.url()).pathname, "/console");
  await page.fill("#token", "not-a-token");
  await page.click("button[type=submit]");
  await page.waitForSelector("text=refused this token");
  assert.equal(await page.isHidden("#nav"), true);
  await shot("sign-in-refused");
  expectOnly(401);

  // The admin signs in from the keyboard (the token field has the focus)
  // and sees the overview.
  await page.fill("#token", "");
  await page.keyboard.type(s.admin);
  await page.keyboard.press("Enter");
  await page.waitForSelector("#verdict");
  await page.waitForSelector("#tenants >> text=acme");
  await page.waitForTimeout(4500); // a few samples for the rate plot
  await shot("overview");

  // The sections are links the keyboard reaches.
  await page.focus('nav a[href="#/catalog"]');
  await page.keyboard.press("Enter");
  await page.waitForSelector("#contract");

  // The live tail: an event emitted over the API shows within a second.
  await page.goto(`${s.base}/console#/log/acme`);
  await page.waitForSelector('#log-rows tr[data-seq="1"]');
  await page.click("#follow");
  await page.waitForSelector("#tail-status >> text=following");
  await page.waitForTimeout(300);
  const emitted = Date.now();
  await s.call("POST", "/v1/events", acme, { type: "PAYMENT_COMPLETED", payload: { order_id: "A-2" } });
  await page.waitForSelector('#log-rows tr[data-seq="2"]', { timeout: 1000 });
  const shown = Date.now() - emitted;
  assert.ok(shown < 1000, `the tailed event showed after ${shown} ms`);
  await shot("log");

  // billing is down: both of acme's events dead-letter there; email has them.
  await until("two dead letters", async () => (await s.call("GET", "/v1/dead-letters?tenant=acme", s.admin)).dead_letters.length === 2);
  await until("email delivered both", () => r.count("/email", first.event.id) === 1);
  const emailBefore = r.seen.filter((x) => x.path === "/email").length;
  await page.goto(`${s.base}/console#/event/acme/1`);
  await page.waitForSelector("#deliveries >> text=dead");
  await page.click("#verify");
  await page.waitForSelector("#verify-result >> text=intact");
  await shot("event");

  // Fix the receiver, then replay from the console: dry run, then confirm.
  r.broken = false;
  await page.goto(`${s.base}/console#/dead-letters`);
  await page.waitForSelector('#dead-letters tr[data-subscription="billing"]');
  await shot("dead-letters");
  // acme's two and globex's one.
  assert.equal(await page.locator("#dead-letters tbody tr").count(), 3);
  await page.check('#dead-letters thead input[type="checkbox"]');
  await page.click("#dry-run");
  await page.waitForSelector("#replay-plan >> text=3 dead");
  await shot("replay-dry-run");
  await page.click("#confirm-replay");
  await page.waitForSelector("text=Replayed:");
  await until("the dead letters completed", async () => (await s.call("GET", "/v1/dead-letters", s.admin)).dead_letters.length === 0);
  await page.goto(`${s.base}/console#/event/acme/1`);
  await page.waitForSelector("#deliveries");
  const statuses = await page.$$eval("#deliveries tbody tr", (rows) => rows.map((row) => [...row.cells].slice(0, 2).map((c) => c.textContent)));
  assert.deepEqual(statuses.sort(), [["billing", "completed"], ["email", "completed"]]);
  assert.equal(r.count("/billing", first.event.id), 3, "billing ran twice failing and once after the replay");
  assert.equal(r.seen.filter((x) => x.path === "/email").length, emailBefore, "email, which had completed, did not run again");

  for (const name of ["subscriptions", "catalog"]) {
    await page.goto(`${s.base}/console#/${name}`);
    await page.waitForSelector(name === "subscriptions" ? "#subscriptions >> text=billing" : "#contract");
    if (name === "subscriptions") {
      // billing: 3 completed after the replay, 3 retried before (2 attempts each, 1 retry each).
      const row = await page.$$eval("#subscriptions tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
      const billing = row.find((r) => r[0] === "billing");
      assert.deepEqual([billing[6], billing[7], billing[8]], ["3", "3", "0"], JSON.stringify(row));
    }
    await shot(name);
  }
  // The events pipe, and a record it does not take.
  await page.goto(`${s.base}/console#/pipes`);
  await page.waitForSelector("#pipes >> text=postbox_events");
  await page.fill("#record", JSON.stringify({ eventName: "INSERT", dynamodb: { SequenceNumber: "1", NewImage: { pk: { S: "not-an-event" } } } }));
  await page.click("#test-pipe");
  await page.waitForSelector("#pipe-test-result >> text=filtered");
  await shot("pipes");
  await page.goto(`${s.base}/console#/overview`);
  await page.waitForSelector("#verdict >> text=All good");
  expectOnly("none");

  // A tenant token sees only its tenant.
  await page.click("#sign-out");
  await page.fill("#token", globex);
  await page.click("button[type=submit]");
  await page.waitForSelector("#tenants >> text=globex");
  assert.equal(await page.locator("#tenants >> text=acme").count(), 0);
  await page.goto(`${s.base}/console#/log`);
  await page.waitForSelector('#log-rows tr[data-seq="1"]');
  assert.equal(await page.locator("#log-rows tr").count(), 1);
  await page.goto(`${s.base}/console#/event/acme/1`);
  await page.waitForSelector("text=not_found");
  await shot("tenant-scope");
  expectOnly(404);
});
