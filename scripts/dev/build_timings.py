#!/usr/bin/env python3
"""Where a build's time goes: reads the report `cargo build --timings` writes
(target/cargo-timings/cargo-timing.html) and writes an SVG bar chart of the crates that took
longest, grouped by package (a package's build script and its library together), with the
rest summed; prints the same as a Markdown table.

    python3 scripts/dev/build_timings.py target/cargo-timings/cargo-timing.html OUT.svg [TITLE]

Standard library only.
"""
import html
import json
import re
import sys
from collections import defaultdict

SHOWN = 14


def units(report):
    text = open(report, encoding="utf-8").read()
    found = re.search(r"const UNIT_DATA = (\[.*?\]);\n", text, re.S)
    if not found:
        sys.exit(f"{report}: no UNIT_DATA (not a cargo --timings report?)")
    return json.loads(found.group(1))


def by_package(data):
    seconds = defaultdict(float)
    for u in data:
        seconds[u["name"]] += u["duration"]
    return sorted(seconds.items(), key=lambda kv: -kv[1])


def svg(rows, rest, total, wall, title):
    bar_h, gap, left, width = 18, 6, 170, 420
    top = 46
    most = max(s for _, s in rows)
    items = rows + [(f"{rest[0]} other crates", rest[1])]
    height = top + len(items) * (bar_h + gap) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" '
        f'height="{height}" font-family="DejaVu Sans, sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{html.escape(title)}</text>',
        f'<text x="10" y="38" fill="#555">CPU seconds per package, {total:.0f} s in all; '
        f"{wall:.0f} s of wall time on 2 cores</text>",
    ]
    for i, (name, s) in enumerate(items):
        y = top + i * (bar_h + gap)
        w = max(1.0, width * s / most)
        colour = "#bbbbbb" if i == len(items) - 1 else "#4c72b0"
        out.append(
            f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{html.escape(name)}</text>'
        )
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"/>')
        out.append(f'<text x="{left + w + 6:.1f}" y="{y + 13}">{s:.0f} s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    report, target = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "cargo build --release --bin fedsim, cold"
    data = units(report)
    packages = by_package(data)
    total = sum(s for _, s in packages)
    wall = max(u["start"] + u["duration"] for u in data)
    rows = packages[:SHOWN]
    rest = (len(packages) - SHOWN, sum(s for _, s in packages[SHOWN:]))
    with open(target, "w", encoding="utf-8") as f:
        f.write(svg(rows, rest, total, wall, title))
    print("| package | CPU seconds | share |")
    print("|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.0f} | {100 * s / total:.0f} % |")
    print(f"| {rest[0]} other crates | {rest[1]:.0f} | {100 * rest[1] / total:.0f} % |")
    print(f"\n{len(data)} units, {total:.0f} CPU seconds, {wall:.0f} s of wall time")


if __name__ == "__main__":
    main()
