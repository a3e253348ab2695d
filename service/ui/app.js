// Sign-in, navigation and the view router. Views are plain functions of (root, params, ctx); ctx.every
// runs a refresh while the view is on screen and stops when another one replaces it. A view with `one`
// also shows one item of its list: #/<path>/<id> calls one(root, id, ctx), once the id (decoded once) is
// one segment matching the grammar of the view's `id` kind; any other text is refused before any request.

import { ApiError, BadId, isId, session, signIn, signOut } from "./api.js";
import { h, mount, notice } from "./dom.js";
import * as admin from "./admin.js";
import * as bulkView from "./bulk.js";
import * as calendarsView from "./calendars.js";
import * as letters from "./letters.js";
import * as notices from "./notices.js";
import * as stats from "./stats.js";
import * as tenant from "./tenant.js";

const VIEWS = {
  tenant: [
    { path: "schedules", label: "Schedules", view: tenant.schedules, one: tenant.scheduleView, id: "schedule" },
    { path: "dead-letters", label: "Dead letters", view: letters.deadLetters, one: letters.letterView, id: "deadLetter" },
    { path: "preview", label: "Cron preview", view: tenant.preview },
    { path: "policies", label: "Throttle policies", view: tenant.policies },
    { path: "calendars", label: "Calendars", view: calendarsView.calendars },
    { path: "stats", label: "Lateness", view: stats.stats },
    { path: "bulk", label: "Bulk actions", view: bulkView.bulk },
    { path: "notifications", label: "Notifications", view: notices.notices },
  ],
  admin: [
    { path: "clients", label: "Clients", view: admin.clients },
    { path: "nodes", label: "Nodes", view: admin.nodes },
    { path: "cluster-stats", label: "Lateness", view: admin.clusterStats, one: admin.clientStats, id: "client" },
  ],
};

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
let current = null;

function context() {
  const timers = [];
  const ctx = {
    alive: true,
    every(ms, fn) {
      const tick = async () => {
        if (!ctx.alive) return;
        const again = await fn();
        if (ctx.alive && again !== false) timers.push(setTimeout(tick, ms));
      };
      timers.push(setTimeout(tick, ms));
    },
    stop() {
      ctx.alive = false;
      timers.forEach(clearTimeout);
    },
  };
  return ctx;
}

function signInForm(message) {
  const token = h("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, placeholder: "dev.Z_fQ… or the admin token" });
  const button = h("button", { type: "submit" }, "Sign in");
  const error = h("div");
  const form = h(
    "form",
    { class: "signin card", onsubmit: submit },
    h("h2", {}, "Sign in"),
    h("p", { class: "muted" }, "With a client's API key (its schedules, dead letters, lateness, previews, throttle policies and calendars) or the admin token (clients, quotas, nodes and the cluster's lateness). The key stays in this tab only."),
    h("label", {}, "API key or admin token", token),
    error,
    button,
  );
  async function submit(e) {
    e.preventDefault();
    button.disabled = true;
    try {
      const me = await signIn(token.value.trim());
      go(`#/${VIEWS[me.role][0].path}`);
    } catch (err) {
      const text = err instanceof ApiError && err.status === 401 ? "This key is not known to tickd." : err.message;
      mount(error, notice(text));
    } finally {
      button.disabled = false;
    }
  }
  mount(main, message || null, form);
  mount(nav);
  mount(who);
  token.focus();
}

function header(me, active) {
  mount(
    nav,
    VIEWS[me.role].map((v) => h("a", { href: `#/${v.path}`, class: v.path === active ? "active" : null, "aria-current": v.path === active ? "page" : null }, v.label)),
  );
  mount(
    who,
    h("span", {}, me.role === "admin" ? "admin" : h("span", {}, "client ", h("strong", { class: "mono" }, me.name))),
    h("button", { type: "button", class: "secondary small", id: "signout", onclick: () => { signOut(); go("#/"); } }, "Sign out"),
  );
}

// A new hash fires hashchange, which routes; the same hash does not, so route here.
function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function route() {
  if (current) current.stop();
  const me = session();
  if (!me) return signInForm();
  const [path, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const views = VIEWS[me.role];
  const found = views.find((v) => v.path === path) || views[0];
  header(me, found.path);
  current = context();
  const view = found.one && rest.some(Boolean) ? oneView(found, rest) : found.view;
  try {
    await view(main, rest, current);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      signOut();
      return signInForm(notice("The key was refused (rotated or removed?): sign in again."));
    }
    mount(main, notice(err.message));
  }
}

// The view of one item, for the rest of the hash after "#/<path>/": all of it is the id (a "/" in it, raw or
// encoded, makes it no id), decoded once; an id that is not valid for the view is refused, with no request.
function oneView(found, rest) {
  const raw = rest.join("/");
  let id = null;
  try {
    id = decodeURIComponent(raw);
  } catch {
    id = null; // a malformed escape ("%E0%A4%A"): no id at all
  }
  if (id === null || !isId(found.id, id)) {
    return async (root) => {
      const back = h("p", {}, h("a", { href: `#/${found.path}` }, `← ${found.label}`));
      mount(root, back, notice(new BadId(found.id, id === null ? raw : id).message));
    };
  }
  return (root, _p, ctx) => found.one(root, id, ctx);
}

window.addEventListener("hashchange", route);
route();
