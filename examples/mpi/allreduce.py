#!/usr/bin/env python3
"""MPI_Allreduce across a gdt gang with the `mpi` recipe:
`gdt-launch mpi -- mpirun -np 3 python3 examples/mpi/allreduce.py`.

Every rank contributes rank+1; the sum must be n(n+1)/2 on every rank. Each
rank prints one line naming the gdt member (GDT_NODE_RANK) it runs in; exits
1 on a wrong sum.
"""
import os
import sys

from mpi4py import MPI


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    expected = size * (size + 1) // 2
    member = os.environ.get("GDT_NODE_RANK", "?")
    print(f"mpi[rank {rank}/{size}] in gdt member {member}: "
          f"allreduce {total} (expected {expected})", flush=True)
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
