"""The HTML report in headless Chromium: it renders offline, the console stays silent, and the
numbers on the page are the numbers of the JSON report."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="the chromium binary is not installed (Debian package chromium)"
)


def _chromium(page: Path, tmp: Path) -> tuple[str, list[str]]:
    """(DOM after scripts ran, console lines) for ``page`` opened offline in headless Chromium."""
    assert CHROMIUM is not None
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    # Chromium logs every console message of the page as ":CONSOLE(line)] "text", source: ..."
    console = [line for line in r.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    return r.stdout, console


class _Numbers(HTMLParser):
    """Collects (table id, row uuid, data-field, data-value, shown text) for every number span."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.uuid: str | None = None
        self.current: dict[str, str] | None = None
        self.found: list[tuple[str | None, str | None, str, str, str]] = []
        self.scripts_src: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.table = a.get("id")
        elif tag == "tr":
            self.uuid = a.get("data-uuid")
        elif tag == "span" and "data-field" in a:
            self.current = {"field": a["data-field"], "value": a["data-value"], "text": ""}
        elif tag == "script" and a.get("src"):
            self.scripts_src.append(a["src"])

    def handle_data(self, data: str) -> None:
        if self.current is not None:
            self.current["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.current is not None:
            c = self.current
            self.found.append((self.table, self.uuid, c["field"], c["value"], c["text"]))
            self.current = None
        elif tag == "table":
            self.table = None


def test_console_detector_sees_errors(tmp_path: Path) -> None:
    """The check below is only worth something if a broken page fails it."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<html><body><script>console.error('boom'); notDefined();</script></body></html>"
    )
    _, console = _chromium(page, tmp_path / "profile")
    assert any("boom" in line for line in console) and any("notDefined" in line for line in console)


@pytest.mark.slow
def test_html_report_renders_offline_and_matches_json(
    cli: Any, tmp_path: Path, day_trace_file: Path
) -> None:
    html = tmp_path / "report.html"
    r = cli(
        "report",
        "--fake",
        day_trace_file,
        "--since",
        "24h",
        "--price-usd-per-hour",
        "3",
        "--until",
        "1800000000",
        "--html",
        html,
        "--json",
    )
    assert r.code == 0, r.stderr
    doc = r.json()
    text = html.read_text()
    assert "https://" not in re.sub(
        r"<script>.*?</script>", "", text, flags=re.S
    )  # no CDN, no web fonts

    dom, console = _chromium(html, tmp_path / "profile")
    assert console == [], console
    assert dom.count('class="main-svg"') >= 3  # plotly drew the three charts
    parser = _Numbers()
    parser.feed(dom)
    assert parser.scripts_src == []

    # totals
    totals = {f: (v, t) for table, _, f, v, t in parser.found if table is None}
    for field in ("allocated_hours", "active_hours", "idle_hours", "cost_usd", "wasted_usd"):
        value, shown = totals[field]
        assert float(value) == pytest.approx(doc[field], abs=1e-9), field
        assert shown.lstrip("$") == f"{doc[field]:.2f}"
    # per GPU
    for g in doc["gpus"]:
        row = {
            f: (v, t)
            for table, uuid, f, v, t in parser.found
            if table == "gpus" and uuid == g["uuid"]
        }
        for field in (
            "allocated_hours",
            "active_hours",
            "idle_hours",
            "cost_usd",
            "wasted_usd",
            "peak_memory_fraction",
        ):
            value, shown = row[field]
            assert float(value) == pytest.approx(g[field], abs=1e-9), field
            expected = (
                f"{g[field] * 100:.0f}%" if field == "peak_memory_fraction" else f"{g[field]:.2f}"
            )
            assert shown.lstrip("$") == expected, field
    # recommendations, in the JSON order
    shown_savings = [v for table, _, f, v, _ in parser.found if table == "recommendations"]
    assert [float(v) if v else None for v in shown_savings] == pytest.approx(
        [r["saving_usd_per_month"] for r in doc["recommendations"]]
    )
    assert doc["idle_hours"] == pytest.approx(16) and doc["wasted_usd"] == pytest.approx(48)
