"""The course's website (`make site`: grader/delivery/site.py), built once for the session
without running anything (`--no-execute`: notebooks without outputs), served on localhost and
checked in a real browser: Debian's chromium driven by Playwright, with every request off the
local server refused (the site must work offline). Every page loads with no console error, its
images load, its math is typeset by the site's own KaTeX, its links and anchors resolve, and
nothing overflows a phone's width; the search finds a function. No built page holds solution
code. Without chromium (or Playwright) the browser tests skip, saying why.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT

from grader.course import load_course
from grader.delivery.site import build_site
from grader.delivery.site_katex import KATEX_VERSION
from grader.delivery.site_leaks import leaks, secret_lines
from grader.usage import UsageError

SCREENSHOTS = ROOT / "build" / "screenshots"
SHOWN = {"index.html": "home", "lectures/01-collectives.html": "lecture-01-collectives"}  # screenshot names
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def expected_pages() -> list[str]:
    """Every page the site must have, from course.toml."""
    course = load_course()
    pages = ["index.html", "getting-started.html", "instructors.html"]
    for module in course.modules.values():
        pages += [
            module.lecture.removesuffix(".md") + ".html",
            f"notebooks/{module.name}.html",
            f"api/{module.name}.html",
        ]
    return pages


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, into a temporary folder (KaTeX comes from build/katex/ once fetched)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (`pip install -e .[dev]`)")
    fetched = (ROOT / "build" / "katex" / f"katex-{KATEX_VERSION}").is_dir()
    if not fetched and shutil.which("npm") is None:
        pytest.skip("the site needs npm to fetch KaTeX once, and there is no npm")
    folder = tmp_path_factory.mktemp("site")
    # In this process, as `python -m grader site --no-execute` runs it (without the CLI's start-up).
    build_site(load_course(), folder / "site", folder / "work", execute=False)
    return folder / "site"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line per request otherwise
        pass


@pytest.fixture(scope="session")
def server(site: Path):
    """The site on http://127.0.0.1:<free port>/, served from a thread for the session."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("no chromium on PATH (`apt-get install chromium`; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (`pip install -e .[dev]`)")
    with sync_playwright() as playwright:
        # Debian's chromium, never a browser downloaded by `playwright install`.
        # Offline: every host name but the local server's address resolves to nothing.
        offline = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
        launched = playwright.chromium.launch(executable_path=executable, args=[offline])
        yield launched
        launched.close()


@dataclass
class Visit:
    """What one page showed in the browser."""

    errors: list[str] = field(default_factory=list)  # console errors, page errors, failed requests
    offline: list[str] = field(default_factory=list)  # requests that left the local server
    broken_images: list[str] = field(default_factory=list)
    untypeset: list[str] = field(default_factory=list)  # math KaTeX did not render, or rendered in red
    raw_math: list[str] = field(default_factory=list)  # delimiters left in the page's text
    links: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)  # what sticks out of a phone's width
    math_count: int = 0


TYPESET_TIMEOUT_MS = 15_000  # generous: KaTeX sets ~300 formulas a lecture, on a busy machine too
TYPESET = "() => [...document.querySelectorAll('.arithmatex')].every(e => e.querySelector('.katex'))"
INSPECT = r"""() => {
  const out = {};
  out.broken_images = [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
  const math = [...document.querySelectorAll('.arithmatex')];
  out.math_count = math.length;
  out.untypeset = math.filter(e => !e.querySelector('.katex') || e.querySelector('.katex-error'))
                      .map(e => e.textContent.slice(0, 80));
  // Text outside code and outside KaTeX's output (whose MathML keeps the TeX source).
  out.raw_math = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const delimiters = /\$\$|\\\(|\\\)|\\\[|\\\]|\$[^\s$](?:[^$]{0,80}[^\s$])?\$/;
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.parentElement.closest('pre, code, script, style, .katex')) continue;
    if (delimiters.test(node.textContent)) out.raw_math.push(node.textContent.trim().slice(0, 80));
  }
  out.links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  // The page must not scroll sideways, and nothing in the article may stick out of the screen
  // (where the page would clip it) unless a scroll container holds it: code blocks, tables
  // (Material wraps them in one) and display math (site.css).
  const width = document.documentElement.clientWidth;
  out.overflow = [];
  if (document.documentElement.scrollWidth > width) {
    out.overflow.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${width} px`);
  }
  const article = document.querySelector('article') || document.body;
  for (const element of article.querySelectorAll('*')) {
    // A formula and a drawing count as a whole: KaTeX and SVG clip their own insides on purpose.
    if (element.parentElement.closest('.katex') || element.ownerSVGElement) continue;
    const box = element.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) continue;
    let held = false;
    for (let p = element.parentElement; p && p !== article.parentElement && !held; p = p.parentElement) {
      held = ['auto', 'scroll'].includes(getComputedStyle(p).overflowX);
    }
    const name = `${element.tagName.toLowerCase()}.${element.className}`;
    if (!held) out.overflow.push(`${name}: ${element.textContent}`.slice(0, 100));
  }
  return out;
}"""


def _visit(page, url: str, visit: Visit) -> Visit:
    page.goto(url, wait_until="load")
    with contextlib.suppress(Exception):  # untypeset math is reported below, page by page
        page.wait_for_function(TYPESET, timeout=TYPESET_TIMEOUT_MS)
    for key, value in page.evaluate(INSPECT).items():
        setattr(visit, key, value)
    return visit


def _screenshot(page, name: str) -> Path:
    """The visible part of the page, as build/screenshots/<name>-<viewport width>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}-{page.viewport_size['width']}.png"
    page.screenshot(path=str(target))
    return target


def _failed(request, server: str, record) -> None:
    if not request.url.startswith(server):
        record("offline", request.url)
    elif "ERR_ABORTED" not in (request.failure or ""):
        record("errors", f"request failed ({request.failure}): {request.url}")


@pytest.fixture(scope="session")
def visits(browser, server: str) -> dict[str, Visit]:
    """Every expected page, loaded once at a phone's width in one tab; what each page's load
    logged or requested is recorded against it. The pages of SHOWN are photographed."""
    found = {path: Visit() for path in expected_pages()}
    current: list[Visit] = []  # the page being visited

    def record(attribute: str, text: str) -> None:
        getattr(current[-1], attribute).append(text)

    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and record("errors", f"console: {m.text}"))
    page.on("pageerror", lambda e: record("errors", f"page error: {e}"))
    page.on("response", lambda r: r.status >= 400 and record("errors", f"HTTP {r.status}: {r.url}"))
    # The browser resolves no host but the local server (see `browser`): a request elsewhere fails.
    # A local one fails only when cancelled (ERR_ABORTED: the test moved on to the next page while
    # the search worker still loaded); a missing file is an HTTP 404, reported above.
    page.on("requestfailed", lambda r: _failed(r, server, record))
    try:
        for path, visit in found.items():
            current.append(visit)
            _visit(page, server + path, visit)
            if path in SHOWN:
                _screenshot(page, SHOWN[path])
    finally:
        context.close()
    return found


def _problems(visits: dict[str, Visit], attribute: str) -> dict[str, list[str]]:
    return {page: getattr(visit, attribute) for page, visit in visits.items() if getattr(visit, attribute)}


# ---- Without a browser --------------------------------------------------------------------------


def test_every_page_of_the_syllabus_is_built(site):
    missing = [page for page in expected_pages() if not (site / page).is_file()]
    assert not missing, missing
    assert (site / "search" / "search_index.json").is_file()


def test_the_built_site_holds_no_solution_line(site):
    secrets = secret_lines(load_course())
    assert len(secrets) > 100, "found almost no solution lines in solutions/: has the fence marker changed?"
    found = leaks(site, secrets)
    assert not found, "solution code in the site:\n" + "\n".join(found[:10])


def test_the_leak_check_finds_a_solution_line_planted_in_a_page(tmp_path):
    secrets = secret_lines(load_course())
    line, origin = next(iter(secrets.items()))
    # As syntax highlighting writes it: every token in a span of its own, indented.
    spans = "".join(f'<span class="n">{token}</span> ' for token in line.split())
    (tmp_path / "page.html").write_text(f"<html><body><pre><code>    {spans}\n</code></pre></body></html>")
    assert leaks(tmp_path, {line: origin}) == [f"page.html: {line!r} (from {origin})"]


def test_site_refuses_to_replace_a_folder_that_is_not_a_previous_build(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("not a site")
    with pytest.raises(UsageError, match="not a previous build"):
        build_site(load_course(), out, work, execute=False)
    with pytest.raises(UsageError, match="holds the course repository"):
        build_site(load_course(), ROOT.parent, work, execute=False)
    with pytest.raises(UsageError, match="must be apart"):
        build_site(load_course(), work / "site", work, execute=False)
    assert (out / "notes.txt").read_text() == "not a site" and not work.exists()


def test_lectures_link_what_they_teach_to_its_api_entry(site):
    html = (site / "lectures" / "01-collectives.html").read_text()
    assert 'href="../api/collectives.html#ring_allreduce"' in html
    api = (site / "api" / "collectives.html").read_text()
    assert 'id="ring_allreduce"' in api and "NotImplementedError" not in api.split('id="ring_allreduce"')[1][:3000]


# ---- In the browser -----------------------------------------------------------------------------


def test_every_page_loads_without_console_errors_and_without_the_network(visits):
    assert not _problems(visits, "errors"), _problems(visits, "errors")
    assert not _problems(visits, "offline"), f"requests off the local server: {_problems(visits, 'offline')}"


def test_every_image_loads(visits):
    assert not _problems(visits, "broken_images"), _problems(visits, "broken_images")
    assert sum(v.math_count for v in visits.values()) > 100, "the lectures' math was not marked up"


def test_all_math_is_typeset_by_katex(visits):
    assert not _problems(visits, "untypeset"), _problems(visits, "untypeset")
    assert not _problems(visits, "raw_math"), f"math delimiters left in the text: {_problems(visits, 'raw_math')}"


def test_every_internal_link_and_anchor_resolves(visits, server):
    pages: dict[str, str | None] = {}  # URL without fragment -> its HTML (None: not 200)

    def fetch(url: str) -> str | None:
        if url not in pages:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    pages[url] = response.read().decode(errors="replace") if response.status == 200 else None
            except urllib.error.URLError:
                pages[url] = None
        return pages[url]

    broken = []
    for page, visit in visits.items():
        for link in sorted(set(visit.links)):
            if not link.startswith(server):
                continue
            target, _, anchor = link.partition("#")
            html = fetch(target)
            if html is None:
                broken.append(f"{page} -> {link}: not found")
            elif anchor and f'id="{urllib.parse.unquote(anchor)}"' not in html:
                broken.append(f"{page} -> {link}: no such anchor")
    assert not broken, "\n".join(broken[:20])


def test_nothing_overflows_a_phone_screen(visits):
    assert not _problems(visits, "overflow"), _problems(visits, "overflow")


def test_search_finds_a_function_by_name(browser, server):
    page = browser.new_page(viewport=DESKTOP)
    try:
        page.goto(server + "index.html", wait_until="load")
        page.click(".md-search__input")
        # Material's search worker builds its index after the page loads, saying so meanwhile;
        # then the query is typed key by key, as a reader types it (search runs on key events).
        meta = "document.querySelector('.md-search-result__meta').textContent"
        ready = f"() => {meta} !== '' && !{meta}.includes('Initializing')"
        page.wait_for_function(ready, timeout=30_000)
        page.locator(".md-search__input").press_sequentially("ring_allreduce")
        page.wait_for_selector(".md-search-result__item", timeout=15_000)
        results = page.inner_text(".md-search-result__list")
    finally:
        page.close()
    assert "ring_allreduce" in results, results[:500]


def test_screenshots_of_the_home_page_and_a_lecture_at_phone_and_desktop_width(visits, browser, server):
    page = browser.new_page(viewport=DESKTOP)  # the phone's were taken by `visits`
    try:
        for path, name in SHOWN.items():
            page.goto(server + path, wait_until="load")
            page.wait_for_function(TYPESET, timeout=TYPESET_TIMEOUT_MS)
            _screenshot(page, name)
    finally:
        page.close()
    for name in SHOWN.values():
        for width in (PHONE, DESKTOP):
            shot = SCREENSHOTS / f"{name}-{width['width']}.png"
            assert shot.is_file() and shot.stat().st_size > 10_000, f"{shot} is missing or nearly empty"
