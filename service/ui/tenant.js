// A client's views: its schedules, one schedule's timeline and actions (pause, resume, trigger now,
// cancel, redrive a failed fire), the cron preview, its throttle policies.

import { api, ApiError, BadId, pages, seg } from "./api.js";
import { letterHref, lettersOf, redriveButton } from "./letters.js";
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

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PAGE = 100;

export function scheduleHref(id) {
  return `#/schedules/${encodeURIComponent(id)}`;
}

// --- the schedules list -------------------------------------------------------------------------------

const filters = { status: "", from: null, to: null, search: "" };

function defaultRange() {
  const now = Date.now();
  filters.from = filters.from || new Date(now - 3600 * 1000);
  filters.to = filters.to || new Date(now + 23 * 3600 * 1000);
}

function rule(s) {
  const r = s.recurrence;
  if (!r) return "once";
  const base = r.cron ? `cron ${r.cron} (${r.timezone || "UTC"})` : `every ${r.every}`;
  const excepted = r.calendars ? `${base} · except ${r.calendars.join(", ")}` : base;
  const named = r.missed ? `${excepted} · late: ${r.missed.policy}${r.missed.deadline_s ? ` after ${r.missed.deadline_s} s` : ""}` : excepted;
  return s.occurrence ? `${named} · #${s.occurrence}` : named;
}

async function cancel(id, button, onDone) {
  if (!window.confirm(`Cancel schedule ${id}? A cancel answered 200 never fires.`)) return;
  await busy(button, async () => {
    try {
      await api("DELETE", `/v1/schedules/${seg("schedule", id)}`);
      onDone(notice(`Cancelled ${id}.`, "ok"));
    } catch (err) {
      onDone(notice(`Cancel refused: ${err.message}`));
    }
  });
}

function scheduleRows(list, onChange) {
  return table(
    [
      { label: "Schedule", cell: (s) => h("a", { href: scheduleHref(s.schedule_id), class: "mono" }, s.schedule_id) },
      { label: "Status", cell: (s) => badge(s.status) },
      { label: "Fires at", cell: (s) => when(s.fire_at) },
      { label: "Due", cell: (s) => when(s.due_at) },
      { label: "Attempts", cell: (s) => String(s.attempts) },
      { label: "Rule", cell: (s) => rule(s) },
      { label: "Callback", cell: (s) => h("span", { class: "wrap" }, callbackText(s.callback)) },
      {
        label: "",
        cell: (s) =>
          s.status === "scheduled" || s.status === "paused"
            ? h("button", { class: "danger small", type: "button", onclick: (e) => cancel(s.schedule_id, e.target, onChange) }, "Cancel")
            : "",
      },
    ],
    list,
    (s) => ({ "data-id": s.schedule_id }),
  );
}

function filterForm(onApply) {
  const status = h(
    "select",
    { name: "status", id: "f-status" },
    ["", "scheduled", "paused", "succeeded", "failed", "cancelled"].map((v) =>
      h("option", { value: v, selected: filters.status === v }, v || "any status"),
    ),
  );
  const from = h("input", { type: "datetime-local", id: "f-from", value: isoToLocalInput(filters.from) });
  const to = h("input", { type: "datetime-local", id: "f-to", value: isoToLocalInput(filters.to) });
  const search = h("input", { type: "search", id: "f-search", placeholder: "schedule id (or its start), or business key", value: filters.search });
  const form = h(
    "form",
    { class: "filters", onsubmit: (e) => { e.preventDefault(); apply(); } },
    h("label", {}, "Status", status),
    h("label", {}, "Due from", from),
    h("label", {}, "Due before", to),
    h("label", { class: "grow" }, "Search by id or business key", search),
    h("button", { type: "submit" }, "Apply"),
  );
  function apply() {
    filters.status = status.value;
    filters.from = from.value ? new Date(localInputToIso(from.value)) : null;
    filters.to = to.value ? new Date(localInputToIso(to.value)) : null;
    filters.search = search.value.trim();
    onApply();
  }
  return form;
}

export async function schedules(root) {
  defaultRange();
  const results = h("div", { class: "results" });
  const message = h("div");
  let next = null;
  let shown = [];
  let exact = false; // shown is one schedule found by id or business key: not filtered again
  let latest = 0; // the newest load; an answer to an older one (e.g. the first list, slower than a search) is dropped

  async function load(more, note = null) {
    mount(message, note);
    const mine = ++latest;
    const current = () => mine === latest;
    if (UUID.test(filters.search)) return lookup(filters.search, current);
    if (filters.search && !more && (await byKey(filters.search, current))) return;
    if (!current()) return;
    const params = new URLSearchParams({ from: filters.from.toISOString(), to: filters.to.toISOString(), limit: String(PAGE) });
    if (filters.status) params.set("status", filters.status);
    try {
      const page = await pages(`/v1/schedules?${params}`, "schedules", more ? next : null, PAGE);
      if (!current()) return;
      next = page.next;
      shown = more ? shown.concat(page.items) : page.items;
      exact = false;
      render();
    } catch (err) {
      if (!current()) return;
      mount(results);
      mount(message, notice(err.message));
    }
  }

  // A business key's schedule (PUT /v1/schedules/by-key/{key}); false when the text names none, and the
  // list below is searched by id prefix instead.
  async function byKey(key, current) {
    let found;
    try {
      found = await api("GET", `/v1/schedules/by-key/${seg("key", key)}`);
    } catch (err) {
      // Not a key (BadId: refused here, no request) or no schedule under it: search ids instead.
      if (err instanceof BadId || (err instanceof ApiError && (err.status === 404 || err.status === 400))) return false;
      if (current()) {
        mount(results);
        mount(message, notice(err.message));
      }
      return true;
    }
    if (current()) showOne(found);
    return true;
  }

  async function lookup(id, current) {
    try {
      const found = await api("GET", `/v1/schedules/${seg("schedule", id)}`);
      if (current()) showOne(found);
    } catch (err) {
      if (!current()) return;
      mount(results);
      mount(message, notice(err instanceof ApiError && err.status === 404 ? `No schedule ${id}.` : err.message));
    }
  }

  function showOne(schedule) {
    shown = [schedule];
    next = null;
    exact = true;
    render();
  }

  function render() {
    const needle = filters.search.toLowerCase();
    const list = needle && !exact ? shown.filter((s) => s.schedule_id.includes(needle)) : shown;
    const more = next ? h("button", { type: "button", class: "secondary", onclick: () => load(true) }, "Load more") : null;
    const count = h("p", { class: "muted" }, `${list.length} schedule${list.length === 1 ? "" : "s"}${next ? " so far" : ""}`);
    mount(results, count, list.length ? scheduleRows(list, (n) => load(false, n)) : null, more);
  }

  mount(
    root,
    h("h2", {}, "Schedules"),
    h("p", { class: "muted" }, "Listed by due time; the API lists a range of at most a day at a time."),
    filterForm(() => load(false)),
    message,
    results,
  );
  await load(false);
}

// --- one schedule's timeline ---------------------------------------------------------------------------

const STATUS_CODE = /\b(?:HTTP )?([1-5]\d\d)\b/;

function attemptText(run) {
  const code = run.last_error && STATUS_CODE.exec(run.last_error);
  return code ? [" ", badge(code[1], Number(code[1]) < 400 ? "succeeded" : "failed")] : [];
}

// Each attempt the run keeps (`tries`: the first and the latest 19), late from its own due time (after
// jitter, window spread, backoff or redrive). An attempt that failed for good and is followed by more
// ends a round: its dead letter was redriven, and the next round starts after that step.
function triesSteps(run, dead) {
  const steps = [];
  run.tries.forEach((t, i) => {
    const error = t.error ? [`: ${t.error}`, ...attemptText({ last_error: t.error })] : [];
    const title = i === 0 ? "Fired" : `Attempt ${t.attempt}`;
    steps.push(step(i === 0 ? "fire" : "attempt", `${title} (${seconds(t.lateness_s)} late)`, t.sent_at, error));
    if (t.outcome === "failed" && i < run.tries.length - 1) {
      steps.push(step("dead", "Dead letter written, then redriven", run.tries[i + 1].due_at, dead(run)));
    }
  });
  return steps;
}

// `dead(run)`: the steps after "Dead letter written" for a failed fire: a link to its letter and redrive.
function runSteps(run, dead) {
  const steps = [];
  const label = run.occurrence ? `Occurrence #${run.occurrence}` : run.status === "skipped" ? "Occurrence" : "Fire";
  // A backfill's fire of the occurrence (POST .../backfill), not the timeline's own: marked so.
  const mark = run.backfill ? [" ", badge("backfill", "paused")] : [];
  steps.push(step("fire", `${label} due`, run.nominal_at, [...mark, h("span", { class: "step-note mono small wrap" }, run.fire_id)]));
  if (run.tries) {
    steps.push(...triesSteps(run, dead));
    steps.push(...outcome(run, dead));
    return steps;
  }
  // A run recorded before attempts were kept: its first attempt's time, the count and the last error.
  if (run.fired_at) steps.push(step("fire", "Fired", run.fired_at));
  if (run.attempts > 1 && run.status !== "failed") {
    const error = run.last_error ? [`, last error: ${run.last_error}`, ...attemptText(run)] : [];
    steps.push(step("attempt", `${run.attempts} attempts`, null, error));
  }
  if (run.events !== undefined) {
    const done = run.events_delivered ?? 0;
    const inWindow = run.completed_in_window === null || run.completed_in_window === undefined ? "" : run.completed_in_window ? ", all within the window" : ", window ended first";
    steps.push(step("attempt", `${done} of ${run.events} events delivered${inWindow}`, run.last_event_at || null));
  }
  const letter = run.status === "failed" ? [] : dead(run);  // a fire redriven from its dead letter
  if (letter.length) steps.push(step("dead", "Dead letter written, then redriven", null, letter));
  steps.push(...outcome(run, dead));
  return steps;
}

function deadFire(run) {
  return run.status === "failed" && !(run.last_error || "").startsWith("skipped");
}

function outcome(run, dead) {
  if (run.status === "succeeded") {
    const on = run.attempts ? ` on attempt ${run.attempts}` : "";
    const last = run.tries ? run.tries[run.tries.length - 1].sent_at : run.fired_at;
    return [step("ok", `Delivered${on}`, last, [" ", badge("succeeded")])];
  }
  if (run.status === "skipped") {
    // A calendar excluded it (its reason names the calendar), or it fell while the schedule was paused.
    return [step("skipped", "Skipped", null, [run.last_error ? `: ${run.last_error.replace(/^skipped: /, "")}` : ": the schedule was paused"])];
  }
  if (run.status === "failed" && !deadFire(run)) {
    return [step("failed", "Skipped", null, [`: ${run.last_error}`])];  // past the catch-up window: not fired
  }
  if (run.status === "failed") {
    const after = `Failed after ${run.attempts} attempt${run.attempts === 1 ? "" : "s"}`;
    return [
      step("failed", after, null, [run.last_error ? `: ${run.last_error}` : "", ...attemptText(run)]),
      step("dead", "Dead letter written", null, [" (no more retries)", ...dead(run)]),
    ];
  }
  if (run.status === "scheduled" && run.attempts > 0) return [step("pending", "Retry pending", null)];
  return [];
}

function step(kind, title, at, extra = []) {
  return h("li", { class: `step step-${kind}` }, h("span", { class: "step-title" }, title), at ? [" ", when(at)] : null, extra);
}

function timeline(schedule, runs, dead) {
  const steps = [step("created", "Created", schedule.created_at)];
  for (const run of [...runs].reverse()) steps.push(...runSteps(run, dead));
  if (schedule.status === "cancelled") steps.push(step("failed", "Cancelled", null, [" ", badge("cancelled")]));
  if (schedule.status === "paused") steps.push(pausedStep(schedule.pause));
  if (schedule.status === "scheduled") {
    const what = schedule.attempts > 0 ? `Next retry (attempt ${schedule.attempts + 1})` : "Next fire due";
    steps.push(step("pending", what, schedule.due_at));
  }
  return h("ol", { class: "timeline", "aria-label": "timeline" }, steps);
}

// A paused schedule's step: since when (a pause with a body), and whether it resumes by itself.
function pausedStep(pause) {
  const what = pause && pause.until ? [": resumes by itself at ", when(pause.until)] : [": fires nothing until resumed"];
  const note = pause && pause.note ? h("span", { class: "step-note wrap" }, pause.note) : null;
  return step("pending", "Paused", pause ? pause.paused_at : null, [...what, note]);
}

// The pause a schedule paused with a body carries (GET /v1/schedules/{id}: `pause`).
function pauseRows(pause) {
  if (!pause) return [];
  return [
    ["Paused since", h("span", { id: "s-paused-since" }, when(pause.paused_at))],
    ["Resumes at", h("span", { id: "s-pause-until" }, pause.until ? when(pause.until) : "until resumed by hand")],
    pause.note ? ["Pause note", h("span", { id: "s-pause-note", class: "wrap" }, pause.note)] : null,
  ];
}

// A debounced by-key schedule's debounce (GET: `debounce`): the burst its fire carries, and the rule.
function debounceRows(d) {
  if (!d) return [];
  const cap = d.max_wait_s ? `, at most ${d.max_wait_s} s after the first` : "";
  const edge = d.edge === "leading" ? "; the first PUT of a burst fires at once" : "";
  return [
    ["Debounce", h("span", { id: "s-debounce" }, `${d.window_s} s after the latest PUT${cap}${edge}`)],
    ["Burst", h("span", { id: "s-debounce-burst" }, [when(d.first_put_at), " to ", when(d.last_put_at)])],
  ];
}

function details(s) {
  const rows = [
    ["Status", h("span", { id: "s-status" }, badge(s.status))],
    ...pauseRows(s.pause),
    ...debounceRows(s.debounce),
    s.trigger_of ? ["Trigger of", h("a", { href: scheduleHref(s.trigger_of), class: "mono wrap" }, s.trigger_of)] : null,
    s.backfill_of ? ["Backfill of", h("a", { href: scheduleHref(s.backfill_of), class: "mono wrap", id: "s-backfill-of" }, s.backfill_of)] : null,
    ["Fire at", when(s.fire_at)],
    ["Due at", when(s.due_at)],
    ["Fire id", h("span", { class: "mono wrap" }, s.fire_id)],
    ["Attempts", String(s.attempts)],
    ["Rule", rule(s)],
    ["Callback", h("span", { class: "wrap" }, callbackText(s.callback))],
    s.throttle ? ["Throttle", s.throttle] : null,
    s.events ? ["Events per fire", String(s.events)] : null,
    s.recurrence ? ["Pause after failures", pauseAfter(s.pause_after_failures)] : null,
    ["Payload", h("pre", { class: "payload" }, JSON.stringify(s.payload, null, 2))],
  ].filter(Boolean);
  return h("dl", { class: "details" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

// A recurring schedule's own pause_after_failures, or the client's default (set under Notifications).
function pauseAfter(n) {
  if (n === undefined) return h("a", { href: "#/notifications" }, "your default");
  return n ? `${n} failed fires in a row` : "never";
}

// --- changes (the audit trail) ----------------------------------------------------------------------

const CHANGE_WORDS = {
  "schedule.create": "Created",
  "schedule.update": "Changed",
  "schedule.pause": "Paused",
  "schedule.resume": "Resumed",
  "schedule.auto_pause": "Auto-paused after failed fires",
  "schedule.resume_ended": "Resumed (its rule had nothing left: ended)",
  "schedule.resume_at_until": "Resumed at its pause's end",
  "schedule.cancel": "Cancelled",
  "schedule.trigger": "Triggered",
  "schedule.backfill": "Backfill started",
  "schedule.put_by_key": "Put by key",
  "schedule.cancel_by_key": "Cancelled by key",
  "dead_letter.redrive": "Redriven",
};

// Newest first: when, what, by whom (the admin, or which API key), the version it left, and its fields.
function changesList(records) {
  if (!records.length) return h("p", { class: "muted" }, "No changes recorded.");
  return h(
    "ol",
    { class: "changes" },
    records.map((r) =>
      h(
        "li",
        { "data-action": r.action },
        when(r.at),
        " ",
        h("strong", {}, CHANGE_WORDS[r.action] || r.action),
        " by ",
        h("span", { class: "mono" }, r.actor),
        r.version !== undefined ? ` (version ${r.version})` : "",
        Object.keys(r.changes || {}).length ? h("pre", { class: "payload" }, JSON.stringify(r.changes, null, 2)) : null,
      ),
    ),
  );
}

// --- pause, resume, trigger now ---------------------------------------------------------------------

const CHANGED = {
  pause: (s) =>
    s.pause && s.pause.until
      ? [`Paused: ${s.schedule_id} resumes by itself at `, when(s.pause.until), "."]
      : `Paused: ${s.schedule_id} fires nothing until resumed.`,
  resume: (s) =>
    s.status === "cancelled"
      ? `Resumed, but its rule has nothing left (end_at passed or max_fires spent): ${s.schedule_id} ended cancelled.`
      : [`Resumed: ${s.schedule_id} is scheduled again, next fire due `, when(s.due_at), "."],
};

// An API error in words, naming the field it refused unless the message already does.
function errorText(err) {
  return err instanceof ApiError && err.field && !err.message.startsWith(err.field) ? `${err.field}: ${err.message}` : err.message;
}

// POST /v1/schedules/{id}/pause (with `body`, a timed or noted pause, or none) or /resume; onDone(notice,
// true when it was done).
async function change(id, action, button, onDone, body = undefined) {
  await busy(button, async () => {
    try {
      onDone(notice(CHANGED[action](await api("POST", `/v1/schedules/${seg("schedule", id)}/${action}`, body)), "ok"), true);
    } catch (err) {
      onDone(notice(`${action === "pause" ? "Pause" : "Resume"} refused: ${errorText(err)}`), false);
    }
  });
}

// Pause's optional "Resume at" and "Note". Built once per view and kept across its redraws (every 1.5 s
// while the schedule can change), so what is being typed stays.
function pauseFields() {
  const until = h("input", { type: "datetime-local", id: "pause-until", name: "until" });
  const note = h("input", { type: "text", id: "pause-note", name: "note", maxlength: "500", autocomplete: "off", placeholder: "why it is paused" });
  const el = h(
    "div",
    { class: "pause-fields", role: "group", "aria-label": "pause options" },
    h("label", {}, "Resume at (optional)", until),
    h("label", { class: "grow" }, "Note (optional)", note),
  );
  return {
    el,
    show(on) {
      el.hidden = !on;
    },
    // The pause's body: null when "Resume at" is half filled in (nothing is sent), undefined when both are
    // empty (a plain pause, no body). "Resume at" is the browser's local clock, sent as a UTC instant.
    body() {
      if (until.validity.badInput) return null;
      const wanted = {};
      if (until.value) wanted.until = localInputToIso(until.value);
      if (note.value.trim()) wanted.note = note.value.trim();
      return Object.keys(wanted).length ? wanted : undefined;
    },
    clear() {
      until.value = "";
      note.value = "";
    },
  };
}

function pause(id, fields, button, onDone) {
  const body = fields.body();
  if (body === null) return onDone(notice("Pause refused: give \"Resume at\" a whole date and time, or leave it empty."));
  return change(id, "pause", button, (note, done) => {
    if (done) fields.clear();
    onDone(note);
  }, body);
}

// Backfill's "From", "To" and rate, for a recurring schedule: its occurrences in [From, To) fired once each,
// oldest first (POST /v1/schedules/{id}/backfill, a bulk job). Built once per view and kept across redraws.
function backfillFields(id, onDone) {
  const from = h("input", { type: "datetime-local", id: "backfill-from", name: "from", required: true });
  const to = h("input", { type: "datetime-local", id: "backfill-to", name: "to", required: true });
  const rate = h("input", { type: "number", id: "backfill-rate", name: "rate_per_s", min: "0.01", step: "any", placeholder: "server's default" });
  const go = h("button", { type: "submit", id: "backfill-run", class: "secondary" }, "Backfill");
  async function onSubmit(e) {
    e.preventDefault();
    if (from.validity.badInput || to.validity.badInput || !from.value || !to.value) {
      onDone(notice('Backfill refused: give "From" and "To" a whole date and time each.'));
      return;
    }
    const body = { from: localInputToIso(from.value), to: localInputToIso(to.value) };
    if (rate.value) body.rate_per_s = Number(rate.value);
    await busy(go, async () => {
      try {
        const job = await api("POST", `/v1/schedules/${seg("schedule", id)}/backfill`, body);
        onDone(
          notice(
            ["Backfill started: job ", h("span", { class: "mono", id: "backfill-job" }, job.job_id), ". Its progress is under ", h("a", { href: "#/bulk" }, "Bulk"), "; each fire shows here as it goes out."],
            "ok",
          ),
        );
      } catch (err) {
        onDone(notice(`Backfill refused: ${errorText(err)}`));
      }
    });
  }
  const el = h(
    "form",
    { class: "pause-fields", id: "backfill", "aria-label": "backfill", onsubmit: onSubmit },
    h("label", {}, "Backfill from", from),
    h("label", {}, "to (not after now)", to),
    h("label", {}, "Fires a second", rate),
    go,
  );
  return {
    el,
    show(on) {
      el.hidden = !on;
    },
  };
}

async function trigger(id, button, onDone) {
  if (!window.confirm(`Fire schedule ${id} once now? Its own timeline does not move.`)) return;
  await busy(button, async () => {
    try {
      const t = await api("POST", `/v1/schedules/${seg("schedule", id)}/trigger`);
      onDone(
        notice(
          ["Triggered: fire id ", h("span", { class: "mono wrap", id: "trigger-fire-id" }, t.fire_id), ". ", h("a", { href: scheduleHref(t.schedule_id) }, "Follow the trigger")],
          "ok",
        ),
      );
    } catch (err) {
      onDone(notice(`Trigger refused: ${err.message}`));
    }
  });
}

// Pause and Resume are both shown, the one the status allows enabled; a paused schedule can be cancelled.
// Pause's options (`fields`) are shown while it can be paused.
function scheduleActions(s, fields, onDone) {
  const id = s.schedule_id;
  const button = (action, label, enabled, kind, onclick) =>
    h("button", { type: "button", class: kind, "data-action": action, disabled: !enabled, onclick: (e) => onclick(e.currentTarget) }, label);
  const live = s.status === "scheduled" || s.status === "paused";
  fields.show(s.status === "scheduled");
  return [
    button("pause", "Pause", s.status === "scheduled", "secondary", (b) => pause(id, fields, b, onDone)),
    button("resume", "Resume", s.status === "paused", "secondary", (b) => change(id, "resume", b, onDone)),
    button("trigger", "Trigger now", s.status !== "cancelled", "", (b) => trigger(id, b, onDone)),
    live ? button("cancel", "Cancel schedule", true, "danger", (b) => cancel(id, b, onDone)) : null,
  ];
}

export async function scheduleView(root, id, ctx) {
  const message = h("div");
  const body = h("div", { class: "detail" });
  // Redrawn on each refresh: the buttons and the two columns; the pause options stay (see pauseFields).
  const fields = pauseFields();
  const buttons = h("div", { class: "action-buttons" });
  const panes = h("div");
  const backfill = backfillFields(id, (note) => done(note));
  const bar = h("div", { class: "actions schedule-actions" }, fields.el, buttons, backfill.el);
  mount(root, h("p", {}, h("a", { href: "#/schedules" }, "← Schedules")), h("h2", { class: "mono wrap" }, id), message, body);
  // fire id -> dead letter, read on open (a redriven fire's run no longer says it failed) and, since the
  // poller marks a fire failed before it writes the letter, again every 2 s while a failed fire has none
  // (5 reads at most: an old letter may be past the 7 days read).
  let letters = new Map();
  let looked = 0;
  let looks = 0;
  let following = false;

  const lacking = (runs) => runs.some((r) => deadFire(r) && !letters.has(r.fire_id));
  const done = (note) => {
    mount(message, note);
    update();
  };

  function dead(run) {
    const letter = letters.get(run.fire_id);
    if (!letter) return [];
    const onRedrive = (note, after) => {
      if (after) letters.set(after.fire_id, after);
      done(note);
    };
    const state = letter.redriven_at ? [" ", badge("redriven", "succeeded"), " ", when(letter.redriven_at)] : [];
    const button = run.status === "failed" ? [" ", redriveButton(letter, onRedrive)] : [];
    return [" ", h("a", { href: letterHref(letter), class: "letter-link" }, "open the dead letter"), ...state, ...button];
  }

  async function refresh() {
    let schedule;
    let runs;
    let changes;
    try {
      [schedule, { items: runs }, { items: changes }] = await Promise.all([
        api("GET", `/v1/schedules/${seg("schedule", id)}`),
        pages(`/v1/schedules/${seg("schedule", id)}/runs?limit=100`, "runs", null, 100, 1),
        pages(`/v1/schedules/${seg("schedule", id)}/audit?limit=50`, "records", null, 50, 1),
      ]);
      // A trigger's dead letter is filed under the schedule it is a trigger of.
      if ((looks === 0 || lacking(runs)) && looks < 5 && Date.now() - looked > 2000) {
        looked = Date.now();
        looks += 1;
        letters = await lettersOf(schedule.trigger_of || id);
      }
    } catch (err) {
      mount(message, notice(err.message));
      return false;
    }
    if (!bar.isConnected) mount(body, bar, panes);
    mount(buttons, scheduleActions(schedule, fields, done));
    backfill.show(Boolean(schedule.recurrence) && schedule.status !== "cancelled");
    mount(panes, h("div", { class: "columns" }, h("section", {}, h("h3", {}, "Timeline"), timeline(schedule, runs, dead)), h("section", {}, h("h3", {}, "Details"), details(schedule), h("h3", {}, "Changes"), changesList(changes))));
    // A timed pause ends by itself: follow it to its resume too.
    const timed = schedule.status === "paused" && Boolean(schedule.pause && schedule.pause.until);
    const live = schedule.status === "scheduled" || timed || runs.some((r) => r.status === "scheduled");
    return live || (lacking(runs) && looks < 5);
  }

  // While it can still change, follow it: a fire, a retry, a dead letter show up on their own. A resume,
  // a trigger or a redrive makes it change again: follow it again.
  async function update() {
    const live = await refresh();
    if (!live || following) return;
    following = true;
    ctx.every(1500, async () => {
      following = await refresh();
      return following;
    });
  }

  await update();
}

// --- cron preview ---------------------------------------------------------------------------------------

function offsetMinutes(local) {
  const m = /([+-])(\d\d):(\d\d)$/.exec(local);
  if (!m) return 0;
  return (m[1] === "-" ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3]));
}

function formatOffset(minutes) {
  const sign = minutes < 0 ? "−" : "+";
  const abs = Math.abs(minutes);
  return `UTC${sign}${String(Math.floor(abs / 60)).padStart(2, "0")}:${String(abs % 60).padStart(2, "0")}`;
}

// The API gives each occurrence's local time with its offset: where the offset changes between two
// occurrences the zone changed its clocks in between. Forward is a gap (local times that did not exist:
// on_gap decides), back a repeat (local times that happened twice: on_overlap decides).
export function dstNotes(occurrences) {
  return occurrences.map((o, i) => {
    if (i === 0) return null;
    const before = offsetMinutes(occurrences[i - 1].local);
    const after = offsetMinutes(o.local);
    if (after === before) return null;
    const shift = Math.abs(after - before);
    const span = shift % 60 ? `${shift} min` : `${shift / 60} h`;
    return after > before
      ? { kind: "gap", text: `DST gap: clocks went forward ${span} (${formatOffset(before)} → ${formatOffset(after)}); local times in the gap do not exist (on_gap)` }
      : { kind: "repeat", text: `DST repeat: clocks went back ${span} (${formatOffset(before)} → ${formatOffset(after)}); local times in the overlap happen twice (on_overlap)` };
  });
}

function previewTable(occurrences) {
  const notes = dstNotes(occurrences);
  const rows = occurrences.map((o, i) => ({ ...o, n: i + 1, note: notes[i] }));
  return table(
    [
      { label: "#", cell: (r) => String(r.n) },
      { label: "UTC", cell: (r) => h("span", { class: "mono" }, r.utc) },
      { label: "Local", cell: (r) => h("span", { class: "mono" }, r.local.slice(0, 19).replace("T", " ")) },
      { label: "Offset", cell: (r) => formatOffset(offsetMinutes(r.local)) },
      { label: "DST", cell: (r) => (r.note ? h("span", {}, badge(r.note.kind === "gap" ? "gap" : "repeat", r.note.kind), " ", r.note.text) : "") },
      { label: "Fires", cell: (r) => (r.excluded_by ? h("span", {}, badge("excluded", "skipped"), ` by ${r.excluded_by}`) : "yes") },
    ],
    rows,
    (r) => ({ class: [r.note ? `dst dst-${r.note.kind}` : "", r.excluded_by ? "excluded" : ""].join(" ").trim() || null }),
  );
}

export async function preview(root) {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const input = (attrs) => h("input", attrs);
  const cron = input({ id: "p-cron", name: "cron", value: "30 2 * * *", placeholder: "m h dom mon dow" });
  const every = input({ id: "p-every", name: "every", placeholder: "15m (instead of cron)" });
  const timezone = input({ id: "p-timezone", name: "timezone", value: zone });
  const count = input({ id: "p-count", type: "number", min: "1", max: "100", value: "10" });
  const after = input({ id: "p-after", type: "datetime-local" });
  const onGap = h("select", { id: "p-gap" }, ["shift", "skip"].map((v) => h("option", { value: v }, v)));
  const onOverlap = h("select", { id: "p-overlap" }, ["first", "last", "both"].map((v) => h("option", { value: v }, v)));
  const calendarNames = input({ id: "p-calendars", name: "calendars", placeholder: "holidays, weekends" });
  const out = h("div", { class: "results" });

  async function run(e) {
    e.preventDefault();
    const body = { count: Number(count.value || 10), on_gap: onGap.value, on_overlap: onOverlap.value };
    if (every.value.trim()) body.every = every.value.trim();
    else body.cron = cron.value.trim();
    if (timezone.value.trim() && !body.every) body.timezone = timezone.value.trim();
    if (after.value) body.after = localInputToIso(after.value);
    const names = calendarNames.value.split(",").map((n) => n.trim()).filter(Boolean);
    if (names.length) body.calendars = names;
    try {
      const answer = await api("POST", "/v1/schedules/preview", body);
      const changes = dstNotes(answer.occurrences).filter(Boolean).length;
      const summary = changes ? `${changes} clock change${changes === 1 ? "" : "s"} in this stretch (marked below).` : "No clock change in this stretch.";
      mount(out, h("p", { class: "muted" }, summary), previewTable(answer.occurrences));
    } catch (err) {
      mount(out, notice(err.field ? `${err.field}: ${err.message}` : err.message));
    }
  }

  mount(
    root,
    h("h2", {}, "Cron preview"),
    h("p", { class: "muted" }, "The next fire times of a rule, on its zone's wall clock; nothing is written."),
    h(
      "form",
      { class: "filters", onsubmit: run },
      h("label", {}, "Cron", cron),
      h("label", {}, "or every", every),
      h("label", {}, "Time zone", timezone),
      h("label", {}, "After", after),
      h("label", {}, "Count", count),
      h("label", {}, "on_gap", onGap),
      h("label", {}, "on_overlap", onOverlap),
      h("label", {}, "Calendars", calendarNames),
      h("button", { type: "submit" }, "Preview"),
    ),
    out,
  );
}

// --- throttle policies ----------------------------------------------------------------------------------

export async function policies(root, _params, ctx) {
  const out = h("div", { class: "results" });
  mount(root, h("h2", {}, "Throttle policies"), h("p", { class: "muted" }, "in_flight: tokens held now, events delivered and not yet released."), out);

  async function refresh() {
    try {
      const { policies: list } = await api("GET", "/v1/throttle-policies");
      const full = await Promise.all(list.map((p) => api("GET", `/v1/throttle-policies/${seg("policy", p.name)}`)));
      if (!full.length) return mount(out, notice("No throttle policies yet (PUT /v1/throttle-policies/{name}).", "info"));
      mount(
        out,
        table(
          [
            { label: "Policy", cell: (p) => h("span", { class: "mono" }, p.name) },
            {
              label: "In flight",
              cell: (p) => h("span", { class: "meter" }, h("progress", { max: String(p.max_in_flight), value: String(p.in_flight) }), ` ${p.in_flight} / ${p.max_in_flight}`),
            },
            { label: "Release timeout", cell: (p) => `${p.release_timeout_s} s` },
            { label: "Updated", cell: (p) => when(p.updated_at) },
          ],
          full,
        ),
      );
    } catch (err) {
      mount(out, notice(err.message));
    }
  }
  await refresh();
  ctx.every(3000, refresh);
}
