// Opens the chaos report's page (tools/chaos/report_page.py) in headless Chromium (playwright-core),
// for tests/e2e/test_e2e_chaos_page.py: reports where the chart's SVG drew its lines, crash
// markers, fault cells and texts as one JSON line on stdout, and saves a screenshot of the
// whole page.
//
//   node chaos_page_browser.mjs PAGE_URL CHROMIUM_PATH USER_DATA_DIR SCREENSHOT_PATH
import { chromium } from "playwright-core";

const [pageUrl, executablePath, userDataDir, screenshotPath] = process.argv.slice(2);
const WAIT_MS = 20000;

const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  timeout: WAIT_MS,
  viewport: { width: 1040, height: 900 },
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
    if (request.url() !== pageUrl) external.push(request.url());
  });
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto(pageUrl);
  await page.locator("svg#timeline").waitFor();
  const seen = await page.evaluate(() => {
    const svg = document.querySelector("svg#timeline");
    // Where an element is drawn on the screen: its centre and its size, in CSS pixels.
    const box = (element) => {
      const { x, y, width, height } = element.getBoundingClientRect();
      return { x: x + width / 2, y: y + height / 2, width, height };
    };
    const named = (prefix) => [...svg.querySelectorAll(`g[id^="${prefix}"]`)];
    return {
      title: document.title,
      verdict: document.getElementById("verdict").textContent,
      svg: box(svg),
      series: named("series-").map((group) => {
        const line = group.querySelector("path");
        const length = line.getTotalLength();
        const onScreen = (along) => {
          const { x, y } = line.getPointAtLength(along);
          const point = new DOMPoint(x, y).matrixTransform(line.getScreenCTM());
          return { x: point.x, y: point.y };
        };
        return {
          name: group.id.replace("series-", ""),
          start: onScreen(0),
          end: onScreen(length),
          length,
          stroke: getComputedStyle(line).stroke,
        };
      }),
      crashes: named("crash-").map((group) => ({
        number: Number(group.id.replace("crash-", "")),
        ...box(group.querySelector("use")),
      })),
      cells: named("faults-").map((group) => ({
        opacity: Number(getComputedStyle(group.querySelector("path")).fillOpacity),
        ...box(group.querySelector("path")),
      })),
      // The axes' tick labels (matplotlib's groups for them are xtick_1, ytick_1, ...).
      ticks: Object.fromEntries(["xtick", "ytick"].map((axis) => [
        axis,
        [...svg.querySelectorAll(`g[id^="${axis}"] text`)].map((text) => ({
          value: Number(text.textContent),
          ...box(text),
        })),
      ])),
      texts: [...svg.querySelectorAll("text")].map((text) => ({
        text: text.textContent,
        ...box(text),
      })),
      invariantRows: [...document.querySelectorAll("#invariants tbody tr")].map((row) => [
        row.dataset.invariant, row.className]),
      crashRows: [...document.querySelectorAll("#crashes tbody tr")].map((row) => row.dataset.kind),
      scripts: document.querySelectorAll("script").length,
    };
  });
  await page.screenshot({ path: screenshotPath, fullPage: true });
  console.log(JSON.stringify({ ...seen, external, errors }));
} finally {
  await context.close();
}
