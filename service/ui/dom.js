// Small DOM helpers: elements are built with h() and text nodes, never from HTML strings, so nothing the
// API returns (payloads, error messages, ids) can become markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function mount(target, ...children) {
  target.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// A table that becomes one card per row on a narrow screen: each cell carries its column name.
export function table(columns, rows, rowAttrs = () => ({})) {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c.label))));
  const body = h(
    "tbody",
    {},
    rows.map((row) =>
      h("tr", rowAttrs(row), columns.map((c) => h("td", { "data-label": c.label }, c.cell(row)))),
    ),
  );
  return h("table", { class: "grid" }, head, body);
}

export function badge(text, kind = text) {
  return h("span", { class: `badge badge-${kind}` }, text);
}

export function notice(message, kind = "error") {
  return h("p", { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "status" }, message);
}

const DATE = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

// A time as the browser's local clock shows it, with the exact UTC instant in the tooltip.
export function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const at = new Date(iso);
  return h("time", { datetime: iso, title: iso }, DATE.format(at));
}

// A callback as one line: the Kafka topic, or the HTTP method and URL.
export function callbackText(callback) {
  return callback.type === "kafka" ? `kafka: ${callback.topic}` : `${callback.method || "POST"} ${callback.url}`;
}

export function seconds(value) {
  if (value === null || value === undefined) return "—";
  return value < 1 ? `${Math.round(value * 1000)} ms` : `${value.toFixed(value < 10 ? 2 : 0)} s`;
}

// The value of a <input type="datetime-local"> (browser's local clock) as an RFC 3339 instant.
export function localInputToIso(value) {
  return value ? new Date(value).toISOString() : "";
}

export function isoToLocalInput(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}

// Runs `action` with the button disabled, so a double click does not send the request twice.
export async function busy(button, action) {
  button.disabled = true;
  try {
    return await action();
  } finally {
    button.disabled = false;
  }
}
