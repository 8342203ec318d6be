#!/usr/bin/env bash
# The browser the viewer's test drives (brace_audit.view_browser): Debian's chromium, installed with apt-get when
# this runs as root on a Debian / Ubuntu machine without one (as CI runs). Playwright comes from pip
# (requirements.txt) and drives this system browser: Playwright's own browser download is never used.
# BRACE_NO_BROWSER=1 skips it (and the viewer's browser test); BRACE_BROWSER names a browser to use instead.
set -uo pipefail
[ "${BRACE_NO_BROWSER:-}" = "1" ] && exit 0
[ -n "${BRACE_BROWSER:-}" ] && exit 0
for name in chromium chromium-browser google-chrome; do
  command -v "$name" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: installing Debian's chromium for the viewer's browser test (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q chromium >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
    || echo "install_browser: apt-get could not install chromium; the viewer's browser test will say so" >&2
else
  echo "install_browser: no Chromium here; install it (sudo apt-get install chromium) or set BRACE_NO_BROWSER=1" >&2
fi
exit 0
