//! The JavaScript project `agenthost new --lang js` writes: `app.js` (the
//! component), a plain module the tests import natively (`node --test`),
//! the JavaScript SDK vendored as `agenthost.js`, and the WIT it binds.

use super::Kind;

/// The JavaScript SDK as this binary was built with it.
const SDK: &str = include_str!("../../../../guests/js/agenthost.js");

pub(super) fn files(kind: Kind, name: &str, ident: &str) -> Vec<(String, String)> {
    let fill = |t: &str| t.replace("{name}", name).replace("{ident}", ident);
    let (app, module, test, readme) = match kind {
        Kind::Agent => (AGENT, AGENT_TOOLS, AGENT_TEST, AGENT_README),
        Kind::Orchestration => (
            ORCHESTRATION,
            ORCHESTRATION_STEPS,
            ORCHESTRATION_TEST,
            ORCHESTRATION_README,
        ),
    };
    let module_file = match kind {
        Kind::Agent => "tools.js",
        Kind::Orchestration => "steps.js",
    };
    vec![
        ("app.js".to_string(), fill(app)),
        (module_file.to_string(), fill(module)),
        (
            format!("{}.test.js", &module_file[..module_file.len() - 3]),
            fill(test),
        ),
        ("README.md".to_string(), fill(readme)),
        ("package.json".to_string(), fill(PACKAGE)),
        (
            ".gitignore".to_string(),
            "/build\n/target\n/node_modules\n*.wasm\n".to_string(),
        ),
        ("agenthost.js".to_string(), SDK.to_string()),
    ]
}

const PACKAGE: &str = r#"{
  "name": "{name}",
  "version": "0.1.0",
  "private": true,
  "type": "module",
  "scripts": {
    "test": "node --test"
  }
}
"#;

const AGENT: &str = r#"// The `{name}` agent, with one tool. `agenthost build` makes {name}.wasm;
// drop it into a host's components directory and it is served at
// POST /api/agents/{name}/run.

import { Agent, Component, Tool, exportComponent } from './agenthost.js';
import { wordCount, wordCountSchema } from './tools.js';

const app = new Component()
  .agent(
    new Agent('{name}')
      .description('Helps with texts')
      .instructions('You help with texts. Count words with the word_count tool.')
      .tool('word_count'),
  )
  // A tool that must not run on the model's word alone (each call then
  // waits for POST /api/agents/{name}/runs/{correlation_id}/approvals;
  // import Approval from './agenthost.js' beside Tool):
  // .tool(new Tool('word_count', 'Counts the words of a text', wordCountSchema, wordCount).approval(Approval.ALWAYS_REQUIRE))
  .tool(new Tool('word_count', 'Counts the words of a text', wordCountSchema, wordCount));

export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
"#;

const AGENT_TOOLS: &str = r#"// The tools, as plain functions: `node --test` runs their tests natively.

/** The JSON Schema of word_count's arguments: what the model sees. */
export const wordCountSchema = {
  type: 'object',
  properties: { text: { type: 'string', description: 'The text whose words are counted.' } },
  required: ['text'],
};

export function wordCount({ text }) {
  return { words: text.split(/\s+/).filter((w) => w.length > 0).length };
}
"#;

const AGENT_TEST: &str = r#"import { test } from 'node:test';
import assert from 'node:assert/strict';
import { wordCount } from './tools.js';

test('word_count counts the words', () => {
  assert.deepEqual(wordCount({ text: 'one two  three' }), { words: 3 });
});
"#;

const ORCHESTRATION: &str = r#"// The `{name}` orchestration: two steps with an agent, then a human's
// approval racing a durable timer. `agenthost build` makes {name}.wasm;
// drop it into a host's components directory, then POST /api/{name}/run
// with {"topic": "tea"} starts it and POST /api/{name}/approve/{instanceId}
// with `true` approves it.

import { Agent, Component, Orchestration, exportComponent } from './agenthost.js';
import { notePrompt } from './steps.js';

// Straight-line code; every call through ctx is journaled, so after a crash
// the host replays it to where it was (Date.now() and Math.random() here
// read the journal too).
function run(ctx, request) {
  const draft = ctx.callAgent('{ident}_writer', notePrompt(request.topic)).wait();
  const summary = ctx.callAgent('{ident}_writer', `Summarize in one line: ${draft}`).wait();
  ctx.setCustomStatus({ state: 'awaiting_approval', draft });
  const approval = ctx.waitForEvent('approval');
  const timeout = ctx.timer(24 * 3600);
  const approved = ctx.whenAny([approval, timeout]) === 0 && approval.wait() === true;
  return { draft, summary, approved };
}

const app = new Component()
  .agent(
    new Agent('{ident}_writer')
      .description('Writes short notes')
      .instructions('You write short, plain notes.'),
  )
  .orchestration(
    new Orchestration('{name}', run)
      .route('{name}/run')
      .eventRoute('{name}/approve/{instanceId}', 'approval')
      .inputSchema({ type: 'object', properties: { topic: { type: 'string' } }, required: ['topic'] }),
  );

export const { component, agentSettings, orchestrationInputs } = exportComponent(app);
"#;

const ORCHESTRATION_STEPS: &str = r#"// Plain helpers of the orchestration: `node --test` runs their tests natively.

export function notePrompt(topic) {
  return `Write a short note about ${topic}`;
}
"#;

const ORCHESTRATION_TEST: &str = r#"import { test } from 'node:test';
import assert from 'node:assert/strict';
import { notePrompt } from './steps.js';

test('the note prompt names the topic', () => {
  assert.equal(notePrompt('tea'), 'Write a short note about tea');
});
"#;

const AGENT_README: &str = r#"# {name}

An [agenthost](https://github.com/) agent in JavaScript with one tool (`word_count`).

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d 'call word_count with {"text": "one two three"}' localhost:7071/api/agents/{name}/run

`agenthost build` bundles `app.js` with rolldown and makes the component
with componentize-js (`npm install @bytecodealliance/componentize-js@0.19.3
rolldown@1.3.2`, here or globally); `agenthost.js` is the SDK, vendored.
With no model configured the host's offline model calls the tool a message
names (`call TOOL with {json}`). `npm test` runs the tests natively.
"#;

const ORCHESTRATION_README: &str = r#"# {name}

An [agenthost](https://github.com/) orchestration in JavaScript: two agent
steps, then a human's approval racing a one-day durable timer.

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d '{"topic": "tea"}' localhost:7071/api/{name}/run            # its statusQueryGetUri follows it
    curl -d 'true' localhost:7071/api/{name}/approve/INSTANCE_ID          # approves it

`agenthost build` bundles with rolldown and builds with componentize-js
(`npm install @bytecodealliance/componentize-js@0.19.3 rolldown@1.3.2`).
`npm test` runs the tests natively.
"#;
