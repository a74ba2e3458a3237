// Write agenthost agents, their tools and durable orchestrations in
// JavaScript. The same verbs as the Rust SDK (agenthost_guest) and the
// Python one: a Component holds Agents, Tools (functions with a JSON Schema
// object for their arguments) and Orchestrations (straight-line code over a
// Context); exportComponent hands it to the host:
//
//   import { Agent, Component, Tool, exportComponent } from 'agenthost';
//   const app = new Component()
//     .agent(new Agent('weather').instructions('Use get_weather.').tool('get_weather'))
//     .tool(new Tool('get_weather', 'Current weather for a city',
//       { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
//       ({ city }) => ({ city, temperatureC: 21 })));
//   export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
//
// `agenthost build` bundles the module and builds it with componentize-js
// against the host's WIT. Inside an orchestration, Date.now() and
// Math.random() read the journaled clock and numbers seeded by the instance,
// so ordinary code replays identically.

import * as durable from 'agenthost:host/durable@0.1.0';
import * as logging from 'agenthost:host/logging@0.1.0';

/** Whether the host may run a tool as soon as the model asks for it. */
export const Approval = Object.freeze({
  NEVER_REQUIRE: 'never-require',
  ALWAYS_REQUIRE: 'always-require',
});

/** Thrown by a tool to fail with a message the model is shown. */
export class ToolError extends Error {}

/** A task failed, or its result is not JSON. Uncaught, it fails the orchestration. */
export class TaskError extends Error {}

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

/** Writes `message` through the host at `level` (trace, debug, info, warn, error). */
export function log(level, message) {
  logging.log(LEVELS.includes(level) ? level : 'info', String(message));
}

// ---- JSON Schema checks of a tool's arguments -----------------------------

const TYPES = {
  string: (v) => typeof v === 'string',
  integer: (v) => Number.isInteger(v),
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  boolean: (v) => typeof v === 'boolean',
  null: (v) => v === null,
  array: (v) => Array.isArray(v),
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
};

/**
 * The first way `value` breaks `schema` (type, enum, required, properties,
 * additionalProperties: false, items, anyOf), or null. The host's model
 * sees the whole schema; this catches what a model gets wrong most often
 * before the tool's code runs.
 */
export function checkSchema(value, schema, where = 'arguments') {
  if (!schema || typeof schema !== 'object') return null;
  if (Array.isArray(schema.anyOf)) {
    const problems = schema.anyOf.map((s) => checkSchema(value, s, where));
    return problems.some((p) => p === null) ? null : problems.join(' or ');
  }
  if (schema.type) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => TYPES[t] && TYPES[t](value))) {
      return `${where} must be ${types.join(' or ')}`;
    }
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    return `${where} must be one of ${JSON.stringify(schema.enum)}`;
  }
  if (TYPES.object(value)) {
    for (const key of schema.required || []) {
      if (!Object.hasOwn(value, key)) return `${where} is missing required field ${key}`;
    }
    const properties = schema.properties || {};
    for (const [key, item] of Object.entries(value)) {
      if (Object.hasOwn(properties, key)) {
        const problem = checkSchema(item, properties[key], `${where}.${key}`);
        if (problem) return problem;
      } else if (schema.additionalProperties === false) {
        return `${where} has unknown field ${key}`;
      }
    }
  }
  if (Array.isArray(value) && schema.items) {
    for (let i = 0; i < value.length; i++) {
      const problem = checkSchema(value[i], schema.items, `${where}[${i}]`);
      if (problem) return problem;
    }
  }
  return null;
}

// ---- Tools and agents -------------------------------------------------------

/**
 * A function of the component that agents (and orchestrations, as an
 * activity) can call: `fn(args)` gets the arguments object, checked against
 * `schema` (the JSON Schema the model sees), and returns any JSON value.
 */
export class Tool {
  constructor(name, description, schema, fn) {
    if (typeof fn !== 'function') throw new TypeError(`tool ${name}: the last argument must be a function`);
    this.name = name;
    this.description = description;
    this.schema = schema || { type: 'object' };
    this.fn = fn;
    this.approvalMode = Approval.NEVER_REQUIRE;
  }

  /** Sets whether the tool needs a human's approval before it runs. */
  approval(mode) {
    this.approvalMode = mode;
    return this;
  }

  toWit() {
    return {
      name: this.name,
      description: this.description,
      parametersSchema: JSON.stringify(this.schema),
      approval: this.approvalMode,
    };
  }

  /** The result as JSON text; throws an activity-error variant, and
   * nothing else: any other throw would trap the component and fail the
   * whole agent run, where the model should be told what went wrong. */
  call(argumentsText) {
    let args;
    try {
      args = argumentsText.trim() ? JSON.parse(argumentsText) : null;
    } catch (e) {
      throw { tag: 'invalid-arguments', val: `the arguments are not JSON: ${e.message}` };
    }
    if (args === null) args = {};
    if (!TYPES.object(args)) throw { tag: 'invalid-arguments', val: 'the arguments must be a JSON object' };
    const problem = checkSchema(args, this.schema);
    if (problem) throw { tag: 'invalid-arguments', val: problem };
    try {
      const result = this.fn(args);
      if (result && typeof result.then === 'function') {
        throw new Error('a tool must return its result, not a Promise: the SDK has no event loop to wait on');
      }
      return stringify(result);
    } catch (e) {
      throw { tag: 'failed', val: errorMessage(e) };
    }
  }
}

/** An agent: a model prompted with instructions that may call tools. */
export class Agent {
  constructor(name) {
    this.name = name;
    this.descriptionText = '';
    this.instructionsText = '';
    this.modelName = undefined;
    this.tools = [];
    this.settings = {};
  }
  description(text) { this.descriptionText = text; return this; }
  /** The system message of every conversation with this agent. */
  instructions(text) { this.instructionsText = text; return this; }
  /** Overrides the host's model (OpenAI) or deployment (Azure). */
  model(name) { this.modelName = name; return this; }
  /** Lets the model call tool `name` of this component. */
  tool(name) { this.tools.push(name); return this; }
  /** Sampling temperature, 0 to 2. */
  temperature(value) { this.settings.temperature = value; return this; }
  maxOutputTokens(tokens) { this.settings.maxOutputTokens = tokens; return this; }
  /** Longest one model call may take, in seconds. */
  timeout(limit) { this.settings.timeoutMs = BigInt(Math.round(seconds(limit) * 1000)); return this; }
  /** Idle time after which a session is forgotten, in seconds (at least
   * one); null keeps sessions forever. */
  sessionTtl(ttl) {
    this.settings.sessionTtlSeconds = BigInt(ttl === null ? 0 : Math.max(1, Math.round(seconds(ttl))));
    return this;
  }
  /** Tokens of the conversation sent to the model at most. */
  historyBudgetTokens(tokens) { this.settings.historyBudgetTokens = tokens; return this; }

  toWit() {
    return {
      name: this.name,
      description: this.descriptionText,
      instructions: this.instructionsText,
      model: this.modelName,
      tools: [...this.tools],
    };
  }

  settingsWit() {
    if (Object.keys(this.settings).length === 0) return null;
    return { agent: this.name, ...this.settings };
  }
}

// ---- Orchestrations -----------------------------------------------------------

const TEXT = Symbol('text');

function retryWit(policy) {
  if (!policy) return undefined;
  return {
    maxAttempts: policy.maxAttempts,
    firstDelayMs: BigInt(Math.round((policy.firstDelaySeconds ?? 1) * 1000)),
    backoffCoefficient: policy.backoff ?? 2,
    maxDelayMs: BigInt(Math.round((policy.maxDelaySeconds ?? 60) * 1000)),
  };
}

/** `value` as a number of seconds, or a TypeError naming what it was. */
function seconds(value) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`a duration in seconds must be a finite number >= 0, not ${String(value)}`);
  }
  return value;
}

/** What a thrown value says: its message, or itself. */
function errorMessage(e) {
  return (e && e.message) || String(e);
}

/** What a failed import call threw, as the host's message. */
function errorText(e) {
  if (e && typeof e === 'object' && 'payload' in e) return String(e.payload);
  if (e && typeof e === 'object' && 'val' in e) return String(e.val);
  return (e && e.message) || String(e);
}

/** A scheduled agent call, activity, sub-orchestration, timer or event wait. */
export class Task {
  constructor(id, decode = 'json') {
    this.id = id;
    this.decode = decode;
  }

  /** Suspends the orchestration until the task is done; its result (text
   * for an agent's answer, else parsed JSON). Throws TaskError if it failed. */
  wait() {
    let text;
    try {
      text = durable.await(this.id);
    } catch (e) {
      throw new TaskError(errorText(e));
    }
    return this.decodeText(text);
  }

  decodeText(text) {
    if (this.decode === TEXT) return text;
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new TaskError(`the task's result is not JSON: ${e.message}`);
    }
  }
}

/** Task numbers as componentize-js lowers a `list<u32>`: a Uint32Array
 * reaches the host as it is; a plain Array of numbers did not (the host
 * saw task 0). */
const taskIds = (tasks) => Uint32Array.from(tasks, (t) => t.id);

const stringify = (value) => JSON.stringify(value === undefined ? null : value);

/** What orchestration code uses to reach the host; every call is journaled. */
export class Context {
  /** Asks `agent` for an answer to `message`; options: session, schema (a
   * JSON Schema: the answer is then parsed JSON of that shape), retry. */
  callAgent(agent, message, { session, schema, retry } = {}) {
    const id = durable.callAgent(agent, message, session, schema ? JSON.stringify(schema) : undefined, retryWit(retry));
    return new Task(id, schema ? 'json' : TEXT);
  }

  /** Asks the A2A agent whose card is at `cardUrl`; options: context, retry. */
  callRemoteAgent(cardUrl, message, { context, retry } = {}) {
    return new Task(durable.callRemoteAgent(cardUrl, message, context, retryWit(retry)), TEXT);
  }

  /** Runs activity (tool) `name` with `input`: this component's, or another
   * component's as `component/name`. */
  callActivity(name, input = null, { retry } = {}) {
    return new Task(durable.callActivity(name, stringify(input), retryWit(retry)));
  }

  /** Runs orchestration `name` as a child instance. */
  callOrchestration(name, input = null) {
    return new Task(durable.callOrchestration(name, stringify(input)));
  }

  /** A durable timer firing `delay` seconds after the current step's time. */
  timer(delay) {
    return new Task(durable.startTimer(durable.now() + BigInt(Math.round(seconds(delay) * 1000))));
  }

  /** Waits for the external event `name`; its payload as parsed JSON. */
  waitForEvent(name) {
    return new Task(durable.waitForEvent(name));
  }

  /** Waits for every task; their results in order. Throws the first failure. */
  whenAll(tasks) {
    const results = durable.awaitAll(taskIds(tasks));
    return results.map((result, i) => {
      if (result.tag === 'err') throw new TaskError(result.val);
      return tasks[i].decodeText(result.val);
    });
  }

  /** Waits for the first of `tasks` to finish; its index. Timers and event
   * waits that lost are cancelled; the winner's wait() returns at once. */
  whenAny(tasks) {
    const [index] = durable.awaitAny(taskIds(tasks));
    return index;
  }

  /** The current step's time, in milliseconds since the Unix epoch. */
  nowMs() { return Number(durable.now()); }
  /** The current step's time. */
  now() { return new Date(this.nowMs()); }
  /** A GUID, the same on every replay. */
  newGuid() { return durable.newGuid(); }
  /** A new conversation with `agent`, for calls that should share history. */
  newSession(agent) { return durable.newSession(agent); }
  get instanceId() { return durable.instanceId(); }
  /** True while the code re-executes journaled steps. */
  get isReplaying() { return durable.isReplaying(); }
  /** Shown as customStatus by the status API. */
  setCustomStatus(status) { durable.setCustomStatus(stringify(status)); }
  /** Restarts with `input` and an empty journal once the run returns. */
  continueAsNew(input = null) { durable.continueAsNew(stringify(input)); }
}

/** A durable orchestration: `fn(ctx, input)` returning a JSON value. With
 * `inputSchema(schema)`, the host refuses a start whose input does not
 * match (400), and the code checks it again. */
export class Orchestration {
  constructor(name, fn) {
    this.name = name;
    this.fn = fn;
    this.descriptionText = '';
    this.routes = [];
    this.eventRoutes = [];
    this.schema = null;
  }
  description(text) { this.descriptionText = text; return this; }
  /** Also start it with POST /api/{path}. */
  route(path) { this.routes.push(path); return this; }
  /** POST /api/{path} (with {instanceId}) raises `event` on that instance. */
  eventRoute(path, event) { this.eventRoutes.push({ path, event }); return this; }
  /** The JSON Schema its input must match. */
  inputSchema(schema) { this.schema = schema; return this; }

  toWit() {
    return {
      name: this.name,
      description: this.descriptionText,
      routes: [...this.routes],
      eventRoutes: this.eventRoutes.map((r) => ({ ...r })),
    };
  }

  /** The output as JSON text; throws the failure's message (a string),
   * and nothing else: any other throw would trap the component. */
  run(inputText) {
    let input;
    try {
      input = inputText.trim() ? JSON.parse(inputText) : null;
    } catch (e) {
      throw `invalid input: ${e.message}`;
    }
    if (this.schema) {
      const problem = checkSchema(input, this.schema, 'input');
      if (problem) throw `invalid input: ${problem}`;
    }
    try {
      const output = this.fn(new Context(), input);
      if (output && typeof output.then === 'function') {
        throw new Error(
          'an orchestration must return its output, not a Promise: ctx calls block, so write it without async/await',
        );
      }
      return stringify(output);
    } catch (e) {
      throw e instanceof TaskError ? e.message : `${(e && e.name) || 'Error'}: ${errorMessage(e)}`;
    }
  }
}

/** Everything a component offers. */
export class Component {
  constructor() {
    this.agents = [];
    this.tools = new Map();
    this.orchestrations = new Map();
  }
  agent(agent) { this.agents.push(agent); return this; }
  tool(tool) {
    if (this.tools.has(tool.name)) throw new Error(`tool '${tool.name}' is declared twice`);
    this.tools.set(tool.name, tool);
    return this;
  }
  orchestration(orchestration) {
    if (this.orchestrations.has(orchestration.name)) {
      throw new Error(`orchestration '${orchestration.name}' is declared twice`);
    }
    this.orchestrations.set(orchestration.name, orchestration);
    return this;
  }

  manifest() {
    return {
      agents: this.agents.map((a) => a.toWit()),
      activities: [...this.tools.values()].map((t) => t.toWit()),
      orchestrations: [...this.orchestrations.values()].map((o) => o.toWit()),
    };
  }
}

/** The interfaces the host calls, bound to `app`: export them as
 * `export const { component, agentSettings, orchestrationInputs } = exportComponent(app);`. */
export function exportComponent(app) {
  return {
    component: {
      describe: () => app.manifest(),
      invokeActivity(name, args) {
        const tool = app.tools.get(name);
        if (!tool) throw { tag: 'not-found', val: name };
        return tool.call(args);
      },
      runOrchestration(name, input) {
        const orchestration = app.orchestrations.get(name);
        if (!orchestration) throw `this component has no orchestration named '${name}'`;
        return orchestration.run(input);
      },
    },
    agentSettings: {
      agentSettings: () => app.agents.map((a) => a.settingsWit()).filter((s) => s !== null),
    },
    orchestrationInputs: {
      inputSchemas: () =>
        [...app.orchestrations.values()]
          .filter((o) => o.schema)
          .map((o) => ({ orchestration: o.name, schema: JSON.stringify(o.schema) })),
    },
  };
}
