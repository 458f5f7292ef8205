#!/usr/bin/env bash
# Checks the dependency rule of docs/architecture.md on #include lines:
#   layer 0: proto, common          layer 1: rendezvous, gitlab
#   layer 2: coordinator, agent, executor, nccl_bootstrap, kv, ckpt, launch, policy (no gRPC);
#            coordinator may use policy and gitlab (job-token checks), policy
#            uses only common
# A directory may include only from the directories listed for it; the
# coordinator's scheduling logic (everything but *_service.*, *_client.* and
# main.cc) may not see gRPC or generated protos at all.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [common]="common"
  [rendezvous]="common rendezvous gdt"
  [gitlab]="common gitlab"
  [coordinator]="common coordinator rendezvous gitlab gdt policy"
  [agent]="common rendezvous agent gdt"
  [executor]="common rendezvous gitlab executor gdt"
  [nccl_bootstrap]="common rendezvous nccl_bootstrap gdt"
  [policy]="common policy"
  [kv]="common rendezvous kv gdt"
  [ckpt]="common rendezvous gitlab ckpt gdt"
  [launch]="common rendezvous launch gdt"
)
ours="proto common rendezvous gitlab coordinator agent executor nccl_bootstrap kv ckpt launch policy tests examples gdt"
status=0
for dir in "${!allowed[@]}"; do
  [ -d "$dir" ] || continue
  while IFS= read -r hit; do
    file=${hit%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$hit")
    top=${inc%%/*}
    case " $ours " in *" $top "*) ;; *) continue ;; esac  # Not one of ours.
    case " ${allowed[$dir]} " in
      *" $top "*) ;;
      *) echo "layering: $file includes \"$inc\" ($dir may use: ${allowed[$dir]})" >&2; status=1 ;;
    esac
  done < <(grep -HE '^#include "[^"]+"' -r "$dir" --include='*.h' --include='*.cc' || true)
done

# gRPC-free scheduling logic: the sources of the gdt_coordinator target, and
# every header they include from coordinator/.
logic=$(tr '\n' ' ' <coordinator/CMakeLists.txt |
  sed -nE 's/.*add_library\(gdt_coordinator ([^)]*)\).*/\1/p')
for src in $logic coordinator_test.cc scheduler_test.cc store_test.cc config_test.cc; do
  for f in "coordinator/$src" "coordinator/${src%.cc}.h"; do
    [ -f "$f" ] || continue
    if grep -qE '#include [<"](grpcpp|grpc|gdt/v1)/' "$f"; then
      echo "layering: $f is coordinator logic but includes gRPC or protos" >&2
      status=1
    fi
  done
done

# gitlab/ is layer 1 without gRPC.
if git grep -nE '#include [<"](grpcpp|gdt/v1)/' -- 'gitlab/*' 'common/*' 'policy/*' >/dev/null; then
  git grep -nE '#include [<"](grpcpp|gdt/v1)/' -- 'gitlab/*' 'common/*' 'policy/*' >&2
  echo "layering: common/ and gitlab/ must not use gRPC or protos" >&2
  status=1
fi
[ $status -eq 0 ] && echo "check-layering: dependency rule holds"
exit $status
