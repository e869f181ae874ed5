"""The Markdown structure a skill file must keep when an overlay edits it, defined precisely enough to check.

Two ways an edit that removes or changes lines breaks a file's structure without breaking its frontmatter, each
a rule over the body (after the frontmatter), in CommonMark's terms:

- an unclosed code fence: a fence (a line of three or more ` or ~, indented at most 3 spaces) with no closing
  fence of the same character and at least the same length after it turns the rest of the file into code;
- an orphaned continuation line: a non-blank line indented 1 to 3 spaces, outside a fence, that is not itself a
  list item and whose nearest non-blank line above is neither a list item nor another line of one (an indented
  line under it). It is what is left when a list item's first line is removed and its continuation stays:
  rendered as a stray paragraph, cut from the instruction it belonged to. (Indented 4 or more after a paragraph,
  a line is an indented code block, which is legitimate.)

Only problems the incumbent file did not already have count against an overlay.
"""

from __future__ import annotations

import re
from collections import Counter

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ITEM = re.compile(r"^ {0,3}([-*+]|\d{1,9}[.)])(\s|$)")
_FRONTMATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


def problems(text: str) -> list[tuple[str, str]]:
    """(rule, the line) for every break in `text`'s structure; the frontmatter is not Markdown and is skipped."""
    body = _FRONTMATTER.sub("", text.replace("\r\n", "\n"), count=1)
    found: list[tuple[str, str]] = []
    fence: str | None = None  # the opening fence's run of ` or ~ while inside one
    opened = ""
    in_item = False  # the nearest non-blank line above belongs to a list item
    for line in body.split("\n"):
        marker = _FENCE.match(line)
        if fence is not None:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence) \
                    and not line[marker.end():].strip():
                fence = None
            continue
        if marker:
            fence, opened = marker.group(1), line
            in_item = False
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if _ITEM.match(line):
            in_item = True
        elif 1 <= indent <= 3 and not line.startswith("\t"):
            if not in_item:
                found.append(("orphaned continuation line", line.strip()))
        elif indent == 0:
            in_item = False
    if fence is not None:
        found.append(("unclosed code fence", opened.strip()))
    return found


def new_problems(before: str, after: str) -> list[tuple[str, str]]:
    """The problems `after` has beyond those `before` already had (each counted as often as it occurs)."""
    extra = Counter(problems(after)) - Counter(problems(before))
    return sorted(extra.elements())
