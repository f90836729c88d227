"""The pictures of docs/performance.md, drawn from one ``bench.performance`` summary.json alone.

    python -m bench.performance --plot-only build/bench/performance/summary.json [--plots docs/img]

:func:`figures` is a pure function of the summary (the dict ``bench.performance`` writes as
summary.json): it measures nothing and reads nothing else, so a committed result draws the same
pictures again. :func:`write_plots` saves them as SVG with text kept as text, no date and a fixed
hash salt, so the same summary gives the same files. Three pictures:

- ``performance_models.svg``: each model's median invoke through the delegate against LiteRT's
  XNNPACK, and the device model's part where the run measured it, with the ratio beside each model;
- ``performance_round_trip.svg``: the empty-job round trip's percentiles (min, p50, p90, p99) on
  each backend, and the doorbell floor timed in the same run with whichever percentiles the result
  holds (the shim has no floor: it says so);
- ``performance_cores.svg``: empty jobs and model invokes per second by clients, one line per
  backend, core mode and NPU core count.

Each drawn series is an SVG group whose id names it, its parts joined by dots: ``vnpu.<model>.<from>``,
``device_model...`` and ``xnnpack...`` per bar; ``round_trip.<where>.<part>`` and ``floor.<where>.<part>``;
``empty_job.<where>.<mode>.<cores>`` and ``model_invoke...`` per line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODELS_SVG = "performance_models.svg"
ROUND_TRIP_SVG = "performance_round_trip.svg"
CORES_SVG = "performance_cores.svg"
PERCENTILES = ("min", "p50", "p90", "p99")  # the round trip's, in order
WORKLOADS = (
    ("empty job", "empty_job", "empty jobs / s"),
    ("model invoke", "model_invoke", "model invokes / s"),
)

# Fixed output for the same input: text as text, no creation date or tool version, a fixed salt for
# the ids matplotlib generates.
_RC = {"svg.fonttype": "none", "svg.hashsalt": "vnpu-performance", "font.size": 9}
_METADATA = {"Date": None, "Creator": None}
VNPU_COLOR, XNNPACK_COLOR, DEVICE_COLOR, FLOOR_COLOR = "#c0392b", "#2c7fb8", "#f39c12", "#7f8c8d"


def _id(*parts: object) -> str:
    """An SVG id (an XML name) of the parts, joined by dots."""
    return ".".join(re.sub(r"[^\w.-]", "_", str(p)) for p in parts)


def _title(summary: Mapping[str, Any]) -> str:
    info = summary.get("machine", {})
    where = f"{info.get('cpu', '?')}, {info.get('cpus', '?')} CPUs" if info else "machine not recorded"
    return f"run {summary.get('when', '?')} at {summary.get('commit', '?')}, {where}"


def models_figure(summary: Mapping[str, Any]) -> Any:
    """Horizontal bars: vnpu, the device model's part and XNNPACK's ms per model (log scale)."""
    from matplotlib.figure import Figure

    models = summary.get("models", [])
    fig = Figure(figsize=(8, 1.7 + 0.4 * max(1, len(models))))
    ax = fig.add_subplot()
    if not models:
        ax.text(0.5, 0.5, "no models in this result", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    labels = [f"{m['name']} ({m['source']})" for m in models]
    rows = range(len(models))
    height = 0.27
    series = [
        ("vnpu", "vnpu (whole invoke through libteflon.so)", VNPU_COLOR, "vnpu_ms", -height),
        ("device_model", "device model's part (where measured)", DEVICE_COLOR, "device_ms", 0.0),
        ("xnnpack", "LiteRT XNNPACK", XNNPACK_COLOR, "xnnpack_ms", height),
    ]
    for gid, label, color, key, offset in series:
        ys = [y + offset for y, m in zip(rows, models, strict=True) if m.get(key)]
        xs = [m[key] for m in models if m.get(key)]
        if not xs:  # the series is not in this result: no empty legend entry
            continue
        bars = ax.barh(ys, xs, height=height, color=color, label=label)
        named = [m for m in models if m.get(key)]
        for bar, m in zip(bars, named, strict=True):
            bar.set_gid(_id(gid, m["name"], m["source"]))
    ax.set_xscale("log")
    right = max(m.get("vnpu_ms") or m.get("xnnpack_ms") or 0 for m in models)
    for y, m in zip(rows, models, strict=True):
        ratio = m.get("ratio")
        text = "no XNNPACK time" if ratio is None else f"{ratio:.1f}x"
        if not m.get("exact", True):
            text += ", NOT exact"
        ax.text(right * 1.6, y, text, va="center", fontsize=8)
    ax.set_xlim(right=right * 6)
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.set_xlabel("median invoke, ms (log scale; vnpu / XNNPACK at the right)")
    ax.set_title(f"Models against XNNPACK, one thread each\n{_title(summary)}", fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.legend(loc="lower center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0.55 / fig.get_figheight(), 1, 1))
    return fig


def _percentiles(row: Mapping[str, Any], prefix: str) -> dict[str, float]:
    return {p: row[f"{prefix}{p}_us"] for p in PERCENTILES if row.get(f"{prefix}{p}_us") is not None}


def _ladder(ax: Any, y: float, values: Mapping[str, float], color: str, gid: str, above: bool) -> None:
    """One distribution as its percentiles: a line over their range, a box p50..p90, a mark each."""
    from matplotlib.collections import LineCollection

    xs = [values[p] for p in PERCENTILES if p in values]
    span = LineCollection([[(min(xs), y), (max(xs), y)]], colors=color, linewidths=1.2)
    ax.add_collection(span)
    span.set_gid(_id(gid, "range"))
    if "p50" in values and "p90" in values:
        (box,) = ax.barh([y], [values["p90"] - values["p50"]], left=[values["p50"]], height=0.36, color=color)
        box.set_alpha(0.35)
        box.set_gid(_id(gid, "p50-p90"))
    marks = ax.scatter(xs, [y] * len(xs), color=color, marker="|", s=160, zorder=3)
    marks.set_gid(_id(gid, "percentiles"))
    for p in PERCENTILES:
        if p in values:
            ax.annotate(p, (values[p], y), xytext=(0, 9 if above else -9), textcoords="offset points",
                        ha="center", va="center", fontsize=7)  # fmt: skip


def round_trip_figure(summary: Mapping[str, Any]) -> Any:
    """The round trip's percentiles per backend, each guest's doorbell floor under it."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = summary.get("round_trip", [])
    fig = Figure(figsize=(8, 1.6 + 0.5 * max(1, 2 * len(rows))))
    ax = fig.add_subplot()
    if not rows:
        ax.text(0.5, 0.5, "no round trip in this result", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    labels: list[str] = []
    y = 0
    top = 0.0
    for r in rows:
        rt = _percentiles(r, "")
        _ladder(ax, y, rt, VNPU_COLOR, _id("round_trip", r["where"]), above=True)
        floor = _percentiles(r, "floor_")
        if not floor:
            labels.append(f"{r['where']} round trip\n(no doorbell floor measured here)")
        else:
            over = f"\n(p50 {r['over_floor']:.1f}x the floor's)" if r.get("over_floor") else ""
            labels.append(f"{r['where']} round trip{over}")
        top = max(top, *rt.values())
        y += 1
        if floor:
            _ladder(ax, y, floor, FLOOR_COLOR, _id("floor", r["where"]), above=False)
            missing = [p for p in PERCENTILES if p not in floor]
            note = f"\n({', '.join(missing)} not in this result)" if missing else ""
            labels.append(f"{r['where']} doorbell floor{note}")
            y += 1
    ax.set_yticks(range(y), labels)
    ax.set_ylim(y - 0.4, -0.7)
    ax.set_xlim(0, top * 1.08)
    ax.set_xlabel("empty-job round trip, us (min, p50, p90, p99; the box spans p50 to p90)")
    ax.set_title(f"Empty-job round trip against the doorbell floor\n{_title(summary)}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    handles = [
        Line2D([], [], color=VNPU_COLOR, marker="|", markersize=10, label="round trip (submit to wait)"),
        Line2D(
            [], [], color=FLOOR_COLOR, marker="|", markersize=10, label="doorbell -> MSI-X -> waiter floor"
        ),
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def cores_figure(summary: Mapping[str, Any]) -> Any:
    """Per second by clients: one panel per workload, one line per backend, mode and core count."""
    from matplotlib.figure import Figure

    rows = summary.get("cores", [])
    fig = Figure(figsize=(9, 4))
    axes = fig.subplots(1, len(WORKLOADS))
    lines: dict[tuple[str, str, str, int], list[tuple[int, float]]] = {}
    for r in rows:
        key = (r["workload"], r["where"], r.get("mode") or "threads", r["cores"])
        lines.setdefault(key, []).append((r["clients"], r["per_s"]))
    setups = sorted({k[1:] for k in lines}, key=lambda k: (not k[0].startswith("shim"), k[1], k[2], k[0]))
    # A colour per backend and core mode, the line style by NPU cores (dashed: one core).
    kinds = sorted(
        {(where.split("_cores")[0], mode) for where, mode, _ in setups}, key=lambda k: k[0] != "shim"
    )
    palette = ["#2c7fb8", "#e67e22", "#16a085", "#8e44ad", "#c0392b", "#7f8c8d"]
    color = {k: palette[i % len(palette)] for i, k in enumerate(kinds)}
    for ax, (workload, gid, ylabel) in zip(axes, WORKLOADS, strict=True):
        drawn = 0
        for where, mode, cores in setups:
            points = sorted(lines.get((workload, where, mode, cores), []))
            if not points:
                continue
            style = "-" if cores > 1 else "--"
            label = f"{where}, cores as {mode}, {cores} NPU core{'s' if cores > 1 else ''}"
            (line,) = ax.plot(*zip(*points, strict=True), style, marker="o",
                              color=color[(where.split("_cores")[0], mode)], label=label)  # fmt: skip
            line.set_gid(_id(gid, where, mode, cores))
            drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, f"no {workload} rows in this result", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
        clients = sorted({r["clients"] for r in rows}) or [1]
        ax.set_xticks(clients)
        ax.set_xlabel("clients")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8)
    fig.suptitle(f"Throughput by NPU cores and clients (median of the runs)\n{_title(summary)}", fontsize=9)
    fig.tight_layout(rect=(0, 0.045 * (1 + (len(handles) + 1) // 2), 1, 1))
    return fig


def figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """File name -> matplotlib Figure, for one summary; nothing is written or measured."""
    import matplotlib

    with matplotlib.rc_context(_RC):
        return {
            MODELS_SVG: models_figure(summary),
            ROUND_TRIP_SVG: round_trip_figure(summary),
            CORES_SVG: cores_figure(summary),
        }


def write_plots(summary: Mapping[str, Any], out: Path) -> list[Path]:
    """Write the summary's pictures into ``out`` as SVG; their paths."""
    import matplotlib

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(_RC):
        for name, fig in figures(summary).items():
            path = out / name
            fig.savefig(path, format="svg", metadata=_METADATA)
            written.append(path)
    return written
