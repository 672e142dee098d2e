"""Plots beside the tables of the results page (issue 47, item 3): one PNG per section whose claim a
picture shows at a glance (a step's cost against the history stored, the wait per step of each
strategy, the prompt size against the history).

They are drawn from the same report text the page prints (the first table of a section), so a plot
can never disagree with the table under it. ``results_page.write_page`` draws them on every run;
``python -m benchmarks.plots`` redraws them from the committed page alone (the JSON results are not
committed) and adds the image links the page would have had.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PLOT_DIR = "benchmark-plots"
"""Folder of the PNGs, beside the page (docs/benchmark-plots/ for docs/benchmarks-results.md)."""


@dataclass(frozen=True)
class PlotSpec:
    """Which columns of a section's first table to draw: lines of ``y`` over ``x`` per ``series``
    (or, without ``x``, bars of the ``bars`` columns per series)."""

    title: str
    y_label: str
    series: tuple[str, ...]
    x: str | None = None
    y: str | None = None
    bars: tuple[str, ...] = ()
    log_x: bool = False
    log_y: bool = False
    only: tuple[tuple[str, str], ...] = ()
    """Rows kept: ``(column, value)`` pairs that must all hold."""
    min_x: float = 0.0
    """Rows with a smaller ``x`` are left out (a 2-message floor would squash a log axis)."""


PLOTS: dict[str, PlotSpec] = {
    "buffering": PlotSpec("Wait for memory per agent step", "ms (log)", ("strategy",),
                          bars=("p50", "p95", "mean", "max"), log_y=True),
    "step_cost": PlotSpec("Memory bookkeeping per step against the history stored", "p50 ms (log)",
                          ("strategy",), x="history", y="p50", log_x=True, log_y=True),
    "agent_step": PlotSpec("create_agent step minus model time (SQLite checkpointer)", "p50 ms (log)",
                           ("strategy",), x="history", y="p50", log_x=True, log_y=True,
                           only=(("saver", "sqlite"),), min_x=100),
    "prompt_tokens": PlotSpec("Prompt tokens per step against the history stored", "tokens, mean (log)",
                              ("strategy",), x="history", y="tokens mean", log_x=True, log_y=True),
    "scale": PlotSpec("One thread's history against OM's step (SQLite)", "ms (log)", (),
                      x="stored", bars=(), log_x=True, log_y=True),
}
"""The sections drawn. ``scale`` draws every millisecond column over ``stored``."""


def parse_table(report: str) -> list[dict[str, str]]:
    """The first fixed-width table of a report: the line above a line of dash runs is the header,
    and each dash run gives a column's extent; rows run to the first blank or indented line."""
    lines = report.splitlines()
    index = next((i for i, line in enumerate(lines) if i and re.fullmatch(r"-+(\s+-+)*\s*", line)), None)
    if index is None:
        return []
    starts = [m.start() for m in re.finditer(r"-+", lines[index])]
    ends = [*starts[1:], None]

    def cells(text: str) -> list[str]:
        return [text[start:end].strip() for start, end in zip(starts, ends, strict=True)]

    header = cells(lines[index - 1])
    rows = []
    for line in lines[index + 1:]:
        if not line.strip() or line.startswith("  "):
            break
        rows.append(dict(zip(header, cells(line), strict=True)))
    return rows


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _columns_in_ms(rows: list[dict[str, str]], x: str) -> list[str]:
    """``scale``'s columns worth drawing: every numeric column but ``x`` and the RSS and ratio ones."""
    if not rows:
        return []
    return [name for name in rows[0] if name != x and "/" not in name and name.lower() != "rss"
            and all(_number(row[name]) is not None for row in rows)]


def draw(name: str, report: str, path: Path) -> bool:
    """Draw section ``name``'s plot from its report into ``path``; False when there is nothing to draw
    (no spec, no table, matplotlib missing)."""
    spec = PLOTS.get(name)
    rows = parse_table(report) if spec else []
    rows = [row for row in rows if all(row.get(column) == value for column, value in (spec.only if spec else ()))]
    if spec is None or not rows:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(8, 4.2), dpi=100)
    axes.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    if spec.x is not None and spec.y is not None:
        groups: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            x, y = _number(row[spec.x]), _number(row[spec.y])
            if x is not None and y is not None and y > 0 and x >= spec.min_x:
                groups.setdefault(" / ".join(row[s] for s in spec.series), []).append((x, y))
        for label, points in groups.items():
            points.sort()
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        axes.set_xlabel(spec.x)
    elif spec.x is not None:  # every millisecond column over x
        for column in _columns_in_ms(rows, spec.x):
            pairs = [(_number(row[spec.x]), _number(row[column])) for row in rows]
            axes.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", label=column)
        axes.set_xlabel(spec.x)
    else:
        labels = [" / ".join(row[s] for s in spec.series) for row in rows]
        width = 0.8 / max(1, len(spec.bars))
        for offset, column in enumerate(spec.bars):
            values = [_number(row[column]) or 0.0 for row in rows]
            axes.bar([i + offset * width for i in range(len(rows))], values, width, label=column)
        axes.set_xticks([i + width * (len(spec.bars) - 1) / 2 for i in range(len(rows))], labels)
    if spec.log_x:
        axes.set_xscale("log")
    if spec.log_y:
        axes.set_yscale("log")
    axes.set_title(spec.title)
    axes.set_ylabel(spec.y_label)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize="small", ncol=2)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return True


def draw_all(reports: Mapping[str, str], folder: Path) -> set[str]:
    """Draw every section of ``reports`` that has a spec into ``folder``; the names drawn."""
    return {name for name, report in reports.items() if draw(name, report, folder / f"{name}.png")}


def image_line(name: str) -> str:
    """The Markdown image the page shows above a drawn section's table."""
    return f"![{name}: {PLOTS[name].title}]({PLOT_DIR}/{name}.png)"


SECTION = re.compile(r"^## (\w+)\n\n(?:!\[[^\n]*\n\n)?```text\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def redraw_page(page: Path) -> set[str]:
    """Redraw the plots of a written page from its own tables and put each image link above its table."""
    text = page.read_text(encoding="utf-8")
    reports = {match.group(1): match.group(2) for match in SECTION.finditer(text)}
    drawn = draw_all(reports, page.parent / PLOT_DIR)

    def with_image(match: re.Match[str]) -> str:
        name, report = match.group(1), match.group(2)
        image = f"{image_line(name)}\n\n" if name in drawn else ""
        return f"## {name}\n\n{image}```text\n{report}\n```"

    page.write_text(SECTION.sub(with_image, text), encoding="utf-8")
    return drawn


def main(argv: list[str] | None = None) -> set[str]:
    from .results_page import PAGE

    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--page", type=Path, default=PAGE, help=f"the results page (default {PAGE})")
    args = parser.parse_args(argv)
    drawn = redraw_page(args.page)
    print(f"{len(drawn)} plots in {args.page.parent / PLOT_DIR}: {', '.join(sorted(drawn))}")
    return drawn


if __name__ == "__main__":
    main()
