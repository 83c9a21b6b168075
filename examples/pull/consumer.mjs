#!/usr/bin/env node
// A pull consumer of the `billing` subscription on the TypeScript client
// (clients/typescript), the same as consumer.py:
//
//   POSTBOX_TOKEN=$(cat postbox-data/admin-token) node examples/pull/consumer.mjs
//
// Each payment's invoice goes to INVOICES (a JSON lines file standing in for
// an external system) under the delivery's idempotency key, once: a
// delivery that comes again (its consumer died before completing it) finds
// its invoice made. PAUSE_AFTER_EFFECT (seconds) waits between the effect
// and the completion; the tests kill the consumer there.
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { Client, PullConsumer } from "../../clients/typescript/src/index.js";

const invoices = process.env.INVOICES ?? "invoices.jsonl";
const pause = Number(process.env.PAUSE_AFTER_EFFECT ?? 0) * 1000;
const client = new Client(process.env.POSTBOX_ENDPOINT ?? "http://127.0.0.1:8000", process.env.POSTBOX_TOKEN);

const consumer = new PullConsumer(client, "billing", async (d) => {
  const made = existsSync(invoices) && readFileSync(invoices, "utf8").split("\n").some((l) => l && JSON.parse(l).key === d.idempotency_key);
  if (!made) {
    const { order_id, amount } = d.event.payload;
    appendFileSync(invoices, JSON.stringify({ key: d.idempotency_key, order: order_id, amount }) + "\n");
  }
  console.log(`consumer: invoiced ${d.event.id} (attempt ${d.attempt})`);
  await new Promise((r) => setTimeout(r, pause));
}, { leaseSeconds: Number(process.env.LEASE_SECONDS ?? 30), waitSeconds: 2 });

console.log("consumer: ready");
await consumer.run(); // until SIGTERM or SIGINT
