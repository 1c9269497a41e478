"""DevicePanel driven headless: the fake 8x A800 box, live telemetry, and this CPU-only machine."""

import threading
import time
from html.parser import HTMLParser

import pytest

from a800lab.core.backends import HAS_CUDA, HAS_NVML
from a800lab.core.device import LINK_LEGEND, cpu_info
from a800lab.core.precision import matmul_precision
from a800lab.widgets import DevicePanel
from a800lab.widgets.device_html import LINK_COLOURS, gpu_table_html, link_colour
from tests.fake_nvml import FakeNvml
from tests.tf32_state import reset_to_defaults


class Tables(HTMLParser):
    """Rows of cell texts (and cell attributes) of every <table class=...> in some HTML."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, dict]]]] = {}
        self._table = None
        self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("class", ""), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = ["", attrs]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[0] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append((self._cell[0].strip(), self._cell[1]))
            self._cell = None
        elif tag == "table":
            self._table = None

    def texts(self, name: str) -> list[list[str]]:
        return [[text for text, _ in row] for row in self.tables[name]]


def fake_panel(**variant):
    fake = FakeNvml(**variant)
    panel = DevicePanel(nvml=fake, cuda_properties=fake.cuda_properties(), interval_s=0.01,
                        refresh_s=0.05)
    return fake, panel


def wait_until(predicate, timeout_s=20):
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def telemetry_threads():
    return [t for t in threading.enumerate()
            if t.name in ("a800lab-telemetry", "a800lab-telemetry-plot")]


def test_gpu_table_has_a_row_per_gpu_with_names_and_problems():
    _, panel = fake_panel()
    tables = Tables(panel.to_html())
    header, *rows = tables.texts("a800lab-gpus")
    assert header[:4] == ["GPU", "name", "CC", "SMs"]
    assert len(rows) == 8
    assert [row[0] for row in rows] == [str(i) for i in range(8)]
    assert all(row[1] == "NVIDIA A800-SXM4-80GB" for row in rows)
    assert all(row[2:4] == ["8.0", "108"] for row in rows)
    assert [row[header.index("torch")] for row in rows] == [f"cuda:{i}" for i in range(8)]
    cell = {name: i for i, name in enumerate(header)}
    assert rows[0][cell["driver / CUDA"]] == "535.129.03 / 12.2"
    assert rows[0][cell["memory free/total GiB"]] == "80.0/80.0"
    assert rows[5][cell["ECC errors (unc. / corr.)"]] == "2/3 / 17/154"
    assert rows[0][cell["ECC errors (unc. / corr.)"]] == "0/0 / 0/0"
    assert rows[2][cell["throttle reasons"]] == "sw_power_cap, hw_thermal_slowdown"
    assert rows[0][cell["throttle reasons"]] == "idle"
    assert rows[2][cell["SM MHz cur/max"]] == "1095/1410"
    assert rows[2][cell["power W cur/limit"]] == "398/400"
    assert rows[2][cell["temp C"]] == "87"
    assert rows[0][cell["PCIe"]] == "gen4 x16"
    assert rows[0][cell["NVLinks"]] == "12"
    assert rows[0][cell["MIG"]] == "off" and rows[0][cell["ECC"]] == "on"
    # the problem cells are highlighted, the healthy ones are not
    styles = [[attrs.get("style", "") for _, attrs in row]
              for row in tables.tables["a800lab-gpus"][1:]]
    assert "#f8d0d0" in styles[5][cell["ECC errors (unc. / corr.)"]]
    assert "#ffe0b0" in styles[2][cell["throttle reasons"]]
    assert "#ffe0b0" not in styles[0][cell["throttle reasons"]]


def test_topology_grid_is_coloured_with_nvlink_groups_and_sys_across():
    _, panel = fake_panel()
    tables = Tables(panel.to_html())
    header, *rows = tables.tables["a800lab-topology"]
    assert [text for text, _ in header][1:9] == [f"GPU{i}" for i in range(8)]
    links = [[attrs["data-link"] for _, attrs in row if "data-link" in attrs] for row in rows]
    for i in range(8):
        for j in range(8):
            expected = "X" if i == j else "NV4" if i // 4 == j // 4 else "SYS"
            assert links[i][j] == expected, (i, j)
    cells = {attrs["data-link"]: attrs["style"] for row in rows for _, attrs in row
             if "data-link" in attrs}
    assert "hsl(130" in cells["NV4"]                       # NVLink: green
    assert LINK_COLOURS["SYS"][0] in cells["SYS"]         # across NUMA nodes: red
    # the affinity columns of nvidia-smi topo -m
    assert [text for text, _ in rows[0]][-2:] == ["0-31,64-95", "0"]
    assert [text for text, _ in rows[7]][-2:] == ["32-63,96-127", "1"]
    legend = [attrs["data-legend"] for attrs in _row_attrs(panel.legend.value)]
    assert legend == list(LINK_LEGEND)
    assert "bonded set of # NVLinks" in panel.legend.value
    assert "QPI/UPI" in panel.legend.value
    affinity = Tables(panel.affinity.value).texts("a800lab-affinity")
    assert affinity[1][3] == "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 " \
                             "numactl --cpunodebind=0 --membind=0 python train.py"
    assert affinity[8][1:3] == ["1", "32-63,96-127"]


def _row_attrs(text):
    class Rows(HTMLParser):
        rows: list = []

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append(dict(attrs))

    parser = Rows()
    parser.rows = []
    parser.feed(text)
    return parser.rows


def test_link_colours_get_greener_with_more_nvlinks():
    def lightness(link):
        return int(link_colour(link)[0].split(",")[-1].strip(" %)"))

    assert lightness("NV1") > lightness("NV4") > lightness("NV12") > lightness("NV18")
    assert link_colour("NV18")[1] == "#ffffff"  # white text on dark green
    assert link_colour("???") == LINK_COLOURS["n/a"]
    assert link_colour("SYS")[0] == "#d73027"


def test_advice_for_ecc_and_throttling_is_visible():
    _, panel = fake_panel()
    text = panel.to_html()
    assert "GPU 5 has ECC errors" in text and "nvidia-smi -q -d ECC,ROW_REMAPPER -i 5" in text
    assert "GPU 2 clocks are throttled (sw_power_cap, hw_thermal_slowdown)" in text
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3 numactl --cpunodebind=0 --membind=0" in text
    assert panel.report["gpu_found"] is True and len(panel.report["gpus"]) == 8
    assert "No NVIDIA GPU" not in text
    assert panel.status_text == "GPUs found."


def test_telemetry_start_stop_collects_samples_and_draws_four_axes():
    fake, panel = fake_panel()
    assert not panel.start_button.disabled and panel.stop_button.disabled
    assert panel.start_telemetry(2) is True
    assert panel.telemetry_running and panel.gpu_choice.value == 2
    assert panel.start_button.disabled and not panel.stop_button.disabled
    assert panel.start_telemetry(2) is False  # a second start is refused, not doubled
    assert "already running" in panel.status_text
    wait_until(lambda: len(panel.telemetry_samples) >= 3)
    gpu = fake.gpus[2]
    gpu.power_mw, gpu.sm_clock_mhz, gpu.gpu_util_pct = 250_000, 1410, 40
    gpu.throttle_mask = 0x1  # back to idle: no longer throttled
    wait_until(lambda: any(s["power_w"] == 250.0 for s in panel.telemetry_samples))
    wait_until(lambda: "power 250 W" in panel.latest.value)  # the periodic re-render ran
    panel.stop_telemetry()
    assert not panel.telemetry_running and not telemetry_threads()
    assert not panel.start_button.disabled and panel.stop_button.disabled
    samples = panel.telemetry_samples
    assert len(samples) >= 4
    assert panel.status_text.startswith(f"Stopped: {len(samples)} samples of GPU 2 over")

    fig = panel.telemetry_figure
    assert len(fig.axes) == 4
    assert fig.get_suptitle() == "NVIDIA A800-SXM4-80GB, NVML 2, cuda:2 (GPU, NVML telemetry)"
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "GPU util (%)", "memory used (GiB)", "power (W)", "SM clock (MHz)"]
    power = set(fig.axes[2].lines[0].get_ydata())
    assert {398.5, 250.0} <= power
    assert {1095, 1410} <= set(fig.axes[3].lines[0].get_ydata())
    assert {100, 40} <= set(fig.axes[0].lines[0].get_ydata())
    assert any("throttled" in text for text in fig.axes[0].get_legend_handles_labels()[1])
    assert bytes(panel.plot.value).startswith(b"\x89PNG") and panel.plot.layout.display is None
    summary = panel.telemetry_summary()
    assert summary["n_samples"] == len(samples)
    assert summary["throttle_reasons"] == ["gpu_idle", "hw_thermal_slowdown", "sw_power_cap"]
    panel.stop_telemetry()  # twice is fine


def test_buttons_start_and_stop_the_selected_gpu():
    _, panel = fake_panel()
    panel.gpu_choice.value = 5
    panel.start_button.click()
    assert panel.telemetry_running
    wait_until(lambda: len(panel.telemetry_samples) >= 2)
    panel.stop_button.click()
    assert not panel.telemetry_running and not telemetry_threads()
    assert "of GPU 5" in panel.status_text
    assert panel.start_telemetry(9) is False
    assert "Cannot sample GPU 9" in panel.status_text


def test_nvml_index_of_a_cuda_device_matches_by_uuid():
    fake = FakeNvml()
    props = fake.cuda_properties()
    panel = DevicePanel(nvml=fake, cuda_properties=props)
    assert [panel.nvml_index_of(i) for i in range(8)] == list(range(8))
    # CUDA_VISIBLE_DEVICES=7,3: torch's cuda:0 is NVML GPU 7
    hidden = DevicePanel(nvml=fake, cuda_properties=[props[7], props[3]])
    assert (hidden.nvml_index_of(0), hidden.nvml_index_of(1), hidden.nvml_index_of(2)) == \
        (7, 3, None)
    assert hidden.nvml_index_of("cuda:1") == 3
    header, *rows = Tables(hidden.gpu_table.value).texts("a800lab-gpus")
    assert [row[header.index("torch")] for row in rows] == [
        "n/a", "n/a", "n/a", "cuda:1", "n/a", "n/a", "n/a", "cuda:0"]


def test_unsupported_readings_show_na_with_the_reason():
    fake = FakeNvml(not_supported={"nvmlDeviceGetPowerUsage"})
    report = DevicePanel(nvml=fake, cuda_properties=fake.cuda_properties()).report
    tables = Tables(gpu_table_html(report))
    header = tables.texts("a800lab-gpus")[0]
    power = tables.tables["a800lab-gpus"][1][header.index("power W cur/limit")]
    assert power[0] == "n/a/400" and "Not Supported" in power[1]["title"]
    report = fake_panel()[1].report
    tables = Tables(gpu_table_html(report))
    power = tables.tables["a800lab-gpus"][1][header.index("power W cur/limit")]
    assert power[0] == "62/400" and power[1]["title"] == "power source: power_usage"


def test_latest_reading_says_when_power_is_a_one_second_average():
    fake = FakeNvml(model="H200", not_supported={"nvmlDeviceGetFieldValues"})
    panel = DevicePanel(nvml=fake, cuda_properties=fake.cuda_properties(), interval_s=0.01,
                        refresh_s=0.05)
    assert panel.start_telemetry(0)
    wait_until(lambda: panel.telemetry_samples)
    panel.stop_telemetry()
    assert "power 62 W (1 s average)" in panel.latest.value


def test_nvswitch_box_and_mig():
    _, panel = fake_panel(nvlink="nvswitch", mig=True)
    tables = Tables(panel.to_html())
    links = {attrs["data-link"] for row in tables.tables["a800lab-topology"] for _, attrs in row
             if "data-link" in attrs}
    assert links == {"X", "NV12"}
    header, *rows = tables.texts("a800lab-gpus")
    assert rows[0][header.index("NVLinks")] == "12 to NVSwitch"
    assert rows[0][header.index("MIG")] == "on"
    assert "MIG is on for GPU(s) 0,1,2,3,4,5,6,7" in panel.to_html()


def test_refresh_while_a_sweep_holds_tf32_on():
    fake, panel = fake_panel()
    try:
        with matmul_precision("tf32"):  # a sweep in another panel's thread sets torch's new API
            panel.refresh()
    finally:
        reset_to_defaults()
    assert panel.status_text == "GPUs found."
    assert "float32 on GPU: matmul tf32, conv tf32" in panel.system.value


def test_refresh_reads_nvml_again():
    fake, panel = fake_panel()
    fake.gpus[3].temperature_c = 91
    panel.refresh_button.click()
    header, *rows = Tables(panel.gpu_table.value).texts("a800lab-gpus")
    assert rows[3][header.index("temp C")] == "91"


def test_driver_not_loaded_gives_the_cpu_view_with_the_reason():
    fake = FakeNvml(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    panel = DevicePanel(nvml=fake, cuda_properties=[])
    text = panel.to_html()
    assert "No NVIDIA GPU found:" in text and "Driver Not Loaded" in text
    assert panel.start_button.disabled and panel.gpu_choice.disabled
    assert "Telemetry unavailable" in panel.telemetry_note.value
    assert "a800lab-gpus" not in text  # GPU sections hidden


def test_gpus_seen_by_torch_only_are_listed_but_telemetry_says_nvml_is_missing():
    _, panel = fake_panel(init_error=FakeNvml.NVMLError_DriverNotLoaded)
    header, *rows = Tables(panel.gpu_table.value).texts("a800lab-gpus")
    assert len(rows) == 8 and rows[0][header.index("SMs")] == "108"
    assert rows[0][header.index("power W cur/limit")] == "n/a/n/a"
    assert panel.start_button.disabled
    assert "telemetry reads NVML, which is not usable here" in panel.telemetry_note.value
    assert "Driver Not Loaded" in panel.telemetry_note.value
    assert panel.start_telemetry(0) is False and not telemetry_threads()


class BrokenNvml(FakeNvml):
    """NVML answering with a bug (not an NVMLError): discovery raises."""

    def nvmlDeviceGetCount(self):
        raise RuntimeError("boom")


def test_panel_never_raises_when_discovery_breaks():
    fake = BrokenNvml()
    panel = DevicePanel(nvml=fake, cuda_properties=fake.cuda_properties())
    assert panel.status_text == "Device discovery failed: RuntimeError: boom"
    assert panel.report["gpu_found"] is False
    assert "device discovery failed: RuntimeError: boom" in panel.banner.value
    assert panel.start_telemetry() is False
    assert panel.start_button.disabled


@pytest.mark.skipif(HAS_NVML or HAS_CUDA, reason="this machine has an NVIDIA GPU")
def test_real_cpu_only_view_says_no_gpu_and_disables_telemetry():
    panel = DevicePanel()
    text = panel.to_html()
    assert panel.report["gpu_found"] is False
    assert "No NVIDIA GPU found:" in panel.banner.value
    assert "CPU fallback" in panel.banner.value
    cpu = dict(row for row in Tables(panel.cpu.value).texts("a800lab-cpu"))
    facts = cpu_info()
    assert cpu["model"] == facts.model
    assert cpu["torch threads"] == str(facts.torch_threads)
    assert cpu["ISA (torch CPU kernels)"] == facts.isa
    assert cpu["cores"].startswith(f"{facts.logical_cores} logical")
    assert "GiB" in cpu["memory"]
    assert "a800lab-gpus" not in text and "a800lab-topology" not in text
    assert panel.start_button.disabled and panel.stop_button.disabled
    assert "Telemetry unavailable: No NVIDIA GPU found" in panel.telemetry_note.value
    assert panel.plot.layout.display == "none"  # no empty picture
    assert panel.start_telemetry() is False
    assert panel.status_text.startswith("Telemetry unavailable:")
    assert not panel.telemetry_running and not telemetry_threads()
