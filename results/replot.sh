#!/usr/bin/env bash
# Redraws every chart in results/ from the data kept beside it, with no new
# measurement: after a change to how charts are drawn.
#   - ipoib/seed004/*.svg   ipoib-eval summary of seed004.csv
#   - perf/*.svg            results/plot-perf.sh (and perf/SUMMARY.md)
#   - dht-bench/ranks-*.svg results/plot-dht-bench.sh (and dht-bench/runs.md)
#   - soak/*.svg            fabkit plot of each soak report, titled as before
#   - surrogate/*/*.svg     fabkit plot of each surrogate report
#
#   bash results/replot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin fabkit --bin ipoib-eval
fk=target/release/fabkit
ie=target/release/ipoib-eval

"$ie" summary results/ipoib/seed004.csv -o results/ipoib/seed004

bash results/plot-perf.sh

bash results/plot-dht-bench.sh "$fk"

# A soak's title says how long it ran: kept from the chart it replaces.
for s in results/soak/*.json; do
  svg=${s%.json}.svg
  title=$(sed -n 's/^<text[^>]*font-size="1[56]"[^>]*>\([^<]*\)<\/text>$/\1/p' "$svg" | head -1 |
    sed 's/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g; s/&amp;/\&/g')
  [ -n "$title" ] || { echo "replot.sh: no title in $svg" >&2; exit 1; }
  "$fk" plot "$s" --title "$title" -o "$svg"
done

for d in results/surrogate/*/; do
  "$fk" plot "$d/report.json" -o "$d"
done
echo "charts redrawn; look at them (rsvg-convert -w 1000 FILE.svg -o FILE.png) before committing"
