"""The chapter-output check itself: it must catch a figure printed as text and stray stderr."""

import matplotlib

matplotlib.use("Agg")

from chapter_outputs import STDERR_TAG, output_problems  # noqa: E402

from a800lab.figures import throughput_figure  # noqa: E402
from a800lab.figures.look import LabFigure  # noqa: E402


def test_a_figure_printed_as_text_and_stderr_are_problems():
    cell = {"metadata": {}}
    text_figure = {"output_type": "execute_result",
                   "data": {"text/plain": "<Figure size 860x460 with 1 Axes>"}}
    stderr = {"output_type": "stream", "name": "stderr", "text": "[1/4] matmul fp32\n"}
    picture = {"output_type": "display_data",
               "data": {"text/plain": "<LabFigure size 860x460 with 1 Axes>",
                        "image/png": "iVBOR..."}}
    stdout = {"output_type": "stream", "name": "stdout", "text": "ok\n"}
    problems = output_problems(cell, [text_figure, stderr, picture, stdout])
    assert len(problems) == 2
    assert "shown as text (<Figure size 860x460 with 1 Axes>)" in problems[0]
    assert "[1/4] matmul fp32" in problems[1]
    assert output_problems({"metadata": {"tags": [STDERR_TAG]}}, [stderr]) == []


def test_a_lab_figure_renders_itself_as_a_picture_without_pyplot():
    import pandas as pd

    df = pd.DataFrame({"n": [1, 2], "throughput": [1.0, 2.0], "outcome": ["ok", "ok"],
                       "device_name": ["CPU: test"] * 2, "label": ["CPU: test"] * 2,
                       "run_id": ["r1"] * 2})
    fig = throughput_figure(df, "n")
    assert isinstance(fig, LabFigure)
    png = fig._repr_png_()  # what IPython calls for an object with no registered formatter
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
