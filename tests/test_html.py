"""The HTML report in a real browser: Debian's chromium driven by selenium through
chromium-driver (both installed by reproducers/setup-host). Each page opens with no console
error and no network request, in under 3 s, and the numbers it shows (listings, READDIRs,
restarts, invalidations, verdict; a dcache run's charted samples and its phases' changes),
read back from its DOM, equal `analyze --json` on the same input. A screenshot of each page is
taken into results/report/ on every run; the ones in docs/report/ (linked from the README) are
replaced only with NFSRT_UPDATE_SCREENSHOTS=1, so that a test run leaves the checkout as it was."""

import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess

import pytest

from conftest import FIXTURES, TOP, installed, run_cli

STORED = os.path.join(TOP, "docs", "report")
SHOTS = os.path.join(TOP, "results", "report")
UPDATE = os.environ.get("NFSRT_UPDATE_SCREENSHOTS") == "1"
BAD = os.path.join(FIXTURES, "5.10-v4.1")
GOOD = os.path.join(FIXTURES, "6.1-v4.1")
# name -> the inputs of one page
PAGES = {
    "bad-5.10": [BAD],
    "good-6.1": [GOOD],
    "multi-5.10": [os.path.join(FIXTURES, "multi-5.10")],
    "multi-6.1": [os.path.join(FIXTURES, "multi-6.1")],
    "fleet-5.10": [os.path.join(FIXTURES, "fleet-5.10")],
    "record-5.10-multi": [os.path.join(FIXTURES, "record-5.10-multi")],
    "undecided-5.10-v3": [os.path.join(FIXTURES, "5.10-v3")],
    "capture-5.10": [os.path.join(FIXTURES, "5.10-v4.1-cap", "modified.pcap.gz")],
    "capture-6.1": [os.path.join(FIXTURES, "6.1-v4.1-cap", "modified.pcap.gz")],
    # Several readers, and tcpdump dropped 561 packets (its log beside it): restarts a range.
    "lossy-capture-multi-5.10": [os.path.join(FIXTURES, "multi-5.10-cap", "multi.pcap.gz")],
    "dcache-negative-5.10": [os.path.join(FIXTURES, "dcache-negative-5.10")],
    "before-after": [BAD, GOOD],
}
LARGEST = os.path.join(FIXTURES, "7.3-v4.1")  # the largest readdir fixture
MAX_BYTES = 5 << 20
FIRST_SCREEN = 1000  # px: what a reader sees before scrolling
# The verdict in check's words (the glossary's), by exit status (no git bisect word).
WORDS = {0: "good", 1: "bad", 125: "cannot decide"}


@pytest.fixture(scope="module")
def browser():
    """One headless chromium for every page, logging the console and the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = installed("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1500"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(installed("chromedriver")), options=opts)
    yield driver
    driver.quit()


def open_page(browser, path):
    """Open a page; return (seconds to its load event, console errors, requests off the page)."""
    browser.get_log("browser")
    browser.get_log("performance")
    browser.get("file://" + path)
    seconds = browser.execute_script(
        "var t=performance.getEntriesByType('navigation')[0];return t.loadEventEnd/1000;"
    )
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    requests = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if url != "file://" + path:
                requests.append(url)
    return seconds, errors, requests


def shown_numbers(browser, section):
    """{key: text} of the numbers a section shows."""
    return {
        e.get_attribute("data-k"): e.text for e in section.find_elements("css selector", ".num")
    }


def png_size(path):
    """(width, height) of a PNG file, from its IHDR chunk; None for a file that is no PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def stored_shots():
    """{name: (sha256, mtime)} of the screenshots in docs/report/: a file written again with
    the same bytes is written all the same."""
    out = {}
    for name in PAGES:
        p = os.path.join(STORED, f"{name}.png")
        if os.path.exists(p):
            with open(p, "rb") as f:
                out[name] = (hashlib.sha256(f.read()).hexdigest(), os.stat(p).st_mtime_ns)
    return out


# As the checkout had them before this module's tests ran.
STORED_BEFORE = stored_shots()


def charted(browser, section):
    """What a dcache section's charts draw: ({counter: [(ns, value)]}, [(phase, start, end)])
    (each phase is in each chart: the first chart's)."""
    return browser.execute_script(
        """var s=arguments[0],pts={},ph=[],first=s.querySelector('svg.samples-chart');
        if(!first)return null;
        s.querySelectorAll('svg.samples-chart circle.sample').forEach(function(c){
          var k=c.dataset.counter;(pts[k]=pts[k]||[]).push([+c.dataset.ns,+c.dataset.v]);});
        first.querySelectorAll('g.phase').forEach(function(g){
          ph.push([g.dataset.phase,+g.dataset.start,+g.dataset.end]);});
        return [pts,ph];""",
        section,
    )


def check_dcache_charts(browser, section, inputs):
    """The charts draw every sample of the run, and each phase's change read off the drawn
    curves (the last sample at or before its start, the first at or after its end) is the
    change analyze --json gives."""
    (js,) = json.loads(run_cli("analyze", "--json", inputs, check=0).stdout)
    res = js["dcache"]
    drawn = charted(browser, section)
    assert drawn is not None, "the dcache run's samples are not drawn"
    points, phases = drawn
    assert len(points["nr_dentry"]) == res["samples"], (len(points["nr_dentry"]), res["samples"])
    assert [p[0] for p in phases] == res["phase_order"], (phases, res["phase_order"])
    for name, start, end in phases:
        for counter in ("nr_dentry", "nr_negative", "slab_bytes"):
            pts = sorted(points[counter])
            before = ([v for t, v in pts if t <= start] or [pts[0][1]])[-1]
            after = ([v for t, v in pts if t >= end] or [pts[-1][1]])[0]
            assert after - before == res["phases"][name]["delta"][counter], (name, counter)


def expected(inputs):
    """What analyze --json says of one input: the numbers the page must show."""
    js = json.loads(run_cli("analyze", "--json", inputs, check=0).stdout)
    if "dcache" in js[0]:
        return {"verdict": js[0]["dcache"]["verdict"]}
    lsts = [s for t in js for s in t["listings"]]

    def total(k):
        xs = [s[k] for s in lsts]
        return str(sum(xs)) if None not in xs else "cannot tell"

    return {
        "listings": str(len(lsts)),
        "readdirs": str(sum(s["readdirs"] for s in lsts)),
        "restarts": total("restarts"),
        "invalidations": total("invalidations"),
        "verdict": WORDS[js[0]["verdict"]["code"]],
    }


@pytest.mark.parametrize("name", list(PAGES))
def test_page_shows_what_analyze_says(browser, tmp_path, name, monkeypatch):
    from selenium.webdriver.common.by import By

    # Named from the top of the tree, as the screenshots show them.
    monkeypatch.chdir(TOP)
    inputs = [os.path.relpath(p, TOP) for p in PAGES[name]]
    out = tmp_path / f"{name}.html"
    run_cli("report", *inputs, "-o", out, check=0)
    seconds, errors, requests = open_page(browser, str(out))
    assert not errors, errors
    assert not requests, requests
    print(f"{name}: the page loaded in {seconds:.2f} s")
    sections = browser.find_elements(By.CSS_SELECTOR, "section.input")
    assert len(sections) == len(inputs)
    for section, path in zip(sections, inputs):
        assert shown_numbers(browser, section) == expected(path), path
        if "dcache" in section.get_attribute("class"):
            check_dcache_charts(browser, section, path)
    if len(inputs) == 2:  # before/after: paired by process and directory, with ratios
        row = browser.find_element(
            By.CSS_SELECTOR,
            'tr[data-listing="paced-lister dir 12 (modified)"][data-metric="restarts"]',
        )
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[2:] == ["5", "0", "0"], cells
    check_first_screen(browser, inputs)
    check_no_text_on_data(browser)
    for section, path in zip(sections, inputs):
        if "dcache" not in section.get_attribute("class"):
            check_overview_marks(browser, section, expected(path)["restarts"])
    os.makedirs(SHOTS, exist_ok=True)
    shot = os.path.join(SHOTS, f"{name}.png")
    browser.save_screenshot(shot)
    if UPDATE:
        shutil.copyfile(shot, os.path.join(STORED, f"{name}.png"))
    # The README's screenshot is this page's, in the size and format the test takes it.
    stored = os.path.join(STORED, f"{name}.png")
    assert os.path.exists(stored), f"{stored}: missing; NFSRT_UPDATE_SCREENSHOTS=1 makes it"
    assert png_size(stored) == png_size(shot) is not None, (png_size(stored), png_size(shot))


def bottom(element):
    return element.location["y"] + element.size["height"]


def check_first_screen(browser, inputs):
    """The first FIRST_SCREEN px hold each readdir input's answer in one sentence, and the
    table of its worst listings; a single input's overview starts there too."""
    from selenium.webdriver.common.by import By

    answers = browser.find_elements(By.CSS_SELECTOR, ".answer")
    assert answers and bottom(answers[0]) < FIRST_SCREEN
    if len(inputs) > 1:
        return
    section = browser.find_element(By.CSS_SELECTOR, "section.input")
    if "dcache" in section.get_attribute("class"):
        return
    sentence = section.find_element(By.CSS_SELECTOR, ".answer .sentence").text
    assert sentence.endswith(".") and "skip" not in sentence and "bisect" not in sentence
    worst = section.find_element(By.CSS_SELECTOR, ".worst")
    assert bottom(worst) < FIRST_SCREEN, bottom(worst)
    overview = section.find_element(By.CSS_SELECTOR, "svg.overview")
    assert overview.location["y"] < FIRST_SCREEN


# Every text of the charts shown against every mark of their data: [(text, mark)] that meet.
OVERLAPS = """
var out=[],marks='circle.readdir,rect.bar,rect.refetch,rect.getdents,line.invalidation,'+
  'line.restart,path.change';
document.querySelectorAll('svg.zoom').forEach(function(svg){
  if(!svg.getClientRects().length)return;
  var texts=[].map.call(svg.querySelectorAll('text'),function(t){
    return [t.textContent,t.getBoundingClientRect()];});
  svg.querySelectorAll(marks).forEach(function(m){var r=m.getBoundingClientRect();
    texts.forEach(function(t){var b=t[1];
      if(r.left<b.right&&b.left<r.right&&r.top<b.bottom&&b.top<r.bottom)
        out.push([t[0],m.getAttribute('class')]);});});});
return out;
"""


def check_no_text_on_data(browser):
    """No text of a chart lies on its data, with every folded chart opened."""
    browser.execute_script("document.querySelectorAll('details').forEach(d=>d.open=true)")
    assert browser.execute_script(OVERLAPS) == []
    browser.execute_script("document.querySelectorAll('details').forEach(d=>d.open=false)")


def check_overview_marks(browser, section, restarts):
    """The overviews mark every restart, each inside its plot area and inside the bar of its
    listing's lane."""
    marks = browser.execute_script(
        """var out=[];arguments[0].querySelectorAll('svg.overview').forEach(function(s){
          var x0=+s.dataset.x0,x1=x0+(+s.dataset.pw);
          s.querySelectorAll('line.restart').forEach(function(l){var x=+l.getAttribute('x1'),
            y=+l.getAttribute('y1'),inBar=[].some.call(s.querySelectorAll('rect.bar'),
            function(b){var bx=+b.getAttribute('x'),by=+b.getAttribute('y');
              return bx<=x+1&&x-1<=bx+(+b.getAttribute('width'))&&y<=by&&by<=y+16;});
            out.push(x0<=x&&x<=x1&&inBar);});});return out;""",
        section,
    )
    if restarts != "cannot tell":
        assert len(marks) == int(restarts), (len(marks), restarts)
    assert all(marks), marks


def test_a_drag_zooms_what_the_overview_draws(browser, tmp_path):
    """Dragging across the overview draws it again for the time dragged across: the bars
    wider, the ticks other times; a double click draws the whole again."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    out = tmp_path / "multi.html"
    run_cli("report", PAGES["multi-5.10"][0], "-o", out, check=0)
    open_page(browser, str(out))
    svg = browser.find_element(By.CSS_SELECTOR, "svg.overview")

    def drawn():
        return browser.execute_script(
            "var s=arguments[0];return [[].map.call(s.querySelectorAll('rect.bar'),"
            "function(r){return +r.getAttribute('width');}),"
            "[].map.call(s.querySelectorAll('g.xticks text'),function(t){return t.textContent;})]",
            svg,
        )

    widths, ticks = drawn()
    scrolled = browser.execute_script("return window.scrollY")
    ActionChains(browser).move_to_element_with_offset(svg, -200, 0).click_and_hold().move_by_offset(
        150, 0
    ).release().perform()
    zoomed, zticks = drawn()
    assert sum(zoomed) > 2 * sum(widths) and zticks != ticks, (zticks, ticks)
    assert browser.execute_script("return window.scrollY") == scrolled
    ActionChains(browser).double_click(svg).perform()
    assert drawn() == [widths, ticks]
    # The wheel is the page's: no chart takes it from the scrolling.
    wheel = "var e=new WheelEvent('wheel',{deltaY:100,cancelable:true,bubbles:true});"
    assert browser.execute_script(
        wheel + "arguments[0].dispatchEvent(e);return !e.defaultPrevented", svg
    )


def test_a_run_leaves_the_stored_screenshots_as_they_were():
    """Runs after the pages' test (pytest keeps a module's order): without
    NFSRT_UPDATE_SCREENSHOTS=1, docs/report/ is as the checkout had it."""
    if not UPDATE:
        assert stored_shots() == STORED_BEFORE


def test_a_folded_poller_opens_on_a_click(browser, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "multi.html"
    run_cli("report", PAGES["multi-5.10"][0], "-o", out, check=0)
    open_page(browser, str(out))
    more = browser.find_element(By.CSS_SELECTOR, "details.more")
    assert not more.get_attribute("open")
    more.find_element(By.TAG_NAME, "summary").click()
    folded = browser.find_elements(By.CSS_SELECTOR, "details.folded")
    assert folded and not folded[0].get_attribute("open")
    inner = folded[0].find_element(By.CSS_SELECTOR, ".listing-block")
    assert not inner.is_displayed()
    folded[0].find_element(By.TAG_NAME, "summary").click()
    assert inner.is_displayed()
    # Hover text of a READDIR: time, cookie, READDIR number and process.
    title = browser.find_element(By.CSS_SELECTOR, "circle.readdir title")
    text = title.get_attribute("textContent")
    assert "READDIR #" in text and " s, cookie " in text and "[" in text, text


def test_the_largest_fixture_page_is_small(browser, tmp_path):
    """The largest fixture's page stays small and loads with no error and no request. How
    long it took is printed, not asserted: on a machine shared with other work a load time is
    the machine's, not the page's (the benches measure speed)."""
    out = tmp_path / "largest.html"
    run_cli("report", LARGEST, "-o", out, check=0)
    assert os.path.getsize(out) < MAX_BYTES, os.path.getsize(out)
    seconds, errors, requests = open_page(browser, str(out))
    assert not errors and not requests, (errors, requests)
    print(f"the largest page ({os.path.getsize(out):,} bytes) loaded in {seconds:.2f} s")
    assert shutil.which("chromium")


def test_bad_input_is_one_line_and_leaves_no_page(tmp_path):
    out = tmp_path / "r.html"
    p = run_cli("report", tmp_path / "none.dat", "-o", out)
    assert p.returncode == 128 and "none.dat" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists() and os.listdir(tmp_path) == []
    p = run_cli("report", BAD, "-o", tmp_path / "no-such-dir" / "r.html")
    assert p.returncode == 128 and "no-such-dir" in p.stderr and "Traceback" not in p.stderr
    assert os.listdir(tmp_path) == []


def test_a_fifo_given_as_the_page_is_written_to_not_replaced(tmp_path):
    """-o of a device or a FIFO (/dev/null, a pipe) writes into it: a rename over it would
    leave a regular file where /dev/null was."""
    fifo = tmp_path / "page"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        p = run_cli("report", BAD, "-o", fifo, check=0)
        page = reader.communicate(timeout=60)[0]
    finally:
        reader.kill()  # a page renamed over the FIFO leaves cat waiting for a writer
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and "replaced" not in p.stdout, p.stdout
    assert page.startswith(b"<!DOCTYPE html>") and os.listdir(tmp_path) == ["page"]


def test_a_trace_of_kmem_events_alone_gets_its_slab_figures(tmp_path):
    out = tmp_path / "kmem.html"
    run_cli("report", os.path.join(FIXTURES, "kmem-host", "kmem.dat"), "-o", out, check=0)
    page = out.read_text()
    slab = run_cli("analyze", os.path.join(FIXTURES, "kmem-host", "kmem.dat"), check=0).stdout
    # The figures as analyze words them (its first line names the biggest grower).
    first = slab.split(": ", 1)[1].splitlines()[0]
    assert 'class="slab"' in page and first.split()[0] in page and 'class="verdict' not in page


def test_three_inputs_are_three_and_the_page_says_none_are_paired(tmp_path):
    out = tmp_path / "three.html"
    inputs = [BAD, GOOD, os.path.join(FIXTURES, "6.12-v4.1")]
    run_cli("report", *inputs, "-o", out, check=0)
    page = out.read_text()
    assert page.count('<section class="input"') == 3 and 'class="pairs"' not in page
    assert "3 inputs: each is shown on its own" in page


@pytest.mark.parametrize(
    "inputs",
    [
        [os.path.join(FIXTURES, "multi-5.10")],
        [os.path.join(FIXTURES, "multi-6.1")],
        [os.path.join(FIXTURES, "fleet-5.10", "fleet.dat")],
        [os.path.join(FIXTURES, "fleet-5.10", "fleet.pcap.gz")],
    ],
    ids=["multi-5.10", "multi-6.1", "fleet-trace", "fleet-capture"],
)
def test_quiet_listings_fold_on_every_input(tmp_path, inputs):
    """A reader's listings with nothing to tell (by their findings: untested, unfinished) fold
    into one <details>, on traces and captures alike, and the page's details are folded."""
    out = tmp_path / "page.html"
    run_cli("report", *inputs, "-o", out, check=0)
    page = out.read_text()
    assert page.count('<details class="folded">') >= 1
    assert "<details open" not in page and 'class="listing-block"' in page.split("<details", 1)[1]


@pytest.mark.parametrize("cap", ["5.10-v4.1-cap", "6.1-v4.1-cap"])
def test_every_change_a_capture_s_answer_counts_is_drawn(tmp_path, cap):
    """The changes of the directory the answer cites: each a mark on the overview where the
    GETATTR reply that showed it came (before: 6.1's 3 were only said, "not drawn")."""
    import re

    path = os.path.join(FIXTURES, cap, "modified.pcap.gz")
    out = tmp_path / "cap.html"
    run_cli("report", path, "-o", out, check=0)
    page = out.read_text()
    overview = page.split('<svg class="overview', 1)[1].split("</svg>", 1)[0]
    drawn = overview.count('class="change"')
    said = re.search(r"(\d+) changes? of the directory the answer counts are not drawn", page)
    (js,) = json.loads(run_cli("analyze", "--json", path, check=0).stdout)
    counted = sum(s["version_changes"] or 0 for s in js["listings"])
    assert counted and drawn == counted and said is None, (drawn, counted)
