"""The operator console in a real browser: Debian's Chromium, headless, driven through its
ChromeDriver by Selenium, against the real ``ratchet serve`` command on a local port.

An operator signs in, finds T-90104 in the queue, sees the exact arguments and the digest, and
approves them (by keyboard); the run page then shows ``done`` with one refund, one call and one
reconcile lookup. An operator without the role sees no approve button, and a form posted from
another site, in the browser of a signed-in agent, changes nothing. For T-90603, a refund of
145.00 on an order refunded once already, a team lead who is also an agent sees the earlier refund
as evidence and the guard's verdict for each role: Approve as team lead, and why not as agent; an
agent sees no Approve button at all. The tests save screenshots of the queue (T-90603's card: the
one in the docs), T-90104's queue, a run page and a diagram page as artefacts
(``$RATCHET_ARTEFACTS/console``, by default ``build/artefacts/console``).

Nothing is downloaded: without ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (Debian's
``chromium`` and ``chromium-driver``) these tests are skipped, and in CI they fail.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import ROOT, SPECS, require_program
from tests.conftest import run_cli as run
from tests.serve.serving import People, serve_command

REFUND = SPECS / "refund.yaml"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTEFACTS = Path(os.environ.get("RATCHET_ARTEFACTS") or ROOT / "build" / "artefacts") / "console"
#: A laptop's screen.
WIDTH, HEIGHT = 1366, 860

pytestmark = pytest.mark.filterwarnings(
    # Selenium's own connection pool to the driver is closed with the driver.
    "ignore::ResourceWarning"
)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium at a laptop's size, driven by its ChromeDriver."""
    require_program("chromium")
    require_program("chromedriver")
    require_program("dot")  # the run page and the spec page draw with Graphviz
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch a browser or driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def console(home: Path, people: People, waiting: str, tmp_path: Path) -> Iterator[str]:
    """The real ``ratchet serve`` with one worker, T-90104 waiting; yields its base URL."""
    with serve_command(
        home, people.path, tmp_path, "--workers", "1", "--spec", str(REFUND)
    ) as base:
        yield base


@pytest.fixture
def console_of_a_double_charge(
    home: Path, people: People, double_charge: tuple[str, str], tmp_path: Path
) -> Iterator[str]:
    """The real ``ratchet serve`` (no worker), T-90603 waiting after T-90602's refund of the same
    order; yields its base URL."""
    with serve_command(home, people.path, tmp_path, "--spec", str(REFUND)) as base:
        yield base


def screenshot(driver: Any, name: str, whole: bool = True) -> Path:
    """Save the page as ``ARTEFACTS/name.png`` (``whole``: all of it, not only the window)."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}.png"
    if whole:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(WIDTH, max(HEIGHT, int(height) + 20))
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, HEIGHT)
    assert path.stat().st_size > 10_000, "a screenshot of a page has more than that"
    return path


def sign_in(driver: Any, base: str, token: str, at: str = "/queue") -> None:
    """Open ``at``; the console asks for a sign-in first; type the token and press Enter."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(base + at)
    assert driver.current_url.startswith(f"{base}/login?next=")
    field = driver.find_element(By.ID, "token")
    assert driver.switch_to.active_element == field  # the page starts where you type
    field.send_keys(token, Keys.ENTER)
    assert driver.find_element(By.CSS_SELECTOR, "p.flash.ok").text.startswith("signed in as")
    assert driver.current_url == base + at


def test_an_operator_finds_t90104_sees_the_exact_arguments_and_approves_them_by_keyboard(
    capsys: pytest.CaptureFixture[str], browser: Any, console: str, people: People, waiting: str
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    asked = httpx.get(f"{console}/api/queue", headers=people.auth("vic")).json()["decisions"][0]
    sign_in(browser, console, people.tokens["ana"])
    card = browser.find_element(By.ID, f"decide-{waiting}")
    assert "T-90104" in card.find_element(By.TAG_NAME, "h3").text
    shown = json.loads(card.find_element(By.CSS_SELECTOR, "pre.args").text)
    assert (
        shown
        == asked["args"]
        == {
            "amount": 9.95,
            "currency": "CAD",
            "order": "LK-793996",
            "reason": "RFD-LATE",
        }
    )
    assert card.find_element(By.CSS_SELECTOR, "code.digest").text == asked["digest"]
    button = card.find_element(By.CSS_SELECTOR, "button.approve")
    assert button.text == f"Approve {asked['digest'][:12]}"
    screenshot(browser, "queue-t90104")

    # By keyboard: Tab from the top of the page reaches the button, which shows it has focus.
    browser.find_element(By.TAG_NAME, "body").click()
    for _ in range(40):
        if browser.switch_to.active_element == button:
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    assert browser.switch_to.active_element == button, "the approve button is not reachable by Tab"
    outline = browser.execute_script(
        "const s = getComputedStyle(document.activeElement);"
        "return [s.outlineStyle, s.outlineWidth];"
    )
    assert outline[0] != "none"
    assert outline[1] != "0px"
    button.send_keys(Keys.ENTER)
    said = browser.find_element(By.CSS_SELECTOR, "p.flash.ok").text
    assert said.startswith(f"{waiting}: ana approved request_refund")

    # The service's worker carries the run on: its reply is lost, it reconciles, it is done.
    browser.find_element(By.LINK_TEXT, "Runs").click()
    browser.find_element(By.LINK_TEXT, "T-90104").click()
    deadline = time.monotonic() + 30
    while browser.find_element(By.ID, "run-status").text != "done":
        assert time.monotonic() < deadline, browser.find_element(By.ID, "history").text
        time.sleep(0.2)
        browser.refresh()
    [row] = browser.find_elements(By.CSS_SELECTOR, "table.effects tbody tr")
    assert row.get_attribute("data-effect") == "request_refund"
    cells = {
        name: row.find_element(By.CSS_SELECTOR, f"td.op-{name}").text
        for name in ("status", "calls", "lookups")
    }
    assert cells == {"status": "done", "calls": "1", "lookups": "1"}
    timeline = browser.find_element(By.CSS_SELECTOR, "ol.timeline").text
    assert timeline.count("reconcile found") == 1
    assert "by ana (agent)" in timeline
    assert "via console from 127.0.0.1" in timeline
    highlighted = browser.find_element(By.CSS_SELECTOR, "figure.diagram svg").text
    assert "this run is here" in highlighted
    screenshot(browser, "run")

    # And in the practice world: one refund made, one call for it, one lookup.
    code, out, err = run(capsys, "effects", "--json")
    assert code == 0, err
    world = json.loads(out)
    assert [c["effect"] for c in world["changes"]] == ["request_refund"]
    assert [c["outcome"] for c in world["calls"]] == ["timeout_after_write", "lookup"]


def test_an_approver_sees_the_earlier_refund_of_the_order_and_approves_only_where_the_guard_lets(
    browser: Any, console_of_a_double_charge: str, people: People, double_charge: tuple[str, str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    console, (earlier, waiting) = console_of_a_double_charge, double_charge
    refusal = (
        "the guard input.amount <= 100.0 || approval.role == 'team_lead' refuses agent "
        "(input.amount is 145)"
    )
    sign_in(browser, console, people.tokens["lead"])
    card = browser.find_element(By.ID, f"decide-{waiting}")
    assert "T-90603" in card.find_element(By.TAG_NAME, "h3").text
    agent = card.find_element(By.CSS_SELECTOR, 'li.verdict.refused[data-role="agent"]')
    assert agent.text == f"agent: may not approve: {refusal}"
    lead = card.find_element(By.CSS_SELECTOR, 'li.verdict.passes[data-role="team_lead"]')
    assert lead.text == "team_lead: may approve"
    [button] = card.find_elements(By.CSS_SELECTOR, "button.approve")
    assert button.text.endswith(" as team_lead")
    form = button.find_element(By.XPATH, "./ancestor::form")
    role = form.find_element(By.CSS_SELECTOR, 'input[name="role"]')
    assert role.get_attribute("value") == "team_lead"
    # The evidence: T-90602's refund of 45.95 on the same order, made, with its receipt.
    row = card.find_element(By.CSS_SELECTOR, f'table.related-runs tr[data-run="{earlier}"]')
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:2] == ["T-90602", "refunded"]
    assert "request_refund done" in cells[3]
    assert "amount=45.95" in cells[3]
    assert "refund_id=re_" in cells[3]
    expiries = [e.text for e in card.find_elements(By.CSS_SELECTOR, "dd.expiry")]
    assert re.search(r"\(in (2d 23h|3d 0h)\)", expiries[0]), expiries[0]  # 72 h, less what passed
    assert re.search(r"\(in (24h 0m|23h 59m)\)", expiries[1]), expiries[1]
    assert "if given now" in expiries[1]
    path = screenshot(browser, "queue")
    assert path.name == "queue.png"  # docs/images/console-queue.png is a copy of it

    # An agent: the reason, a reject form, and no Approve button at all.
    browser.find_element(By.CSS_SELECTOR, "form.who button.quiet").click()
    WebDriverWait(browser, 10).until(lambda b: urlsplit(b.current_url).path == "/login")
    sign_in(browser, console, people.tokens["ana"])
    card = browser.find_element(By.ID, f"decide-{waiting}")
    browser.implicitly_wait(0)
    assert card.find_elements(By.CSS_SELECTOR, "button.approve") == []
    assert card.find_elements(By.CSS_SELECTOR, "button.reject") != []
    verdict = card.find_element(By.CSS_SELECTOR, 'li.verdict[data-role="agent"]')
    assert verdict.text == f"agent: may not approve: {refusal}"


def test_an_operator_without_the_role_sees_no_approve_button(
    browser: Any, console: str, people: People, waiting: str
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, console, people.tokens["vic"])
    card = browser.find_element(By.ID, f"decide-{waiting}")
    browser.implicitly_wait(0)
    assert card.find_elements(By.CSS_SELECTOR, "button.approve") == []
    assert card.find_elements(By.TAG_NAME, "form") == []
    assert "may not decide this: agent or team_lead may" in card.text
    browser.get(f"{console}/runs/{waiting}")
    assert browser.find_elements(By.CSS_SELECTOR, "button.approve") == []


class _Elsewhere(BaseHTTPRequestHandler):
    """Another site: a page with a form that posts an approval to the console."""

    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *_: Any) -> None:
        pass


def test_a_form_posted_from_another_site_in_a_signed_in_browser_changes_nothing(
    browser: Any, console: str, people: People, waiting: str
) -> None:
    from selenium.webdriver.common.by import By

    asked = httpx.get(f"{console}/api/queue", headers=people.auth("vic")).json()["decisions"][0]
    sign_in(browser, console, people.tokens["ana"])  # the agent's browser holds a session
    _Elsewhere.page = (
        f'<form method="post" action="{console}/runs/{waiting}/approve">'
        f'<input type="hidden" name="digest" value="{asked["digest"]}">'
        '<input type="hidden" name="role" value="agent">'
        '<button id="win" type="submit">Claim your prize</button></form>'
    ).encode()
    elsewhere = HTTPServer(("127.0.0.1", 0), _Elsewhere)
    thread = threading.Thread(target=elsewhere.serve_forever)
    thread.start()
    try:
        # localhost, not 127.0.0.1: another site, whose requests carry no strict cookie.
        browser.get(f"http://localhost:{elsewhere.server_address[1]}/")
        browser.find_element(By.ID, "win").click()
        refused = browser.find_element(By.TAG_NAME, "main").text
    finally:
        elsewhere.shutdown()
        thread.join()
        elsewhere.server_close()
    assert "Refused" in refused
    assert "nothing changed" in refused
    status = httpx.get(f"{console}/api/runs/{waiting}", headers=people.auth("vic")).json()
    assert status["status"] == "waiting"
    history = httpx.get(f"{console}/api/runs/{waiting}/trace", headers=people.auth("vic"))
    assert [e for e in history.json()["events"] if e["kind"] == "approved"] == []
    exposition = httpx.get(f"{console}/metrics").text
    assert 'ratchet_console_refusals_total{reason="no_session"} 1.0' in exposition


def test_a_spec_page_shows_its_table_and_diagrams(
    browser: Any, console: str, people: People, waiting: str
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, console, people.tokens["vic"], at=f"/runs/{waiting}")
    browser.find_element(By.PARTIAL_LINK_TEXT, "refund v1").click()
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("refund")
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.diagram svg")
    assert len(figures) == 3
    assert all(f.size["width"] > 300 for f in figures)
    table = browser.find_element(By.CSS_SELECTOR, "div.scroll table")
    assert "request_refund" in table.text
    screenshot(browser, "diagram")
