#!/usr/bin/env bash
# Keeps a `sagd reproduce` report in the repository as the README's current one: its page, its
# Markdown with the figures it links, and results.json, into docs/results/reproduce-quick/; then
# the screenshots of the page (scripts/screenshot.mjs, when Node and playwright-core are here).
#   scripts/keep-report.sh [REPORT_DIR]     (default out/reproduce)
# The README's numbers are checked against the kept results.json by `cargo test` (tests/docs.rs).
set -euo pipefail
src=${1:-out/reproduce}
dst=docs/results/reproduce-quick
[ -f "$src/report.html" ] || { echo "no report in $src: run sagd reproduce first"; exit 2; }
rm -rf "$dst"
mkdir -p "$dst"
cp "$src/report.html" "$src/report.md" "$src/results.json" "$dst/"
grep -o '](\([a-z0-9-]*/[a-z0-9_-]*\.png\))' "$src/report.md" | sed 's/^](//; s/)$//' | while read -r f; do
  mkdir -p "$dst/$(dirname "$f")"
  cp "$src/$f" "$dst/$f"
done
if command -v node > /dev/null; then
  node scripts/screenshot.mjs "$dst/report.html" "${FIGURES:-/tmp/sagd-figures}" \
    || echo "screenshots not taken: npm install playwright-core, and Chromium (Debian's chromium)"
fi
echo "kept $src in $dst"
