"""The report page's interactive plots: inline SVG, a tip naming the trial under the pointer, and
the same trial highlighted in every plot and table row at once. Nothing is fetched from anywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.controller.jobs.describe import display
from trials.controller.report.data import PlotTrial

# a trial's element of a collection: matplotlib writes each element's url as a link around it
_TRIAL_LINK = re.compile(r'<a xlink:href="#trial-(\d+)"[^>]*>(.*?)</a>', re.S)
LINE_ZORDER = 2  # Line2D's default: the trials' lines and marks sit where single lines did


@dataclass(slots=True)
class TrialLines:
    """The trials' lines of one plot, drawn as one collection (:meth:`draw`): each trial's line its own
    element of it, linked to ``#trial-<id>`` for the page's hover (:func:`inline_svg`). On 1,000
    trials one ``Line2D`` per trial cost seconds of a report (made, laid out, clipped and drawn
    one by one, twice: PNG and SVG); one collection draws them in one call."""

    ids: list[int] = field(default_factory=list)
    segments: list[list[tuple[float, float]]] = field(default_factory=list)
    colors: list[Any] = field(default_factory=list)
    widths: list[float] = field(default_factory=list)
    styles: list[str] = field(default_factory=list)
    order: list[float] = field(default_factory=list)

    def add(self, trial_id: int, xs: Sequence[Any], ys: Sequence[Any], *, color: Any, linewidth: float = 1.5,
            linestyle: str = "-", alpha: float = 1.0, zorder: float = 0.0) -> None:
        """One trial's line; ``zorder`` orders the trials within the collection (the highest on top)."""
        from matplotlib.colors import to_rgba

        self.ids.append(trial_id)
        self.segments.append([(float(x), float(y)) for x, y in zip(xs, ys, strict=True)])
        self.colors.append(to_rgba(color, alpha))
        self.widths.append(linewidth)
        self.styles.append(linestyle)
        self.order.append(zorder)

    def draw(self, ax: Any, *, zorder: float = LINE_ZORDER, gid: str | None = None) -> Any:
        """Add the lines to ``ax`` as one ``LineCollection`` (None if there are none)."""
        from matplotlib.collections import LineCollection

        if not self.ids:
            return None
        rank = sorted(range(len(self.ids)), key=self.order.__getitem__)  # (stable: ties keep their order)
        lines = LineCollection([self.segments[i] for i in rank], colors=[self.colors[i] for i in rank],
                               linewidths=[self.widths[i] for i in rank],
                               linestyles=[self.styles[i] for i in rank], zorder=zorder, gid=gid)
        lines.set_urls([f"#trial-{self.ids[i]}" for i in rank])
        ax.add_collection(lines, autolim=True)
        return lines


def trial_marks(ax: Any, ids: Sequence[int], xs: Sequence[Any], ys: Sequence[Any], marker: str, *,
                color: Any = None, colors: Sequence[Any] | None = None, hollow: bool = False,
                alpha: float | None = None, size: float = 6.0, edge_width: float = 1.0, label: str | None = None,
                zorder: float = LINE_ZORDER, transform: Any = None, gid: str | None = None) -> Any:
    """One mark per trial (``marker`` ``"o"`` or ``"x"``; ``size`` in points, as ``Line2D``'s
    markersize; ``color``, or ``colors`` one per trial), as one collection whose elements link to
    ``#trial-<id>`` (the page's hover); the legend's entry is ``label``."""
    from matplotlib.colors import to_rgba

    if not ids:
        return None
    rgba = [to_rgba(c, alpha) for c in colors] if colors is not None else [to_rgba(color, alpha)] * len(ids)
    style: dict[str, Any] = {"marker": marker, "s": size * size, "linewidths": edge_width, "zorder": zorder,
                             "label": label if label is not None else "_nolegend_", "gid": gid}
    if transform is not None:
        style["transform"] = transform
    if marker == "x":  # (a mark with no inside: scatter draws its lines in the face colour)
        style["facecolors"] = rgba
    else:
        style.update(facecolors="none" if hollow else rgba, edgecolors=rgba)
    marks = ax.scatter(list(xs), list(ys), **style)
    marks.set_urls([f"#trial-{i}" for i in ids])
    return marks


CSS = """.plot svg{max-width:100%;height:auto;border:1px solid #ddd}
[data-trial]{cursor:pointer}tr.hot td{background:#ffe7a0}
.plot .hot path,.plot .hot use{stroke:#000!important;stroke-width:3px!important;stroke-opacity:1!important}
.tip{position:absolute;display:none;background:#fff;border:1px solid #888;padding:.3em .5em;
font-size:.85em;max-width:40em;pointer-events:none;box-shadow:0 1px 4px #0003}"""

# Hovering a trial's mark (or its table row) shows its tip and highlights it in every plot and table.
SCRIPT = """(function(){
var tips=JSON.parse(document.getElementById('trial-tips').textContent);
var box=document.createElement('div');box.className='tip';document.body.appendChild(box);
function mark(id,on){document.querySelectorAll('[data-trial="'+id+'"]').forEach(
function(e){e.classList.toggle('hot',on);});}
document.querySelectorAll('[data-trial]').forEach(function(g){var id=g.getAttribute('data-trial');
g.addEventListener('mouseenter',function(){mark(id,true);box.textContent=tips[id]||('trial '+id);
box.style.display='block';});
g.addEventListener('mousemove',function(ev){box.style.left=(ev.pageX+14)+'px';box.style.top=(ev.pageY+14)+'px';});
g.addEventListener('mouseleave',function(){mark(id,false);box.style.display='none';});});
})();"""


def inline_svg(svg: str) -> str:
    """matplotlib's SVG document as a page element: no XML prolog, each trial's marks tagged (a
    collection's element linked to ``#trial-<id>``)."""
    start = svg.find("<svg")
    return _TRIAL_LINK.sub(r'<g class="trial" data-trial="\1">\2</g>', svg[start:] if start >= 0 else svg)


def trial_tips(trials: Sequence[PlotTrial], metric_ids: Sequence[str],
               local: Mapping[str, Mapping[str, object]]) -> dict[str, str]:
    """Per trial id, one line: state (and how it stopped), final metrics, parameters."""
    out = {}
    for t in trials:
        state = t.state
        if t.stopped:
            state += f", stopped early at step {t.curve[-1][0]}" if t.curve else ", stopped early"
            why = local.get(str(t.trial_id), {}).get("stop_reason")
            state += f" ({why})" if why else ""
        metrics = " ".join(f"{m}={display(v)}" for m, v in zip(metric_ids, t.values, strict=False)
                           if v is not None)
        params = " ".join(f"{k}={display(v, 4)}" for k, v in t.params.items())
        out[str(t.trial_id)] = " · ".join(x for x in (f"trial {t.trial_id}", state, metrics, params) if x)
    return out


def tips_script(tips: Mapping[str, str]) -> str:
    """The tips as a JSON data block (every ``<`` escaped: nothing in it can end the element)."""
    data = json.dumps(tips, ensure_ascii=False).replace("<", "\\u003c")
    return f"<script type='application/json' id='trial-tips'>{data}</script><script>{SCRIPT}</script>"
