// The JSON API, called with the signed-in key. The key lives in this tab's sessionStorage only: it is gone
// when the tab closes, and no other tab or site can read it.

const STORE_KEY = "tickd.session";

export class ApiError extends Error {
  constructor(status, body) {
    const detail = (body && body.error) || {};
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.code = detail.code || "";
    this.field = detail.field || null;
  }
}

export function session() {
  const raw = sessionStorage.getItem(STORE_KEY);
  return raw ? JSON.parse(raw) : null;
}

export function signOut() {
  sessionStorage.removeItem(STORE_KEY);
}

async function call(token, method, path, body) {
  const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!resp.ok) throw new ApiError(resp.status, parsed);
  return parsed;
}

export function api(method, path, body) {
  const current = session();
  if (!current) throw new ApiError(401, { error: { message: "not signed in" } });
  return call(current.token, method, path, body);
}

// Which kind of key this is, asked of the API itself: a client key reads its own throttle policies; the
// admin token lists clients. Either answer 401 means the key is unknown.
export async function signIn(token) {
  try {
    await call(token, "GET", "/v1/throttle-policies");
    const clientId = token.split(".", 1)[0];
    return save({ token, role: "tenant", name: clientId });
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) throw err;
  }
  await call(token, "GET", "/v1/clients");
  return save({ token, role: "admin", name: "admin" });
}

function save(value) {
  sessionStorage.setItem(STORE_KEY, JSON.stringify(value));
  return value;
}

// Follow next_cursor until `want` items arrived or `maxPages` pages were read: a listing page may be short
// or empty and still carry a cursor (README, GET /v1/schedules).
export async function pages(path, field, cursor, want, maxPages = 20) {
  const items = [];
  let next = cursor;
  for (let page = 0; page < maxPages && items.length < want; page += 1) {
    const sep = path.includes("?") ? "&" : "?";
    const url = next ? `${path}${sep}cursor=${encodeURIComponent(next)}` : path;
    const answer = await api("GET", url);
    items.push(...answer[field]);
    next = answer.next_cursor;
    if (!next) break;
  }
  return { items, next };
}
