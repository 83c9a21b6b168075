#!/usr/bin/env node
// The payment fan-out's four handlers in TypeScript (plain ESM), as pull
// consumers.
//
//   postbox serve --catalog examples/pull/payments.toml
//   POSTBOX_TOKEN=$(cat postbox-data/admin-token) node examples/typescript/payments.mjs
//
// Each PAYMENT_COMPLETED is delivered to four subscriptions: the order is
// mirrored, a shipment booked, the buyer notified (this handler fails every
// first attempt, so retries show) and the product's tag marked. Each effect
// goes to an external system, here the LEDGER file (JSON lines), keyed by the
// delivery's idempotency key: a delivery can come again (its consumer died
// before completing it), and the key makes the second run a no-op. What a
// handler returns is recorded in the claim. Runs until SIGTERM or SIGINT.
//
// Environment: POSTBOX_ENDPOINT (default http://127.0.0.1:8000), POSTBOX_TOKEN,
// LEDGER (default ledger.jsonl), LEASE_SECONDS (default 10), PAUSE_AFTER_EFFECT
// (seconds between an effect and its completion; the tests kill the process
// there).
import { appendFileSync, existsSync, fsyncSync, openSync, closeSync, readFileSync } from "node:fs";

import { Client, PullConsumer } from "../../clients/typescript/src/index.js";

const LEDGER = process.env.LEDGER ?? "ledger.jsonl";
const PAUSE = Number(process.env.PAUSE_AFTER_EFFECT ?? "0");
const LEASE = Number(process.env.LEASE_SECONDS ?? "10");

// Applies `effect` to the external system once per idempotency key. Node
// runs one handler step at a time, so the read and the append cannot
// interleave with another handler's.
async function once(d, effect) {
  const lines = existsSync(LEDGER) ? readFileSync(LEDGER, "utf8").split("\n").filter(Boolean) : [];
  const at = lines.findIndex((l) => JSON.parse(l).key === d.idempotency_key);
  if (at >= 0) return { ledger_line: at + 1, again: true };
  const fd = openSync(LEDGER, "a");
  appendFileSync(fd, JSON.stringify({ key: d.idempotency_key, ...effect }) + "\n");
  fsyncSync(fd);
  closeSync(fd);
  console.log(`payments.mjs: ${d.subscription} ${d.event.id} (attempt ${d.attempt})`);
  await new Promise((r) => setTimeout(r, PAUSE * 1000));
  return { ledger_line: lines.length + 1 };
}

const handlers = {
  "order-mirror": (d) => once(d, { effect: "order mirrored", order: d.event.payload.order_id, amount: d.event.payload.amount }),
  shipment: (d) => once(d, { effect: "shipment booked", order: d.event.payload.order_id }),
  notification: (d) => {
    if (d.attempt === 1) throw new Error("the mail server is busy"); // retried with backoff
    return once(d, { effect: "buyer notified", to: d.event.payload.buyer });
  },
  "tag-update": (d) => once(d, { effect: "tag marked", tag: d.event.payload.tag }),
};

const client = new Client(process.env.POSTBOX_ENDPOINT ?? "http://127.0.0.1:8000", process.env.POSTBOX_TOKEN);
const consumers = Object.entries(handlers).map(
  ([name, handler]) => new PullConsumer(client, name, handler, { leaseSeconds: LEASE, waitSeconds: 2 }),
);
const stop = () => consumers.forEach((c) => c.stop());
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
console.log("payments.mjs: ready");
await Promise.all(consumers.map((c) => c.run({ signals: false })));
