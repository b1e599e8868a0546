# Sourced by install-debian-packages.sh (and its tests): reading the apt sources this machine has.

# The archive this machine already installs its release from (the first configured source that lists
# the suite), so backports come from the same mirror, whichever it is.
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
    cat "$apt_dir"/sources.list "$apt_dir"/sources.list.d/*.list 2>/dev/null | awk -v suite="$suite" '
      $1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) print $i }'
  } | head -n 1
}
