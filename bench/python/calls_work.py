"""A call-heavy Python workload for bench/python: ~8,800 Python calls per round (recursive fib,
a tree of small objects walked with a small method at its leaves, a generator pipeline, a class
hierarchy), so that a deterministic profiler's cost per call shows. Deterministic (stdout: its
total). Argument: rounds (default 600, ~1.5 s on this machine).

On stderr: the CPU time of its main part (the rounds), `cpu_s=S`, and the CPU time of each of
the four functions main calls, `phase_s fib=S walk=S pipeline=S total_area=S` (time.process_time
around each call): their inclusive times without a profiler. Natively about fib 48%, walk 29%,
pipeline 20%, total_area 3%; no other function of this file takes more than ~6%, so the five
top functions by inclusive time (<module> and main, at ~100% both, then fib, walk, pipeline)
stand more than 5 points apart, also under cProfile, whose cost per call inflates fib most."""
import sys
import time


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Node:
    __slots__ = ("value", "kids")

    def __init__(self, value, kids):
        self.value = value
        self.kids = kids

    def weight(self):
        return self.value % 7 + 1


def build(depth, value):
    if depth == 0:
        return Node(value, ())
    return Node(value, (build(depth - 1, value * 2), build(depth - 1, value * 2 + 1)))


def walk(node):
    if not node.kids:
        return node.weight()
    total = node.value & 7
    for kid in node.kids:
        total += walk(kid)
    return total


def numbers(n):
    for i in range(n):
        yield i


def odd_squares(values):
    for v in values:
        if v & 1:
            yield v * v


def pipeline(n):
    acc = 0
    for v in odd_squares(numbers(n)):
        for k in range(6):
            acc = (acc * 31 + v + k) % 1000003
    return acc


class Shape:
    def __init__(self, size):
        self.size = size

    def area(self):
        return self.size * self.size


class Square(Shape):
    pass


class Circle(Shape):
    def area(self):
        return 3 * super().area()


def total_area(shapes):
    return sum(s.area() for s in shapes)


def main(rounds):
    tree = build(12, 1)
    shapes = [(Square if i % 3 else Circle)(i % 10) for i in range(800)]
    clock = time.process_time
    phases = [0.0, 0.0, 0.0, 0.0]
    total = 0
    start = clock()
    for _ in range(rounds):
        t0 = clock()
        total += fib(20) + fib(19)
        t1 = clock()
        total += walk(tree)
        t2 = clock()
        total += pipeline(2200)
        t3 = clock()
        total += total_area(shapes)
        t4 = clock()
        phases[0] += t1 - t0
        phases[1] += t2 - t1
        phases[2] += t3 - t2
        phases[3] += t4 - t3
    cpu = clock() - start
    print("total", total)
    names = ("fib", "walk", "pipeline", "total_area")
    print(f"cpu_s={cpu:.6f}", file=sys.stderr)
    print("phase_s " + " ".join(f"{n}={s:.6f}" for n, s in zip(names, phases)), file=sys.stderr)


main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
