// Test guest `clock` (JavaScript): what Date.now() and Math.random() give
// inside an orchestration, before and after a durable timer, and a tool of
// another component (`weather/get_weather`) called as an activity. The
// values seen before the timer are shown as custom status in the first
// episode and returned from the last one, which replays them: equal only
// if they came from the journal, not the machine. And `sequence`, n
// activities in a row, for the benchmark of a durable step.

import { Component, Orchestration, Tool, exportComponent } from '../../../guests/js/agenthost.js';

function seen(ctx) {
  return {
    time_ms: Date.now(),
    now_ms: ctx.nowMs(),
    random: Math.random(),
    guid: ctx.newGuid(),
  };
}

function clock(ctx) {
  const before = seen(ctx);
  ctx.setCustomStatus(before);
  ctx.timer(2).wait();
  // A step's time is that of its latest journaled call: one made after the
  // timer fired moves the clock past it.
  ctx.newGuid();
  const after = { time_ms: Date.now(), now_ms: ctx.nowMs() };
  const weather = ctx.whenAll(
    ['Paris', 'Rome'].map((city) => ctx.callActivity('weather/get_weather', { city })),
  );
  return { before, after, weather };
}

/** `n` activities one after the other: the benchmark's durable steps. */
function sequence(ctx, input) {
  let total = 0;
  for (let i = 0; i < (input?.n ?? 10); i++) total += ctx.callActivity('instant', { n: i }).wait();
  return total;
}

function unknown(ctx) {
  return ctx.callActivity('no_such_tool', {}).wait();
}

const app = new Component()
  .orchestration(new Orchestration('clock', clock))
  .orchestration(new Orchestration('unknown_activity', unknown))
  .orchestration(new Orchestration('sequence', sequence))
  .tool(new Tool('promised', 'An async tool: refused with a message', { type: 'object' }, async () => 1))
  .tool(new Tool('bigint', 'A result JSON cannot hold', { type: 'object' }, () => ({ n: 1n })))
  .tool(
    new Tool('instant', 'Returns n at once', { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }, ({ n }) => n),
  );

export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
