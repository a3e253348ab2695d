// Notifications: the client's own settings (pause after failures, the notify target) and its feed of
// notices (schedules auto-paused, fires dead-lettered, resumes), newest first.
import { api, pages } from "./api.js";
import { busy, callbackText, h, mount, notice, when } from "./dom.js";
import { scheduleHref } from "./tenant.js";

const PAGE = 50;

function days(seconds) {
  const d = seconds / 86400;
  return Number.isInteger(d) ? `${d} day${d === 1 ? "" : "s"}` : `${(seconds / 3600).toFixed(1)} hours`;
}
const KIND_WORDS = {
  "schedule.auto_paused": "Auto-paused",
  "fire.dead_lettered": "Dead-lettered",
  "schedule.resumed": "Resumed",
};

function noticeRows(items) {
  return h(
    "ol",
    { class: "changes", id: "notices" },
    items.map((n) =>
      h(
        "li",
        { "data-kind": n.kind },
        when(n.at),
        " ",
        h("strong", {}, KIND_WORDS[n.kind] || n.kind),
        " ",
        n.schedule_id ? h("a", { href: scheduleHref(n.schedule_id), class: "mono wrap" }, n.target) : h("span", { class: "mono" }, n.target),
        h("pre", { class: "payload" }, JSON.stringify(n.detail, null, 2)),
      ),
    ),
  );
}

// PATCH /v1/settings with the form's values: an empty target removes it.
function settingsForm(current, onSaved) {
  const after = h("input", { type: "number", min: "0", max: "1000", id: "pause-after", value: String(current.pause_after_failures) });
  const url = h("input", { type: "url", id: "notify-url", placeholder: "https://… (empty: the feed only)", value: current.notify && current.notify.url ? current.notify.url : "" });
  const missed = current.missed || { policy: "fire_all", deadline_s: null };
  const policy = h("select", { id: "missed-policy" }, ["fire_all", "skip", "fire_once"].map((v) => h("option", { value: v, selected: v === missed.policy ? "" : null }, v)));
  const deadline = h("input", { type: "number", min: "1", max: "604800", id: "missed-deadline", placeholder: "60", value: missed.deadline_s ? String(missed.deadline_s) : "" });
  const save = h("button", { type: "submit" }, "Save");
  async function submit(event) {
    event.preventDefault();
    await busy(save, async () => {
      const body = { pause_after_failures: Number(after.value), notify: url.value ? { type: "http", url: url.value } : null };
      // fire_all is the default: null clears a policy; skip and fire_once take a deadline (60 s if empty).
      body.missed = policy.value === "fire_all" ? null : { policy: policy.value, ...(deadline.value ? { deadline: `${Number(deadline.value)}s` } : {}) };
      try {
        onSaved(await api("PATCH", "/v1/settings", body), notice("Settings saved.", "ok"));
      } catch (err) {
        onSaved(current, notice(`Settings refused: ${err.message}`));
      }
    });
  }
  return h(
    "form",
    { class: "filters", onsubmit: submit },
    h("label", {}, "Pause a recurring schedule after this many failed fires in a row (0: never)", after),
    h("label", { class: "grow" }, "Deliver notifications to", url),
    h("label", {}, "A late occurrence (missed fire): policy", policy),
    h("label", {}, "start deadline, s", deadline),
    save,
  );
}

export async function notices(root) {
  const settingsBox = h("div", { id: "settings" });
  const results = h("div", { class: "results" });
  const message = h("div");
  let next = null;
  let shown = [];

  function showSettings(current, note = null) {
    const target = current.notify ? callbackText(current.notify) : "none: kept in this feed only";
    const m = current.missed || { policy: "fire_all", deadline_s: null };
    const late = m.policy === "fire_all" ? "every late occurrence fires (fire_all)" : `${m.policy} when more than ${m.deadline_s} s late`;
    const kept = `Runs, dead letters and notices are kept ${days(current.retention_s)}, audit records ${days(current.audit_retention_s)} (set with PATCH /v1/settings, up to ${days(current.retention_max_s)} and ${days(current.audit_retention_max_s)}).`;
    mount(
      settingsBox,
      note,
      h("p", { class: "muted", id: "notify-target" }, `Notify target: ${target}`),
      h("p", { class: "muted", id: "retention" }, kept),
      h("p", { class: "muted", id: "missed" }, `Missed fires of recurring schedules that name no policy: ${late}.`),
      settingsForm(current, showSettings),
    );
  }

  async function load(more) {
    try {
      const page = await pages(`/v1/notifications?limit=${PAGE}`, "notices", more ? next : null, PAGE);
      next = page.next;
      shown = more ? shown.concat(page.items) : page.items;
      const button = next ? h("button", { type: "button", class: "secondary", onclick: () => load(true) }, "Load more") : null;
      const count = h("p", { class: "muted" }, `${shown.length} notice${shown.length === 1 ? "" : "s"}${next ? " so far" : ""}`);
      mount(results, count, shown.length ? noticeRows(shown) : null, button);
    } catch (err) {
      mount(message, notice(err.message));
    }
  }

  mount(
    root,
    h("h2", {}, "Notifications"),
    h("p", { class: "muted" }, "What happened to your schedules without a request asking: auto-pauses, dead letters, resumes. The last 7 days, newest first."),
    settingsBox,
    message,
    results,
  );
  try {
    showSettings(await api("GET", "/v1/settings"));
  } catch (err) {
    mount(message, notice(err.message));
  }
  await load(false);
}
