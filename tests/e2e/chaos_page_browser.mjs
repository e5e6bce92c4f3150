// Opens the chaos report's page (tools/chaos/report_page.py) in headless Chromium (playwright-core),
// for tests/e2e/test_e2e_chaos_page.py: reports what the chart's SVG drew as one JSON line on
// stdout, and saves a screenshot of the whole page.
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
    const box = (element) => {
      const { width, height } = element.getBoundingClientRect();
      return { width, height };
    };
    return {
      title: document.title,
      verdict: document.getElementById("verdict").textContent,
      svg: box(svg),
      series: [...svg.querySelectorAll("polyline.series")].map((line) => ({
        name: line.dataset.series,
        points: line.points.numberOfItems,
        length: line.getTotalLength(),
        stroke: getComputedStyle(line).stroke,
      })),
      crashes: [...svg.querySelectorAll("g.crash-marker")].map((marker) => ({
        kind: marker.dataset.kind,
        t: Number(marker.dataset.t),
        title: marker.querySelector("title").textContent,
        ...box(marker.querySelector(".crash-shape")),
      })),
      faultBins: [...svg.querySelectorAll("rect.fault-bin")].map((cell) => ({
        kind: cell.dataset.kind,
        count: Number(cell.dataset.count),
        ...box(cell),
      })),
      legend: [...svg.querySelectorAll(".legend-item")].map((item) => item.dataset.label),
      invariantRows: [...document.querySelectorAll("#invariants tbody tr")].map((row) => [
        row.dataset.invariant, row.className]),
      scripts: document.querySelectorAll("script").length,
    };
  });
  await page.screenshot({ path: screenshotPath, fullPage: true });
  console.log(JSON.stringify({ ...seen, external, errors }));
} finally {
  await context.close();
}
