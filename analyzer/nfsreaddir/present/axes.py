"""The time axis the report's charts share: ticks at round steps with their unit, drawn by the
page's Python once and again by its script after a zoom (ZOOM below, the same steps).

A chart that zooms is an <svg class="zoom"> whose data-x0 and data-pw give its plot area in px
and data-span its time span in ns; every element drawn at a time carries data-t (ns from the
chart's start; data-t1 too for a span). A drag across the plot zooms to what it covered, a
double click goes back to the whole; the wheel is left to the page, which it scrolls. The
drawing itself moves (a viewBox change alone would stretch circles and text with it)."""

import math

TICKS = 6  # at most this many ticks on an axis
_STEPS = (1, 2, 5, 10)


def step(span):
    """The round tick step (1, 2 or 5 times a power of ten) for a span, in its own unit."""
    p = 10 ** math.floor(math.log10(span / TICKS)) if span > 0 else 1
    return next(p * m for m in _STEPS if span / (p * m) <= TICKS)


def unit(span_ns):
    """(ns per unit, its name) for a span: s, ms or µs."""
    if span_ns >= 2e9:
        return 1e9, "s"
    return (1e6, "ms") if span_ns >= 2e6 else (1e3, "µs")


def _label(v):
    return f"{v:.6g}"


def xticks(a, b, x0, pw, y, h):
    """The SVG of a time axis from a to b ns (past the chart's start) on a plot area x0..x0+pw
    px, its baseline at y and grid lines h px above it: a <g class="xticks">."""
    span = max(b - a, 1)
    per, name = unit(span)
    st = step(span / per)
    first = math.ceil(a / per / st) * st
    out = [f'<g class="xticks" data-y="{y}" data-h="{h}">']
    k = 0
    while first + k * st <= b / per + 1e-9:
        v = first + k * st
        px = x0 + (v * per - a) / span * pw
        out.append(
            f'<line x1="{px:.1f}" y1="{y - h}" x2="{px:.1f}" y2="{y + 4}" stroke="#ddd"/>'
            f'<text x="{px:.1f}" y="{y + 15}" font-size="10" text-anchor="middle" '
            f'fill="#444">{_label(v)} {name}</text>'
        )
        k += 1
    return "".join(out) + "</g>"


# The zoom of every svg.zoom; nice() and unit() are step() and unit() above.
ZOOM = r"""
function nice(s){var p=Math.pow(10,Math.floor(Math.log10(s/6)));
  return [1,2,5,10].map(function(m){return p*m;}).find(function(q){return s/q<=6;});}
function unit(s){return s>=2e9?[1e9,'s']:s>=2e6?[1e6,'ms']:[1e3,'\u00b5s'];}
function draw(svg,a,b){var x0=+svg.dataset.x0,w=+svg.dataset.pw,k=w/Math.max(b-a,1);
  svg.dataset.a=a;svg.dataset.b=b;
  svg.querySelectorAll('[data-t]').forEach(function(e){
    var x=x0+(+e.dataset.t-a)*k;
    if(e.dataset.t1!==undefined){e.setAttribute('x',x.toFixed(1));
      e.setAttribute('width',Math.max((+e.dataset.t1-+e.dataset.t)*k,1.5).toFixed(1));}
    else if(e.tagName==='circle')e.setAttribute('cx',x.toFixed(1));
    else if(e.tagName==='line'){e.setAttribute('x1',x.toFixed(1));
      e.setAttribute('x2',x.toFixed(1));}
    else e.setAttribute('transform','translate('+x.toFixed(1)+' 0)');});
  var g=svg.querySelector('g.xticks'),y=+g.dataset.y,h=+g.dataset.h,u=unit(b-a),
    st=nice((b-a)/u[0]),s='';
  for(var v=Math.ceil(a/u[0]/st)*st;v<=b/u[0]+1e-9;v+=st){var px=(x0+(v*u[0]-a)*k).toFixed(1);
    s+='<line x1="'+px+'" y1="'+(y-h)+'" x2="'+px+'" y2="'+(y+4)+'" stroke="#ddd"/>'+
      '<text x="'+px+'" y="'+(y+15)+'" font-size="10" text-anchor="middle" fill="#444">'+
      (+v.toPrecision(6))+' '+u[1]+'</text>';}
  g.innerHTML=s;}
document.querySelectorAll('svg.zoom').forEach(function(svg){
  var x0=+svg.dataset.x0,w=+svg.dataset.pw,sel=svg.querySelector('rect.select'),from=null;
  function at(e){var r=svg.getBoundingClientRect();
    return Math.min(Math.max(e.clientX-r.left,x0),x0+w);}
  function t(px){var a=+svg.dataset.a,b=+svg.dataset.b;return a+(px-x0)/w*(b-a);}
  svg.addEventListener('mousedown',function(e){from=at(e);e.preventDefault();});
  svg.addEventListener('mousemove',function(e){if(from===null)return;var to=at(e);
    sel.setAttribute('x',Math.min(from,to));sel.setAttribute('width',Math.abs(to-from));});
  svg.addEventListener('mouseup',function(e){if(from===null)return;var to=at(e);
    sel.setAttribute('width',0);if(Math.abs(to-from)>4)draw(svg,t(Math.min(from,to)),t(Math.max(from,to)));
    from=null;});
  svg.addEventListener('dblclick',function(){draw(svg,0,+svg.dataset.span);});
});
"""


def zoom_attrs(x0, pw, span):
    """The attributes that make an <svg class="zoom"> zoom (see the module's text)."""
    return f'data-x0="{x0}" data-pw="{pw}" data-span="{span}" data-a="0" data-b="{span}"'


def select_rect(y, h):
    """The band a drag draws while it selects (width 0 until then)."""
    return f'<rect class="select" x="0" y="{y}" width="0" height="{h}" fill="#06c" opacity="0.15"/>'
