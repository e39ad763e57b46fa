"""Screenshot one figure of a poslens report for the README.

Usage (after `make report`):
    .venv/bin/python docs/make_readme_figure.py results/quick/report.html docs/img/report_sources.png [--index 0]

Opens the report in headless Chromium (Debian's chromium and chromedriver) and
saves the figure at --index (0: C_res and C_mask by layer across architectures).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args()
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--window-size=1300,3000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(args.report.resolve().as_uri())
        figure = driver.find_elements(By.TAG_NAME, "figure")[args.index]
        driver.execute_script("arguments[0].scrollIntoView()", figure)
        args.png.parent.mkdir(parents=True, exist_ok=True)
        figure.screenshot(str(args.png))
    finally:
        driver.quit()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
