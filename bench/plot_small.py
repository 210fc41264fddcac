#!/usr/bin/env python3
"""Draws issue 27's sweep as an SVG (no plotting library): the time of one square n x n x n product
against n, log-log, one panel per precision, for tilestream's C++ API (context::gemm) beside OpenBLAS
called directly (cblas_?gemm), from bench/small_bench's JSON, and Python's tilestream.matmul beside
numpy's `a @ b`, from bench/small_python.py's JSON. Each point is the median the benchmark recorded
(alternated runs); the title says which files, commit, machine and date.

    bench/plot_small.py --cpu bench/results/small-cpu-vm-2026-11-26q.json \\
        --python bench/results/small-python-vm-2026-11-26q.json --out docs/small-sweep.svg
"""
import argparse
import json
import math
import os
import sys

WIDTH, HEIGHT = 1010, 490
PANEL_W, PANEL_H = 400, 320
LEFT, TOP = 80, 88
GAP = 90

# (label, file key, row field, colour, dash)
SERIES = [('tilestream C++ context::gemm', 'cpu', 'seconds', '#c0392b', ''),
          ('OpenBLAS from C, cblas_?gemm', 'cpu', 'openblas_seconds', '#e67e22', '6,4'),
          ('Python tilestream.matmul', 'python', 'seconds', '#1f5fa8', ''),
          ('numpy a @ b', 'python', 'numpy_seconds', '#2aa198', '6,4')]


def squares(doc, dtype):
    return sorted((r['n'], r) for r in doc['calls'] if r['dtype'] == dtype and r['m'] == r['n'] == r['k'])


def esc(text):
    return str(text).replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')


def time_label(seconds):
    for unit, scale in (('s', 1), ('ms', 1e-3), ('µs', 1e-6), ('ns', 1e-9)):
        if seconds >= scale * 0.999:
            value = seconds / scale
            return ('%g' % round(value, 3)) + ' ' + unit
    return '%g s' % seconds


def panel(x0, y0, title, curves, y_lo, y_hi, n_hi):
    """One log-log panel: curves is [(label, colour, dash, [(n, seconds)])]."""
    out = []
    x_of = lambda n: x0 + PANEL_W * math.log2(n) / math.log2(n_hi)
    y_of = lambda s: y0 + PANEL_H * (1 - (math.log10(s) - y_lo) / (y_hi - y_lo))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#888"/>' % (x0, y0, PANEL_W, PANEL_H))
    out.append('<text x="%d" y="%d" class="title">%s</text>' % (x0 + PANEL_W / 2, y0 - 10, esc(title)))
    for e in range(int(math.floor(y_lo)), int(math.ceil(y_hi)) + 1):
        if y_lo <= e <= y_hi:
            y = y_of(10 ** e)
            out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/>' % (x0, y, x0 + PANEL_W, y))
            out.append('<text x="%d" y="%.1f" class="ytick">%s</text>' % (x0 - 6, y + 4, time_label(10 ** e)))
    n = 1
    while n <= n_hi:
        x = x_of(n)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="grid"/>' % (x, y0, x, y0 + PANEL_H))
        out.append('<text x="%.1f" y="%d" class="xtick">%d</text>' % (x, y0 + PANEL_H + 16, n))
        n *= 4
    out.append('<text x="%d" y="%d" class="axis">n (square n x n x n product)</text>' % (x0 + PANEL_W / 2, y0 + PANEL_H + 36))
    for label, colour, dash, points in curves:
        if not points:
            continue
        path = ' '.join('%s%.1f,%.1f' % ('M' if i == 0 else 'L', x_of(n), y_of(s)) for i, (n, s) in enumerate(points))
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="1.8"%s><title>%s</title></path>' %
                   (path, colour, ' stroke-dasharray="%s"' % dash if dash else '', esc(label)))
        for n, s in points:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.6" fill="%s"><title>%s, n = %d: %s</title></circle>' %
                       (x_of(n), y_of(s), colour, esc(label), n, esc(time_label(s))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--cpu', required=True, help="bench/small_bench's JSON (small-cpu-*.json)")
    ap.add_argument('--python', required=True, help="bench/small_python.py's JSON (small-python-*.json)")
    ap.add_argument('--out', required=True, help='the SVG to write')
    args = ap.parse_args()
    docs = {}
    for key, path in (('cpu', args.cpu), ('python', args.python)):
        with open(path) as f:
            docs[key] = json.load(f)
    dtypes = [d for d in ('f32', 'f64') if squares(docs['cpu'], d) or squares(docs['python'], d)]
    if not dtypes:
        sys.exit('no square rows (m = n = k) in %s or %s' % (args.cpu, args.python))
    data = {}
    for d in dtypes:
        data[d] = [(label, colour, dash, [(n, r[field]) for n, r in squares(docs[key], d) if r.get(field, 0) > 0])
                   for label, key, field, colour, dash in SERIES]
    every = [s for d in dtypes for _, _, _, pts in data[d] for _, s in pts]
    n_hi = max(n for d in dtypes for _, _, _, pts in data[d] for n, _ in pts)
    y_lo, y_hi = math.floor(math.log10(min(every))), math.ceil(math.log10(max(every)))
    cpu, py = docs['cpu'], docs['python']
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="sans-serif" font-size="12">' % (WIDTH, HEIGHT, WIDTH, HEIGHT),
           '<style>.grid{stroke:#e4e4e4;stroke-width:1}.title{text-anchor:middle;font-weight:bold}'
           '.xtick{text-anchor:middle;fill:#444}.ytick{text-anchor:end;fill:#444}.axis{text-anchor:middle;fill:#222}'
           '.note{fill:#555;font-size:11px}</style>',
           '<rect width="100%" height="100%" fill="#fafafa"/>',
           '<text x="%d" y="22" font-size="15" font-weight="bold">Time per call against n: tilestream and its anchors '
           '(medians of alternated runs)</text>' % LEFT,
           '<text x="%d" y="40" class="note">%s (%s), %s; load and other conditions: the JSON files</text>' %
           (LEFT, esc(cpu.get('machine', '?')), esc(cpu.get('cpu_isa_flags', '')), esc(cpu.get('date', '?'))),
           '<text x="%d" y="56" class="note">C++: %s (commit %s); Python: %s (commit %s, numpy %s)</text>' %
           (LEFT, esc(os.path.basename(args.cpu)), esc(cpu.get('git_hash', '?')), esc(os.path.basename(args.python)),
            esc(py.get('git_hash', '?')), esc(py.get('numpy', '?')))]
    for i, d in enumerate(dtypes):
        svg += panel(LEFT + i * (PANEL_W + GAP), TOP, 'float32' if d == 'f32' else 'float64', data[d], y_lo, y_hi, n_hi)
    # The legend, under the panels.
    ly = TOP + PANEL_H + 58
    for i, (label, _, _, colour, dash) in enumerate(SERIES):
        x = LEFT + i * 235
        svg.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' %
                   (x, ly, x + 28, ly, colour, ' stroke-dasharray="%s"' % dash if dash else ''))
        svg.append('<text x="%d" y="%d">%s</text>' % (x + 34, ly + 4, esc(label)))
    svg.append('</svg>')
    with open(args.out, 'w') as f:
        f.write('\n'.join(svg) + '\n')
    print('wrote %s (%s, n = 1..%d)' % (args.out, ', '.join(dtypes), n_hi))


if __name__ == '__main__':
    main()
