"""The status line every panel has: one coloured message, readable back as plain text.

    status = StatusLine("Ready.")
    status.say("3 points failed", "error")      # levels: info, ok, warn, error
    status.text                                  # "3 points failed"
"""

from __future__ import annotations

import html

import ipywidgets as widgets

_COLOURS = {"ok": "green", "warn": "darkorange", "error": "crimson"}


class StatusLine(widgets.HTML):
    """An HTML widget holding one escaped, coloured message."""

    def __init__(self, text: str = "", level: str = "info", **kwargs):
        super().__init__(**kwargs)
        self.say(text, level)

    def say(self, text: str, level: str = "info") -> None:
        colour = _COLOURS.get(level, "inherit")
        self.value = f'<span style="color:{colour}">{html.escape(text)}</span>'

    @property
    def text(self) -> str:
        """The message as plain text."""
        return html.unescape(self.value.split(">", 1)[1].rsplit("<", 1)[0])
