// A client's dead letters: the list (newest first, by schedule and failure time), one letter, and its
// redrive. A redrive writes the fire again with the same fire id; a letter is redriven once: redriving it
// again answers the same marks and writes no second fire (README, "Dead letters").

import { api, ApiError, isId, pages, seg } from "./api.js";
import {
  badge,
  busy,
  callbackText,
  h,
  isoToLocalInput,
  localInputToIso,
  mount,
  notice,
  seconds,
  table,
  when,
} from "./dom.js";

const PAGE = 100;

// Empty times: the API's default, the last 7 days up to now.
const filters = { schedule: "", from: null, to: null };

export function letterHref(letter) {
  return `#/dead-letters/${encodeURIComponent(letter.dead_letter_id)}`;
}

function state(letter) {
  if (!letter.redriven_at) return badge("dead letter", "failed");
  return h("span", {}, badge("redriven", "succeeded"), " ", when(letter.redriven_at));
}

function errorText(err) {
  return err instanceof ApiError && err.field ? `${err.field}: ${err.message}` : err.message;
}

// What a redrive answer says: the fire written again (same fire id) and when it is due, or, for a letter
// already redriven, that nothing new was written.
function redrivenNotice(before, after) {
  const again = Boolean(before.redriven_at);
  const lead = again ? "Already redriven; no second fire written. Fire " : "Redriven: fire ";
  return notice(
    [lead, h("span", { class: "mono wrap" }, after.fire_id), " is due ", when(after.redriven_due_at), " (same fire id). ", h("a", { href: `#/schedules/${encodeURIComponent(after.schedule_id)}` }, "Follow it on its schedule")],
    "ok",
  );
}

// POST …/redrive for `letter`; onDone(notice, the letter as answered or null when refused).
export async function redrive(letter, button, onDone) {
  const first = letter.redriven_at ? "It was redriven already: this writes no second fire." : "Its fire is delivered again now, with the same fire id.";
  if (!window.confirm(`Redrive dead letter ${letter.dead_letter_id}? ${first}`)) return;
  await busy(button, async () => {
    try {
      const after = await api("POST", `/v1/dead-letters/${seg("deadLetter", letter.dead_letter_id)}/redrive`);
      onDone(redrivenNotice(letter, after), after);
    } catch (err) {
      onDone(notice(`Redrive refused: ${errorText(err)}`), null);
    }
  });
}

export function redriveButton(letter, onDone, extra = {}) {
  const label = letter.redriven_at ? "Redrive again" : "Redrive";
  return h("button", { type: "button", class: letter.redriven_at ? "secondary small" : "small", "data-action": "redrive", ...extra, onclick: (e) => redrive(letter, e.currentTarget, onDone) }, label);
}

// One schedule's dead letters (the last 7 days), keyed by fire id: the timeline links its failed fires.
export async function lettersOf(scheduleId) {
  const params = new URLSearchParams({ schedule_id: scheduleId, limit: String(PAGE) });
  const { items } = await pages(`/v1/dead-letters?${params}`, "dead_letters", null, PAGE, 8);
  return new Map(items.map((letter) => [letter.fire_id, letter]));
}

// --- the list ------------------------------------------------------------------------------------------

function letterRows(list, onChange) {
  return table(
    [
      { label: "Dead letter", cell: (l) => h("a", { href: letterHref(l), class: "mono wrap" }, l.dead_letter_id) },
      { label: "Schedule", cell: (l) => h("a", { href: `#/schedules/${encodeURIComponent(l.schedule_id)}`, class: "mono wrap" }, l.schedule_id) },
      { label: "Failed at", cell: (l) => when(l.failed_at) },
      { label: "Attempts", cell: (l) => String(l.attempts) },
      { label: "Last error", cell: (l) => h("span", { class: "wrap" }, l.last_error) },
      { label: "State", cell: (l) => state(l) },
      { label: "", cell: (l) => redriveButton(l, onChange) },
    ],
    list,
    (l) => ({ "data-letter": l.dead_letter_id }),
  );
}

function filterForm(onApply) {
  const schedule = h("input", { type: "search", id: "dl-schedule", placeholder: "any schedule", value: filters.schedule });
  const from = h("input", { type: "datetime-local", id: "dl-from", value: filters.from ? isoToLocalInput(filters.from) : "" });
  const to = h("input", { type: "datetime-local", id: "dl-to", value: filters.to ? isoToLocalInput(filters.to) : "" });
  function apply(e) {
    e.preventDefault();
    filters.schedule = schedule.value.trim();
    filters.from = from.value ? new Date(localInputToIso(from.value)) : null;
    filters.to = to.value ? new Date(localInputToIso(to.value)) : null;
    onApply();
  }
  return h(
    "form",
    { class: "filters", onsubmit: apply },
    h("label", { class: "grow" }, "Schedule id", schedule),
    h("label", {}, "Failed from", from),
    h("label", {}, "Failed before", to),
    h("button", { type: "submit" }, "Apply"),
  );
}

function query() {
  const params = new URLSearchParams({ limit: String(PAGE) });
  if (filters.schedule) params.set("schedule_id", filters.schedule);
  if (filters.from) params.set("from", filters.from.toISOString());
  if (filters.to) params.set("to", filters.to.toISOString());
  return `/v1/dead-letters?${params}`;
}

export async function deadLetters(root) {
  const results = h("div", { class: "results" });
  const message = h("div");
  let next = null;
  let shown = [];

  async function load(more, note = null) {
    mount(message, note);
    try {
      const page = await pages(query(), "dead_letters", more ? next : null, PAGE);
      next = page.next;
      shown = more ? shown.concat(page.items) : page.items;
      render();
    } catch (err) {
      mount(results);
      mount(message, notice(errorText(err)));
    }
  }

  function render() {
    const more = next ? h("button", { type: "button", class: "secondary", onclick: () => load(true) }, "Load more") : null;
    const count = h("p", { class: "muted" }, `${shown.length} dead letter${shown.length === 1 ? "" : "s"}${next ? " so far" : ""}`);
    mount(results, count, shown.length ? letterRows(shown, (n) => load(false, n)) : null, more);
  }

  mount(
    root,
    h("h2", {}, "Dead letters"),
    h("p", { class: "muted" }, "Fires that failed for good, newest first. Empty times: the last 7 days; a range spans at most 31 days."),
    filterForm(() => load(false)),
    message,
    results,
  );
  await load(false);
}

// --- one dead letter -----------------------------------------------------------------------------------

// One attempt of the fire: when it went out, how late from its due time, and how it ended.
function tryItem(t) {
  return h("li", {}, `#${t.attempt} `, when(t.sent_at), ` (${seconds(t.lateness_s)} late) ${t.outcome}`, t.error ? `: ${t.error}` : "");
}

function details(l) {
  const rows = [
    ["State", state(l)],
    ["Schedule", h("a", { href: `#/schedules/${encodeURIComponent(l.schedule_id)}`, class: "mono wrap" }, l.schedule_id)],
    ["Fire id", h("span", { class: "mono wrap", id: "dl-fire-id" }, l.fire_id)],
    ["Failed at", when(l.failed_at)],
    ["Attempts", String(l.attempts)],
    ["Last error", h("span", { class: "wrap" }, l.last_error)],
    l.tries ? ["Each attempt", h("ol", { class: "tries small" }, l.tries.map(tryItem))] : null,
    ["Callback", h("span", { class: "wrap" }, callbackText(l.callback))],
    l.redriven_due_at ? ["Redriven fire due", when(l.redriven_due_at)] : null,
    ["Payload", h("pre", { class: "payload" }, JSON.stringify(l.payload, null, 2))],
  ].filter(Boolean);
  return h("dl", { class: "details" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

export async function letterView(root, id) {
  const message = h("div");
  const body = h("div", { class: "detail" });
  mount(root, h("p", {}, h("a", { href: "#/dead-letters" }, "← Dead letters")), h("h2", { class: "mono wrap" }, id), message, body);
  if (!isId("deadLetter", id)) return mount(message, notice(`${id} is not a dead letter id (<failed_at epoch ms>-<schedule id>).`));

  function render(letter) {
    const explain = letter.redriven_at
      ? "Redriving again writes no second fire; it only finishes the first redrive if that one's write was lost."
      : "A redrive writes this fire again, due now, with the same fire id; attempts start again.";
    const onDone = (note, after) => {
      mount(message, note);
      if (after) render(after);
    };
    mount(body, h("div", { class: "actions" }, h("span", { class: "muted small grow" }, explain), redriveButton(letter, onDone, { id: "dl-redrive" })), details(letter));
  }

  try {
    render(await api("GET", `/v1/dead-letters/${seg("deadLetter", id)}`));
  } catch (err) {
    mount(message, notice(err instanceof ApiError && err.status === 404 ? `No dead letter ${id} (kept for the retention only).` : errorText(err)));
  }
}
