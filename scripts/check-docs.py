#!/usr/bin/env python3
"""Checks that the docs and the code agree.

- Every command-line flag named in README.md or docs/ is offered by some gdt
  binary (its --help, walking every subcommand), unless it belongs to another
  program (EXTERNAL_FLAGS below); and every flag a gdt binary offers is named
  somewhere in the docs.
- Every Prometheus metric gdt-coord registers is described in
  docs/operations.md, and every gdt_* metric the docs name exists.
- Every metric packaging/grafana/gdt-dashboard.json queries exists.

Usage: check-docs.py BUILD_DIR [--without-flag FLAG]
--without-flag pretends the binaries lost FLAG (the test of this check).
Exit 0 when they agree, 1 with one line per disagreement.
"""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BINARIES = ["coordinator/gdt-coord", "agent/gdt-agent", "executor/gdt-executor",
            "ci/gdt-ci", "kv/gdt-kv", "ckpt/gdt-ckpt", "launch/gdt-launch",
            "launch/gdt-rsh", "sim/gdt-sim"]
# Flags the docs name that belong to other programs: build tools, torchrun,
# the runner, benchmarks, package tools.
EXTERNAL_FLAGS = {
    "--build", "--target", "--install", "--output-on-failure",  # cmake/ctest
    "--nnodes", "--nproc", "--nproc-per-node", "--nproc_per_node",
    "--node-rank", "--node_rank", "--rdzv-backend", "--rdzv-endpoint",
    "--rdzv-id", "--master-addr", "--master-port", "--max-restarts",
    "--standalone",  # torchrun
    "--non-interactive", "--url", "--token", "--executor", "--description",
    "--builds-dir", "--cache-dir", "--tag-list", "--registration-token",
    # gitlab-runner register
    "--benchmark", "--benchmark_min_time", "--benchmark_filter",  # benchmark
    "--libs", "--cflags",  # pkg-config
    "--system", "--home", "--shell", "--no-create-home", "--group",  # useradd
    "--quick", "--reps", "--sizes", "--members", "--channels", "--mib",
    "--barrier-only", "--max-txn-ops", "--max-request-bytes", "--store",
    "--quota-backend-bytes", "--auto-compaction-mode",
    "--auto-compaction-retention",
    "--step", "--etcd",
    "--full-peers", "--hosts", "--joins-per-second", "--main-port",
    # bench/ programs and scripts/bench.sh; etcd flags they pass
    "--gtest_filter",  # googletest binaries
    "--call-graph",  # perf record
    "--keep", "--dir", "--files", "--threshold", "--prefix",
    "--first-job-id", "--absent", "--now", "--master", "--rank",
    "--interval",
    "--address", "--block", "--death-timeout", "--head", "--host",
    "--include-dashboard", "--name", "--no-dashboard", "--no-nanny",
    "--node-ip-address", "--nthreads", "--port", "--server",
    # Dask, Ray and the generic launcher recipes' own commands
    "--master_addr",  # torch.distributed.launch
    "--sockets", "--seconds", "--nofile", "--bin",  # bench/agent_fd_flood.py
    "--endpoint", "--connections", "--streams", "--pid", "--status", "--source",
    # bench/coord_stalled_streams.py
    "--rss-mib", "--starters", "--starts", "--busy-ms",  # bench/spawn_bench.cc
    "--sim", "--out", "--jobs",  # sim/traces/sweep.py
    "--depth", "--prune", "--quiet", "--unshallow",  # git fetch
    "--init", "--recursive", "--hard",  # git submodule, git reset
    "--no-checkout", "--branch",  # git clone
    "--remote",  # git submodule update
    "--get-url",  # git ls-remote
    "--ignore-unmatch",  # git rm
}
FLAG = re.compile(r"(?<![A-Za-z0-9_-])--[a-z][a-z0-9_-]*[a-z0-9]")


def help_text(argv):
    result = subprocess.run(argv + ["--help"], capture_output=True, text=True,
                            timeout=20)
    return result.stdout + result.stderr


def subcommands(text):
    names = []
    in_section = False
    for line in text.splitlines():
        if line.strip() == "Subcommands:":
            in_section = True
            continue
        if in_section:
            match = re.match(r"^  ([a-z][a-z-]*)\s", line)
            if match:
                names.append(match.group(1))
            elif line and not line.startswith(" "):
                in_section = False
    return names


def binary_flags(build):
    flags = {}
    for binary in BINARIES:
        path = build / binary
        if not path.exists():
            sys.exit(f"check-docs: {path} is missing: build everything first")
        pending = [[str(path)]]
        while pending:
            argv = pending.pop()
            text = help_text(argv)
            where = " ".join([pathlib.Path(argv[0]).name] + argv[1:])
            for flag in FLAG.findall(text):
                flags.setdefault(flag, where)
            pending.extend(argv + [name] for name in subcommands(text))
    return flags


def doc_files():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def doc_flags():
    found = {}
    for path in doc_files():
        for flag in FLAG.findall(path.read_text(encoding="utf-8")):
            found.setdefault(flag, path.relative_to(ROOT))
    return found


def code_metrics():
    names = set()
    for source in (ROOT / "coordinator").glob("*.cc"):
        if source.name.endswith("_test.cc"):
            continue
        names.update(re.findall(r'"(gdt_[a-z_]+)"', source.read_text()))
    return names


def base_metric(name):
    return re.sub(r"_(bucket|sum|count)$", "", name)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = pathlib.Path(sys.argv[1])
    without = set()
    if len(sys.argv) == 4 and sys.argv[2] == "--without-flag":
        without.add(sys.argv[3])
    problems = []

    offered = {f: w for f, w in binary_flags(build).items() if f not in without}
    named = doc_flags()
    for flag, where in sorted(named.items()):
        if flag not in offered and flag not in EXTERNAL_FLAGS:
            problems.append(f"{where} names {flag}, which no gdt binary offers")
    for flag, where in sorted(offered.items()):
        if flag not in named:
            problems.append(f"`{where} --help` offers {flag}, which no doc names")

    metrics = code_metrics()
    operations = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    documented = {base_metric(m) for m in re.findall(r"\bgdt_[a-z_]+", operations)}
    for metric in sorted(metrics - documented):
        problems.append(f"gdt-coord exports {metric}, which docs/operations.md does not describe")
    for metric in sorted(set(re.findall(r"`(gdt_[a-z_]+)", operations))):
        if base_metric(metric) not in metrics:
            problems.append(f"docs/operations.md names metric {metric}, which gdt-coord does not export")

    board = ROOT / "packaging/grafana/gdt-dashboard.json"
    if board.exists():
        for expr in re.findall(r'"expr":\s*"((?:[^"\\]|\\.)*)"', board.read_text()):
            for metric in re.findall(r"\bgdt_[a-z_]+", expr):
                if base_metric(metric) not in metrics:
                    problems.append(f"{board.relative_to(ROOT)} queries {metric}, which gdt-coord does not export")

    for problem in problems:
        print(f"check-docs: {problem}")
    if problems:
        return 1
    print(f"check-docs: {len(offered)} flags, {len(metrics)} metrics: docs and code agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
