// The admin's views: clients and their quotas (with the resize dialog), the poller nodes, and the cluster's
// lateness and callback outcomes (every client together, or one client's).

import { api, BadId, isId, seg } from "./api.js";
import { badge, busy, h, mount, notice, table, when } from "./dom.js";
import { statsPanel } from "./stats.js";

// A node fences itself once its heartbeat has gone unanswered for TICKD_NODE_TTL_S − 3 s: 7 s with the
// default TTL of 10 s. The API cannot see the pollers' settings, so the view assumes the default.
const FENCE_AFTER_S = 7;

function range(from, to) {
  return from === to - 1 ? `${from}` : `${from}–${to - 1}`;
}

// What a resize will do, in the words of the README's quota resize contract.
export function resizeExplanation(client, wanted) {
  const { poller_count: count, poller_span: span } = client;
  if (!Number.isInteger(wanted) || wanted < 1) return ["Give a whole number of pollers, at least 1."];
  if (wanted === count) return [`${client.client_id} already has ${count} poller${count === 1 ? "" : "s"}: nothing changes.`];
  if (wanted > count) {
    return [
      `Raising the quota from ${count} to ${wanted}: new schedules are spread over pollers ${range(0, wanted)} at once.`,
      span > count ? `Pollers ${range(count, span)} are still draining from an earlier decrease; those within the new count simply stay.` : null,
    ].filter(Boolean);
  }
  const keep = Math.max(span, count);
  return [
    `Lowering the quota from ${count} to ${wanted}: new schedules go to pollers ${range(0, wanted)} only, from now on.`,
    `Schedules already written to pollers ${range(wanted, keep)} are not moved and not lost: those pollers drain. They keep running (poller_span stays ${keep}) until each one's checkpoint passes the last minute ever written to it and TICKD_DRAIN_GRACE_S (60 s by default) has passed since the resize; only then do they stop.`,
    `Listing keeps reading all ${keep} poller ids; a reschedule moves a schedule off a draining poller.`,
  ];
}

function resizeDialog(client, onDone) {
  const input = h("input", { type: "number", id: "resize-count", min: "1", value: String(client.poller_count), required: true });
  const explain = h("div", { class: "explain", "aria-live": "polite" });
  const error = h("div");
  const confirm = h("button", { type: "submit", class: "primary", id: "resize-confirm" }, "Resize");
  const dialog = h(
    "dialog",
    { class: "dialog", "aria-labelledby": "resize-title" },
    h(
      "form",
      { method: "dialog", onsubmit: submit },
      h("h3", { id: "resize-title" }, `Resize ${client.client_id}`),
      h("p", { class: "muted" }, `Now: poller_count ${client.poller_count}, poller_span ${client.poller_span}.`),
      h("label", {}, "New poller_count", input),
      explain,
      error,
      h("div", { class: "actions" }, h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Keep as is"), confirm),
    ),
  );

  function update() {
    const wanted = Number(input.value);
    mount(explain, resizeExplanation(client, wanted).map((line) => h("p", {}, line)));
    confirm.textContent = `Resize to ${input.value || "?"}`;
    confirm.disabled = !Number.isInteger(wanted) || wanted < 1 || wanted === client.poller_count;
  }

  async function submit(e) {
    e.preventDefault();
    await busy(confirm, async () => {
      try {
        const changed = await api("PATCH", `/v1/clients/${seg("client", client.client_id)}`, { poller_count: Number(input.value) });
        dialog.close();
        onDone(notice(`${changed.client_id}: poller_count ${client.poller_count} → ${changed.poller_count} (poller_span ${changed.poller_span}).`, "ok"));
      } catch (err) {
        mount(error, notice(err.message));
      }
    });
  }

  input.addEventListener("input", update);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  update();
  dialog.showModal();
  input.select();
}

export async function clients(root) {
  const message = h("div");
  const out = h("div", { class: "results" });
  mount(root, h("h2", {}, "Clients and quotas"), message, out);

  async function refresh() {
    try {
      const { clients: list } = await api("GET", "/v1/clients");
      mount(
        out,
        table(
          [
            { label: "Client", cell: (c) => h("span", { class: "mono" }, c.client_id) },
            { label: "Active", cell: (c) => (c.active ? badge("active", "succeeded") : badge("inactive", "cancelled")) },
            { label: "Pollers", cell: (c) => h("span", { class: "quota" }, String(c.poller_count)) },
            { label: "Span", cell: (c) => String(c.poller_span) },
            {
              label: "Draining",
              cell: (c) => (c.poller_span > c.poller_count ? badge(`pollers ${range(c.poller_count, c.poller_span)}`, "draining") : "—"),
            },
            { label: "Resized", cell: (c) => when(c.resized_at) },
            { label: "Kafka topics", cell: (c) => (c.kafka_topics.length ? c.kafka_topics.join(", ") : "—") },
            {
              label: "",
              cell: (c) => [
                h("button", { type: "button", class: "small", onclick: () => resizeDialog(c, (n) => { mount(message, n); refresh(); }) }, "Resize"),
                " ",
                h("a", { class: "stats-link", href: `#/cluster-stats/${encodeURIComponent(c.client_id)}` }, "Lateness"),
              ],
            },
          ],
          list,
          (c) => ({ "data-client": c.client_id }),
        ),
      );
    } catch (err) {
      mount(out, notice(err.message));
    }
  }
  await refresh();
}

// --- nodes ----------------------------------------------------------------------------------------------

function instanceTable(instances) {
  if (!instances.length) return h("p", { class: "muted" }, "No instances.");
  return table(
    [
      { label: "Instance", cell: (i) => h("span", { class: "mono" }, `${i.client_id}/${i.poller_id}`) },
      { label: "Epoch", cell: (i) => h("span", { class: "epoch" }, String(i.epoch)) },
      { label: "State", cell: (i) => (i.draining ? badge("draining") : badge("serving", "succeeded")) },
    ],
    instances,
    (i) => ({ "data-instance": `${i.client_id}/${i.poller_id}` }),
  );
}

function nodeCard(node) {
  const late = node.heartbeat_age_s > FENCE_AFTER_S;
  return h(
    "section",
    { class: `card${late ? " card-late" : ""}`, "data-node": node.node_id },
    h("h3", {}, h("span", { class: "mono" }, node.node_id), " ", late ? badge("heartbeat late: fenced", "failed") : badge("live", "succeeded")),
    h(
      "dl",
      { class: "details" },
      h("dt", {}, "Address"),
      h("dd", { class: "mono" }, `${node.address} (status on port ${node.metrics_port})`),
      h("dt", {}, "Started"),
      h("dd", {}, when(node.started_at)),
      h("dt", {}, "Heartbeat"),
      h("dd", {}, when(node.heartbeat_at), ` (${node.heartbeat_age_s.toFixed(1)} s ago)`),
      h("dt", {}, "Instances"),
      h("dd", {}, String(node.instances.length)),
    ),
    instanceTable(node.instances),
  );
}

function fencedSection(view) {
  const late = view.nodes.filter((n) => n.heartbeat_age_s > FENCE_AFTER_S).map((n) => n.node_id);
  const gone = new Map();
  for (const i of view.unowned.filter((u) => u.owner)) gone.set(i.owner, [...(gone.get(i.owner) || []), i]);
  const waiting = view.unowned.filter((u) => !u.owner);
  const items = [
    ...late.map((id) => h("li", {}, h("span", { class: "mono" }, id), `: heartbeat older than ${FENCE_AFTER_S} s, so it has fenced itself (fires nothing) until it is heard again.`)),
    ...[...gone].map(([owner, list]) =>
      h("li", {}, h("span", { class: "mono" }, owner), `: no live heartbeat, still named on ${list.length} claim${list.length === 1 ? "" : "s"} (${list.map((i) => `${i.client_id}/${i.poller_id} epoch ${i.epoch}`).join(", ")}) until the ring's next owner takes them over.`),
    ),
  ];
  return h(
    "section",
    { class: "card", id: "fenced" },
    h("h3", {}, "Fenced and departed nodes"),
    items.length ? h("ul", {}, items) : h("p", { class: "muted" }, "None: every node heard from recently holds its claims."),
    waiting.length ? h("p", {}, `Waiting for an owner (never claimed, or released): ${waiting.map((i) => `${i.client_id}/${i.poller_id}`).join(", ")}.`) : null,
  );
}

export async function nodes(root, _params, ctx) {
  const out = h("div", { class: "results" });
  const stamp = h("p", { class: "muted" });
  mount(root, h("h2", {}, "Poller nodes"), stamp, out);

  async function refresh() {
    try {
      const view = await api("GET", "/v1/admin/nodes");
      mount(stamp, "As of ", when(view.at), `: ${view.nodes.length} live node${view.nodes.length === 1 ? "" : "s"}.`);
      mount(out, h("div", { class: "cards" }, view.nodes.map(nodeCard)), fencedSection(view));
    } catch (err) {
      mount(out, notice(err.message));
    }
  }
  await refresh();
  ctx.every(2000, refresh);
}

// --- lateness and callback outcomes -----------------------------------------------------------------------

function statsHash(clientId) {
  return clientId ? `#/cluster-stats/${encodeURIComponent(clientId)}` : "#/cluster-stats";
}

// A picker of whose statistics to show: every client together, or one. Choosing one changes the address,
// so a client's view can be bookmarked and the back button returns to the cluster's.
function clientPicker(chosen) {
  const select = h(
    "select",
    { id: "stats-client", name: "client", onchange: () => { location.hash = statsHash(select.value); } },
    h("option", { value: "" }, "Every client (the whole cluster)"),
  );
  const form = h(
    "form",
    { class: "filters", onsubmit: (e) => e.preventDefault() },
    h("label", { class: "grow" }, "Whose statistics", select),
  );
  api("GET", "/v1/clients")
    .then(({ clients: list }) => {
      const ids = list.map((c) => c.client_id);
      if (chosen && !ids.includes(chosen)) ids.unshift(chosen);
      select.append(...ids.map((id) => h("option", { value: id }, id)));
      select.value = chosen || "";
    })
    .catch((err) => form.append(notice(err.message)));
  return form;
}

async function statsFor(root, clientId, ctx) {
  if (clientId && !isId("client", clientId)) return mount(root, notice(new BadId("client", clientId).message));
  const path = clientId ? `/v1/admin/stats?client_id=${encodeURIComponent(clientId)}` : "/v1/admin/stats";
  const panel = statsPanel(path, ctx, (answer) =>
    answer.client_id === null ? "every client together" : `client ${answer.client_id} only`,
  );
  mount(
    root,
    h("h2", {}, clientId ? ["Lateness and callback outcomes: ", h("span", { class: "mono" }, clientId)] : "Lateness and callback outcomes across the cluster"),
    clientId ? h("p", {}, h("a", { href: statsHash(null), id: "stats-every" }, "← Every client together")) : null,
    clientPicker(clientId),
    panel.nodes,
  );
  await panel.start();
}

export async function clusterStats(root, _params, ctx) {
  await statsFor(root, null, ctx);
}

export async function clientStats(root, clientId, ctx) {
  await statsFor(root, clientId, ctx);
}
