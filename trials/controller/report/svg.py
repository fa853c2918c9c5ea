"""The report page's interactive plots: inline SVG, a tip naming the trial under the pointer, and
the same trial highlighted in every plot and table row at once. Nothing is fetched from anywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from trials.controller.jobs.describe import display
from trials.controller.report.data import PlotTrial

_TRIAL_GID = re.compile(r'<g id="trial-(\d+)"')
_MARKERS = {"o": "o", "x": "x"}  # the format strings the plots give for marks without a line


def trial_line(ax: Any, trial_id: int, xs: Sequence[Any], ys: Sequence[Any], fmt: str = "-", **style: Any) -> Any:
    """One trial's line (or mark, ``fmt`` ``"o"``/``"x"``) as its own artist, named ``trial-<id>``
    for the page's hover. Made as a ``Line2D`` and added as is, and a clipped one left out of the
    layout (it cannot widen the axes): on 1,000 trials ``ax.plot``'s argument parsing and the layout
    measuring every line took seconds of a report. The caller rescales the axes once after
    (``ax.autoscale_view``)."""
    from matplotlib.lines import Line2D

    if fmt in _MARKERS:
        style = {"marker": _MARKERS[fmt], "linestyle": "none", **style}
    line = Line2D(xs, ys, gid=f"trial-{trial_id}", **style)
    ax.add_line(line)
    if line.get_clip_on():
        line.set_in_layout(False)
    return line

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
    """matplotlib's SVG document as a page element: no XML prolog, each trial's marks tagged."""
    start = svg.find("<svg")
    return _TRIAL_GID.sub(r'<g class="trial" data-trial="\1"', svg[start:] if start >= 0 else svg)


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
