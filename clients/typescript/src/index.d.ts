/** An error answer of the API: its status, code and message. */
export class PostboxError extends Error {
  readonly status: number;
  readonly code: string;
}

/** One event of a tenant's log, as the API returns it. */
export interface Emitted {
  event: {
    id: string;
    type: string;
    tenant: string;
    seq: number;
    correlation_id: string;
    causation_id: string | null;
    actor: string;
    occurred_at: string;
    payload: Record<string, unknown>;
  };
  hash: string;
}

/** One delivery of a pull subscription. */
export interface Delivery {
  handle: string;
  subscription: string;
  event: Emitted["event"];
  attempt: number;
  idempotency_key: string;
  lease_expires_at_ms: number;
  /** W3C Trace Context of this delivery, when the event carries one. */
  traceparent?: string | null;
}

export interface ClientOptions {
  /** Retries of a request that changed nothing (408, 429, 5xx, a failed connection). Default 5. */
  retries?: number;
  /** First backoff, milliseconds; doubled each retry, with jitter. Default 200. */
  backoffMs?: number;
}

export interface EmitOptions {
  writes?: Record<string, unknown>[];
  /** Drawn when absent, so the client's own retries never emit twice. */
  idempotencyKey?: string;
  correlationId?: string;
}

export class Client {
  constructor(endpoint: string, token?: string, options?: ClientOptions);
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>, retry?: boolean): Promise<any>;
  emit(type: string, payload: Record<string, unknown>, options?: EmitOptions): Promise<Emitted>;
  events(from?: number, limit?: number): Promise<{ events: Emitted[]; next: number }>;
  /** The log from `from`, then each event as it commits; resumes with Last-Event-ID after a dropped connection. */
  follow(from?: number, signal?: AbortSignal): AsyncGenerator<Emitted>;
  receive(subscription: string, options?: { max?: number; waitSeconds?: number; leaseSeconds?: number }): Promise<Delivery[]>;
  /** Completes a delivery, recording `result` (any JSON value, at most 4 KB) in its claim. */
  complete(delivery: Delivery, result?: unknown): Promise<void>;
  fail(delivery: Delivery, error: string, options?: { terminal?: boolean; retryAfterSeconds?: number }): Promise<void>;
  extend(delivery: Delivery, leaseSeconds: number): Promise<number>;
}

/** Thrown by a handler: dead-lettered at once. */
export class Terminal extends Error {}
/** Thrown by a handler: retried no sooner than `seconds`. */
export class RetryAfter extends Error {
  constructor(message: string, seconds: number);
  readonly seconds: number;
}

export interface PullConsumerOptions {
  leaseSeconds?: number;
  max?: number;
  waitSeconds?: number;
}

/** Runs `handler` on each delivery of `subscription`, extending the lease while it runs. */
export class PullConsumer {
  constructor(client: Client, subscription: string, handler: (d: Delivery) => unknown | Promise<unknown>, options?: PullConsumerOptions);
  completed: number;
  failed: number;
  /** Until stop(), SIGTERM or SIGINT; settles the deliveries in hand first. */
  run(options?: { signals?: boolean }): Promise<void>;
  stop(): void;
  handle(delivery: Delivery): Promise<boolean>;
}

export class WebhookVerificationError extends Error {}

/** The delivery's JSON if its Standard Webhooks signature and age check out. */
export function verifyWebhook(
  secret: string,
  headers: Record<string, string>,
  body: string | Uint8Array,
  options?: { toleranceSeconds?: number; now?: number },
): unknown;
