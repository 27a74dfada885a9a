"""How every attention pattern is drawn: one colour scale (`ATTENTION_SCALE`), masked cells, token labels and the
16-bit form a page holds a pattern in, shared by the notebook views (`attnlab.pattern_view`, `attnlab.heads_view`)
and the scan report's views (its enlarged heat map, its canvases and small multiples, its PNG).

- The scale is magma on √weight: its stops sit at weight (k/9)², k = 0..9, with magma's colour at k/9, and every
  drawing interpolates linearly in the weight between them (plotly's `colorscale`, the canvas palette of
  `ATTENTION_JS`, matplotlib's colormap, the colour bar's CSS gradient), from `zmin` = 0 to `zmax` = 1. Low weights
  get most of the colours, as in the scan report's drawings before.
- A masked cell (a key the query cannot see: the upper triangle of a causal pattern, a padded key) is NaN in the data
  and drawn in `masked`, a grey that is no colour of the scale, never as weight 0.
- A token label is single-line: control characters become visible (`token_label`: a newline is "↵").
"""

from __future__ import annotations

import base64
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np

MAGMA = ("#000004", "#180f3d", "#440f76", "#721f81", "#9e2f7f", "#cd4071", "#f1605d", "#fd9668", "#feca8d", "#fcfdbf")
MASKED_CODE = 65535  # the 16-bit code of a masked cell; weights are q / WEIGHT_STEPS, q = 0..WEIGHT_STEPS
WEIGHT_STEPS = 65534
CONTROL_NAMES = {"\n": "↵", "\t": "⇥", "\r": "\\r"}


@dataclass(frozen=True)
class ColourScale:
    """A colour scale for weights in [zmin, zmax]: `stops` ((position in [0, 1], "#rrggbb"), ...) interpolated
    linearly in the weight; `masked`: the colour of a cell that is masked (NaN)."""

    name: str
    zmin: float
    zmax: float
    stops: tuple[tuple[float, str], ...]
    masked: str

    def as_dict(self) -> dict[str, Any]:
        """The scale as a page's script reads it (the same keys in every view)."""
        return {"name": self.name, "zmin": self.zmin, "zmax": self.zmax,
                "stops": [[p, c] for p, c in self.stops], "masked": self.masked}  # fmt: skip

    def plotly(self) -> dict[str, Any]:
        """A plotly heat map's colour settings (`colorscale`, `zmin`, `zmax`)."""
        return {"colorscale": [[p, c] for p, c in self.stops], "zmin": self.zmin, "zmax": self.zmax}

    def cmap(self) -> Any:
        """The matplotlib colormap (masked / NaN cells in `masked`), for imshow with vmin=zmin, vmax=zmax."""
        from matplotlib.colors import LinearSegmentedColormap

        cmap = LinearSegmentedColormap.from_list(self.name, list(self.stops), N=WEIGHT_STEPS + 1)  # as the canvas
        return cmap.with_extremes(bad=self.masked)

    def css_gradient(self) -> str:
        """A CSS linear-gradient from zmin (bottom) to zmax (top): the colour bar."""
        return "linear-gradient(to top, " + ", ".join(f"{c} {100 * p:.3f}%" for p, c in self.stops) + ")"

    def rgb(self, weights: Any) -> np.ndarray:
        """[..., 3] the colours (0..255, float) of `weights` on the scale; NaN -> the masked colour."""
        w = np.asarray(weights, dtype=np.float64)
        pos = np.clip((w - self.zmin) / (self.zmax - self.zmin), 0.0, 1.0)
        xs = [p for p, _ in self.stops]
        cols = np.array([_hex_rgb(c) for _, c in self.stops], dtype=np.float64)
        out = np.stack([np.interp(np.nan_to_num(pos), xs, cols[:, k]) for k in range(3)], axis=-1)
        out[np.isnan(w)] = _hex_rgb(self.masked)
        return out


def _hex_rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


ATTENTION_SCALE = ColourScale(
    name="attention weight (magma on sqrt weight)",
    zmin=0.0,
    zmax=1.0,
    stops=tuple(((k / 9) ** 2, MAGMA[k]) for k in range(10)),
    masked="#c8c8c8",
)


def token_label(token: Any) -> str:
    """`token` as one line of text: a newline -> "↵", a tab -> "⇥", a carriage return -> "\\r", any other control
    character (Unicode Cc) or line/paragraph separator -> its escape ("\\x0b", "\\u2028"); the rest as it is."""
    out = []
    for ch in str(token):
        if ch in CONTROL_NAMES:
            out.append(CONTROL_NAMES[ch])
        elif unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def masked_pattern(a: Any, valid: Any = None) -> np.ndarray:
    """[query, key] float64 weights with NaN where the cell is masked: the strict upper triangle when the pattern is
    causal (every weight there exactly 0 or NaN), every cell already NaN, and every key and query where `valid` [T]
    (1 = a real token, 0 = padding) is 0."""
    out = np.array(a, dtype=np.float64)
    n = out.shape[-1]
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    if not np.any(np.nan_to_num(out[upper])):  # NaN (a cell already masked, as a padded batch's) counts as masked
        out[upper] = np.nan
    if valid is not None:
        pad = ~np.asarray(valid, dtype=bool)
        out[:, pad] = np.nan
        out[pad, :] = np.nan
    return out


def pack_pattern(a: Any) -> dict[str, Any]:
    """A [query, key] pattern as 16-bit codes in base64 (the form a page holds it in): a weight w in [0, 1] is
    round(w · 65534) (step 1/65534, under the 4-decimal hover's half step), a masked (NaN) cell is 65535."""
    w = np.asarray(a, dtype=np.float64)
    q = np.round(np.clip(np.nan_to_num(w, nan=0.0), 0.0, 1.0) * WEIGHT_STEPS)
    q[np.isnan(w)] = MASKED_CODE
    return {"n": int(w.shape[-1]), "u16": base64.b64encode(q.astype("<u2").tobytes()).decode("ascii")}


def unpack_pattern(packed: dict[str, Any]) -> np.ndarray:
    """The [query, key] float64 weights of `pack_pattern`'s form, NaN where masked (what the page's script reads)."""
    n = int(packed["n"])
    q = np.frombuffer(base64.b64decode(packed["u16"]), dtype="<u2").reshape(n, n)
    return np.where(q == MASKED_CODE, np.nan, q / WEIGHT_STEPS)


def colour_bar_html(scale: ColourScale = ATTENTION_SCALE, ticks: int = 5) -> str:
    """A vertical colour bar (CSS gradient, zmin at the bottom) with `ticks` labelled weights and a swatch of the
    masked colour."""
    labels = "".join(
        f'<span style="bottom:{100 * k / (ticks - 1):.1f}%">'
        f"{scale.zmin + (scale.zmax - scale.zmin) * k / (ticks - 1):g}</span>"
        for k in range(ticks)
    )
    return (
        f'<div class="colourbar" title="{scale.name}"><div class="bar" style="background:{scale.css_gradient()}">'
        f'</div><div class="ticks">{labels}</div><div class="masked"><i style="background:{scale.masked}"></i>'
        f"masked</div></div>"
    )


# The drawing every page shares (no library offers it offline): the canvas palette of a scale (one colour per
# 16-bit step, built once), unpacking `pack_pattern`'s form, a pattern on a canvas (max-pooled past `most` pixels a
# side, masked cells in the masked colour) and `token_label` for labels that arrive at view time.
ATTENTION_JS = r"""
var attnlabAttention = (function () {
  var tables = {};
  function rgb(c) { return [parseInt(c.slice(1, 3), 16), parseInt(c.slice(3, 5), 16), parseInt(c.slice(5, 7), 16)]; }
  function word(c) {  // RGBA bytes in little-endian order
    return ((255 << 24) | (Math.round(c[2]) << 16) | (Math.round(c[1]) << 8) | Math.round(c[0])) >>> 0;
  }
  function palette(scale) {
    var key = JSON.stringify(scale);
    if (tables[key]) return tables[key];
    var t = new Uint32Array(65536), s = scale.stops, k = 0;
    for (var q = 0; q < 65535; q++) {
      var p = q / 65534;
      while (k < s.length - 2 && p > s[k + 1][0]) k++;
      var a = rgb(s[k][1]), b = rgb(s[k + 1][1]), f = Math.max(0, Math.min(1, (p - s[k][0]) / (s[k + 1][0] - s[k][0])));
      t[q] = word([a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])]);
    }
    t[65535] = word(rgb(scale.masked));
    tables[key] = t;
    return t;
  }
  function step(w, scale) {  // the 16-bit step of a weight; null or NaN (masked) -> 65535
    if (w === null || w === undefined || w !== w) return 65535;
    var p = (w - scale.zmin) / (scale.zmax - scale.zmin);
    return p > 0 ? (p >= 1 ? 65534 : (p * 65534 + 0.5) | 0) : 0;
  }
  function unpack(A) {  // pack_pattern's form -> Float32Array rows, NaN where masked; nested lists as they are
    if (!A || A.u16 === undefined) return A;
    var bin = atob(A.u16), n = A.n, f = new Float32Array(n * n), rows = [];
    for (var k = 0; k < n * n; k++) {
      var q = bin.charCodeAt(2 * k) | (bin.charCodeAt(2 * k + 1) << 8);
      f[k] = q === 65535 ? NaN : q / 65534;
    }
    for (var i = 0; i < n; i++) rows.push(f.subarray(i * n, (i + 1) * n));
    return rows;
  }
  function draw(canvas, A, scale, most) {  // one pixel per (query, key); past `most` a side, each its block's max
    var n = A.length, s = most && n > most ? Math.ceil(n / most) : 1, m = Math.ceil(n / s), i, j, k, row;
    var ctx = canvas.getContext('2d'); canvas.width = m; canvas.height = m;
    var img = ctx.createImageData(m, m), px = new Uint32Array(img.data.buffer), c = palette(scale);
    if (s === 1) {
      for (i = 0; i < n; i++) { row = A[i]; k = i * n; for (j = 0; j < n; j++) px[k + j] = c[step(row[j], scale)]; }
    } else {
      var top = new Float32Array(m * m).fill(NaN);
      for (i = 0; i < n; i++) {
        row = A[i]; k = ((i / s) | 0) * m;
        for (j = 0; j < n; j++) {
          var w = row[j], b = k + ((j / s) | 0);
          if (w !== null && w === w && !(w <= top[b])) top[b] = w;
        }
      }
      for (k = 0; k < m * m; k++) px[k] = c[step(top[k], scale)];
    }
    ctx.putImageData(img, 0, 0); canvas.dataset.drawn = '1';
  }
  var names = {'\n': '\u21b5', '\t': '\u21e5', '\r': '\\r'};
  function label(t) {  // token_label: one line, control characters visible
    return String(t).replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, function (ch) {
      if (names[ch]) return names[ch];
      var h = ch.charCodeAt(0).toString(16);
      return ch.charCodeAt(0) < 256 ? '\\x' + ('0' + h).slice(-2) : '\\u' + ('000' + h).slice(-4);
    });
  }
  return {palette: palette, step: step, unpack: unpack, draw: draw, label: label};
})();
"""
