// Postbox's HTTP API from Node 20+, no dependencies (global fetch, node:crypto).
import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";

const RETRIED = new Set([408, 429, 500, 502, 503, 504]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class PostboxError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.name = "PostboxError";
  }
}

export class Client {
  constructor(endpoint = "http://127.0.0.1:8000", token, { retries = 5, backoffMs = 200 } = {}) {
    this.endpoint = endpoint.replace(/\/+$/, "");
    this.token = token;
    this.retries = retries;
    this.backoffMs = backoffMs;
  }

  #headers(extra = {}, body) {
    const h = { accept: "application/json", ...extra };
    if (body !== undefined) h["content-type"] = "application/json";
    if (this.token) h.authorization = `Bearer ${this.token}`;
    return h;
  }

  async request(method, path, body, headers = {}, retry = true) {
    for (let attempt = 0; ; attempt++) {
      let wait = 0;
      try {
        const res = await fetch(this.endpoint + path, {
          method,
          headers: this.#headers(headers, body),
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        const text = await res.text();
        if (res.ok) return text ? JSON.parse(text) : null;
        let failure;
        try {
          const { error } = JSON.parse(text);
          failure = new PostboxError(res.status, error.code ?? "", error.message ?? "");
        } catch {
          failure = new PostboxError(res.status, "", text);
        }
        if (!retry || !RETRIED.has(res.status) || attempt >= this.retries) throw failure;
        wait = Number(res.headers.get("retry-after") ?? 0) * 1000 || 0;
      } catch (e) {
        if (e instanceof PostboxError) throw e;
        if (!retry || attempt >= this.retries) throw e; // a failed connection
      }
      const delay = this.backoffMs * 2 ** attempt * (0.5 + Math.random() / 2);
      await sleep(Math.max(delay, wait));
    }
  }

  emit(type, payload, { writes, idempotencyKey, correlationId } = {}) {
    const headers = { "idempotency-key": idempotencyKey ?? randomUUID() };
    if (correlationId) headers["x-correlation-id"] = correlationId;
    const body = { type, payload };
    if (writes?.length) body.writes = writes;
    return this.request("POST", "/v1/events", body, headers);
  }

  events(from = 1, limit = 100) {
    return this.request("GET", `/v1/events?from=${from}&limit=${limit}`);
  }

  async *follow(from = 1, signal) {
    let last;
    for (let failures = 0; failures <= this.retries; ) {
      const headers = this.#headers({ accept: "text/event-stream" });
      if (last !== undefined) headers["last-event-id"] = String(last);
      let res;
      try {
        res = await fetch(`${this.endpoint}/v1/events/stream?from=${from}`, { headers, signal });
      } catch (e) {
        if (signal?.aborted) return;
        await sleep(this.backoffMs * 2 ** failures++);
        continue;
      }
      if (!res.ok) {
        const text = await res.text();
        if (!RETRIED.has(res.status)) throw new PostboxError(res.status, "", text);
        await sleep(this.backoffMs * 2 ** failures++);
        continue;
      }
      failures = 0;
      try {
        for await (const { event, id, data } of sse(res.body)) {
          if (event === "event") {
            last = Number(id);
            yield JSON.parse(data);
          } else if (event === "error") {
            throw new PostboxError(500, "stream_error", data);
          }
        }
      } catch (e) {
        if (e instanceof PostboxError) throw e;
        if (signal?.aborted) return;
      }
    }
  }

  async receive(subscription, { max = 1, waitSeconds = 20, leaseSeconds = 30 } = {}) {
    const answer = await this.request("POST", `/v1/subscriptions/${subscription}/receive`, {
      max,
      wait_seconds: waitSeconds,
      lease_seconds: leaseSeconds,
    });
    return answer.deliveries;
  }

  async complete(d, result) {
    const body = { handle: d.handle };
    if (result !== undefined && result !== null) body.result = result;
    await this.request("POST", `/v1/subscriptions/${d.subscription}/complete`, body, {}, false);
  }

  async fail(d, error, { terminal = false, retryAfterSeconds } = {}) {
    const body = { handle: d.handle, error: error || "failed" };
    if (terminal) body.terminal = true;
    else if (retryAfterSeconds !== undefined) body.retry_after_seconds = retryAfterSeconds;
    await this.request("POST", `/v1/subscriptions/${d.subscription}/fail`, body, {}, false);
  }

  async extend(d, leaseSeconds) {
    const answer = await this.request(
      "POST",
      `/v1/subscriptions/${d.subscription}/extend`,
      { handle: d.handle, lease_seconds: leaseSeconds },
      {},
      false,
    );
    return answer.lease_expires_at_ms;
  }
}

async function* sse(body) {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message", id = "", data = [];
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, "");
      buffer = buffer.slice(nl + 1);
      if (line === "") {
        if (data.length) yield { event, id, data: data.join("\n") };
        event = "message";
        data = [];
      } else if (!line.startsWith(":")) {
        const at = line.indexOf(":");
        const field = at < 0 ? line : line.slice(0, at);
        let value = at < 0 ? "" : line.slice(at + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "id") id = value;
        else if (field === "data") data.push(value);
      }
    }
  }
}

export class Terminal extends Error {}

export class RetryAfter extends Error {
  constructor(message, seconds) {
    super(message);
    this.seconds = seconds;
  }
}

export class PullConsumer {
  #stopped = false;

  constructor(client, subscription, handler, { leaseSeconds = 30, max = 10, waitSeconds = 5 } = {}) {
    Object.assign(this, { client, subscription, handler, leaseSeconds, max, waitSeconds });
    this.completed = 0;
    this.failed = 0;
  }

  stop() {
    this.#stopped = true;
  }

  async run({ signals = true } = {}) {
    const stop = () => this.stop();
    if (signals) {
      process.on("SIGTERM", stop);
      process.on("SIGINT", stop);
    }
    try {
      while (!this.#stopped) {
        const got = await this.client.receive(this.subscription, {
          max: this.max,
          waitSeconds: this.waitSeconds,
          leaseSeconds: this.leaseSeconds,
        });
        for (const d of got) await this.handle(d);
      }
    } finally {
      if (signals) {
        process.off("SIGTERM", stop);
        process.off("SIGINT", stop);
      }
    }
  }

  async handle(d) {
    const keeper = setInterval(() => {
      this.client.extend(d, this.leaseSeconds).catch(() => {});
    }, (this.leaseSeconds * 1000) / 3);
    let failure;
    let result;
    try {
      result = await this.handler(d);
    } catch (e) {
      failure = e;
    } finally {
      clearInterval(keeper);
    }
    try {
      if (failure === undefined) {
        await this.client.complete(d, result);
        this.completed++;
        return true;
      }
      const message = `${failure?.name ?? "Error"}: ${failure?.message ?? failure}`;
      if (failure instanceof Terminal) await this.client.fail(d, message, { terminal: true });
      else if (failure instanceof RetryAfter) await this.client.fail(d, message, { retryAfterSeconds: failure.seconds });
      else await this.client.fail(d, message);
      this.failed++;
      return false;
    } catch (e) {
      // 409: the lease was lost; the delivery comes back with the same key.
      if (e instanceof PostboxError && e.status === 409) return false;
      throw e;
    }
  }
}

export class WebhookVerificationError extends Error {}

export function verifyWebhook(secret, headers, body, { toleranceSeconds = 300, now } = {}) {
  const h = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  const id = h["webhook-id"], stamp = h["webhook-timestamp"], signatures = h["webhook-signature"];
  if (!id || !stamp || !signatures) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  const sent = Number(stamp);
  if (!Number.isInteger(sent)) throw new WebhookVerificationError("webhook-timestamp is not a number");
  if (Math.abs((now ?? Date.now() / 1000) - sent) > toleranceSeconds) {
    throw new WebhookVerificationError("webhook-timestamp is outside the tolerance");
  }
  const bytes = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  const signed = Buffer.concat([Buffer.from(`${id}.${stamp}.`), bytes]);
  const offered = signatures.split(" ").filter((s) => s.startsWith("v1,")).map((s) => Buffer.from(s.slice(3)));
  for (const one of secret.split(" ").filter(Boolean)) {
    const key = Buffer.from(one.startsWith("whsec_") ? one.slice(6) : one, "base64");
    const expected = Buffer.from(createHmac("sha256", key).update(signed).digest("base64"));
    if (offered.some((s) => s.length === expected.length && timingSafeEqual(s, expected))) {
      return JSON.parse(bytes.toString());
    }
  }
  throw new WebhookVerificationError("no signature matches the secret");
}
