// What every view uses: the host's API (mounted again under
// /dashboard/api, so a browser signed in to the dashboard sends its key on
// every request), a small DOM builder that never parses text as HTML, and
// short notes in the corner.

export const API = "/dashboard/api";

/** The task hub the page shows: `?taskHub=NAME` in its address (a host
 * serving several hubs), else the host's own. */
export const HUB = new URLSearchParams(location.search).get("taskHub") || "";

/** `url` on the page's task hub: the host picks the hub by `taskHub=`. */
export function onHub(url) {
  if (!HUB) return url;
  return `${url}${url.includes("?") ? "&" : "?"}taskHub=${encodeURIComponent(HUB)}`;
}

/** A refusal of the API: its status and the JSON body that says why. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `the host answered ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** Calls the host's API; resolves to { status, data, headers } or throws ApiError. */
export async function api(path, { method = "GET", body, headers = {} } = {}) {
  // The header says the request comes from this page: the host refuses a
  // change made with the browser's sign-in without it (another site's form
  // could otherwise use that sign-in).
  const init = {
    method,
    credentials: "same-origin",
    headers: { accept: "application/json", "x-agenthost-dashboard": "1", ...headers },
  };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["content-type"] = "application/json";
  }
  const response = await fetch(onHub(API + path), init);
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return { status: response.status, data, headers: response.headers };
}

/** An element: attributes (`on…` are listeners), then children (text stays text). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "value") el.value = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** A short message in the corner, gone after a few seconds. */
export function toast(text, bad = false) {
  const note = h("div", { class: bad ? "bad" : "" }, text);
  document.getElementById("toast").append(note);
  setTimeout(() => note.remove(), 6000);
}

/** Runs an action of a button; tells what the host answered. */
export async function act(what, call) {
  try {
    await call();
    toast(`${what}: done`);
    return true;
  } catch (e) {
    toast(`${what}: ${e.message}`, true);
    return false;
  }
}

export function go(hash) {
  location.hash = hash;
}
