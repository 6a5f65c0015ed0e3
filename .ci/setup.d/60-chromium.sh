#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver, for the dashboard's browser test
# (tests/api/test_dashboard_browser.py) and its speed bench (bench/dashboard_speed.py).
# Playwright (from pyproject.toml's test extras) drives this system browser through
# executable_path=/usr/bin/chromium: `playwright install` is never run, no browser build is
# downloaded. chromedriver comes along for anyone who prefers Selenium. No service is
# involved; the packages only add binaries.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/apt.sh"

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
# A sans-serif with the metrics of Arial, so pages and screenshots read as designed.
[ -d /usr/share/fonts/truetype/liberation ] || missing+=(fonts-liberation)
apt_install "${missing[@]}"
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null | head -1), $(/usr/bin/chromedriver --version 2>/dev/null | head -1 | cut -d' ' -f1-2)"
