#!/bin/sh
# Start PostgreSQL and Redis on 127.0.0.1 if they are not answering (as this machine's images do).
set -u
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
    i=0
    while [ $i -lt 30 ] && ! pg_isready -q -h 127.0.0.1 -p 5432; do i=$((i + 1)); sleep 1; done
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
    i=0
    while [ $i -lt 30 ] && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; do i=$((i + 1)); sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 -p 6379 ping
# The database the test settings name (pytest creates test_<name> from it).
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='suanchi'" 2>/dev/null | grep -q 1 \
    || createdb -h 127.0.0.1 -U postgres suanchi 2>/dev/null || true
# Real servers the tests start themselves: Prometheus (telemetry) and Chromium (browser tests),
# from Debian's packages; installed once, when missing.
missing=""
command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
# A CJK font, so Chinese pages render in the browser tests' screenshots.
[ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || missing="$missing fonts-wqy-microhei"
# ... which the PDF bill also embeds (apps/billing/exports.py); the bill tests read PDFs with
# poppler's pdffonts / pdftotext.
command -v pdffonts >/dev/null 2>&1 || missing="$missing poppler-utils"
# The cluster tests make TLS certificates at test time with the openssl CLI (tests/clusters/test_pages.py).
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
if [ -n "$missing" ]; then
    echo "installing Debian packages:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
