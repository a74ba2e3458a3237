// `approval`, in JavaScript: human in the loop. The writer drafts; the
// orchestration shows the draft in its custom status and waits for
// `approval_received` racing a timer (24 hours unless the input says
// otherwise). Approved: published. Rejected: one revision using the
// feedback. Timer first: escalated. Approve with
// `POST /api/approval/{instanceId}` and `{"approved": true}`.
// The twin of sample-agents/approval (Rust).

import { Component, Orchestration, TaskError, exportComponent } from '../../../guests/js/agenthost.js';

const DAY = 24 * 60 * 60;

/** The reviewer's decision, as the Rust twin decodes it: a boolean
 * `approved` and an optional string `feedback`, else the instance fails. */
function asDecision(payload) {
  const ok =
    payload !== null &&
    typeof payload === 'object' &&
    typeof payload.approved === 'boolean' &&
    (payload.feedback === undefined || payload.feedback === null || typeof payload.feedback === 'string');
  if (!ok) {
    throw new TaskError(`the task's result does not decode: expected {"approved": boolean, "feedback"?: string}, got ${JSON.stringify(payload)}`);
  }
  return payload;
}

function approval(ctx, request) {
  const session = ctx.newSession('writer');
  const draft = ctx.callAgent('writer', `Write a short piece about ${request.topic}.`, { session }).wait();
  ctx.setCustomStatus({ state: 'awaiting_approval', draft });
  const decision = ctx.waitForEvent('approval_received');
  const timeout = ctx.timer(request.timeout_seconds ?? DAY);
  if (ctx.whenAny([decision, timeout]) === 1) {
    ctx.setCustomStatus({ state: 'escalated' });
    return { status: 'escalated', content: draft };
  }
  const { approved, feedback } = asDecision(decision.wait());
  if (approved) {
    ctx.setCustomStatus({ state: 'published' });
    return { status: 'published', content: draft };
  }
  const revised = ctx
    .callAgent('writer', `Revise the piece using this feedback: ${feedback ?? 'Make it better.'}`, { session })
    .wait();
  ctx.setCustomStatus({ state: 'revised' });
  return { status: 'revised', content: revised };
}

const app = new Component().orchestration(
  new Orchestration('approval', approval)
    .description("Drafts content and waits for a human's approval")
    .eventRoute('approval/{instanceId}', 'approval_received')
    .inputSchema({
      type: 'object',
      properties: { topic: { type: 'string' }, timeout_seconds: { type: ['integer', 'null'] } },
      required: ['topic'],
    }),
);

export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
