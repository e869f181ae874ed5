"""An overlay may not leave a skill file's Markdown broken in the two ways skillevo/core/markdown.py defines: an
orphaned continuation line (what a half-removed list item leaves) or an unclosed code fence; problems the
incumbent already had do not count against it."""

from __future__ import annotations

import pytest

from skillevo.core import markdown, overlay
from skillevo.core.oracle_guard import OracleGuard

HEAD = "---\nname: work\ndescription: Work.\n---\n\n# Work\n\n"
ITEMS = "- Read the file.\n- Read every module end to end,\n  so that no caller is missed.\n- Make the change.\n"


def test_a_well_formed_file_has_no_problem():
    text = HEAD + "Intro paragraph.\n\n" + ITEMS + "\n1. first\n   continued\n\n```sh\n  make test\n```\n" \
        "\n    an indented code block after a blank line\n"
    assert markdown.problems(text) == []


@pytest.mark.parametrize("after, rule", [
    # the first line of the first item removed: its continuation now follows the heading's blank line
    (HEAD + "  so that no caller is missed.\n- Make the change.\n", "orphaned continuation line"),
    (HEAD + "Intro.\n  a stray continuation\n", "orphaned continuation line"),
    (HEAD + ITEMS + "\n```sh\nmake test\n", "unclosed code fence"),
    (HEAD + ITEMS + "\n````\n```\n", "unclosed code fence"),  # a shorter fence does not close a longer one
])
def test_an_edit_that_breaks_the_structure_is_found(after, rule):
    assert [r for r, _ in markdown.new_problems(HEAD + ITEMS, after)] == [rule]


def test_what_the_incumbent_already_had_does_not_count():
    broken = HEAD + "Intro.\n  already stray\n" + ITEMS
    assert markdown.problems(broken) and markdown.new_problems(broken, broken + "- one more\n") == []


def test_freeze_refuses_an_overlay_that_orphans_a_continuation_line():
    family = {"work/SKILL.md": (HEAD + ITEMS).encode()}
    files = {"work/SKILL.md": (HEAD + "- Read the file.\n  so that no caller is missed.\n- Make the change.\n"
                               "\n## Notes\n\n  a leftover\n").encode()}
    with pytest.raises(overlay.OverlayRefused, match=r"orphaned continuation line: 'a leftover'.*"
                                                     r"\(rule: Markdown structure kept\)"):
        overlay.validate(files, family, {"work"}, OracleGuard.for_tasks([]), overlay.Limits(max_changed_lines=40))
