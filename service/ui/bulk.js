// Bulk actions: count the schedules a tag selects (a dry run), then pause, resume, cancel or trigger them
// all, or redrive their dead letters, as a background job; the client's jobs with their progress, refreshed
// while one runs.
import { api, pages } from "./api.js";
import { busy, h, mount, notice, table, when } from "./dom.js";

const ACTIONS = ["pause", "resume", "cancel", "trigger", "redrive"];
const STATUSES = ["", "scheduled", "paused", "succeeded", "failed", "cancelled"];
const TAG = /^[a-z0-9][a-z0-9_.-]{0,62}=[\x20-\x7e]{0,128}$/;
const VERBS = { pause: "Pause", resume: "Resume", cancel: "Cancel", trigger: "Trigger", redrive: "Redrive" };
// What a job counts: schedules, or for a redrive the dead letters of the last 7 days (the API's default).
const noun = (act, n) => (act === "redrive" ? `dead letter${n === 1 ? "" : "s"}` : `schedule${n === 1 ? "" : "s"}`);

// A backfill (started from a recurring schedule's page): no tag, its schedule and range instead.
function backfillText(b) {
  return h("span", { class: "backfill" }, [
    "occurrences of ",
    h("a", { href: `#/schedules/${encodeURIComponent(b.schedule_id)}`, class: "mono" }, b.schedule_id.slice(0, 8)),
    " from ",
    when(b.from),
    " to ",
    when(b.to),
  ]);
}

function jobRows(jobs, onStop) {
  const open = (j) => j.state === "queued" || j.state === "running";
  const columns = [
    { label: "Started", cell: (j) => when(j.created_at) },
    { label: "Action", cell: (j) => (j.dry_run ? `count (${j.action})` : j.action) },
    { label: "Tag", cell: (j) => (j.backfill ? backfillText(j.backfill) : h("span", { class: "mono" }, j.filter.tag + (j.filter.status ? ` · ${j.filter.status}` : ""))) },
    { label: "State", cell: (j) => h("span", { class: "state" }, j.state) },
    { label: "Matched", cell: (j) => h("span", { class: "matched" }, String(j.matched)) },
    { label: "Changed", cell: (j) => String(j.changed) },
    { label: "Unchanged", cell: (j) => String(j.unchanged) },
    { label: "Failed", cell: (j) => h("span", { title: j.failures.map((f) => `${f.nominal_at || f.schedule_id}: ${f.reason}`).join("\n") }, String(j.failed)) },
    { label: "", cell: (j) => (open(j) ? h("button", { type: "button", class: "secondary", onclick: () => onStop(j) }, "Stop") : "") },
  ];
  const shown = table(columns, jobs, (j) => ({ "data-job": j.job_id, "data-state": j.state }));
  shown.id = "jobs";
  return shown;
}

export async function bulk(root, _params, ctx) {
  const action = h("select", { id: "bulk-action" }, ACTIONS.map((a) => h("option", { value: a }, VERBS[a])));
  const tag = h("input", { id: "bulk-tag", placeholder: "team=payments", required: true, autocomplete: "off" });
  const status = h("select", { id: "bulk-status" }, STATUSES.map((s) => h("option", { value: s }, s || "any status")));
  const count = h("button", { type: "submit", id: "bulk-count" }, "Count");
  const run = h("button", { type: "button", id: "bulk-run", disabled: true }, "Run");
  const summary = h("p", { class: "muted", id: "bulk-summary" }, "Count first: a dry run changes nothing.");
  const message = h("div");
  const list = h("div", { class: "results" });
  let counted = null; // the filter and action a dry run counted: what Run acts on

  function filter() {
    const text = tag.value.trim();
    if (!TAG.test(text)) throw new Error("the tag is key=value: a key of a-z 0-9 _ . - (starting with a letter or digit), then = and a value");
    return status.value ? { tag: text, status: status.value } : { tag: text };
  }

  async function waitDone(jobId) {
    for (;;) {
      const job = await api("GET", `/v1/bulk-jobs/${encodeURIComponent(jobId)}`);
      if (job.state === "done" || job.state === "cancelled") return job;
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  async function refresh() {
    try {
      const page = await pages("/v1/bulk-jobs?limit=20", "jobs", null, 20);
      mount(list, page.items.length ? jobRows(page.items, stop) : h("p", { class: "muted" }, "No bulk jobs yet."));
      return page.items.some((j) => j.state === "queued" || j.state === "running");
    } catch (err) {
      mount(message, notice(err.message));
      return false;
    }
  }

  async function stop(job) {
    try {
      await api("POST", `/v1/bulk-jobs/${encodeURIComponent(job.job_id)}/cancel`);
      mount(message, notice("Job stopped: what it did stands.", "ok"));
    } catch (err) {
      mount(message, notice(`Not stopped: ${err.message}`));
    }
    await refresh();
  }

  function changed() {
    counted = null;
    run.disabled = true;
    run.textContent = "Run";
    mount(summary, "Count first: a dry run changes nothing.");
  }

  async function onCount(event) {
    event.preventDefault();
    await busy(count, async () => {
      try {
        const wanted = filter();
        const started = await api("POST", "/v1/bulk-jobs", { action: action.value, filter: wanted, dry_run: true });
        mount(message);
        mount(summary, "Counting…");
        const job = await waitDone(started.job_id);
        // A redrive's range was fixed by the count (failed in the last 7 days): the run takes the same one.
        const range = action.value === "redrive" ? { from: job.filter.from, to: job.filter.to } : {};
        counted = { action: action.value, filter: { ...wanted, ...range }, matched: job.matched };
        run.disabled = job.matched === 0;
        run.textContent = `${VERBS[action.value]} ${job.matched} ${noun(action.value, job.matched)}`;
        const of = action.value === "redrive" ? " failed in the last 7 days, of schedules that" : "";
        mount(summary, `${job.matched} ${noun(action.value, job.matched)}${of} match ${wanted.tag}${wanted.status ? ` (${wanted.status})` : ""}.`);
      } catch (err) {
        mount(message, notice(err.message));
      }
      await refresh();
    });
  }

  async function onRun() {
    if (!counted) return;
    run.disabled = true; // once: a new count enables it again
    try {
      await api("POST", "/v1/bulk-jobs", { action: counted.action, filter: counted.filter });
      mount(message, notice(`${VERBS[counted.action]} started for ${counted.matched} ${noun(counted.action, counted.matched)}: progress below.`, "ok"));
      changed();
    } catch (err) {
      mount(message, notice(err.message));
      run.disabled = false;
    }
    if (await refresh()) ctx.every(1000, refresh);
  }

  [action, tag, status].forEach((el) => el.addEventListener("input", changed));
  run.onclick = onRun;
  mount(
    root,
    h("h2", {}, "Bulk actions"),
    h("p", { class: "muted" }, "Act on every schedule with a tag, whatever its due time, or redrive their dead letters. Jobs run in the background at a bounded rate; a schedule is changed once even if an API replica dies mid-job."),
    h(
      "form",
      { class: "filters", onsubmit: onCount },
      h("label", {}, "Action", action),
      h("label", { class: "grow" }, "Tag (key=value)", tag),
      h("label", {}, "Status", status),
      count,
      run,
    ),
    summary,
    message,
    list,
  );
  if (await refresh()) ctx.every(1000, refresh);
}
