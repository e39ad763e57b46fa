"""Screenshots of the built docs site and of a saved notebook, taken with the network off.

Run after ``mkdocs build`` (the site in ``site/``) and, for the notebook, give the path
of an executed ``.ipynb``; it is exported with nbconvert's HTML exporter first::

    .venv/bin/mkdocs build -q
    .venv/bin/python docs/take_screenshots.py --site site --notebook docs/tutorials/05_your_text_head_by_head.ipynb --out /tmp/shots

Chromium runs headless behind a proxy that does not exist, so any page that needs the
network (a CDN script, a web font) shows it: the site is served from this machine's
loopback interface only (the search index needs http, not ``file://``).
The pages' failed requests are listed beside each PNG.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import threading
import time
from pathlib import Path

PAGES = {
    "home": "index.html",
    "methodology": "methodology/index.html",
    "methodology-decomposition": "methodology/index.html#s4.1",
    "glossary": "glossary/index.html",
    "tutorial-05": "tutorials/05_your_text_head_by_head/index.html",
}


def _driver(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--proxy-server=http://127.0.0.1:9",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _shoot(driver, url: str, png: Path, figures: int = 0) -> list[str]:
    """The page's top, then (for ``figures`` > 0) each of its first plotly figures scrolled into view."""
    driver.get(url)
    time.sleep(2.0)
    driver.save_screenshot(str(png))
    drawn = driver.execute_script("return document.querySelectorAll('.plotly-graph-div .main-svg').length")
    for k in range(figures):
        found = driver.execute_script(
            f"const d = document.querySelectorAll('.plotly-graph-div')[{k}]; if (d) {{ d.scrollIntoView(); window.scrollBy(0, -120); }} return !!d;"
        )
        if not found:
            break
        time.sleep(0.5)
        driver.save_screenshot(str(png.with_name(f"{png.stem}-figure{k + 1}.png")))
    messages = [entry["message"] for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    return messages + [f"(info) {drawn} plotly svg layers drawn"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="site")
    parser.add_argument("--notebook", default=None)
    parser.add_argument("--out", default="/tmp/poslens-shots")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1600)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    site = Path(args.site).resolve()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    driver = _driver(args.width, args.height)
    problems: dict[str, list[str]] = {}
    try:
        for name, page in PAGES.items():
            path, _, anchor = page.partition("#")
            if not (site / path).exists():
                problems[name] = [f"missing: {site / path}"]
                continue
            url = base + path.removesuffix("index.html") + (f"#{anchor}" if anchor else "")
            problems[name] = _shoot(driver, url, out / f"{name}.png", figures=3 if "tutorial" in name else 0)
        if args.notebook:
            import nbformat
            from nbconvert import HTMLExporter

            notebook = nbformat.read(args.notebook, as_version=4)
            html, _ = HTMLExporter().from_notebook_node(notebook)
            exported = out / (Path(args.notebook).stem + ".html")
            exported.write_text(html, encoding="utf-8")
            problems["notebook"] = _shoot(driver, exported.as_uri(), out / "notebook.png", figures=3)
    finally:
        driver.quit()
        server.shutdown()
    (out / "console.json").write_text(json.dumps(problems, indent=1), encoding="utf-8")
    for name, messages in problems.items():
        print(f"{name}: {len(messages)} console warnings/errors" + "".join(f"\n  {m[:200]}" for m in messages))


if __name__ == "__main__":
    main()
