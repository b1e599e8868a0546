# Sourced by install-debian-packages.sh (and its tests): reading the apt sources this machine has.

# The archive this machine already installs its release from (the first configured source that lists
# the suite), so backports come from the same mirror, whichever it is. Safe under `set -euo pipefail`
# (the installer's): files that are absent are skipped, not read.
archive_serving() {
  local suite=$1 apt_dir=${2:-/etc/apt}
  {
    for f in "$apt_dir"/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk -v suite="$suite" '
        function flush() { if (listed && uri != "" && !found) { print uri; found = 1 } uri = ""; listed = 0 }
        /^[[:space:]]*$/ { flush(); next }
        tolower($1) == "uris:" { uri = $2 }
        tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) listed = 1 }
        END { flush() }' "$f"
    done
    for f in "$apt_dir"/sources.list "$apt_dir"/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      awk -v suite="$suite" '
        $1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) print $i }' "$f"
    done
  } | awk 'NR == 1'   # not head: reading to the end, no writer gets SIGPIPE, which pipefail would count
}
