"""The report's pictures: matplotlib figures of a summary, each a PNG as base64 text to embed.

Figures are built with ``matplotlib.figure.Figure`` on the Agg canvas, never through pyplot: no
figure is registered in pyplot's global list, so none outlives its picture, however many reports
one process writes, and no display is needed.
"""

from __future__ import annotations

import base64
import io

import matplotlib
import numpy as np

matplotlib.use("Agg")  # before anything could import pyplot: a report never needs a display

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from streamer.evaluate.figures import SIDES, Summary  # noqa: E402

COLORS = {"champion": "#1f5fa8", "candidate": "#d9641c"}
SIZE = (6.4, 3.6)
DPI = 96


def _png(fig: Figure) -> str:
    """The figure as base64 PNG text; the figure is cleared so its memory goes with it."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight",
                metadata={"Software": None})  # matplotlib's own would carry its web address
    fig.clear()
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=SIZE)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def delta_histogram(summary: Summary) -> str | None:
    """How far the candidate's score is from the champion's, row by row (signed)."""
    histogram = summary.histograms.get("delta")
    if histogram is None:
        return None
    fig, ax = _axes("Score difference (candidate - champion)", "delta", "events")
    ax.stairs(histogram.counts["delta"], histogram.edges, fill=True, color="#6b6b6b")
    ax.set_yscale("symlog")  # the peak at 0 would hide the tails
    return _png(fig)


def score_distributions(summary: Summary) -> str | None:
    """Both models' score distributions overlaid on shared bins."""
    histogram = summary.histograms.get("scores")
    if histogram is None:
        return None
    fig, ax = _axes("Score distributions", "score", "events")
    for side in SIDES:
        ax.stairs(histogram.counts[side], histogram.edges, label=side, color=COLORS[side],
                  linewidth=1.5)
    ax.legend()
    return _png(fig)


def agreement_over_time(summary: Summary) -> str | None:
    """Agreement and mean |delta| per hour or day of event time."""
    if not summary.over_time:
        return None
    times = np.asarray([b.start_ms for b in summary.over_time], dtype="datetime64[ms]")  # UTC, as matplotlib reads it
    fig, ax = _axes(f"Agreement by {summary.bin} of event time (UTC)", "event time", "agreement")
    left = ax.plot(times, [b.agreement for b in summary.over_time], marker=".", color=COLORS["champion"],
                   label="agreement")
    ax.set_ylim(min(0.0, *(b.agreement for b in summary.over_time)), 1.02)
    right = ax.twinx()
    right.set_ylabel("mean |delta|")
    lines = left + right.plot(times, [b.mean_abs_delta for b in summary.over_time], color=COLORS["candidate"],
                              linestyle="--", label="mean |delta|")
    ax.legend(handles=lines, loc="lower right")
    fig.autofmt_xdate()
    return _png(fig)


def curve(summary: Summary, name: str) -> str | None:
    """The ROC, PR or calibration curves of both models overlaid."""
    curves = summary.curves.get(name)
    if not curves:
        return None
    title, xlabel, ylabel = {
        "roc": ("ROC", "false positive rate", "true positive rate"),
        "pr": ("Precision-recall", "recall", "precision"),
        "calibration": ("Calibration", "mean score", "fraction positive"),
    }[name]
    fig, ax = _axes(title, xlabel, ylabel)
    if name in ("roc", "calibration"):
        ax.plot([0, 1], [0, 1], color="#aaaaaa", linestyle=":", linewidth=1)
    for side in SIDES:
        c = curves[side]
        ax.plot(c.x, c.y, label=side, color=COLORS[side],
                marker="o" if name == "calibration" else None)
    ax.legend()
    return _png(fig)
