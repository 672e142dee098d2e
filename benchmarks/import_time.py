"""import_time: what ``import langchain_om`` costs next to ``import langgraph.graph`` (issue 32).

Each statement runs in a fresh interpreter (``python -c``), the statements taking turns so a busy
moment of a shared machine hits each of them; the figure is the median over ``--import-runs``
rounds of the process CPU time the statement took (wall time is printed too; on a loaded
machine it mostly measures the load). Rows:

* ``langgraph.graph``: the reference, what any LangGraph user imports anyway;
* ``langchain_om``: the package root (every public name loads on first use);
* ``typical use``: ``from langchain_om import ObservationalMemory, SQLiteStore`` plus the
  middleware, against ``langgraph.graph`` plus ``langchain.agents.create_agent``.

Bytecode: an installed package has its ``.pyc`` files, so the children always use a bytecode
cache (``PYTHONPYCACHEPREFIX`` in the temp directory, warmed by one unmeasured import per
checkout) even when ``PYTHONDONTWRITEBYTECODE`` is set; without it every round would compile
langchain_om from source (about 100 ms here) while langgraph loads from its ``.pyc`` files.

Targets: ``import langchain_om`` within 1.15x of ``import langgraph.graph``, and the typical use
within 1.15x of its reference. ``--import-baseline
DIR`` also times the same statements against another checkout (e.g. ``git worktree add
/tmp/base main``), side by side in the same rounds.

    python -m benchmarks.import_time --import-runs 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .common import ratio, section_main, table
from .progress import track

TARGET = 1.15
ROOT = Path(__file__).resolve().parent.parent
STATEMENTS = {
    "langgraph.graph": "import langgraph.graph",
    "langchain_om": "import langchain_om",
    "langgraph + create_agent": "import langgraph.graph\nfrom langchain.agents import create_agent",
    "typical use": "from langchain_om import ObservationalMemory, ObservationalMemoryMiddleware, SQLiteStore",
}
_CHILD = """import time
wall, cpu = time.perf_counter(), time.process_time()
{statement}
print((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000)
"""


PYCACHE = Path(tempfile.gettempdir()) / "langchain_om_import_time_pycache"


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _warm(root: Path) -> None:
    """Fill the bytecode cache for every statement's modules (not measured)."""
    subprocess.run([sys.executable, "-c", "\n".join(STATEMENTS.values())], capture_output=True, env=_env(root),
                   cwd=root, timeout=300, check=True)


def _once(statement: str, root: Path) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD.format(statement=statement)], capture_output=True,
                          text=True, env=_env(root), cwd=root, timeout=300, check=True)
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def collect(runs: int, baseline: Path | None) -> dict[str, dict[str, list[float]]]:
    roots = {"": ROOT, **({" (baseline)": baseline} if baseline is not None else {})}
    samples: dict[str, dict[str, list[float]]] = {}
    for root in roots.values():
        _warm(root)
    for round_ in track(range(runs), lambda r: f"round {r + 1} of {runs}"):
        for label, statement in STATEMENTS.items():
            for suffix, root in roots.items():
                if suffix and not label.startswith(("langchain_om", "typical")):
                    continue  # the reference rows do not depend on the checkout
                wall, cpu = _once(statement, root)
                row = samples.setdefault(label + suffix, {"wall_ms": [], "cpu_ms": []})
                row["wall_ms"].append(wall)
                row["cpu_ms"].append(cpu)
        print(f"  import_time: round {round_ + 1}/{runs}", flush=True)
    return samples


def payload_from(samples: dict[str, dict[str, list[float]]], runs: int) -> dict[str, Any]:
    medians = {label: {key: statistics.median(values) for key, values in row.items()}
               for label, row in samples.items()}
    spread = {label: {key: [min(values), max(values)] for key, values in row.items()}
              for label, row in samples.items()}
    ratios: dict[str, float | None] = {}
    for label in medians:
        reference = "langgraph + create_agent" if label.startswith("typical") else "langgraph.graph"
        if label.startswith(("langchain_om", "typical")):
            ratios[f"{label} / {reference} (CPU)"] = ratio(medians[label]["cpu_ms"], medians[reference]["cpu_ms"])
            ratios[f"{label} / {reference} (wall)"] = ratio(medians[label]["wall_ms"],
                                                           medians[reference]["wall_ms"])
    value = ratios.get("langchain_om / langgraph.graph (CPU)")
    typical = ratios.get("typical use / langgraph + create_agent (CPU)")
    return {"params": {"runs": runs}, "medians": medians, "spread": spread, "ratios": ratios,
            "target": {"import_over_langgraph_at_most": TARGET, "ratio": value,
                       "met": value is not None and value <= TARGET,
                       "typical_use_ratio": typical, "typical_use_met": typical is not None and typical <= TARGET}}


def report(payload: dict[str, Any]) -> str:
    rows = [[label, m["cpu_ms"], m["wall_ms"], *payload["spread"][label]["cpu_ms"]]
            for label, m in payload["medians"].items()]
    out = table(f"Import time, fresh interpreter, median of {payload['params']['runs']} rounds",
                ["statement", "CPU ms", "wall ms", "CPU min", "CPU max"], rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.2f}" if value is not None else f"\n  {key} = n/a"
    target = payload["target"]
    if target["ratio"] is not None:
        out += (f"\n  target: import langchain_om <= {TARGET:g} x import langgraph.graph (CPU): "
                f"{target['ratio']:.2f} -> {'met' if target['met'] else 'MISSED'}")
    if target.get("typical_use_ratio") is not None:
        out += (f"\n  target: typical use <= {TARGET:g} x langgraph.graph + create_agent (CPU): "
                f"{target['typical_use_ratio']:.2f} -> {'met' if target['typical_use_met'] else 'MISSED'}")
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--import-runs", dest="import_runs", type=int, default=3 if quick else 9)
    parser.add_argument("--import-baseline", dest="import_baseline", type=Path, default=None,
                        help="another checkout to time side by side (its langchain_om)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    return payload_from(collect(args.import_runs, args.import_baseline), args.import_runs)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("import_time", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
