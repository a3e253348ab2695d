// The JSON API, called with the signed-in key. The key lives in this tab's sessionStorage only: it is gone
// when the tab closes, and no other tab or site can read it.

const STORE_KEY = "tickd.session";

// The API's id grammars (service/params.py). Every id put into a request path goes through seg(): it must
// match its grammar and is then encoded, so an id taken from the address bar ("#/schedules/..%2F..%2Fadmin",
// "#/schedules/x?y#z") can neither climb to another endpoint nor add a query or a fragment.
const ID = {
  schedule: [/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, "schedule id"],
  deadLetter: [/^\d{1,15}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, "dead letter id (<failed_at epoch ms>-<schedule id>)"],
  client: [/^[a-z0-9_-]{1,64}$/, "client id"],
  policy: [/^[a-z0-9_-]{1,64}$/, "throttle policy name"],
  key: [/^[A-Za-z0-9._~:@-]{1,128}$/, "business key"],
};
// "." and ".." (in any spelling a URL parser reads as one) would be resolved away by fetch.
const DOT_SEGMENT = /^(?:\.|%2e){1,2}$/i;
// What a request path may look like: /v1/, then segments of unreserved or percent-encoded characters
// (what encodeURIComponent leaves), then an optional query; no fragment, no backslash, no dot segment.
const PATH = /^\/v1(?:\/[A-Za-z0-9\-._~!*'()%:@]+)*\/?(?:\?[^#\\]*)?$/;

export class BadId extends Error {
  constructor(kind, value) {
    super(`${JSON.stringify(String(value))} is not a valid ${ID[kind][1]}.`);
    this.kind = kind;
  }
}

export function isId(kind, value) {
  return typeof value === "string" && ID[kind][0].test(value) && !DOT_SEGMENT.test(value);
}

// One path segment: `value` checked against the grammar of `kind` (BadId if it does not match), encoded.
export function seg(kind, value) {
  if (!isId(kind, value)) throw new BadId(kind, value);
  return encodeURIComponent(value);
}

function checkedPath(path) {
  const bare = path.split("?", 1)[0];
  if (!PATH.test(path) || bare.split("/").some((s) => DOT_SEGMENT.test(s))) {
    throw new ApiError(0, { error: { message: `refused to call ${JSON.stringify(path)}: not an API path` } });
  }
  return path;
}

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
  const resp = await fetch(checkedPath(path), init);
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
