// The Postbox operator console: one page over the HTTP API. It keeps the
// token in this tab's sessionStorage and sends it in the Authorization
// header of its own requests (no cookies, so no cross-site request
// forgery); a tenant token sees only its tenant, as in the API. Every text
// from the server goes into the page as text, never as markup.

const TOKEN_KEY = "postbox.console.token";
const state = { token: sessionStorage.getItem(TOKEN_KEY), admin: false, tenant: null, stop: [] };

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body, signal) {
  const headers = { Authorization: `Bearer ${state.token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
  const text = await res.text();
  let data = text;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Prometheus text and other non-JSON answers stay text.
  }
  if (!res.ok) {
    throw new ApiError(res.status, data?.error?.code ?? String(res.status), data?.error?.message ?? text);
  }
  return data;
}

// h("td", {class: "x"}, "text", child...): an element with text children.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows, attrs = {}) {
  return h("table", attrs, h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))), h("tbody", {}, rows));
}

function card(label, value, cls) {
  return h("div", { class: "card" }, h("div", { class: `n ${cls ?? ""}` }, value), h("div", { class: "l" }, label));
}

function notice(text, error = false) {
  return h("div", { class: error ? "notice error" : "notice", role: error ? "alert" : "status" }, text);
}

const main = () => document.getElementById("main");

function show(...nodes) {
  main().replaceChildren(...nodes);
}

// Runs `fn` now and every `ms` while the current page is shown.
function every(ms, fn) {
  let live = true;
  const tick = async () => {
    if (!live) return;
    try {
      await fn();
    } catch (e) {
      if (live) reportError(e);
    }
    if (live) timer = setTimeout(tick, ms);
  };
  let timer = setTimeout(tick, 0);
  state.stop.push(() => {
    live = false;
    clearTimeout(timer);
  });
}

function reportError(e) {
  if (e?.name === "AbortError") return;
  if (e instanceof ApiError && e.status === 401) {
    signOut(`The server refused the token: ${e.message}`);
    return;
  }
  const box = document.getElementById("page-error");
  if (box) box.replaceChildren(notice(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e), true));
}

const time = (iso) => (iso ? iso.replace("T", " ").replace("Z", " UTC") : "-");
const tenantQuery = (tenant) => (tenant ? `tenant=${encodeURIComponent(tenant)}` : "");
const join = (...parts) => parts.filter(Boolean).join("&");

// ---- metrics (admin tokens) ------------------------------------------------

function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

const sum = (samples, name, pred = () => true) =>
  samples.filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);

// Cumulative bucket counts of histogram `name` (summed over its series).
function buckets(samples, name, pred = () => true) {
  const by = new Map();
  for (const s of samples) {
    if (s.name !== `${name}_bucket` || !pred(s.labels)) continue;
    const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
    by.set(le, (by.get(le) ?? 0) + s.value);
  }
  return [...by.entries()].sort((a, b) => a[0] - b[0]);
}

// The q-quantile's bucket bound of the observations between two snapshots.
function quantile(before, after, q) {
  const prev = new Map(before);
  const delta = after.map(([le, n]) => [le, n - (prev.get(le) ?? 0)]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (total <= 0) return null;
  for (const [le, n] of delta) if (n >= q * total) return le;
  return null;
}

const ms = (seconds) => (seconds === null ? "-" : seconds === Infinity ? "> max" : `${+(seconds * 1000).toPrecision(3)} ms`);

function plot(points, label) {
  const w = 600;
  const hgt = 90;
  const max = Math.max(1, ...points.map((p) => p[1]));
  const t0 = points.length ? points[0][0] : 0;
  const span = Math.max(1, points.length ? points[points.length - 1][0] - t0 : 1);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "plot");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}, peak ${max.toFixed(1)}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.map(([t, v]) => `${(((t - t0) / span) * w).toFixed(1)},${(hgt - 4 - (v / max) * (hgt - 8)).toFixed(1)}`).join(" "));
  svg.append(line);
  return h("div", {}, h("div", { class: "muted" }, `${label} (last ${Math.round(span / 1000)} s, peak ${max.toFixed(1)})`), svg);
}

// ---- pages -----------------------------------------------------------------

function signIn(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  const input = h("input", { id: "token", type: "password", autocomplete: "off", required: true, "aria-describedby": "token-help" });
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: async (e) => {
        e.preventDefault();
        state.token = input.value.trim();
        try {
          await whoAmI();
          sessionStorage.setItem(TOKEN_KEY, state.token);
          location.hash = "#/overview";
          route();
        } catch (err) {
          state.token = null;
          const text = err instanceof ApiError && err.status === 401 ? `The server refused this token: ${err.message}` : String(err.message ?? err);
          form.querySelector(".result").replaceChildren(notice(text, true));
        }
      },
    },
    h("h1", {}, "Sign in to the Postbox console"),
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "muted" }, "An admin token (data directory's admin-token) or a tenant token (postbox token create --tenant T). It stays in this tab only."),
    h("button", { class: "primary", type: "submit" }, "Sign in"),
    h("div", { class: "result" }, message ? notice(message, true) : null),
  );
  show(form);
  input.focus();
}

async function whoAmI() {
  const rec = await api("GET", "/v1/reconciliation");
  state.admin = "queue_depth" in rec;
  state.tenant = state.admin ? null : (rec.tenants[0]?.tenant ?? null);
  document.getElementById("who").textContent = state.admin ? "admin token" : `tenant token${state.tenant ? `: ${state.tenant}` : ""}`;
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  return rec;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  stopPage();
  history.replaceState(null, "", "#/");
  signIn(message);
}

async function overview() {
  const verdict = h("div");
  const cards = h("div", { class: "cards" });
  const plots = h("div");
  const tenants = h("div");
  show(h("h1", {}, "Overview"), h("div", { id: "page-error" }), verdict, cards, plots, h("h2", {}, "Tenants"), tenants);
  const history = [];
  every(2000, async () => {
    const rec = await api("GET", "/v1/reconciliation");
    verdict.replaceChildren(
      h("p", {}, h("span", { class: `verdict ${rec.verdict === "ok" ? "ok" : "bad"}`, id: "verdict" }, rec.verdict === "ok" ? "All good" : "Needs attention")),
      rec.reasons.length ? h("ul", {}, rec.reasons.map((r) => h("li", {}, r))) : null,
    );
    const intact = rec.tenants.filter((t) => t.chain_intact).length;
    const dead = rec.tenants.reduce((a, t) => a + t.dead_letters, 0);
    const list = [card("tenants", rec.tenants.length), card("chains verified intact", `${intact} / ${rec.tenants.length}`, intact === rec.tenants.length ? "ok" : "bad"), card("dead letters", dead, dead ? "bad" : "ok")];
    if (state.admin) {
      list.push(card("events queue depth", rec.queue_depth), card("in flight", rec.queue_in_flight), card("events DLQ depth", rec.dlq_depth, rec.dlq_depth ? "bad" : ""), card("poison messages", rec.poison, rec.poison ? "bad" : ""));
      const samples = parseMetrics(await api("GET", "/v1/metrics"));
      const now = Date.now();
      history.push({ t: now, emitted: sum(samples, "postbox_emit_events_total"), emit: buckets(samples, "postbox_http_emit_seconds"), e2e: buckets(samples, "postbox_emit_to_completion_seconds") });
      while (history.length > 150) history.shift();
      const rates = history.slice(1).map((s, i) => [s.t, ((s.emitted - history[i].emitted) * 1000) / Math.max(1, s.t - history[i].t)]);
      const first = history[Math.max(0, history.length - 16)];
      const last = history[history.length - 1];
      const lag = samples.filter((s) => s.name === "postbox_relay_records_behind");
      list.push(
        card("events emitted", sum(samples, "postbox_emit_events_total")),
        card("events/s now", rates.length ? rates[rates.length - 1][1].toFixed(1) : "-"),
        card("emit p50 / p99 (30 s)", `${ms(quantile(first.emit, last.emit, 0.5))} / ${ms(quantile(first.emit, last.emit, 0.99))}`),
        card("emit to completion p99 (30 s)", ms(quantile(first.e2e, last.e2e, 0.99))),
        ...lag.map((s) => card(`relay lag, pipe ${s.labels.pipe}`, `${s.value} records`, s.value > 1000 ? "warn" : "")),
      );
      plots.replaceChildren(plot(rates, "events emitted per second"));
    }
    cards.replaceChildren(...list);
    tenants.replaceChildren(
      rec.tenants.length
        ? table(
            ["tenant", "head seq", "chain", "dead letters"],
            rec.tenants.map((t) =>
              h(
                "tr",
                {},
                h("td", {}, h("a", { href: `#/log/${encodeURIComponent(t.tenant)}` }, t.tenant)),
                h("td", {}, t.head_seq),
                h("td", { class: t.chain_intact ? "ok" : "bad" }, t.chain_intact ? "intact" : `broken: ${t.broken ?? ""}`),
                h("td", { class: t.dead_letters ? "bad" : "" }, t.dead_letters ? h("a", { href: `#/dead-letters/${encodeURIComponent(t.tenant)}` }, t.dead_letters) : 0),
              ),
            ),
            { id: "tenants" },
          )
        : h("p", { class: "muted" }, "No tenant has emitted an event yet."),
    );
  });
}

function eventRow(entry, tenant, fresh) {
  const e = entry.event;
  return h(
    "tr",
    { class: fresh ? "row-new" : null, dataset: { seq: e.seq } },
    h("td", {}, h("a", { href: `#/event/${encodeURIComponent(tenant ?? e.tenant)}/${e.seq}` }, e.seq)),
    h("td", {}, e.type),
    h("td", {}, time(e.occurred_at)),
    h("td", {}, h("code", {}, e.id)),
    h("td", {}, e.actor),
  );
}

async function tenantsList() {
  return (await api("GET", "/v1/reconciliation")).tenants;
}

async function logPage(tenant) {
  const tenants = await tenantsList();
  if (state.admin && !tenant) tenant = tenants[0]?.tenant;
  if (!tenant && state.admin) {
    show(h("h1", {}, "Log"), h("p", { class: "muted" }, "No tenant has emitted an event yet."));
    return;
  }
  const head = tenants.find((t) => !state.admin || t.tenant === tenant)?.head_seq ?? 0;
  let from = Math.max(1, head - 49);
  const body = h("tbody", { id: "log-rows" });
  const status = h("span", { class: "muted", id: "tail-status" });
  let follow = null;
  let next = head + 1;
  const load = async () => {
    const page = await api("GET", `/v1/events?${join(`from=${from}`, "limit=50", tenantQuery(tenant))}`);
    body.replaceChildren(...page.events.map((e) => eventRow(e, tenant)));
    next = Math.max(next, page.next);
    range.textContent = page.events.length ? `seq ${from} to ${page.next - 1} of ${Math.max(head, page.next - 1)}` : "no events";
  };
  const range = h("span", { class: "muted" });
  const tail = h("button", {
    type: "button",
    id: "follow",
    "aria-pressed": "false",
    onclick: () => {
      if (follow) {
        follow.abort();
        follow = null;
        tail.textContent = "Follow live";
        tail.setAttribute("aria-pressed", "false");
        status.textContent = "";
        return;
      }
      follow = new AbortController();
      state.stop.push(() => follow?.abort());
      tail.textContent = "Stop following";
      tail.setAttribute("aria-pressed", "true");
      status.textContent = "following new events…";
      followLog(tenant, next, follow.signal, (entry) => {
        body.append(eventRow(entry, tenant, true));
        next = entry.event.seq + 1;
      }).catch(reportError);
    },
  }, "Follow live");
  const picker = state.admin
    ? h(
        "label",
        {},
        "Tenant ",
        h(
          "select",
          { id: "tenant", onchange: (e) => (location.hash = `#/log/${encodeURIComponent(e.target.value)}`) },
          tenants.map((t) => h("option", { value: t.tenant, selected: t.tenant === tenant }, t.tenant)),
        ),
      )
    : null;
  show(
    h("h1", {}, `Log${tenant ? ` of ${tenant}` : ""}`),
    h("div", { id: "page-error" }),
    h(
      "div",
      { class: "inline" },
      picker,
      " ",
      h("button", { type: "button", onclick: () => { from = Math.max(1, from - 50); load().catch(reportError); } }, "Earlier"),
      " ",
      h("button", { type: "button", onclick: () => { from = Math.max(1, Math.min(from + 50, next - 1)); load().catch(reportError); } }, "Later"),
      " ",
      tail,
      " ",
      range,
      " ",
      status,
    ),
    h("table", {}, h("thead", {}, h("tr", {}, ["seq", "type", "occurred at", "id", "actor"].map((x) => h("th", { scope: "col" }, x)))), body),
  );
  await load();
}

// Reads the log's server-sent events from `from` until `signal` aborts.
async function followLog(tenant, from, signal, onEvent) {
  const res = await fetch(`/v1/events/stream?${join(`from=${from}`, tenantQuery(tenant))}`, { headers: { Authorization: `Bearer ${state.token}` }, signal });
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    throw new ApiError(res.status, data?.error?.code, data?.error?.message ?? res.statusText);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let kind = "message";
      let data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trimStart();
      }
      if (kind === "event" && data) onEvent(JSON.parse(data));
      else if (kind === "error") throw new ApiError(500, "stream", data);
    }
  }
}

async function eventPage(tenant, seq) {
  const q = tenantQuery(tenant);
  const entry = await api("GET", `/v1/events/${seq}${q ? `?${q}` : ""}`);
  const e = entry.event;
  let previous = "(genesis)";
  if (e.seq > 1) {
    const page = await api("GET", `/v1/events?${join(`from=${e.seq - 1}`, "limit=1", q)}`);
    previous = page.events[0]?.hash ?? "-";
  }
  const verdict = h("span", { id: "verify-result" });
  show(
    h("h1", {}, `Event ${e.seq} of ${e.tenant}`),
    h("div", { id: "page-error" }),
    h("p", {}, h("a", { href: `#/log/${encodeURIComponent(e.tenant)}` }, "← the log")),
    table(
      ["field", "value"],
      [
        ["id", e.id],
        ["type", e.type],
        ["tenant", e.tenant],
        ["seq", e.seq],
        ["occurred at", time(e.occurred_at)],
        ["actor", e.actor],
        ["correlation id", e.correlation_id],
        ["causation id", e.causation_id ?? "-"],
        ["hash", entry.hash],
        ["previous hash", previous],
      ].map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, h("code", {}, v)))),
    ),
    h("h2", {}, "Payload"),
    h("pre", {}, JSON.stringify(e.payload, null, 2)),
    h("h2", {}, "Deliveries"),
    entry.deliveries.length
      ? table(
          ["subscription", "status", "attempts", "last error", "result", "updated"],
          entry.deliveries.map((d) =>
            h(
              "tr",
              {},
              h("td", {}, d.subscription),
              h("td", { class: d.status === "completed" ? "ok" : d.status === "dead" ? "bad" : "" }, d.status),
              h("td", {}, d.attempts),
              h("td", {}, d.last_error ?? "-"),
              h("td", {}, d.result === undefined || d.result === null ? "-" : h("code", {}, JSON.stringify(d.result))),
              h("td", {}, time(d.updated_at)),
            ),
          ),
          { id: "deliveries" },
        )
      : h("p", { class: "muted" }, "No DURABLE subscription matches this event's type."),
    h("h2", {}, "Chain"),
    h(
      "p",
      {},
      h(
        "button",
        {
          type: "button",
          id: "verify",
          onclick: async () => {
            verdict.textContent = " verifying…";
            try {
              const rec = await api("GET", "/v1/reconciliation");
              const line = rec.tenants.find((t) => t.tenant === e.tenant);
              verdict.className = line?.chain_intact ? "ok" : "bad";
              verdict.textContent = line?.chain_intact ? ` the chain of ${e.tenant} is intact up to seq ${line.head_seq}` : ` the chain of ${e.tenant} is broken: ${line?.broken ?? "not found"}`;
            } catch (err) {
              reportError(err);
            }
          },
        },
        "Verify this tenant's chain",
      ),
      verdict,
    ),
  );
}

async function deadLettersPage(tenant) {
  const catalog = await api("GET", "/v1/catalog");
  const form = h(
    "form",
    { class: "inline", onsubmit: (ev) => { ev.preventDefault(); load().catch(reportError); } },
    state.admin ? h("label", {}, "Tenant", h("input", { name: "tenant", value: tenant ?? "", placeholder: "all" })) : null,
    h("label", {}, "Subscription", h("select", { name: "subscription" }, h("option", { value: "" }, "all"), catalog.subscriptions.filter((s) => s.lane === "DURABLE").map((s) => h("option", { value: s.name }, s.name)))),
    h("label", {}, "Failed after", h("input", { name: "from", type: "datetime-local" })),
    h("label", {}, "Failed before", h("input", { name: "to", type: "datetime-local" })),
    h("button", { type: "submit" }, "Filter"),
  );
  const list = h("div", { id: "dead-letters" });
  const actions = h("div", { id: "replay-panel" });
  show(
    h("h1", {}, "Dead letters"),
    h("div", { id: "page-error" }),
    form,
    list,
    actions,
    state.admin
      ? h(
          "div",
          {},
          h("h2", {}, "The events queue's dead-letter queue"),
          h("p", { class: "muted" }, "Messages the events queue gave up on (received too often without being settled) wait in its dead-letter queue."),
          h("button", { type: "button", id: "redrive", onclick: () => redrive(actions) }, "Redrive…"),
        )
      : null,
  );
  let rows = [];
  const selection = () => {
    const f = new FormData(form);
    const ms = (v) => (v ? new Date(v).getTime() : undefined);
    return { tenant: state.admin ? f.get("tenant") || undefined : undefined, subscription: f.get("subscription") || undefined, from_ms: ms(f.get("from")), to_ms: ms(f.get("to")) };
  };
  async function load() {
    const s = selection();
    const q = Object.entries(s).filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join("&");
    rows = (await api("GET", `/v1/dead-letters${q ? `?${q}` : ""}`)).dead_letters;
    actions.replaceChildren();
    if (!rows.length) {
      list.replaceChildren(h("p", { class: "muted", id: "no-dead-letters" }, "No dead letters match."));
      return;
    }
    const all = h("input", { type: "checkbox", "aria-label": "select all", onchange: (e) => list.querySelectorAll("tbody input").forEach((c) => (c.checked = e.target.checked)) });
    list.replaceChildren(
      table(
        [all, "tenant", "seq", "type", "subscription", "attempts", "error", "last failure"],
        rows.map((d, i) =>
          h(
            "tr",
            { dataset: { event: d.event_id, subscription: d.subscription } },
            h("td", {}, h("input", { type: "checkbox", "aria-label": `select ${d.tenant} ${d.seq} ${d.subscription}`, dataset: { i } })),
            h("td", {}, d.tenant),
            h("td", {}, h("a", { href: `#/event/${encodeURIComponent(d.tenant)}/${d.seq}` }, d.seq)),
            h("td", {}, d.event_type),
            h("td", {}, d.subscription),
            h("td", {}, d.attempts),
            h("td", {}, d.error),
            h("td", {}, time(d.last_failure_at)),
          ),
        ),
      ),
      h("button", { type: "button", id: "dry-run", class: "primary", onclick: () => dryRun() }, "Replay selected…"),
    );
  }
  async function dryRun() {
    const picked = [...list.querySelectorAll("tbody input:checked")].map((c) => rows[Number(c.dataset.i)]);
    if (!picked.length) {
      actions.replaceChildren(notice("Select the dead letters to replay first.", true));
      return;
    }
    const body = { event_ids: [...new Set(picked.map((d) => d.event_id))], subscription: selection().subscription, dry_run: true };
    const plan = await api("POST", "/v1/dead-letters/replay", body);
    actions.replaceChildren(
      h("h2", {}, "Replay: what it will do"),
      h(
        "p",
        { id: "replay-plan" },
        `${plan.selected.length} dead (event, subscription) pair(s) will run again: their claims are reset and their events sent to the events queue. `,
        "Subscriptions that already completed these events do not run again.",
      ),
      h("ul", {}, plan.selected.map((d) => h("li", {}, `${d.tenant} seq ${d.seq} (${d.event_type}) → ${d.subscription}, ${d.attempts} attempts: ${d.error}`))),
      h("button", {
        type: "button",
        id: "confirm-replay",
        class: "danger",
        onclick: async (e) => {
          e.target.disabled = true;
          const done = await api("POST", "/v1/dead-letters/replay", { ...body, dry_run: false });
          actions.replaceChildren(notice(`Replayed: ${done.reset} claim(s) reset, ${done.enqueued} event(s) sent again${done.skipped ? `, ${done.skipped} skipped` : ""}. Watch them complete in the events' deliveries.`));
          setTimeout(() => load().then(() => actions.prepend(notice(`Replayed: ${done.reset} claim(s) reset, ${done.enqueued} event(s) sent again.`))).catch(reportError), 1500);
        },
      }, `Replay ${plan.selected.length} now`),
      " ",
      h("button", { type: "button", onclick: () => actions.replaceChildren() }, "Cancel"),
    );
    document.getElementById("confirm-replay").focus();
  }
  await load();
}

function redrive(actions) {
  actions.replaceChildren(
    h("h2", {}, "Redrive: what it will do"),
    h("p", {}, "Every message in the events queue's dead-letter queue moves back to the events queue; the claims those messages need are cleared first, so their events are delivered again to the subscriptions that have not completed them."),
    h("button", {
      type: "button",
      id: "confirm-redrive",
      class: "danger",
      onclick: async (e) => {
        e.target.disabled = true;
        try {
          const r = await api("POST", "/v1/queues/redrive");
          actions.replaceChildren(notice(`Moved ${r.moved} message(s) from ${r.dead_letter_queue}; ${r.reset} claim(s) reset, ${r.poison} poison.`));
        } catch (err) {
          reportError(err);
        }
      },
    }, "Redrive now"),
    " ",
    h("button", { type: "button", onclick: () => actions.replaceChildren() }, "Cancel"),
  );
}

async function subscriptionsPage() {
  const [catalog, dead] = await Promise.all([api("GET", "/v1/catalog"), api("GET", "/v1/dead-letters")]);
  const samples = state.admin ? parseMetrics(await api("GET", "/v1/metrics")) : [];
  const of = (name) => (l) => l.subscription === name;
  show(
    h("h1", {}, "Subscriptions"),
    h("div", { id: "page-error" }),
    table(
      ["name", "lane", "glob", "matches", "handler", "retry", "completed", "retried", "running", "handler p50 / p99", "dead letters"],
      catalog.subscriptions.map((s) => {
        const b = buckets(samples, "postbox_handler_seconds", of(s.name));
        const runs = sum(samples, "postbox_handler_seconds_count", of(s.name));
        const outcome = (o) => (state.admin ? sum(samples, "postbox_deliveries_total", (l) => l.subscription === s.name && l.outcome === o) : "-");
        const deadCount = dead.dead_letters.filter((d) => d.subscription === s.name).length;
        return h(
          "tr",
          {},
          h("td", {}, s.name),
          h("td", {}, s.lane),
          h("td", {}, h("code", {}, s.glob)),
          h("td", {}, (s.matches ?? []).join(", ") || "-"),
          h("td", {}, h("code", {}, s.handler)),
          h("td", {}, s.retry ? `${s.retry.max_attempts} attempts, ${s.retry.backoff_ms} ms backoff` : "-"),
          h("td", {}, outcome("completed")),
          h("td", {}, outcome("retried")),
          h("td", {}, state.admin ? sum(samples, "postbox_handlers_running", of(s.name)) : "-"),
          h("td", {}, state.admin && runs ? `${ms(quantile([], b, 0.5))} / ${ms(quantile([], b, 0.99))}` : "-"),
          h("td", { class: deadCount ? "bad" : "" }, deadCount ? h("a", { href: "#/dead-letters" }, deadCount) : 0),
        );
      }),
      { id: "subscriptions" },
    ),
  );
}

async function pipesPage() {
  if (!state.admin) {
    show(h("h1", {}, "Pipes"), h("p", { class: "muted" }, "The relay's pipes are shown to admin tokens."));
    return;
  }
  const [{ pipes }, samples] = await Promise.all([api("GET", "/v1/pipes"), api("GET", "/v1/metrics").then(parseMetrics)]);
  const lagOf = (name, metric) => samples.find((s) => s.name === metric && s.labels.pipe === name)?.value;
  const target = (t) => (t.kind === "queue" ? `queue ${t.queue.queue}${t.queue.group_id ? `, group ${t.queue.group_id}` : ""}${t.queue.deduplication_id ? `, dedup ${t.queue.deduplication_id}` : ""}` : `bus ${t.bus} (${t.detail_type}, ${t.source})`);
  const select = h("select", { id: "pipe", name: "pipe" }, pipes.map((p) => h("option", { value: p.name }, p.name)));
  const record = h("textarea", { id: "record", rows: 8, cols: 90, spellcheck: "false", "aria-label": "stream record (JSON)" }, '{"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "Keys": {}, "NewImage": {}}}');
  const result = h("div", { id: "pipe-test-result", role: "status" });
  show(
    h("h1", {}, "Pipes"),
    h("div", { id: "page-error" }),
    table(
      ["name", "source table", "filters", "template", "target", "settings", "lag"],
      pipes.map((p) =>
        h(
          "tr",
          {},
          h("td", {}, p.name, p.warnings?.length ? h("div", { class: "warn" }, p.warnings.join(" ")) : null),
          h("td", {}, p.table, h("div", { class: "muted" }, p.start)),
          h("td", {}, p.filters.length ? p.filters.map((f) => h("div", {}, h("code", {}, f))) : "(every record)"),
          h("td", {}, h("code", {}, p.template || "(the record)")),
          h("td", {}, target(p.target)),
          h("td", {}, `batch ${p.batch_size}, ${p.max_retries} retries, records up to ${p.max_record_age_seconds} s old, ${p.bisect_on_failure ? "bisects" : "no bisection"}, DLQ ${p.dead_letter_queue}`),
          h("td", {}, `${lagOf(p.name, "postbox_relay_records_behind") ?? "-"} records, oldest ${lagOf(p.name, "postbox_relay_oldest_unrelayed_age_seconds") ?? "-"} s`),
        ),
      ),
      { id: "pipes" },
    ),
    h("h2", {}, "Test a pipe on a stream record"),
    h("p", { class: "muted" }, "Runs the pipe's filters and input template over the record, as postbox pipe test does; nothing is sent."),
    h(
      "form",
      {
        onsubmit: async (e) => {
          e.preventDefault();
          let body;
          try {
            body = JSON.parse(record.value);
          } catch (err) {
            result.replaceChildren(notice(`The record is not JSON: ${err.message}`, true));
            return;
          }
          try {
            const out = await api("POST", `/v1/pipes/${encodeURIComponent(select.value)}/test`, body);
            result.replaceChildren(h("p", { class: out.outcome === "dead_letter" ? "bad" : "ok" }, out.outcome.replace("_", " ")), h("pre", {}, out.report));
          } catch (err) {
            result.replaceChildren(notice(`${err.code}: ${err.message}`, true));
          }
        },
      },
      h("p", {}, h("label", {}, "Pipe ", select)),
      h("p", {}, record),
      h("button", { type: "submit", id: "test-pipe" }, "Test"),
    ),
    result,
  );
}

async function catalogPage() {
  const c = await api("GET", "/v1/catalog");
  show(
    h("h1", {}, "Catalog"),
    h("div", { id: "page-error" }),
    h("p", { class: c.ok ? "ok" : "bad", id: "contract" }, c.ok ? "The contract holds: every event type has a producer and every subscription matches something." : `The contract is broken (${c.violations.length} violation(s)).`),
    c.violations.length ? h("ul", {}, c.violations.map((v) => h("li", {}, typeof v === "string" ? v : v.message ?? JSON.stringify(v)))) : null,
    h("h2", {}, "Event types"),
    table(
      ["name", "kind", "producers", "subscribers", "schema"],
      c.event_types.map((t) =>
        h(
          "tr",
          {},
          h("td", {}, t.name),
          h("td", {}, t.kind),
          h("td", {}, t.producers.join(", ")),
          h("td", {}, t.subscribers.map((s) => `${s.name} (${s.lane})`).join(", ") || "-"),
          h("td", {}, t.schema ? h("details", {}, h("summary", {}, "schema"), h("pre", {}, JSON.stringify(t.schema, null, 2))) : "-"),
        ),
      ),
    ),
    h("h2", {}, "Producers"),
    table(["name", "emits"], c.producers.map((p) => h("tr", {}, h("td", {}, p.name), h("td", {}, p.emits.join(", "))))),
  );
}

// ---- routing ---------------------------------------------------------------

function stopPage() {
  for (const stop of state.stop.splice(0)) stop();
}

async function route() {
  stopPage();
  if (!state.token) return signIn();
  const [page, a, b] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const link of document.querySelectorAll("nav a")) {
    link.toggleAttribute("aria-current", false);
    if (link.getAttribute("href") === `#/${page || "overview"}` || (page === "event" && link.getAttribute("href") === "#/log")) link.setAttribute("aria-current", "page");
  }
  try {
    if (document.getElementById("nav").hidden) await whoAmI();
    switch (page) {
      case "log":
        return await logPage(a);
      case "event":
        return await eventPage(a, b);
      case "dead-letters":
        return await deadLettersPage(a);
      case "subscriptions":
        return await subscriptionsPage();
      case "pipes":
        return await pipesPage();
      case "catalog":
        return await catalogPage();
      default:
        return await overview();
    }
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return signOut(`The server refused the token: ${e.message}`);
    show(h("h1", {}, "Something went wrong"), notice(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e), true));
  }
}

document.getElementById("sign-out").addEventListener("click", () => signOut());
window.addEventListener("hashchange", route);
route();
