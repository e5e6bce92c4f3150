// Drives the operator console's page in headless Chromium (playwright-core), for
// tests/e2e/test_e2e_console_browser.py: list the orders in Error, open one, resubmit it,
// discard the dead letter DEAD_MESSAGE_ID of the orders queue, and report what the page showed
// at each point as one JSON line on stdout.
//
//   node console_browser.mjs PAGE_URL ORDER_ID CHROMIUM_PATH USER_DATA_DIR DEAD_MESSAGE_ID
import { chromium } from "playwright-core";

const [pageUrl, orderId, executablePath, userDataDir, deadMessageId] = process.argv.slice(2);
const WAIT_MS = 20000;

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  timeout: WAIT_MS,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(WAIT_MS);
  const external = [];
  page.on("request", (request) => {
    if (!request.url().startsWith(new URL(pageUrl).origin)) external.push(request.url());
  });
  await page.goto(pageUrl);
  await page.selectOption("#state", "Error");
  const row = page.locator(`#orders tr[data-order="${orderId}"]`);
  await row.waitFor();
  const listed = (await row.locator("td").allTextContents()).slice(0, 2);
  await row.click();
  await page.waitForFunction(
    (id) => document.getElementById("timeline-order").textContent === id, orderId);
  const before = await page.textContent("#timeline-state");
  const attempts = await page.locator("#attempts tbody tr").allTextContents();
  const history = await page.textContent("#history");
  const statusMessages = await page.locator("#status-messages tbody tr").evaluateAll(
    (rows) => rows.map((row) => [...row.cells].map((c) => c.textContent)));
  await page.click("#resubmit");
  await page.waitForFunction(() => document.getElementById("message").textContent.includes("done"));
  const message = await page.textContent("#message");
  const after = await page.textContent("#timeline-state");
  const stillListed = await page.locator(`#orders tr[data-order="${orderId}"]`).count();

  page.on("dialog", (dialog) => dialog.accept());
  await page.selectOption("#dlq", "orders");
  const letter = page.locator("#letters tbody tr", { hasText: deadMessageId });
  await letter.waitFor();
  const deadLetter = (await letter.locator("td").allTextContents()).slice(1, 4);
  await letter.locator("button.dlq-discard").click();
  await page.waitForFunction(
    () => document.getElementById("dlq-message").textContent.includes("done"));
  const dlqMessage = await page.textContent("#dlq-message");
  const deadLettersLeft = await page.locator("#letters tbody tr", { hasText: deadMessageId }).count();
  console.log(JSON.stringify({
    listed, before, attempts, history, statusMessages, message, after, stillListed,
    deadLetter, dlqMessage, deadLettersLeft, external,
  }));
} finally {
  await context.close();
}
