#!/usr/bin/env bash
# ctest `packaging_debs_install_and_run` (label packaging): builds the three
# .debs from an already-built tree with CPack, checks their metadata,
# unpacks each into a scratch root with `dpkg -x` and runs the installed
# binaries with --version. Usage: test_packages.sh BUILD_DIR VERSION
set -euo pipefail
build=$1
version=$2

fail() { echo "packaging: $*" >&2; exit 1; }
command -v dpkg-shlibdeps >/dev/null || fail "dpkg-shlibdeps missing (apt-get install dpkg-dev)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Reuse the build's binaries (no rebuild): CPack only installs and packs.
# gzip instead of xz keeps CI time down; stripped binaries keep it small.
cpack --config "$build/CPackConfig.cmake" -B "$work/out" \
  -D CPACK_DEBIAN_COMPRESSION_TYPE=gzip >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }

root=$work/root
for package in gdt-coordinator gdt-agent gdt-executor; do
  deb=$(ls "$work/out/${package}_${version}_"*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || { ls -l "$work/out" >&2; fail "no .deb for $package"; }
  name=$(dpkg-deb -f "$deb" Package)
  [ "$name" = "$package" ] || fail "$deb is named '$name', want '$package'"
  depends=$(dpkg-deb -f "$deb" Depends)
  case "$depends" in
    *libc6*) ;;
    *) fail "$package Depends lacks libc6 (dpkg-shlibdeps): '$depends'" ;;
  esac
  dpkg-deb -I "$deb" conffiles | grep -q '^/etc/gdt/' ||
    fail "$package marks no /etc/gdt conffile"
  dpkg -x "$deb" "$root"
  echo "packaging: $package $version Depends: $depends"
done

expect_file() { [ -f "$root/$1" ] || fail "missing /$1 after dpkg -x"; }
expect_file etc/gdt/coord.yaml
expect_file etc/gdt/agent.yaml
expect_file etc/gdt/executor.yaml
expect_file usr/lib/systemd/system/gdt-coord.service
expect_file usr/lib/systemd/system/gdt-agent.service
expect_file usr/share/doc/gdt-coordinator/README.md
grep -q '^ExecStart=/usr/bin/gdt-coord serve --config /etc/gdt/coord.yaml$' \
  "$root/usr/lib/systemd/system/gdt-coord.service" ||
  fail "gdt-coord.service does not start /usr/bin/gdt-coord with /etc/gdt"

for binary in gdt-coord gdt-agent gdt-executor gdt-ci; do
  path=$root/usr/bin/$binary
  [ -x "$path" ] || fail "missing /usr/bin/$binary"
  out=$("$path" --version 2>&1) || fail "$binary --version exited $?: $out"
  [ "$out" = "$binary $version" ] ||
    fail "$binary --version printed '$out', want '$binary $version'"
  echo "packaging: $out"
done

# The installed gdt-coord serves with the installed /etc/gdt/coord.yaml
# (listen address and state moved to the scratch directory).
"$root/usr/bin/gdt-coord" serve --config "$root/etc/gdt/coord.yaml" \
  --listen 127.0.0.1:0 --state "$work/coord.db" --port-file "$work/port" \
  >"$work/serve.log" 2>&1 &
coord=$!
for _ in $(seq 1 200); do
  [ -s "$work/port" ] && break
  kill -0 "$coord" 2>/dev/null || break
  sleep 0.05
done
if [ ! -s "$work/port" ]; then
  kill "$coord" 2>/dev/null || true
  wait "$coord" 2>/dev/null || true
  cat "$work/serve.log" >&2
  fail "the installed gdt-coord did not serve with the installed coord.yaml"
fi
"$root/usr/bin/gdt-coord" status --coordinator "$(cat "$work/port")" >/dev/null ||
  fail "gdt-coord status against the installed daemon failed"
kill -TERM "$coord"
wait "$coord" || fail "gdt-coord did not exit cleanly on SIGTERM"
echo "packaging: ok"
