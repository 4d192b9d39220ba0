"""The searches of :mod:`fsdpsim.drivers.sensitivity`: per row, the least point of a geometric
lattice at which a function that grows along it reaches zero, narrowed from a bracket by
bisection and secants until its ends are adjacent lattice points (the module docstring of
:mod:`fsdpsim.drivers.sensitivity`, "Searches")."""

from __future__ import annotations

import numpy as np

#: Thresholds are points of a geometric lattice anchored at the plan: ``2^(k / STEPS)`` times
#: its bandwidth or micro-batch (steps of 0.068 %), so a threshold is a well-defined number of
#: the engine, the same however the search got there.
STEPS = 1024


class Search:
    """Per row, the least lattice index ``k`` with ``f(k) ≥ 0`` for a function that grows with
    ``k`` (the plan's point is ``k = 0``): a bracket ``lo < k* ≤ hi`` (``f(lo) < 0 ≤ f(hi)``)
    narrowed until ``hi = lo + 1``, and every point seen (for the secants).

    ``sign`` maps the index to the coordinate in which the function is about linear:
    ``c = 2^(sign · k / STEPS)``, i.e. 1/B for bandwidth (sign −1), b for tokens (+1).
    Starting from the plan's value ``f0`` and the grid ``(k, f)`` (NaN: not evaluated), the
    bracket is the first sign change from ``k = 0`` towards the side ``f0``'s sign points to;
    none up to the top of the grid gives ``+∞``, none down to its bottom ``−∞`` (the
    threshold is below the range: reported 0)."""

    def __init__(self, f0, sign, k, f):
        n = f0.size
        self.sign = sign
        self.k_seen = np.concatenate([np.zeros((n, 1)), k], axis=1)
        self.f_seen = np.concatenate([f0[:, None], f], axis=1)
        ks, fs = self.k_seen, self.f_seen
        ok = np.isfinite(ks) & np.isfinite(fs)
        up = (f0 < 0)[:, None]
        # Upwards (f0 < 0): the lowest k > 0 with f >= 0; below it, the highest k >= 0 seen.
        # Downwards (f0 >= 0): the highest k < 0 with f < 0; above it, the lowest k <= 0 seen.
        hi, f_hi = _extreme(ok & up & (ks > 0) & (fs >= 0), ks, fs, lowest=True)
        lo, f_lo = _extreme(ok & ~up & (ks < 0) & (fs < 0), ks, fs, lowest=False)
        lo_up, f_lo_up = _extreme(ok & up & (ks >= 0) & (ks < hi[:, None]), ks, fs,
                                  lowest=False)
        hi_dn, f_hi_dn = _extreme(ok & ~up & (ks <= 0) & (ks > lo[:, None]), ks, fs,
                                  lowest=True)
        up = up[:, 0]
        self.lo, self.f_lo = np.where(up, lo_up, lo), np.where(up, f_lo_up, f_lo)
        self.hi, self.f_hi = np.where(up, hi, hi_dn), np.where(up, f_hi, f_hi_dn)
        self.active = np.isfinite(self.lo) & np.isfinite(self.hi) & (self.hi - self.lo > 1)
        self._rows = np.arange(n)  # the rows whose points seen are kept (:meth:`_compact`)
        self._compact()

    def proposals(self, spread: int) -> np.ndarray:
        """Lattice points strictly inside each active bracket (NaN: none): the midpoint (the
        bracket halves at least), ``spread`` evenly spaced points, and both neighbours of the
        root of three straight lines in the linear coordinate — through both ends (false
        position), through ``lo`` and the nearest point below it, through ``hi`` and the
        nearest point above it (exact where the function is linear between the root and two of
        those points, kinks elsewhere). Computed on the active rows alone (:meth:`_compact`)."""
        rows = self._rows
        out = np.full((self.lo.size, 7 + spread), np.nan)
        if not rows.size:
            return out
        lo, hi, f_lo, f_hi = self.lo[rows], self.hi[rows], self.f_lo[rows], self.f_hi[rows]
        width = hi - lo
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            below, f_below = _extreme(self.k_seen < lo[:, None], self.k_seen, self.f_seen,
                                      lowest=False)
            above, f_above = _extreme(self.k_seen > hi[:, None], self.k_seen, self.f_seen,
                                      lowest=True)
            roots = [self._line_root(k1, f1, k2, f2) for k1, f1, k2, f2 in (
                (lo, f_lo, hi, f_hi), (below, f_below, lo, f_lo), (hi, f_hi, above, f_above))]
            at_roots = np.floor(np.stack(roots, axis=1))
            k = np.concatenate([
                np.floor(0.5 * (lo + hi))[:, None],
                lo[:, None] + np.round(width[:, None] * np.arange(1, spread + 1) / (spread + 1)),
                at_roots, at_roots + 1.0], axis=1)
            k = np.sort(k, axis=1)
            k[:, 1:] = np.where(k[:, 1:] == k[:, :-1], np.nan, k[:, 1:])
            inside = (k > lo[:, None]) & (k < hi[:, None])
        out[rows] = np.where(inside, k, np.nan)
        return out

    def _line_root(self, k1, f1, k2, f2):
        """The lattice index where the line through two points, straight in ``c``, crosses
        zero (NaN where it does not)."""
        c1, c2 = 2.0 ** (self.sign * k1 / STEPS), 2.0 ** (self.sign * k2 / STEPS)
        c = c1 - f1 * (c2 - c1) / (f2 - f1)
        return np.where(c > 0, self.sign * STEPS * np.log2(np.where(c > 0, c, 1.0)), np.nan)

    def update(self, k: np.ndarray, f: np.ndarray) -> None:
        """Keep the points; narrow each active bracket to the first sign change walking up
        from ``lo``."""
        rows = self._rows
        if not rows.size:
            return
        k, f = k[rows], f[rows]
        seen = np.isfinite(k) & np.isfinite(f)
        self.k_seen = np.concatenate([self.k_seen, np.where(seen, k, np.nan)], axis=1)
        self.f_seen = np.concatenate([self.f_seen, np.where(seen, f, np.nan)], axis=1)
        lo, hi, f_lo, f_hi = self.lo[rows], self.hi[rows], self.f_lo[rows], self.f_hi[rows]
        inside = seen & (k > lo[:, None]) & (k < hi[:, None])
        new_hi, new_f_hi = _extreme(inside & (f >= 0), k, f, lowest=True)
        moved = np.isfinite(new_hi)
        hi, f_hi = np.where(moved, new_hi, hi), np.where(moved, new_f_hi, f_hi)
        new_lo, new_f_lo = _extreme(inside & (k < hi[:, None]), k, f, lowest=False)
        moved = np.isfinite(new_lo)
        lo, f_lo = np.where(moved, new_lo, lo), np.where(moved, new_f_lo, f_lo)
        self.lo[rows], self.hi[rows], self.f_lo[rows], self.f_hi[rows] = lo, hi, f_lo, f_hi
        self.active[rows] = hi - lo > 1
        self._compact()

    def _compact(self) -> None:
        """Keep the points seen of the active rows only (a bracket, once closed, never opens
        again): the later rounds' work is that of the rows still searching, not of all."""
        keep = self.active[self._rows]
        if not keep.all():
            self._rows = self._rows[keep]
            self.k_seen, self.f_seen = self.k_seen[keep], self.f_seen[keep]

    def result(self) -> np.ndarray:
        """``k*``: the bracket's ``hi``; +∞ where the grid's top does not reach, −∞ where its
        bottom does."""
        k = np.where(np.isfinite(self.hi), self.hi, np.inf)
        return np.where(np.isinf(self.lo) & np.isfinite(self.hi) & (self.hi <= 0), -np.inf, k)


def _extreme(mask, k, f, lowest: bool):
    """Per row, the lowest (or highest) ``k`` where ``mask`` holds and its ``f``; ±∞ and NaN
    where it holds nowhere."""
    fill = np.inf if lowest else -np.inf
    masked = np.where(mask, k, fill)
    j = (np.argmin if lowest else np.argmax)(masked, axis=1)[:, None]
    best = np.take_along_axis(masked, j, axis=1)[:, 0]
    return best, np.where(np.isfinite(best), np.take_along_axis(f, j, axis=1)[:, 0], np.nan)
