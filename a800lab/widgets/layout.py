"""Where an Explorer's widgets go, so that a panel fits a notebook's output (968 px in
JupyterLab at its default width): labels whole, one column, or tabs for a panel with sections.

    widget, tabs = explorer_layout(panel, title, extras)   # Explorer._build calls it
"""

import html

import ipywidgets as widgets

# where a panel built on Explorer puts its own widgets (its `extras`), top to bottom: under the
# parameter controls (and the view switch), above and below the status line, under the plot's
# caption; and "sections": (title, widget) pairs shown as tabs after "Run" (its controls, Run
# and Clear), with Stop and the progress bar under the tabs, shared by whatever runs
SLOTS = ("after_controls", "before_status", "after_status", "after_plot", "sections")
_EM_PER_CHAR = 0.62  # a description's width per character of its text, in em


def fit_labels(controls) -> None:
    """One description width for all, the longest label's (ipywidgets cuts at ~90 px)."""
    controls = [c for c in controls if hasattr(c, "style") and getattr(c, "description", "")]
    if controls:
        longest = max(len(c.description) for c in controls)
        for control in controls:
            control.style.description_width = f"{longest * _EM_PER_CHAR + 1:.1f}em"
            _inline(control)


def whole(*controls) -> None:
    """Labels and buttons at their own width, never cut."""
    for control in controls:
        if isinstance(control, widgets.Button):
            control.layout.width = "auto"
        elif hasattr(control, "style"):
            control.style.description_width = "initial"
            _inline(control)


def _inline(control) -> None:
    """ToggleButtons render as a block (ipywidgets 8): the label on a line of its own above
    the buttons; the inline row's class puts it beside them, right-aligned like the others."""
    if isinstance(control, widgets.ToggleButtons):
        control.add_class("widget-inline-hbox")


def explorer_layout(p, title: str, extras: dict) -> tuple[widgets.VBox, widgets.Tab | None]:
    """The Explorer `p` as one widget, and its tabs (None without sections)."""
    unknown = set(extras) - set(SLOTS)
    if unknown:
        raise ValueError(f"extras has slots {sorted(unknown)}; the layout has {list(SLOTS)}")

    def slot(name: str) -> list:
        return list(extras.get(name, ()))

    fit_labels(p.controls.values())
    header = [widgets.HTML(f"<h3>{html.escape(title)}</h3>")] if title else []
    views = [p.view] if p.view is not None else []
    whole(p.sweep_axis, p.sweep_values, p.progress, p.color_by, p.earlier_runs, p.recorded,
          p.path, *views)
    controls = [widgets.VBox(list(p.controls.values())), *views, *slot("after_controls"),
                widgets.HBox([p.sweep_axis, p.sweep_values])]
    progress = [p.progress, p.progress_text]
    sections = slot("sections")
    tabs = None
    if sections:
        run = widgets.VBox([*controls, widgets.HBox([p.run_button, p.clear_button])])
        tabs = widgets.Tab(children=[run, *(w for _, w in sections)],
                           titles=["Run", *(t for t, _ in sections)])
        top = [tabs, widgets.HBox([p.stop_button, *progress])]
    else:
        top = [*controls, widgets.HBox([p.run_button, p.stop_button, p.clear_button, *progress])]
    widget = widgets.VBox([
        *header, *top, *slot("before_status"), p.status, *slot("after_status"),
        widgets.HBox([widgets.VBox([p.color_by, p.earlier_runs]),
                      widgets.VBox([p.recorded, p.overlay_hint],
                                   layout=widgets.Layout(width="55%"))]),
        p.plot, p.caption, *slot("after_plot"),
        widgets.HBox([p.path, p.save_button, p.load_button]), p.table])
    return widget, tabs


def show_section(tabs: widgets.Tab | None, title: str) -> None:
    """Bring the tab `title` forward."""
    if tabs is not None and title in tabs.titles:
        tabs.selected_index = list(tabs.titles).index(title)
