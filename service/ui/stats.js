// Delivery statistics: for the last 5 minutes, hour and day, the fires, the attempts delivered, retried and
// failed for good, and how late the first attempts went out (p50, p99, max). Pollers write their counts
// every few seconds, so a panel refreshes while it is on screen. The client's own view (GET /v1/stats) is
// here; the admin's cluster view (GET /v1/admin/stats, in admin.js) shows the same panel.

import { api } from "./api.js";
import { h, mount, notice, seconds, table, when } from "./dom.js";

export const REFRESH_MS = 3000;
const NAMES = { 300: "Last 5 minutes", 3600: "Last hour", 86400: "Last day" };

function windowName(windowS) {
  return NAMES[windowS] || `Last ${windowS} s`;
}

function count(value, kind) {
  return h("span", { class: value > 0 && kind ? `count count-${kind}` : "count" }, String(value));
}

function windowsTable(windows) {
  return table(
    [
      { label: "Window", cell: (w) => h("strong", {}, windowName(w.window_s)) },
      { label: "Fired", cell: (w) => count(w.fired) },
      { label: "Delivered", cell: (w) => count(w.delivered, "ok") },
      { label: "Retried", cell: (w) => count(w.retried, "warn") },
      { label: "Failed", cell: (w) => count(w.failed, "bad") },
      { label: "p50 late", cell: (w) => seconds(w.lateness_p50_s) },
      { label: "p99 late", cell: (w) => seconds(w.lateness_p99_s) },
      { label: "Max late", cell: (w) => seconds(w.lateness_max_s) },
    ],
    windows,
    (w) => ({ "data-window": String(w.window_s) }),
  );
}

// The panel for one stats answer at `path`: the explanation, an "as of" line and the windows table,
// refreshed every REFRESH_MS while ctx is alive. `whose(answer)` names what the numbers count, or null.
// Returns the nodes to mount and start(), which reads once and then keeps refreshing.
export function statsPanel(path, ctx, whose = () => null) {
  const stamp = h("p", { class: "muted", id: "stats-at" });
  const out = h("div", { class: "results", id: "stats" });

  async function refresh() {
    try {
      const answer = await api("GET", path);
      const who = whose(answer);
      mount(stamp, "As of ", when(answer.at), who ? ` · ${who}` : null, ` · refreshed every ${REFRESH_MS / 1000} s`);
      out.dataset.client = answer.client_id === null ? "" : answer.client_id;
      mount(out, windowsTable(answer.windows));
    } catch (err) {
      mount(out, notice(err.message));
    }
  }

  return {
    nodes: [
      h(
        "p",
        { class: "muted" },
        "Fired: first attempts. Lateness: how long after its due time a first attempt went out (p50 and p99 are the upper edge of a histogram bucket). Counts arrive every few seconds; they are statistics, not a ledger.",
      ),
      stamp,
      out,
    ],
    async start() {
      await refresh();
      ctx.every(REFRESH_MS, refresh);
    },
  };
}

export async function stats(root, _params, ctx) {
  const panel = statsPanel("/v1/stats", ctx);
  mount(root, h("h2", {}, "Lateness and delivery"), panel.nodes);
  await panel.start();
}
