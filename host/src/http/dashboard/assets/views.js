// The dashboard's views. Each draws itself into `main` and returns
// { tick(change), dispose() }: `tick` runs once a second with what the
// host's change feed says, and redraws the data (never the forms a person
// may be typing into); `dispose` runs when another view takes the page.
import { api, act, go, h, toast, API, onHub } from "/dashboard/lib.js";

const enc = encodeURIComponent;
const INSTANCES = "/runtime/webhooks/durabletask/instances";

function when(value) {
  if (!value) return "";
  const t = new Date(value);
  return isNaN(t) ? String(value) : t.toLocaleString();
}

function ms(from, to) {
  const a = Date.parse(from), b = Date.parse(to);
  if (isNaN(a) || isNaN(b)) return "";
  const d = b - a;
  return d < 1000 ? `${d} ms` : d < 60000 ? `${(d / 1000).toFixed(1)} s` : `${(d / 60000).toFixed(1)} min`;
}

function json(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "none");
  return h("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

function status(text) {
  return h("span", { class: `status ${text}`, "data-testid": "status" }, text);
}

function failed(into, e) {
  into.replaceChildren(h("p", { class: "error", "data-testid": "error" }, e.message));
}

/** A data section redrawn by `draw()` on demand and on each tick. */
function section(main, draw) {
  const body = h("div");
  main.append(body);
  const refresh = async () => {
    try {
      const content = await draw();
      body.replaceChildren(...[content].flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
    } catch (e) {
      failed(body, e);
    }
  };
  refresh();
  return { body, refresh };
}

// Components -----------------------------------------------------------

function components(main) {
  main.append(h("h2", {}, "Components"));
  let seen = null;
  const data = section(main, async () => {
    const { data } = await api("/api/components");
    const rows = data.components.map((c) =>
      h("tr", { "data-testid": `component-${c.name}` },
        h("td", {}, h("strong", {}, c.name), h("div", { class: "muted mono" }, c.file)),
        h("td", { class: "mono", title: c.digest }, String(c.digest || "").slice(0, 12)),
        h("td", {}, (c.agents || []).map((a) => agentCell(a, c.activities || []))),
        h("td", {}, (c.activities || []).map((a) => toolCell(a))),
        h("td", {}, (c.orchestrations || []).map((o) => h("div", { class: "mono" }, h("a", { href: `#/orchestrations?name=${enc(o.name || o)}` }, o.name || o)))),
        h("td", { "data-testid": "versions" }, (c.versions_in_use || []).map((v) => versionLine(v)), replayLine(c.name, c.replay_check)),
        h("td", {}, h("details", {}, h("summary", {}, "grants"), json(c.grants))),
        h("td", {}, `${Number(c.load_ms || 0).toFixed(1)} ms`, h("div", { class: "muted" }, c.from_cache ? "from cache" : "compiled")),
        h("td", { class: "error" }, c.load_error || "")));
    const retired = (data.versions_in_use || []).map((v) =>
      h("tr", {}, h("td", {}, v.name), h("td", {}, versionLine(v))));
    const failures = (data.failures || []).map((f) =>
      h("tr", { "data-testid": "load-failure" }, h("td", { class: "mono" }, f.file), h("td", { class: "error" }, f.error)));
    return [
      h("table", { "data-testid": "components" },
        h("tr", {}, ["Component", "Digest", "Agents and their tools", "Tools and activities", "Orchestrations", "Versions in use", "Grants", "Load", "Error"].map((t) => h("th", {}, t))),
        rows.length ? rows : h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No component is served: drop a .wasm file into the components directory."))),
      data.versions_error ? h("p", { class: "error" }, `versions in use: ${data.versions_error}`) : [],
      retired.length ? [h("h3", {}, "Versions of components no longer served, still in use"), h("table", {}, h("tr", {}, h("th", {}, "Component"), h("th", {}, "Version")), retired)] : [],
      failures.length ? [h("h3", {}, "Files that did not load"), h("table", { "data-testid": "failures" }, h("tr", {}, h("th", {}, "File"), h("th", {}, "Error")), failures)] : [],
    ];
  });
  return {
    async tick(change) {
      if (change.components !== seen) {
        seen = change.components;
        await data.refresh();
      }
    },
  };
}

/** The last replay check of a component's version against older versions' instances. */
function replayLine(name, check) {
  if (!check || !check.instances) return [];
  const running = check.finishedAt ? "" : " (running)";
  const parts = [`${check.compatible} compatible`, `${check.divergent} divergent`];
  if (check.upgraded) parts.push(`${check.upgraded} moved here`);
  if (check.unchecked) parts.push(`${check.unchecked} unchecked`);
  return h("div", { "data-testid": "replay-check" },
    h("a", { href: onHub(`${API}/api/components/${enc(name)}`), target: "_blank" }, "replay check"),
    `: ${parts.join(", ")} of ${check.instances}${running}`,
    h("span", { class: "muted" }, ` (${check.policy})`));
}

/** A version instances not ended still run on. */
function versionLine(v) {
  const count = `${v.instances} instance${v.instances === 1 ? "" : "s"} not ended`;
  return h("div", { class: "mono", title: v.digest }, String(v.digest).slice(0, 14), " ",
    h("span", { class: v.served ? "muted" : "waiting" }, `${count}${v.served ? "" : " (an older version)"}`));
}

/** An agent and its tools (names; their specs are the component's activities). */
function agentCell(agent, activities) {
  const approval = (name) => (activities.find((a) => a.name === name) || {}).approval;
  return h("div", { "data-testid": `agent-${agent.name}` },
    h("a", { href: `#/agents/${enc(agent.name)}` }, agent.name),
    (agent.tools || []).map((tool) => h("div", { class: "mono muted" }, `· ${tool}`,
      approval(tool) === "always-require" ? h("span", { class: "waiting" }, " (approval)") : "")));
}

/** A tool or activity: its approval mode, description and argument schema. */
function toolCell(tool) {
  return h("details", { class: "mono" },
    h("summary", {}, tool.name, tool.approval ? h("span", { class: "muted" }, ` ${tool.approval}`) : ""),
    tool.description ? h("div", { class: "muted" }, tool.description) : "",
    json(tool.parameters));
}

function parseMaybe(text) {
  if (typeof text !== "string") return text;
  try { return JSON.parse(text); } catch { return text; }
}

// Orchestrations -------------------------------------------------------

const STATUSES = ["", "Pending", "Running", "Suspended", "Completed", "Failed", "Terminated", "ContinuedAsNew"];

function orchestrations(main, _, query) {
  main.append(h("h2", {}, "Orchestrations"));
  const field = (name, label, attrs = {}) => h("label", {}, label, h("input", { name, value: query.get(name) || "", ...attrs }));
  const select = h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: query.get("status") === s }, s || "any")));
  const form = h("form", { class: "filters", "data-testid": "filters" },
    h("label", {}, "Status", select),
    field("name", "Orchestration"),
    field("prefix", "Id starts with"),
    field("from", "Created after", { type: "datetime-local" }),
    h("button", { class: "primary", type: "submit" }, "Filter"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) params.set(k, v);
    go(`#/orchestrations?${params}`);
  });
  main.append(form);
  // Pages: the continuation token of each page shown so far.
  const tokens = [null];
  const data = section(main, async () => {
    const params = new URLSearchParams({ top: "25", showInput: "false", newestFirst: "true" });
    if (query.get("status")) params.set("runtimeStatus", query.get("status"));
    if (query.get("name")) params.set("name", query.get("name"));
    if (query.get("prefix")) params.set("instanceIdPrefix", query.get("prefix"));
    if (query.get("from")) params.set("createdTimeFrom", new Date(query.get("from")).toISOString());
    const token = tokens[tokens.length - 1];
    if (token) params.set("continuationToken", token);
    const { data, headers } = await api(`${INSTANCES}?${params}`);
    const next = headers.get("x-ms-continuation-token");
    const rows = data.map((i) =>
      h("tr", { class: "link", "data-testid": "instance-row", "data-id": i.instanceId, onclick: () => go(`#/instance/${enc(i.instanceId)}`) },
        h("td", { class: "mono" }, i.instanceId), h("td", {}, i.name), h("td", {}, status(i.runtimeStatus)),
        h("td", {}, when(i.createdTime)), h("td", {}, when(i.lastUpdatedTime))));
    return [
      h("table", { "data-testid": "instances" },
        h("tr", {}, ["Instance", "Orchestration", "Status", "Created", "Updated"].map((t) => h("th", {}, t))),
        rows.length ? rows : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No instance matches."))),
      h("div", { class: "actions" },
        h("button", { disabled: tokens.length < 2, onclick: () => { tokens.pop(); data.refresh(); } }, "Previous page"),
        h("button", { disabled: !next, "data-testid": "next-page", onclick: () => { tokens.push(next); data.refresh(); } }, "Next page")),
    ];
  });
  return { tick: () => data.refresh() };
}

/** The journal as steps: each call with what became of it (by task number,
 * which is the call's position). A raised event is shown at the first wait
 * for its name still open, in call order: the host gives it to the wait its
 * code awaited first, which differs only when a wait lost a race (when_any)
 * and a later wait for the same name took the event. */
function steps(history) {
  const calls = [];
  const outcomes = new Map();
  const raised = [];
  for (const entry of history) {
    if (entry.call) calls.push(entry);
    else if (entry.event === "event_raised") raised.push(entry);
    else if (entry.event) {
      if (!outcomes.has(entry.task)) outcomes.set(entry.task, []);
      outcomes.get(entry.task).push(entry);
    }
  }
  const waits = {};
  calls.forEach((c, i) => { if (c.call === "wait_for_event") (waits[c.name] ||= []).push(i); });
  for (const event of raised) {
    const queue = waits[event.name];
    if (queue && queue.length) outcomes.set(queue.shift(), [event]);
  }
  return calls.map((call, i) => ({ call, outcomes: outcomes.get(i) || [] }));
}

const TASKS = new Set(["call_agent", "call_activity", "call_remote_agent", "call_orchestration", "start_timer", "wait_for_event"]);

function describe(call) {
  switch (call.call) {
    case "call_agent": return `agent ${call.agent}`;
    case "call_activity": return `activity ${call.name}`;
    case "call_remote_agent": return `remote agent ${call.card_url}`;
    case "call_orchestration": return `sub-orchestration ${call.name}`;
    case "start_timer": return `timer until ${when(new Date(call.fire_at))}`;
    case "wait_for_event": return `wait for event ${call.name}`;
    case "now": return "clock";
    case "new_guid": return "new GUID";
    case "new_session": return `new session of ${call.agent}`;
    case "set_custom_status": return "custom status";
    case "continue_as_new": return "continue as new";
    default: return call.call;
  }
}

function instance(main, [id]) {
  main.append(h("h2", {}, "Instance ", h("span", { class: "mono" }, id)));
  const path = `${INSTANCES}/${enc(id)}`;
  let last = null;
  const actions = h("div", { class: "actions", "data-testid": "actions" });
  const raise = raiseForm(path, () => data.refresh());
  const data = section(main, async () => {
    const { data: i } = await api(`${path}?showHistory=true&showInput=true`);
    last = i;
    // An agent call's run: its correlation id is `{instance}:{execution}:{task}:{attempt}`.
    const runOf = (n) => (i.agentRuns || []).filter((r) => r.correlationId.split(":").slice(-2, -1)[0] === String(n)).pop();
    const rows = steps(i.historyEvents || []).map(({ call, outcomes }, n) => {
      // A task's first outcome is the one its code saw.
      const end = outcomes[0];
      const task = TASKS.has(call.call);
      const state = !task ? "" : !end ? "waiting" : end.event === "task_failed" ? "failed" : "done";
      return h("tr", { "data-testid": state === "waiting" ? "waiting-step" : "step" },
        h("td", {}, n),
        h("td", {}, describe(call), call.call === "call_agent" && runOf(n)
          ? [" ", h("a", { href: `#/run/${enc(call.agent)}/${enc(runOf(n).correlationId)}`, "data-testid": "step-run" }, "run")] : ""),
        h("td", {}, when(call.timestamp)),
        h("td", { class: state === "waiting" ? "waiting" : state === "failed" ? "error" : "" }, task ? (end ? when(end.timestamp) : "waiting") : ""),
        h("td", {}, end ? ms(call.timestamp, end.timestamp) : ""),
        h("td", {}, call.retry ? `up to ${call.retry.max_attempts ?? call.retry.maxAttempts ?? "?"} tries` : ""),
        h("td", {}, end ? h("details", {}, h("summary", {}, end.event), json(parseMaybe(end.result ?? end.error ?? end.payload))) : ""));
    });
    const runs = (i.agentRuns || []).map((r) =>
      h("tr", { class: "link", "data-testid": "agent-run", onclick: () => go(`#/run/${enc(r.agent)}/${enc(r.correlationId)}`) },
        h("td", {}, r.agent), h("td", { class: "mono" }, r.correlationId), h("td", {}, status(r.status)),
        h("td", {}, (r.pendingApprovals || []).map((p) => h("div", { class: "waiting" }, `${p.tool} waits for approval`)))));
    actions.replaceChildren(...instanceActions(path, i, () => data.refresh()));
    raise.suggest((i.historyEvents || []).filter((e) => e.call === "wait_for_event").map((e) => e.name));
    return [
      h("dl", {},
        h("dt", {}, "Orchestration"), h("dd", {}, i.name),
        h("dt", {}, "Status"), h("dd", { "data-testid": "instance-status" }, status(i.runtimeStatus)),
        h("dt", {}, "Created"), h("dd", {}, when(i.createdTime)),
        h("dt", {}, "Updated"), h("dd", {}, when(i.lastUpdatedTime)),
        h("dt", {}, "Component"), h("dd", { class: "mono" }, String(i.componentDigest || "").slice(0, 16))),
      h("h3", {}, "Input"), json(i.input),
      h("h3", {}, "Custom status"), h("div", { "data-testid": "custom-status" }, json(i.customStatus)),
      h("h3", {}, "Output"), h("div", { "data-testid": "output" }, json(i.output)),
      h("h3", {}, "Timeline"),
      h("table", { "data-testid": "timeline" },
        h("tr", {}, ["#", "Step", "Scheduled", "Completed", "Took", "Retry policy", "Outcome"].map((t) => h("th", {}, t))), rows),
      runs.length ? [h("h3", {}, "Agent runs"), h("table", {}, h("tr", {}, ["Agent", "Run", "Status", "Approvals"].map((t) => h("th", {}, t))), runs)] : [],
    ];
  });
  main.insertBefore(actions, data.body);
  main.insertBefore(raise.form, data.body);
  return {
    tick: () => (last && ["Completed", "Failed", "Terminated"].includes(last.runtimeStatus) ? null : data.refresh()),
  };
}

function instanceActions(path, i, refresh) {
  const running = ["Pending", "Running", "Suspended"].includes(i.runtimeStatus);
  const button = (label, attrs, what, call) =>
    h("button", { ...attrs, "data-testid": `action-${label.toLowerCase()}`, onclick: async () => { if (await act(what, call)) refresh(); } }, label);
  return [
    button("Suspend", { disabled: i.runtimeStatus !== "Running" && i.runtimeStatus !== "Pending" }, "suspend", () => api(`${path}/suspend?reason=${enc("from the dashboard")}`, { method: "POST" })),
    button("Resume", { disabled: i.runtimeStatus !== "Suspended" }, "resume", () => api(`${path}/resume?reason=${enc("from the dashboard")}`, { method: "POST" })),
    button("Terminate", { class: "danger", disabled: !running }, "terminate", () => api(`${path}/terminate?reason=${enc("from the dashboard")}`, { method: "POST" })),
    button("Restart", { disabled: running }, "restart", () => api(`/api/orchestrators/${enc(i.name)}/${enc(i.instanceId)}`, { method: "POST", body: i.input ?? null })),
    button("Purge", { class: "danger", disabled: running }, "purge", async () => { await api(path, { method: "DELETE" }); go("#/orchestrations"); }),
  ];
}

function raiseForm(path, refresh) {
  const names = h("datalist", { id: "event-names" });
  const name = h("input", { name: "event", list: "event-names", required: true, placeholder: "event name", "data-testid": "event-name" });
  const payload = h("textarea", { name: "payload", "data-testid": "event-payload", placeholder: '{"approved": true}' });
  const form = h("form", { class: "inline", "data-testid": "raise-event" },
    h("label", {}, "Raise event", name), names, h("label", {}, "Payload (JSON)", payload),
    h("button", { class: "primary", type: "submit" }, "Raise"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let body = null;
    if (payload.value.trim()) {
      try { body = JSON.parse(payload.value); } catch (err) { toast(`the payload is not JSON: ${err.message}`, true); return; }
    }
    if (await act(`raise ${name.value}`, () => api(`${path}/raiseEvent/${enc(name.value)}`, { method: "POST", body: JSON.stringify(body) }))) refresh();
  });
  return {
    form,
    suggest(events) {
      const known = [...new Set(events)];
      names.replaceChildren(...known.map((n) => h("option", { value: n })));
      if (!name.value && known.length === 1) name.value = known[0];
    },
  };
}

// Agents, runs and sessions ------------------------------------------------

function agents(main, [name], query) {
  if (!name) {
    main.append(h("h2", {}, "Agents"));
    const data = section(main, async () => {
      const { data } = await api("/api/components");
      const all = data.components.flatMap((c) => (c.agents || []).map((a) => ({ ...a, component: c.name })));
      return h("table", { "data-testid": "agents" },
        h("tr", {}, ["Agent", "Component", "Tools"].map((t) => h("th", {}, t))),
        all.map((a) => h("tr", { class: "link", onclick: () => go(`#/agents/${enc(a.name)}`) },
          h("td", {}, a.name), h("td", {}, a.component), h("td", { class: "mono" }, (a.tools || []).join(", ")))));
    });
    return { tick: () => null, refresh: data.refresh };
  }
  main.append(h("h2", {}, "Agent ", name));
  const select = h("select", { name: "status", "data-testid": "run-status" },
    ["", "pending", "awaiting_approval", "completed", "failed", "canceled"].map((s) => h("option", { value: s, selected: query.get("status") === s }, s || "any")));
  select.addEventListener("change", () => go(`#/agents/${enc(name)}${select.value ? `?status=${select.value}` : ""}`));
  main.append(h("form", { class: "filters" }, h("label", {}, "Runs", select)));
  const data = section(main, async () => {
    const params = new URLSearchParams({ limit: "50" });
    if (query.get("status")) params.set("status", query.get("status"));
    const { data } = await api(`/api/agents/${enc(name)}/runs?${params}`);
    const sessions = [...new Set(data.runs.map((r) => r.sessionId))];
    return [
      h("table", { "data-testid": "runs" },
        h("tr", {}, ["Run", "Session", "Status", "Message", "Created", "Approvals"].map((t) => h("th", {}, t))),
        data.runs.map((r) => h("tr", { class: "link", "data-testid": "run-row", "data-id": r.correlationId, onclick: () => go(`#/run/${enc(name)}/${enc(r.correlationId)}`) },
          h("td", { class: "mono" }, r.correlationId), h("td", { class: "mono" }, r.sessionId), h("td", {}, status(r.status)),
          h("td", {}, String(r.message || "").slice(0, 80)), h("td", {}, when(r.createdAt)),
          h("td", { class: "waiting" }, (r.pendingApprovals || []).length ? `${r.pendingApprovals.length} waiting` : "")))),
      h("h3", {}, "Sessions of these runs"),
      h("ul", {}, sessions.map((s) => h("li", {}, h("a", { class: "mono", href: `#/session/${enc(name)}/${enc(s)}` }, s)))),
    ];
  });
  return { tick: () => data.refresh() };
}

function run(main, [agent, id]) {
  main.append(h("h2", {}, "Run ", h("span", { class: "mono" }, id)));
  const base = `/api/agents/${enc(agent)}/runs/${enc(id)}`;
  const answer = h("div", { class: "answer", "data-testid": "answer" });
  const approvals = h("div", { "data-testid": "approvals" });
  main.append(approvals, h("h3", {}, "Answer"), answer);
  let done = false;
  let gone = false;
  let stream = null;
  // The live answer, from the start of the stream; closed once it ended.
  const follow = () => {
    if (stream || done || gone) return;
    let text = "";
    stream = new EventSource(onHub(`${API}${base}/stream`));
    stream.addEventListener("chunk", (e) => {
      text += JSON.parse(e.data).text || "";
      answer.textContent = text;
    });
    // A new attempt of the run: its stream starts again.
    stream.addEventListener("restart", () => { text = ""; answer.textContent = ""; });
    stream.addEventListener("complete", () => { stream.close(); data.refresh(); });
    // The run's own `error` event carries data; a connection lost has none:
    // the browser reconnects by itself (from the last event), and a stream
    // it gave up on is opened again by the next refresh.
    stream.addEventListener("error", (e) => {
      if (e.data !== undefined) {
        stream.close();
        data.refresh();
      } else if (stream.readyState === EventSource.CLOSED) {
        stream = null;
      }
    });
  };
  const data = section(main, async () => {
    const { data: r } = await api(base);
    done = ["completed", "failed", "canceled"].includes(r.status);
    if (done && r.response !== undefined && r.response !== null) {
      answer.textContent = typeof r.response === "string" ? r.response : JSON.stringify(r.response, null, 2);
    }
    if (!done) follow();
    approvals.replaceChildren(...(r.pendingApprovals || []).map((p) => approvalBox(base, p, () => data.refresh())));
    return h("dl", {},
      h("dt", {}, "Agent"), h("dd", {}, h("a", { href: `#/agents/${enc(agent)}` }, agent)),
      h("dt", {}, "Status"), h("dd", { "data-testid": "run-status" }, status(r.status)),
      h("dt", {}, "Session"), h("dd", {}, h("a", { class: "mono", href: `#/session/${enc(agent)}/${enc(r.sessionId)}` }, r.sessionId)),
      h("dt", {}, "Message"), h("dd", {}, r.message),
      h("dt", {}, "Created"), h("dd", {}, when(r.createdAt)),
      h("dt", {}, "Updated"), h("dd", {}, when(r.updatedAt)),
      h("dt", {}, "Usage"), h("dd", {}, r.usage ? JSON.stringify(r.usage) : ""),
      r.error ? [h("dt", {}, "Error"), h("dd", { class: "error" }, r.error)] : []);
  });
  return {
    tick: () => (done ? null : data.refresh()),
    dispose: () => {
      gone = true;
      if (stream) stream.close();
    },
  };
}

function approvalBox(base, call, refresh) {
  const reason = h("input", { placeholder: "reason (optional)", "data-testid": `reason-${call.callId}` });
  const decide = (approved) => async () => {
    const body = { callId: call.callId, approved };
    if (reason.value.trim()) body.reason = reason.value.trim();
    if (await act(approved ? `approve ${call.tool}` : `deny ${call.tool}`, () => api(`${base}/approvals`, { method: "POST", body }))) refresh();
  };
  return h("div", { class: "approval", "data-testid": "pending-approval" },
    h("strong", {}, `${call.tool} waits for a human`), h("span", { class: "muted mono" }, ` ${call.callId}`),
    json(call.arguments),
    h("div", { class: "actions" }, reason,
      h("button", { class: "primary", "data-testid": `approve-${call.callId}`, onclick: decide(true) }, "Approve"),
      h("button", { class: "danger", "data-testid": `deny-${call.callId}`, onclick: decide(false) }, "Deny")));
}

function session(main, [agent, id]) {
  main.append(h("h2", {}, `Session of ${agent} `, h("span", { class: "mono" }, id)));
  const data = section(main, async () => {
    const { data } = await api(`/api/agents/${enc(agent)}/sessions/${enc(id)}?limit=200`);
    return [
      h("p", { class: "muted" }, `tokens: ${JSON.stringify(data.usage)}`),
      h("table", { "data-testid": "conversation" },
        h("tr", {}, ["#", "Role", "Content", "Run"].map((t) => h("th", {}, t))),
        data.messages.map((m) => h("tr", {},
          h("td", {}, m.seq), h("td", {}, m.role),
          h("td", {}, m.content || "",
            (m.toolCalls || []).map((c) => h("div", { class: "mono" }, `calls ${c.function?.name || c.name}(${c.function?.arguments || ""})`)),
            m.toolCallId ? h("div", { class: "muted mono" }, `result of ${m.toolCallId}`) : ""),
          h("td", {}, h("a", { class: "mono", href: `#/run/${enc(agent)}/${enc(m.correlationId)}` }, String(m.correlationId).slice(0, 8)))))),
    ];
  });
  return { tick: () => data.refresh() };
}

// Health ---------------------------------------------------------------

/** Prometheus text: the sum of each metric's samples, by name (optionally
 * only the samples whose labels contain `having`). */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (match) samples.push({ name: match[1], labels: match[2] || "", value: Number(match[3]) });
  }
  return (name, having = "") => samples.filter((s) => s.name === name && s.labels.includes(having)).reduce((a, s) => a + s.value, 0);
}

const FIGURES = [
  { title: "Agent runs / s", rate: (m) => m("agenthost_runs_total") },
  { title: "Failed runs / s", rate: (m) => m("agenthost_runs_total", 'outcome="failed"') },
  { title: "Episodes / s", rate: (m) => m("agenthost_episodes_total") },
  { title: "Journal commits / s", rate: (m) => m("agenthost_journal_commit_seconds_count") },
  { title: "Steps per commit", ratio: (m) => [m("agenthost_journal_commit_batch_size_sum"), m("agenthost_journal_commit_batch_size_count")] },
  { title: "Waiting instances", gauge: (m) => m("agenthost_waiting_instances") },
  { title: "Hot instances", gauge: (m) => m("agenthost_hot_instances") },
  { title: "Approvals pending", gauge: (m) => m("agenthost_approvals_pending") },
  { title: "Model latency (ms)", ratio: (m) => [1000 * m("agenthost_model_call_seconds_sum"), m("agenthost_model_call_seconds_count")] },
  { title: "Model tokens / s", rate: (m) => m("agenthost_model_tokens_total") },
  { title: "HTTP 5xx / s", rate: (m) => m("agenthost_http_requests_total", 'status="5') },
];

function health(main) {
  main.append(h("h2", {}, "Health"));
  const cards = h("div", { class: "cards", "data-testid": "health" });
  main.append(cards, h("p", { class: "muted" }, "From /metrics, once a second while this page is shown."));
  const series = FIGURES.map(() => []);
  let previous = null;
  const sample = async () => {
    const response = await fetch(`${API}/metrics`, { credentials: "same-origin" });
    if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
    const m = parseMetrics(await response.text());
    const now = Date.now();
    const raw = FIGURES.map((f) => (f.rate ? f.rate(m) : f.gauge ? f.gauge(m) : f.ratio(m)));
    FIGURES.forEach((f, i) => {
      let value = null;
      if (f.gauge) value = raw[i];
      else if (previous && f.rate) value = Math.max(0, (raw[i] - previous.raw[i]) / ((now - previous.at) / 1000));
      else if (previous && f.ratio) {
        const [sum, count] = raw[i], [sum0, count0] = previous.raw[i];
        value = count > count0 ? (sum - sum0) / (count - count0) : 0;
      }
      if (value !== null) { series[i].push(value); if (series[i].length > 60) series[i].shift(); }
    });
    previous = { at: now, raw };
    cards.replaceChildren(...FIGURES.map((f, i) => card(f.title, series[i])));
  };
  sample().catch((e) => failed(cards, e));
  return { tick: () => sample() };
}

function card(title, values) {
  const last = values.length ? values[values.length - 1] : null;
  const top = Math.max(1e-9, ...values);
  const points = values.map((v, i) => `${(i / 59) * 100},${30 - (v / top) * 28}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 100 30");
  svg.setAttribute("preserveAspectRatio", "none");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points);
  svg.append(line);
  return h("div", { class: "card", "data-testid": "figure" },
    h("div", { class: "muted" }, title),
    h("div", { class: "figure" }, last === null ? "…" : last >= 100 ? Math.round(last) : Number(last.toFixed(2))),
    svg);
}

export const views = { components, orchestrations, instance, agents, run, session, health };
