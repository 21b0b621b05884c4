#!/usr/bin/env bash
# Renders a run document to HTML and screenshots it with headless Chromium, to check
# that the page looks right in a real browser. Manual step (CI does not need Chromium):
#
#   apt-get update && apt-get install -y chromium
#   crates/speedmatrix-report/scripts/screenshot.sh [RUN.json] [OUT.png]
#
# Defaults: the seed fixture, target/report-screenshot.png. Prints the PNG's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
run="${1:-$root/crates/speedmatrix-report/tests/fixtures/seed-run.json}"
png="${2:-$root/target/report-screenshot.png}"
chromium="${CHROMIUM:-/usr/bin/chromium}"
if [[ ! -x "$chromium" ]]; then
    echo "error: $chromium not found; install it with: apt-get install -y chromium" >&2
    exit 2
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cargo run --quiet -p speedmatrix -- report "$run" --format html -o "$work/report.html"
mkdir -p "$(dirname "$png")"
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile" --hide-scrollbars --window-size=${WINDOW_SIZE:-1400,2400} \
    --screenshot="$png" "file://$work/report.html" >/dev/null 2>&1
test -s "$png"
echo "$png"
