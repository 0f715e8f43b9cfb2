"""Celeritas' experiment tables (section 6, Tables 2-5) from tfplace's results, beside the paper's numbers.

Builders turn result records into :class:`Table` objects, which render as Markdown and CSV:

- :func:`graph_table` (Table 2): ops and CCR before and after Optimal Operation Fusion;
- :func:`step_time_table` (Table 3): simulated step time per placer, out-of-memory marked;
- :func:`placement_time_table` (Table 4): seconds each placer took;
- :func:`accuracy_table` (Table 5): relative deviation of the Standard Evaluation's estimates;
- :func:`real_run_table`: simulated against measured step time of small placements run for real.

:func:`plot_step_times` draws Table 3 as bars, the paper's values as markers. The paper's numbers
(:data:`PAPER_GRAPHS`, :data:`PAPER_STEP_TIME`, :data:`PAPER_PLACEMENT_SECONDS`,
:data:`PAPER_ACCURACY`) are copied from papers/celeritas.txt, section 6. No TensorFlow is needed.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments.comparison import FusionStats, PlacerRun
from tfplace.estimator.accuracy import AccuracyReport

__all__ = [
    "PAPER_ACCURACY",
    "PAPER_GRAPHS",
    "PAPER_PLACEMENT_SECONDS",
    "PAPER_STEP_TIME",
    "RealRun",
    "Table",
    "accuracy_table",
    "graph_table",
    "paper_model",
    "placement_time_table",
    "plot_step_times",
    "real_run_table",
    "step_time_table",
    "write_tables",
]

OOM = None
"""A paper cell that reads "OOM"."""

#: Table 2: ops, clusters after fusion, CCR before and after fusion.
PAPER_GRAPHS: dict[str, tuple[int, int, float, float]] = {
    "inception_v3": (6332, 59, 33.118, 8.137),
    "nmt": (25463, 154, 18.630, 6.372),
    "transformer": (36352, 220, 111.957, 11.10),
    "tensor_holography": (3810, 37, 49.147, 7.438),
}

#: Table 3: step seconds on 4 x V100 32 GB (PCIe); ``None`` is "OOM".
PAPER_STEP_TIME: dict[str, dict[str, float | None]] = {
    "inception_v3": {
        "metis": OOM,
        "m_topo": 3.100,
        "m_etf": 10.548,
        "m_sct": 7.610,
        "hrl": 8.565,
        "order_place": 2.931,
        "celeritas": 2.859,
    },
    "nmt": {
        "metis": OOM,
        "m_topo": OOM,
        "m_etf": OOM,
        "m_sct": OOM,
        "hrl": 10.224,
        "order_place": 9.117,
        "celeritas": 9.099,
    },
    "transformer": {
        "metis": OOM,
        "m_topo": OOM,
        "m_etf": 8.613,
        "m_sct": 8.411,
        "hrl": 42.837,
        "order_place": 6.935,
        "celeritas": 6.536,
    },
    "tensor_holography": {
        "metis": 6.591,
        "m_topo": 2.220,
        "m_etf": 6.376,
        "m_sct": 6.013,
        "hrl": 3.683,
        "order_place": 1.520,
        "celeritas": 1.461,
    },
}

#: Table 4: seconds to generate the placement; ``None`` is "OOM" (m-SCT on NMT). HRL: 5 hours.
PAPER_PLACEMENT_SECONDS: dict[str, dict[str, float | None]] = {
    "inception_v3": {"m_sct": 8.591, "hrl": 5 * 3600.0, "order_place": 5.439, "celeritas": 7.183},
    "nmt": {"m_sct": OOM, "hrl": 5 * 3600.0, "order_place": 54.695, "celeritas": 59.418},
    "transformer": {"m_sct": 129.498, "hrl": 5 * 3600.0, "order_place": 92.639, "celeritas": 95.304},
    "tensor_holography": {"m_sct": 2.968, "hrl": 5 * 3600.0, "order_place": 2.711, "celeritas": 3.586},
}

#: Table 5: mean relative deviation per op of memory and of time.
PAPER_ACCURACY: dict[str, tuple[float, float]] = {
    "inception_v3": (0.0154, 0.0799),
    "nmt": (0.0393, 0.1085),
    "transformer": (0.0602, 0.1416),
    "tensor_holography": (0.0292, 0.1132),
}

#: Display names of placers, as the paper writes them.
PLACER_NAMES = {
    "celeritas": "Celeritas",
    "celeritas_paper": "Celeritas (paper: static memory, no co-placement)",
    "order_place": "Order-Place",
    "metis": "METIS",
    "m_topo": "m-TOPO",
    "m_etf": "m-ETF",
    "m_sct": "m-SCT",
    "hrl": "HRL",
    "dfs_topo": "DFS-TOPO",
    "single": "one device",
    "auto": "tfplace auto",
    "auto_whole_ops": "tfplace auto (whole ops)",
}

_VARIANTS = {"nmt_while": "nmt"}

_PANELS_PER_ROW = 3


def paper_model(model: str) -> str | None:
    """The model of the paper a tfplace model stands for (``nmt_while`` is NMT), if any."""
    name = _VARIANTS.get(model, model)
    return name if name in PAPER_GRAPHS else None


@dataclass(frozen=True)
class RealRun:
    """A placement run for real (on the loopback cluster) beside its simulated step.

    Attributes
    ----------
    model, placer : str
    batch_size : int
    devices : int
        Devices (worker processes) the placement uses.
    simulated : float
        Simulated step seconds with the devices' link.
    measured : float
        Median measured step seconds.
    steps : int
        Steps timed.
    mismatches : int
        Ops TensorFlow ran elsewhere than placed.
    """

    model: str
    placer: str
    batch_size: int
    devices: int
    simulated: float
    measured: float
    steps: int
    mismatches: int


@dataclass(frozen=True)
class Table:
    """A titled table of text cells; the first column names the row.

    Cells may mark emphasis with ``**`` (Markdown bold); CSV drops the marks.
    """

    name: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: str = ""

    def markdown(self) -> str:
        """A Markdown section: title, pipe table, notes."""
        lines = [f"### {self.title}", "", _pipe_row(self.columns), _pipe_row(["---"] * len(self.columns))]
        lines += [_pipe_row(row) for row in self.rows]
        if self.notes:
            lines += ["", self.notes]
        return "\n".join(lines) + "\n"

    def csv(self) -> str:
        """The header and rows as CSV, emphasis marks removed."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows([cell.replace("**", "") for cell in row] for row in self.rows)
        return buffer.getvalue()


def _pipe_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _number(value: float | None, digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2%}"


def graph_table(fusion: Sequence[FusionStats], graph_ops: Mapping[str, int]) -> Table:
    """Table 2: graph size and CCR before and after fusion, each beside the paper's value.

    ``graph_ops`` gives the ops of each model's whole TensorFlow graph (initializers included);
    ``FusionStats.ops`` counts the ops of the training step, which are placed.
    """
    rows = []
    for stats in fusion:
        paper = PAPER_GRAPHS.get(paper_model(stats.model) or "")
        rows.append(
            (
                stats.model,
                f"{graph_ops[stats.model]:,}" if stats.model in graph_ops else "-",
                f"{stats.ops:,}",
                f"{paper[0]:,}" if paper else "-",
                f"{stats.clusters:,}" if stats.clusters is not None else "-",
                f"{paper[1]:,}" if paper else "-",
                _number(stats.ccr_before),
                _number(paper[2]) if paper else "-",
                _number(stats.ccr_after),
                _number(paper[3]) if paper else "-",
                _number(stats.compute_seconds),
                _number(stats.memory_bytes / 1e9, 1),
            )
        )
    return Table(
        name="table2_graphs",
        title="Table 2: graph size and CCR before and after Optimal Operation Fusion",
        columns=(
            "model",
            "graph ops",
            "step ops (placed)",
            "paper ops",
            "clusters",
            "paper clusters",
            "CCR before",
            "paper",
            "CCR after",
            "paper",
            "compute [s]",
            "memory estimate [GB]",
        ),
        rows=tuple(rows),
        notes=(
            "CCR (Eq. 1): summed edge transfer times over summed op compute times on the target devices. "
            "Compute: the summed op times on one target device. Memory estimate: the placers' static "
            "model of the whole step on one device: every op's persistent bytes and the outputs it allocates "
            "(not those that are an input's buffer), plus the largest temporary bytes (an upper bound of "
            "the memory a step holds at once)."
        ),
    )


def _models(runs: Sequence[PlacerRun]) -> list[str]:
    return list(dict.fromkeys(run.model for run in runs))


def _placers(runs: Sequence[PlacerRun]) -> list[str]:
    return list(dict.fromkeys(run.placer for run in runs))


#: Placers that are not baselines of the paper: Celeritas itself, its ablation and tfplace's
#: ``auto`` (which runs the others); the speed-up is measured against the rest.
_NOT_BASELINES = ("celeritas", "celeritas_paper", "order_place", "auto", "auto_whole_ops")

#: The paper's column a variant's cell shows (the paper ran Celeritas as it specifies it).
_PAPER_COLUMN = {"celeritas_paper": "celeritas"}


_AUTO_WHOLE_OPS_NOTE = (
    " tfplace auto (whole ops): the fastest simulated placement of whole ops that fits, the placements "
    "Celeritas chooses among; auto with split plans is in results/split_plans.md."
)


def _speedup_against_baselines(times: Mapping[str, float]) -> str:
    """Celeritas against the fastest baseline (not Order-Place, not auto), as the paper's "Speed up"
    column."""
    baselines = [p for p in times if p not in _NOT_BASELINES]
    if "celeritas" not in times or not baselines:
        return "-"
    rival = min(baselines, key=times.__getitem__)
    gain = (times[rival] - times["celeritas"]) / times[rival]
    return f"{gain:+.1%} vs {PLACER_NAMES.get(rival, rival)}"


def step_time_table(runs: Sequence[PlacerRun]) -> Table:
    """Table 3: simulated step seconds per model and placer, the paper's row under each model.

    A placement that runs out of memory reads ``OOM (t)``, ``t`` its simulated time regardless;
    the fastest placement that fits is bold.
    """
    placers = _placers(runs)
    columns = (
        "model",
        "source",
        *(PLACER_NAMES.get(p, p) for p in placers),
        "HRL",
        "Celeritas vs best baseline",
    )
    rows = []
    for model in _models(runs):
        mine = [run for run in runs if run.model == model]
        by_placer = {run.placer: run for run in mine}
        fitting = [run for run in mine if not run.oom and math.isfinite(run.step_time)]
        best = min(fitting, key=lambda run: run.step_time).placer if fitting else None
        cells = []
        for placer in placers:
            run = by_placer.get(placer)
            if run is None:
                cells.append("-")
            elif run.oom:
                cells.append(f"OOM ({_number(run.step_time)})")
            else:
                text = _number(run.step_time)
                cells.append(f"**{text}**" if placer == best else text)
        fitting_times = {run.placer: run.step_time for run in fitting}
        rows.append((model, "tfplace (simulated)", *cells, "n/a", _speedup_against_baselines(fitting_times)))
        paper = PAPER_STEP_TIME.get(paper_model(model) or "")
        if paper is not None:
            cells = [_paper_cell(paper, _PAPER_COLUMN.get(placer, placer)) for placer in placers]
            measured = {p: t for p, t in paper.items() if t is not None}
            hrl = _paper_cell(paper, "hrl")
            rows.append((model, "paper (measured)", *cells, hrl, _speedup_against_baselines(measured)))
    return Table(
        name="table3_step_time",
        title="Table 3: step time in seconds",
        columns=columns,
        rows=tuple(rows),
        notes=(
            "OOM: a device's simulated peak memory exceeds its capacity (the time in brackets is the "
            "simulated step regardless). Bold: the fastest placement that fits. Last column: Celeritas "
            "against the fastest baseline that fits (Order-Place, its ablation, and tfplace auto excluded), the "
            "paper's speed-up column. HRL is not implemented here (it trains a policy for hours on the devices)."
            + _AUTO_WHOLE_OPS_NOTE
            * ("auto_whole_ops" in placers)
        ),
    )


def _paper_cell(paper: Mapping[str, float | None], placer: str) -> str:
    if placer not in paper:
        return "-"
    value = paper[placer]
    return "OOM" if value is None else _number(value)


def placement_time_table(runs: Sequence[PlacerRun]) -> Table:
    """Table 4: seconds each placer took per model, the paper's row under each model."""
    placers = _placers(runs)
    rows = []
    for model in _models(runs):
        by_placer = {run.placer: run for run in runs if run.model == model}
        cells = [_number(by_placer[p].placement_seconds) if p in by_placer else "-" for p in placers]
        rows.append((model, "tfplace", *cells, "n/a"))
        paper = PAPER_PLACEMENT_SECONDS.get(paper_model(model) or "")
        if paper is not None:
            rows.append((model, "paper", *(_paper_cell(paper, p) for p in placers), "5 hours"))
    return Table(
        name="table4_placement_time",
        title="Table 4: placement generation time in seconds",
        columns=("model", "source", *(PLACER_NAMES.get(p, p) for p in placers), "HRL"),
        rows=tuple(rows),
        notes=(
            "Indexing the cost graph and placing it, without profiling or simulation; the paper "
            "reports m-SCT, HRL, Order-Place and Celeritas only (m-SCT ran out of memory on NMT)."
        ),
    )


def accuracy_table(reports: Mapping[str, AccuracyReport]) -> Table:
    """Table 5: mean relative deviation per op of estimated memory and time, beside the paper's."""
    rows = []
    for model, report in reports.items():
        paper = PAPER_ACCURACY.get(paper_model(model) or "")
        batches = ",".join(str(b) for b in report.profile_batch_sizes)
        rows.append(
            (
                model,
                f"{batches} -> {report.target_batch}",
                _percent(report.memory.mean),
                _percent(paper[0]) if paper else "-",
                _percent(report.time.mean),
                _percent(paper[1]) if paper else "-",
                _percent(report.memory.exact),
                _percent(report.time.within_30),
                _percent(report.time_weighted_deviation),
                _percent(report.floor_time.mean if report.floor_time else None),
                _percent(report.floor_time_weighted),
                _number(report.floor_ratio, 2),
                f"{report.memory.ops:,} / {report.time.ops:,}",
                _number(report.profiling_seconds, 0),
                _number(report.measurement_seconds, 0),
            )
        )
    return Table(
        name="table5_estimation",
        title="Table 5: Standard Evaluation accuracy, mean relative deviation per op",
        columns=(
            "model",
            "profiled -> predicted batch",
            "memory dev.",
            "paper",
            "time dev.",
            "paper",
            "memory exact",
            "time within 30%",
            "time dev. weighted by time",
            "time noise floor",
            "floor weighted by time",
            "time dev. / floor",
            "ops compared (memory / time)",
            "profiling [s]",
            "measuring [s]",
        ),
        rows=tuple(rows),
        notes=(
            "Per op |estimated - measured| / measured, estimated by regression from the small batches, "
            "measured at the predicted batch on this machine's CPU. Memory: output plus temporary bytes. "
            "Time noise floor: the same per-op deviation between two independent measurements of the "
            "predicted batch by the same procedure; the prediction's time deviations are then pooled over "
            "both measurements (tfplace.estimator.accuracy). "
            "Profiling and measuring: seconds the small batches and the predicted batch took when they "
            "were measured (cached profiles keep them)."
        ),
    )


def real_run_table(runs: Sequence[RealRun]) -> Table:
    """Simulated against measured step time of placements run on the loopback cluster."""
    rows = tuple(
        (
            run.model,
            PLACER_NAMES.get(run.placer, run.placer),
            str(run.batch_size),
            str(run.devices),
            _number(run.simulated, 4),
            _number(run.measured, 4),
            f"{run.measured / run.simulated:.2f}" if run.simulated > 0 else "-",
            str(run.steps),
            str(run.mismatches),
        )
        for run in runs
    )
    return Table(
        name="table_real_runs",
        title="Real runs on the loopback cluster: simulated and measured step time in seconds",
        columns=(
            "model",
            "placer",
            "batch",
            "workers",
            "simulated",
            "measured (median)",
            "measured / simulated",
            "steps",
            "ops not where placed",
        ),
        rows=rows,
    )


def write_tables(tables: Sequence[Table], directory: str | os.PathLike[str], preamble: str = "") -> Path:
    """Write each table as ``<name>.md`` and ``<name>.csv`` and all of them into ``tables.md``.

    Returns the path of ``tables.md``.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for table in tables:
        (out / f"{table.name}.md").write_text(table.markdown())
        (out / f"{table.name}.csv").write_text(table.csv())
    combined = out / "tables.md"
    combined.write_text("\n".join([preamble, *(table.markdown() for table in tables)]).lstrip("\n"))
    return combined


def plot_step_times(runs: Sequence[PlacerRun], path: str | os.PathLike[str]) -> None:
    """Bars of the simulated step time per placer, one panel per model, the paper's times as markers.

    Out-of-memory placements are hatched red; the paper's OOM cells are marked at the axis bottom.
    """
    models = _models(runs)
    columns = min(len(models), _PANELS_PER_ROW)
    rows = -(-len(models) // columns)
    figure = Figure(figsize=(max(4.6 * columns, 7.0), 0.4 + 4.0 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(rows, columns, squeeze=False).ravel()
    for axes in panels[len(models) :]:
        axes.set_visible(False)
    for axes, model in zip(panels, models):
        mine = [run for run in runs if run.model == model]
        positions = range(len(mine))
        heights = [run.step_time for run in mine]
        bars = axes.bar(positions, heights, color=["#d62728" if run.oom else "#1f77b4" for run in mine])
        for bar, run in zip(bars, mine):
            if run.oom:
                bar.set_hatch("//")
                bar.set_facecolor("white")
                bar.set_edgecolor("#d62728")
        paper = PAPER_STEP_TIME.get(paper_model(model) or "", {})
        marks = [(i, paper[run.placer]) for i, run in enumerate(mine) if run.placer in paper]
        known = [(i, t) for i, t in marks if t is not None]
        if known:
            axes.plot(*zip(*known), "kD", markersize=6, label="paper (measured)")
            axes.legend(loc="upper left", fontsize=8, frameon=False)
        for i, t in marks:
            if t is None:
                axes.annotate("paper: OOM", (i, 0), ha="center", va="bottom", fontsize=7, rotation=90)
        axes.set_xticks(list(positions), [PLACER_NAMES.get(run.placer, run.placer) for run in mine])
        axes.tick_params(axis="x", labelrotation=45, labelsize=8)
        axes.set_title(model, loc="left", fontsize=9)
        axes.set_ylabel("step time [s]")
        axes.grid(axis="y", color="#e0e0e0", linewidth=0.6)
        axes.set_axisbelow(True)
    figure.suptitle(
        "Simulated step time per placer (hatched red: out of memory)", x=0.01, ha="left", fontsize=11
    )
    figure.savefig(os.fspath(path), dpi=110)
