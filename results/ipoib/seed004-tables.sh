#!/usr/bin/env bash
# Writes results/ipoib/seed004/tables.md from the sweep's own summary
# (seed004/summary.json, written by `ipoib-eval sweep`): per experiment, one
# row per point with the settings that vary in it, and the median [lowest-
# highest] of the repetitions. SEED004.md quotes these tables; nothing in
# them is typed by hand. Needs jq.
#
#   bash results/ipoib/seed004-tables.sh
set -euo pipefail
cd "$(dirname "$0")"
sum=seed004/summary.json
[ -f "$sum" ] || { echo "seed004-tables.sh: $sum is missing; run run-seed004.sh first" >&2; exit 1; }
{
  echo "# Seed 004 sweep: every point"
  echo
  echo "Written by \`results/ipoib/seed004-tables.sh\` from \`$sum\`;"
  echo "$(grep -E '^(ipoib-eval|command|date|finished):' seed004-machine.txt | sed 's/^/- /')"
  echo
  echo "Median [lowest-highest] of the repetitions; loss as a fraction;"
  echo "TX queue shares in percent, queue 0 first."
  jq -r '
    def fig($f; $d): if $f == null then "-" else
      "\($f.median | . * pow(10; $d) | round / pow(10; $d)) [\($f.min | . * pow(10; $d) | round / pow(10; $d))-\($f.max | . * pow(10; $d) | round / pow(10; $d))]" end;
    .points | group_by(.experiment)[] as $pts
    | ($pts | map(.settings) | (.[0] | keys) as $k
       | [$k[] as $key | select((map(.[$key]) | unique | length) > 1) | $key]) as $vary
    | ($vary + (if ($pts | map(.direction) | unique | length) > 1 then ["direction"] else [] end)) as $cols
    | "\n## \($pts[0].experiment)\n",
      "| \(($cols + ["Gbit/s", "msgs/s", "loss", "cycles/msg", "TX queues %"]) | join(" | ")) |",
      "|\(($cols + ["", "", "", "", ""]) | map("---") | join("|"))|",
      ($pts | sort_by(.settings | to_entries | map(.value | (tonumber? // .)))[]
        | . as $p
        | "| \(($cols | map(if . == "direction" then $p.direction else $p.settings[.] end))
              + [fig($p.figures.gbit_s; 2), fig($p.figures.msgs_per_s; 0),
                 fig($p.figures.loss; 4), fig($p.figures.cycles_per_msg; 0),
                 ($p.tx_queue_share // [] | map(round) | join("/"))]
             | join(" | ")) |")
  ' "$sum"
} > seed004/tables.md
echo "wrote results/ipoib/seed004/tables.md"
