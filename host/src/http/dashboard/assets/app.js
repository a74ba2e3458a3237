// The dashboard's frame: a hash router over the views of views.js, and the
// host's change feed (/dashboard/events), whose ticks refresh the view shown.
import { views } from "/dashboard/views.js";
import { HUB, onHub } from "/dashboard/lib.js";

function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "components";
  const [path, query = ""] = hash.split("?");
  const decode = (part) => {
    try { return decodeURIComponent(part); } catch { return part; }
  };
  return { parts: path.split("/").map(decode), query: new URLSearchParams(query) };
}

const SECTIONS = { instance: "orchestrations", run: "agents", session: "agents" };
let shown = null;

function render() {
  if (shown && shown.dispose) shown.dispose();
  const { parts, query } = route();
  const name = Object.hasOwn(views, parts[0]) ? parts[0] : "components";
  const section = SECTIONS[name] || name;
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.getAttribute("href") === `#/${section}`);
  }
  const main = document.getElementById("view");
  main.replaceChildren();
  shown = views[name](main, parts.slice(1), query) || {};
}

/** The change feed: each tick refreshes the view shown (one refresh at a time). */
function listen() {
  const live = document.getElementById("live");
  const events = new EventSource(onHub("/dashboard/events"));
  let busy = false;
  events.addEventListener("open", () => {
    live.textContent = "live";
    live.classList.add("on");
  });
  events.addEventListener("error", () => {
    live.textContent = "reconnecting";
    live.classList.remove("on");
  });
  events.addEventListener("tick", async (event) => {
    if (busy || !shown || !shown.tick) return;
    busy = true;
    try {
      await shown.tick(JSON.parse(event.data));
    } catch (e) {
      console.warn("refresh failed", e);
    } finally {
      busy = false;
    }
  });
}

window.addEventListener("hashchange", render);
document.getElementById("hub").textContent = HUB ? `task hub ${HUB}` : "";
render();
listen();
