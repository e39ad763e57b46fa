"""Walk the text of an HTML fragment, leaving tags, code and scripts alone.

Shared by the documentation hooks (``section_links.py``, ``math.py``): both
rewrite words of a page's prose after Markdown (or nbconvert, or mkdocstrings)
has made HTML of it, and neither may touch what sits inside ``<code>``,
``<pre>``, ``<script>``, ``<style>``, links, or MathML already made. A regular
expression tokenizer is enough here: the HTML comes from Markdown and nbconvert,
so it is well formed; an end tag with no open element of its name is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_TOKEN = re.compile(
    r"<!--.*?-->"  # comment
    r"|<(?P<raw>script|style|textarea)\b[^>]*>.*?</(?P=raw)\s*>"  # raw-text element, with its content
    r"|<!\[CDATA\[.*?\]\]>"
    r"|<![^>]*>"  # doctype
    r"|</?[A-Za-z][^>]*>",  # start or end tag
    re.DOTALL | re.IGNORECASE,
)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)([^>]*?)(/?)>", re.DOTALL)
_VOID = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"])
_CLASS = re.compile(r"""\bclass\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)

SKIP_TAGS = frozenset({"code", "pre", "a", "kbd", "samp", "math", "svg"})
"""Elements whose text is never rewritten."""


def map_text(
    html: str,
    fn: Callable[[str], str],
    skip_tags: frozenset[str] = SKIP_TAGS,
    skip_classes: frozenset[str] = frozenset(),
    only_classes: frozenset[str] | None = None,
) -> str:
    """``html`` with every text run outside ``skip_tags`` replaced by ``fn(run)``.

    ``fn`` gets the text as it stands in the HTML (entities not decoded) and
    returns HTML. An element with a class in ``skip_classes`` is skipped like a
    skipped tag. With ``only_classes``, only text inside an element carrying
    one of those classes is passed to ``fn``.
    """
    out: list[str] = []
    stack: list[tuple[str, bool, bool]] = []  # (tag, skipped here or above, inside an "only" element)
    pos = 0

    def state() -> tuple[bool, bool]:
        return (stack[-1][1], stack[-1][2]) if stack else (False, only_classes is None)

    def emit_text(text: str) -> None:
        if not text:
            return
        skipped, inside = state()
        out.append(fn(text) if inside and not skipped else text)

    for m in _TOKEN.finditer(html):
        emit_text(html[pos : m.start()])
        token = m.group(0)
        out.append(token)
        pos = m.end()
        if m.group("raw") or token.startswith("<!"):
            continue
        t = _TAG.match(token)
        if not t:
            continue
        closing, name, attrs, selfclose = t.group(1), t.group(2).lower(), t.group(3), t.group(4)
        if closing:
            for k in range(len(stack) - 1, -1, -1):
                if stack[k][0] == name:
                    del stack[k:]
                    break
            continue
        if selfclose or name in _VOID:
            continue
        c = _CLASS.search(attrs)
        classes = set((c.group(1) or c.group(2) or c.group(3) or "").split()) if c else set()
        skipped, inside = state()
        skipped = skipped or name in skip_tags or bool(classes & skip_classes)
        inside = inside or (only_classes is not None and bool(classes & only_classes))
        stack.append((name, skipped, inside))
    emit_text(html[pos:])
    return "".join(out)
