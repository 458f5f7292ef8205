#!/usr/bin/env bash
# Checks the dependency rule of docs/architecture.md ("Layout") on #include
# lines:
#   layer 0  proto (included as gdt/v1/...), common
#   layer 1  rendezvous, gitlab, policy, state, kv (the store's logic)
#   layer 2  coordinator, agent, executor, ci, ckpt, kv (service, CLI), ctl,
#            sim, launch, nccl_bootstrap
#   support  testing (test support: may use any component, never tests/)
# Each folder may include only from the folders listed for it; the folders'
# include graph has no cycle; the gRPC-free code (below) includes neither
# gRPC nor generated protos.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [common]="common"
  [rendezvous]="common rendezvous gdt"
  [gitlab]="common gitlab"
  [policy]="common policy"
  [state]="common state"
  [kv]="common rendezvous kv gdt"
  [sim]="common policy sim"
  [ctl]="common rendezvous ctl gdt"
  [coordinator]="common rendezvous gitlab policy state kv coordinator gdt"
  [agent]="common rendezvous agent gdt"
  [executor]="common rendezvous gitlab executor gdt"
  [ci]="common gitlab ci"
  [ckpt]="common rendezvous gitlab ckpt gdt"
  [launch]="common rendezvous launch gdt"
  [nccl_bootstrap]="common rendezvous nccl_bootstrap gdt"
  [testing]="common rendezvous gitlab policy state kv sim ctl coordinator agent executor ci ckpt launch nccl_bootstrap testing gdt"
)
ours="proto gdt ${!allowed[*]} tests bench examples"
status=0
edges=""
for dir in "${!allowed[@]}"; do
  [ -d "$dir" ] || continue
  while IFS= read -r hit; do
    file=${hit%%:*}
    # Tests may also use the test support; a binary's main.cc (layer 3) may
    # wire in any component. Neither adds an edge between folders.
    case "$file" in
      *_test.cc | *_fuzzer.cc)
        [ "$(sed -E 's/.*#include "([^/"]+)\/.*/\1/' <<<"$hit")" = testing ] && continue ;;
      */main.cc) continue ;;
    esac
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
    top=${inc%%/*}
    case " $ours " in *" $top "*) ;; *) continue ;; esac  # Not one of ours.
    case " ${allowed[$dir]} " in
      *" $top "*) ;;
      *) echo "layering: $file includes \"$inc\" ($dir may use: ${allowed[$dir]})" >&2; status=1 ;;
    esac
    [ "$top" != "$dir" ] && [ "$top" != gdt ] && edges+="$dir $top"$'\n'
  done < <(grep -HE '^#include "[^"]+"' -r "$dir" --include='*.h' --include='*.cc' || true)
done

# No cycle between folders (tsort reports one on stderr).
if ! cycle=$(sort -u <<<"$edges" | sed '/^$/d' | tsort 2>&1 >/dev/null) || [ -n "$cycle" ]; then
  echo "layering: the folders' include graph has a cycle:" >&2
  echo "$cycle" >&2
  status=1
fi

# gRPC-free code: whole folders, and the logic targets of the components
# that also have a gRPC edge.
sources_of() {  # sources_of <dir> <target>: the .cc files of add_library(<target> ...)
  tr '\n' ' ' <"$1/CMakeLists.txt" |
    sed -nE "s/.*add_library\($2 ([^)]*)\).*/\1/p" | tr ' ' '\n' | sed '/^$/d'
}
grpc_free=(common gitlab policy state sim ci)
for pair in coordinator:gdt_coordinator agent:gdt_agent_core kv:gdt_kv ckpt:gdt_ckpt; do
  dir=${pair%%:*}
  for src in $(sources_of "$dir" "${pair#*:}"); do
    grpc_free+=("$dir/$src" "$dir/${src%.cc}.h" "$dir/${src%.cc}_test.cc")
  done
done
for path in "${grpc_free[@]}"; do
  [ -e "$path" ] || continue
  if grep -rnE '#include [<"](grpcpp|grpc|gdt/v1)/' "$path" >&2; then
    echo "layering: $path is gRPC-free code but includes gRPC or protos" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "check-layering: dependency rule holds"
exit $status
