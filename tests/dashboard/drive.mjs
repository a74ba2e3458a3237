// Drives the dashboard in Debian's Chromium with Playwright, for
// tests/dashboard.rs, which started the host (admin key required), an
// `approval` instance waiting for its event and a `clerk` run waiting for a
// decision. Each step prints one JSON line that the Rust test checks; a line
// "go" on stdin answers a step that needs the test to act (dropping files).
// Any exception fails the process.
//
// usage: node drive.mjs BASE KEY INSTANCE_ID SCREENSHOTS_DIR
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const [base, key, instanceId, shots] = process.argv.slice(2);
const out = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const told = async () => (await lines.next()).value;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
// The browser signs in as a person would when asked: any user, the key.
const context = await browser.newContext({
  httpCredentials: { username: "admin", password: key },
  viewport: { width: 1280, height: 860 },
});
const page = await context.newPage();
const requests = [];
page.on("request", async (request) => {
  if (!request.url().startsWith(base)) return;
  // A request still in flight when the browser closes (the change feed
  // reconnecting) has no headers left to read: it is not counted.
  const headers = await request.allHeaders().catch(() => null);
  if (headers) requests.push({ url: request.url().slice(base.length), authorization: headers.authorization || null });
});
const answers = [];
page.on("response", (response) => {
  if (response.url().startsWith(base)) answers.push({ url: response.url().slice(base.length), status: response.status() });
});
page.on("pageerror", (e) => out("page-error", { error: String(e) }));
const text = (selector) => page.locator(selector).first().innerText();
// A slow machine (the suite runs tests side by side) gets time; a failure
// says where the page was and what it showed.
page.setDefaultTimeout(60000);

try {
  // 1. The approval sample: find the instance, see its waiting step, raise
  //    the approval from the form, see it complete.
  await page.goto(`${base}/dashboard#/orchestrations?name=approval`);
  await page.locator(`[data-testid=instance-row][data-id="${instanceId}"]`).click();
  const waiting = page.locator("[data-testid=waiting-step]", { hasText: "approval_received" });
  await waiting.waitFor();
  await page.screenshot({ path: `${shots}/instance-waiting.png`, fullPage: true });
  const waitingText = await waiting.innerText();
  await page.fill("[data-testid=event-name]", "approval_received");
  await page.fill("[data-testid=event-payload]", '{"approved": true}');
  await page.click("[data-testid=raise-event] button[type=submit]");
  await page.locator("[data-testid=instance-status]", { hasText: "Completed" }).waitFor();
  await page.screenshot({ path: `${shots}/instance-completed.png`, fullPage: true });
  out("approval", {
    waiting: waitingText,
    status: await text("[data-testid=instance-status]"),
    output: await text("[data-testid=output]"),
    steps: await page.locator("[data-testid=timeline] tr").count(),
    stepRun: await page.locator("[data-testid=step-run]").first().getAttribute("href"),
  });

  // 2. An agent's tool call waits for a human: approve it in the page, see
  //    the answer stream in, and the run complete.
  await page.goto(`${base}/dashboard#/agents/clerk`);
  await page.locator("[data-testid=run-row]", { hasText: "waiting" }).first().click();
  await page.locator("[data-testid=pending-approval]").waitFor();
  await page.screenshot({ path: `${shots}/run-approval.png`, fullPage: true });
  const pending = await text("[data-testid=pending-approval]");
  await page.click("[data-testid=approve-call_refund]");
  // Part of the answer while the run has not ended: it is streamed.
  let partial = null;
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const [answer, status] = await Promise.all([text("[data-testid=answer]"), text("[data-testid=run-status]")]);
    if (answer && status !== "completed") { partial = { answer, status }; break; }
    if (status === "completed") break;
    await page.waitForTimeout(50);
  }
  await page.locator("[data-testid=run-status]", { hasText: "completed" }).waitFor();
  await page.screenshot({ path: `${shots}/run-completed.png`, fullPage: true });
  out("agent", { pending, partial, answer: await text("[data-testid=answer]"), status: await text("[data-testid=run-status]") });

  // 3. Components: a file dropped in appears without a reload; a broken one
  //    shows its load error.
  await page.goto(`${base}/dashboard#/components`);
  await page.locator("[data-testid=component-approval]").waitFor();
  await page.evaluate(() => { window.notReloaded = true; });
  out("components-shown");
  await told();
  await page.locator("[data-testid=component-doc-poet]").waitFor();
  const failure = page.locator("[data-testid=load-failure]", { hasText: "broken.wasm" });
  await failure.waitFor();
  // A new build of orchestration-tests was dropped in too: its replay check
  // against the instance still waiting on the old one shows once it ends.
  const replay = page.locator("[data-testid=component-orchestration-tests] [data-testid=replay-check]");
  await replay.waitFor();
  await page.screenshot({ path: `${shots}/components.png`, fullPage: true });
  out("components", {
    poet: await text("[data-testid=component-doc-poet]"),
    failure: await failure.innerText(),
    reloaded: !(await page.evaluate(() => window.notReloaded === true)),
    tests: await text("[data-testid=component-orchestration-tests]"),
    replay: await replay.innerText(),
  });

  // 4. Health: the figures of /metrics, live.
  await page.goto(`${base}/dashboard#/health`);
  await page.waitForTimeout(3500);
  await page.screenshot({ path: `${shots}/health.png`, fullPage: true });
  out("health", {
    figures: await page.locator("[data-testid=figure]").count(),
    text: await text("[data-testid=health]"),
  });
} catch (e) {
  await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  out("failed", { error: String(e), url: page.url(), shown: await page.locator("body").innerText().catch(() => "") });
  throw e;
} finally {
  page.removeAllListeners();
  out("requests", { requests, answers });
  await browser.close();
}
process.exit(0);
