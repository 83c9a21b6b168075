// Compiled (not run) by scripts/test with tsc --noEmit: the declarations
// describe the API a TypeScript user writes against.
import { Client, PullConsumer, Terminal, verifyWebhook, type Delivery } from "../src/index.js";

const client = new Client("http://127.0.0.1:8000", "token", { retries: 3 });
const emitted = await client.emit("PAYMENT_COMPLETED", { order_id: "A-1" }, { idempotencyKey: "pay-A-1" });
const seq: number = emitted.event.seq;
const consumer = new PullConsumer(client, "billing", async (d: Delivery) => {
  if (d.attempt > 3) throw new Terminal(`gave up on ${d.idempotency_key}`);
});
await consumer.run();
const body: unknown = verifyWebhook("whsec_x", { "webhook-id": "1" }, "{}");
console.log(seq, body);
