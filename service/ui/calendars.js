// A client's calendars: each one's zone, excluded dates, ranges and weekdays, its version and when it last
// changed. Read-only here: a calendar is written with PUT /v1/calendars/{name} (or `tickd calendars put`),
// and the cron preview shows what the ones named take away.

import { api } from "./api.js";
import { h, mount, notice, table, when } from "./dom.js";

const SHOWN_DATES = 6;

function dates(list) {
  if (!list.length) return "";
  const shown = list.slice(0, SHOWN_DATES).join(", ");
  return list.length > SHOWN_DATES ? `${shown} … (${list.length} in all)` : shown;
}

function ranges(list) {
  if (!list.length) return "";
  return h("ul", { class: "plain" }, list.map((r) => h("li", { class: "mono" }, `${r.from.replace("T", " ")} → ${r.to.replace("T", " ")}`)));
}

export async function calendars(root, _params, ctx) {
  const out = h("div", { class: "results" });
  mount(
    root,
    h("h2", {}, "Calendars"),
    h("p", { class: "muted" }, "Occurrences of the recurring schedules that name a calendar are not fired on its dates, in its ranges or on its weekdays (read on its own zone's wall clock)."),
    out,
  );

  async function refresh() {
    try {
      const { calendars: list } = await api("GET", "/v1/calendars");
      if (!list.length) return mount(out, notice("No calendars yet (PUT /v1/calendars/{name}, or tickd calendars put).", "info"));
      mount(
        out,
        table(
          [
            { label: "Calendar", cell: (c) => h("span", { class: "mono" }, c.name) },
            { label: "Version", cell: (c) => `v${c.version}` },
            { label: "Zone", cell: (c) => c.timezone },
            { label: "Dates", cell: (c) => dates(c.dates) },
            { label: "Ranges", cell: (c) => ranges(c.ranges) },
            { label: "Weekdays", cell: (c) => c.weekdays.join(", ") },
            { label: "Changed", cell: (c) => when(c.updated_at) },
          ],
          list,
          (c) => ({ "data-calendar": c.name }),
        ),
      );
    } catch (err) {
      mount(out, notice(err.message));
    }
  }
  await refresh();
  ctx.every(5000, refresh);
}
