#!/usr/bin/env bash
# ctest `packaging_debs_install_and_run` (label packaging): builds the three
# .debs from an already-built tree with CPack, checks their metadata and
# that each holds its binaries, unpacks each into a scratch root with
# `dpkg -x` and runs every installed binary with --help and --version.
# Usage: test_packages.sh BUILD_DIR VERSION
set -euo pipefail
build=$1
version=$2

fail() { echo "packaging: $*" >&2; exit 1; }
command -v dpkg-shlibdeps >/dev/null || fail "dpkg-shlibdeps missing (apt-get install dpkg-dev)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Reuse the build's binaries (no rebuild): CPack only installs and packs.
# Uncompressed (no xz, no gzip) keeps CI time down: the test build's binaries
# are large sanitizer builds; stripped binaries keep them smaller.
cpack --config "$build/CPackConfig.cmake" -B "$work/out" \
  -D CPACK_DEBIAN_COMPRESSION_TYPE=none >"$work/cpack.log" 2>&1 ||
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
  if [ "$package" = gdt-agent ]; then
    # The member accounts the shipped agent.yaml names.
    dpkg-deb -I "$deb" postinst | grep -q 'gdt-slot' ||
      fail "gdt-agent's postinst does not create the gdt-slot accounts"
  fi
  dpkg -x "$deb" "$root"
  echo "packaging: $package $version Depends: $depends"
  dpkg-deb -c "$deb" >"$work/$package.files"
done

# Which package holds which binary: the daemons with their tools, the
# job-side tools on the GPU hosts (member scripts run there).
declare -A owner=(
  [gdt-coord]=gdt-coordinator [gdt-sim]=gdt-coordinator
  [gdt-agent]=gdt-agent [gdt-kv]=gdt-agent [gdt-ckpt]=gdt-agent
  [gdt-launch]=gdt-agent [gdt-rsh]=gdt-agent
  [gdt-executor]=gdt-executor [gdt-ci]=gdt-executor
)
for binary in "${!owner[@]}"; do
  grep -q "\./usr/bin/$binary\$" "$work/${owner[$binary]}.files" ||
    fail "${owner[$binary]} does not hold /usr/bin/$binary"
done
for recipe in dask ray spark generic; do
  grep -q "\./usr/share/gdt/launchers/$recipe.yaml\$" "$work/gdt-agent.files" ||
    fail "gdt-agent does not hold the $recipe launcher recipe"
done
grep -q '\./usr/share/gdt/grafana/gdt-dashboard.json$' "$work/gdt-coordinator.files" ||
  fail "gdt-coordinator does not hold the Grafana dashboard"

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

for binary in "${!owner[@]}"; do
  path=$root/usr/bin/$binary
  [ -x "$path" ] || fail "missing /usr/bin/$binary"
  out=$("$path" --version 2>&1) || fail "$binary --version exited $?: $out"
  [ "$out" = "$binary $version" ] ||
    fail "$binary --version printed '$out', want '$binary $version'"
  help=$("$path" --help 2>&1) || fail "$binary --help exited $?: $help"
  case "$help" in
    *"$binary"*) ;;
    *) fail "$binary --help does not name the program: $help" ;;
  esac
  echo "packaging: $out, --help ok"
done

# The installed gdt-launch finds the installed recipes without flags: outside
# a job it then stops at the missing job environment, not at the recipe.
env -i PATH=/usr/bin:/bin "$root/usr/bin/gdt-launch" dask --print \
  >"$work/launch.out" 2>&1 || true
grep -q "GDT_NODE_RANK is not set" "$work/launch.out" ||
  { cat "$work/launch.out" >&2; fail "the installed gdt-launch did not find its recipes"; }

# The runner config example calls the executor where the package puts it.
executor=$(sed -n 's/^ *config_exec = "\(.*\)"/\1/p' \
  "$root/usr/share/doc/gdt-executor/examples/runner-config.toml")
[ "$executor" = /usr/bin/gdt-executor ] ||
  fail "runner-config.toml calls '$executor', the package installs /usr/bin/gdt-executor"

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
