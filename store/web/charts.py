"""Usage charts as inline SVG written here (no script, no charting library): tokens per day
stacked by model, and cost per model. Labels are untrusted text: cleaned as everywhere else on
the page (``store.visible_text.visible``: escape sequences dropped, bidi overrides and other
invisible characters shown) and escaped."""

from __future__ import annotations

from markupsafe import Markup, escape

from store.visible_text import visible

PALETTE = ("#3b6ea8", "#d08a2e", "#4f9a64", "#b5493f", "#7d5ba6", "#2f8f93", "#a6795b", "#8a8a8a")
OTHER = "other models"
MAX_SERIES = len(PALETTE) - 1


def model_name(item: dict) -> str:
    """``provider/model`` of a usage row (``(no model)`` for summaries and tool results)."""
    if not item.get("model"):
        return "(no model)"
    return f"{item['provider']}/{item['model']}" if item.get("provider") else item["model"]


def _label(text: str) -> Markup:
    return escape(visible(text))


def _number(value: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:g}"


def tokens_by_day(by_day: list[dict], width: int = 640, height: int = 220) -> Markup:
    """Stacked bars: total tokens per day, one colour per model (the biggest ones; the rest as one)."""
    days = sorted({row["day"] or "?" for row in by_day})
    if not days:
        return Markup('<p class="note">No usage recorded.</p>')
    totals: dict[str, int] = {}
    for row in by_day:
        totals[model_name(row)] = totals.get(model_name(row), 0) + row["tokens"]["total"]
    ranked = sorted(totals, key=lambda m: -totals[m])
    shown = ranked if len(ranked) <= MAX_SERIES + 1 else ranked[:MAX_SERIES]
    colour = {m: PALETTE[i] for i, m in enumerate(shown)}
    stacks: dict[str, dict[str, int]] = {d: {} for d in days}
    for row in by_day:
        name = model_name(row) if model_name(row) in colour else OTHER
        stack = stacks[row["day"] or "?"]
        stack[name] = stack.get(name, 0) + row["tokens"]["total"]
    if len(shown) < len(ranked):
        colour[OTHER] = PALETTE[-1]
    top = max(sum(s.values()) for s in stacks.values()) or 1
    left, bottom, plot_h = 52, 36, height - 36 - 12
    step = (width - left - 8) / len(days)
    bar = max(min(step * 0.7, 40), 1.5)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="tokens by day">']
    for fraction in (0, 0.5, 1):
        y = 12 + plot_h * (1 - fraction)
        parts.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
                     f'{_number(top * fraction)}</text>')
    label_every = max(1, round(len(days) / 8))
    for index, day in enumerate(days):
        x = left + index * step + (step - bar) / 2
        y = 12 + plot_h
        for name, value in sorted(stacks[day].items(), key=lambda kv: list(colour).index(kv[0])):
            h = plot_h * value / top
            y -= h
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{colour[name]}">'
                         f'<title>{_label(day)} · {_label(name)}: {value:,} tokens</title></rect>')
        if index % label_every == 0:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 16}" class="axis" '
                         f'text-anchor="middle">{_label(day[5:] if len(day) == 10 else day)}</text>')
    parts.append("</svg>")
    legend = "".join(f'<span class="key"><svg width="10" height="10"><rect width="10" height="10" fill="{c}"/></svg>'
                     f'{_label(m)}</span>' for m, c in colour.items())
    return Markup("".join(parts) + f'<div class="legend">{legend}</div>')


def cost_by_model(models: list[dict], width: int = 640) -> Markup:
    """Horizontal bars: cost per model, with its tokens."""
    rows = [m for m in models if m["cost"] or m["tokens"]["total"]]
    if not rows:
        return Markup('<p class="note">No usage recorded.</p>')
    top = max(m["cost"] for m in rows) or 1
    line, label_w = 22, 230
    height = line * len(rows) + 6
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="cost by model">']
    for index, item in enumerate(rows):
        y = 3 + index * line
        w = (width - label_w - 150) * item["cost"] / top
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" class="axis" text-anchor="end">'
                     f'{_label(model_name(item)[:34])}</text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{max(w, 1):.1f}" height="{line - 8}" '
                     f'fill="{PALETTE[index % len(PALETTE)]}"><title>{_label(model_name(item))}</title></rect>'
                     f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" class="axis">${item["cost"]:.4f} · '
                     f'{_number(item["tokens"]["total"])} tok</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
