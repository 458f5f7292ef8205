#!/usr/bin/env python3
"""Descriptor flood against a real gdt-agent, as a job on its host could do.

Starts a gdt-coord (SQLite state in a temp dir) and a gdt-agent on loopback,
the agent under `prlimit --nofile=SOFT:HARD` (the limits a service manager
would give it), then opens many idle TCP connections to the agent's endpoint
from a process running as an unprivileged uid (setpriv; root only) and keeps
them open. Every second it reports:

  held     connections the flood still holds open (the agent closes idle ones)
  answers  whether a fresh connection to the agent gets an HTTP/2 SETTINGS
           frame back (the agent accepts and serves)
  host     the agent's host as `gdt-coord status --json` shows it

and prints a summary line at the end. Usage (from a build tree):

  bench/agent_fd_flood.py --bin build-test --sockets 3000 --seconds 30
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def answers(host, port, timeout=2.0):
    """Whether a new connection gets a SETTINGS frame back in `timeout`."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(PREFACE)
            head = conn.recv(9)
            return len(head) == 9 and head[3] == 4
    except OSError:
        return False


def flood(host, port, count, seconds):
    """Child: opens `count` idle connections, reports how many stay open."""
    conns = []
    failed = 0
    for _ in range(count):
        try:
            conn = socket.create_connection((host, port), timeout=2)
            conn.setblocking(False)
            conns.append(conn)
        except OSError:
            failed += 1
    print(json.dumps({"opened": len(conns), "failed": failed}), flush=True)
    end = time.time() + seconds
    while time.time() < end:
        open_now = 0
        for conn in conns:
            if conn.fileno() < 0:
                continue
            try:
                while True:  # Drain what the server sent; b"" = it closed.
                    if conn.recv(65536) == b"":
                        conn.close()
                        break
            except BlockingIOError:
                pass
            except OSError:
                conn.close()
            if conn.fileno() >= 0:
                open_now += 1
        print(json.dumps({"held": open_now}), flush=True)
        time.sleep(1)


def wait_file(path, proc, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited with {proc.returncode}")
        time.sleep(0.05)
    raise SystemExit(f"no port file {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="build-test", help="build tree")
    parser.add_argument("--sockets", type=int, default=3000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--nofile", default="1024:4096",
                        help="the agent's SOFT:HARD RLIMIT_NOFILE")
    parser.add_argument("--uid", type=int, default=65534,
                        help="flood as this uid when root")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="gdt-fd-flood-")
    coord_yaml = os.path.join(tmp, "coord.yaml")
    with open(coord_yaml, "w") as f:
        f.write(f"listen_address: 127.0.0.1:0\nstate_path: {tmp}/coord.db\n"
                "heartbeat_interval_seconds: 1\nhost_down_after_seconds: 5\n")
    coord = subprocess.Popen(
        [f"{args.bin}/coordinator/gdt-coord", "serve", "--config", coord_yaml,
         "--port-file", f"{tmp}/coord.port"],
        stdout=open(f"{tmp}/coord.log", "w"), stderr=subprocess.STDOUT)
    procs = [coord]
    try:
        coord_ep = wait_file(f"{tmp}/coord.port", coord)
        agent_yaml = os.path.join(tmp, "agent.yaml")
        with open(agent_yaml, "w") as f:
            f.write(f"coordinator: {coord_ep}\nlisten_address: 127.0.0.1:0\n"
                    f"scratch_dir: {tmp}/scratch\ncgroup_parent: \"off\"\n"
                    "host: {name: flood-host, address: 127.0.0.1, gpus: 0}\n")
        agent = subprocess.Popen(
            ["prlimit", f"--nofile={args.nofile}", "--",
             f"{args.bin}/agent/gdt-agent", "--config", agent_yaml,
             "--port-file", f"{tmp}/agent.port"],
            stdout=open(f"{tmp}/agent.log", "w"), stderr=subprocess.STDOUT)
        procs.append(agent)
        agent_ep = wait_file(f"{tmp}/agent.port", agent)
        host, port = agent_ep.rsplit(":", 1)
        port = int(port)

        def host_view():
            out = subprocess.run(
                [f"{args.bin}/coordinator/gdt-coord", "status", "--json",
                 "--coordinator", coord_ep], capture_output=True, text=True,
                timeout=10)
            try:
                for h in json.loads(out.stdout)["hosts"]:
                    if h["name"] == "flood-host":
                        return h["state"] + (
                            f" ({h['not_ready_reason']})"
                            if h.get("not_ready_reason") else "")
            except (ValueError, KeyError):
                pass
            return "?"

        print(f"before flood: answers={answers(host, port)} host={host_view()}")
        prefix = []
        if os.geteuid() == 0:
            prefix = ["setpriv", f"--reuid={args.uid}", f"--regid={args.uid}",
                      "--clear-groups"]
        flooder = subprocess.Popen(
            prefix + [sys.executable, __file__, "--child", host, str(port),
                      str(args.sockets), str(args.seconds)],
            stdout=subprocess.PIPE, text=True)
        procs.append(flooder)
        print("flood:", flooder.stdout.readline().strip())
        ok = bad = 0
        not_ready_seen = False
        for line in flooder.stdout:
            good = answers(host, port)
            view = host_view()
            not_ready_seen |= "(" in view  # The state has a reason.
            ok += good
            bad += not good
            print(f"{json.loads(line)} answers={good} host={view}", flush=True)
        flooder.wait()
        end = time.time() + 30
        while time.time() < end and not answers(host, port):
            time.sleep(0.5)
        recovered = answers(host, port)
        time.sleep(3)
        print(f"after flood: answers={recovered} host={host_view()}")
        print(f"SUMMARY probes_answered={ok} probes_unanswered={bad} "
              f"host_marked_not_ready={not_ready_seen} "
              f"recovered={recovered} agent_alive={agent.poll() is None}")
        print(f"logs in {tmp}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        flood(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
              int(sys.argv[5]))
    else:
        main()
