// Screenshots of a `sagd reproduce` report as a reader sees it, in headless Chromium at 1280 px:
// the top of the page (docs/report.png), the whole page (docs/report-full.png), and each figure
// at its size in the page (into FIGURES_DIR, when given). Records the report's SHA-256 beside the
// screenshots in docs/screenshots.json, which a test compares with the report kept in the
// repository, so a screenshot of another report fails the tests.
//
//   npm install playwright-core          # once, anywhere on NODE_PATH; Chromium from Debian's
//   node scripts/screenshot.mjs docs/results/reproduce-quick/report.html [FIGURES_DIR]
//
// CHROMIUM names the browser (default /usr/bin/chromium).
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { resolve } from "node:path";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const [page_path, figures] = process.argv.slice(2);
if (!page_path) {
  console.error("usage: node scripts/screenshot.mjs REPORT_HTML [FIGURES_DIR]");
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
await page.goto("file://" + resolve(page_path));
await page.screenshot({ path: "docs/report.png" });
await page.screenshot({ path: "docs/report-full.png", fullPage: true });
const shown = [];
if (figures) {
  mkdirSync(figures, { recursive: true });
  const imgs = await page.$$("img");
  for (const [i, img] of imgs.entries()) {
    const alt = (await img.getAttribute("alt")) || `figure-${i}`;
    const box = await img.boundingBox();
    const natural = await img.evaluate((e) => [e.naturalWidth, e.naturalHeight]);
    const name = alt.replace(/[^A-Za-z0-9.-]+/g, "_");
    await img.screenshot({ path: `${figures}/${name}` });
    shown.push(`${alt}: ${Math.round(box.width)} × ${Math.round(box.height)} px in the page ` +
      `(drawn ${natural[0]} × ${natural[1]}, scale ${(box.width / natural[0]).toFixed(2)})`);
  }
}
await browser.close();
const sha256 = createHash("sha256").update(readFileSync(page_path)).digest("hex");
const record = { of: page_path, sha256 };
writeFileSync(
  "docs/screenshots.json",
  JSON.stringify({ "docs/report.png": record, "docs/report-full.png": record }, null, 1) + "\n",
);
for (const s of shown) console.log(s);
