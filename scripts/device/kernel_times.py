#!/usr/bin/env python3
"""Sums an Nsight Compute CSV of gpu__time_duration.sum per kernel name.

Usage: kernel_times.py NCU.csv. Prints each kernel's launches, total and mean time in us, longest
total first, and the sum over all: the device time of the profiled launches, each run alone (ncu
serialises them), so the sum against the step's wall time shows what overlap and gaps add.
"""
import collections
import csv
import sys

UNIT_TO_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def main(path):
    with open(path, newline="") as f:
        rows = [row for row in csv.reader(f) if len(row) > 10]
    if not rows:
        sys.exit(f"{path}: no profiled kernels")
    header = rows[0]
    name, unit, value = (header.index(column) for column in ("Kernel Name", "Metric Unit", "Metric Value"))
    total = collections.defaultdict(float)
    launches = collections.Counter()
    for row in rows[1:]:
        kernel = row[name].split("(")[0]
        total[kernel] += float(row[value].replace(",", "")) * UNIT_TO_US[row[unit]]
        launches[kernel] += 1
    for kernel, us in sorted(total.items(), key=lambda item: -item[1]):
        print(f"{kernel:44s} {launches[kernel]:5d} launches {us:10.1f} us total {us / launches[kernel]:8.2f} us mean")
    print(f"{'all':44s} {sum(launches.values()):5d} launches {sum(total.values()):10.1f} us total")


if __name__ == "__main__":
    main(sys.argv[1])
