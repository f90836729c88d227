"""A slow, independent reference of TFLite's integer kernels, in plain Python ints.

Written from the formulas of TFLite's reference kernels (common.h,
reference/integer_ops/*.h) with explicit loops. It is the tests' one oracle of the
fixed-point arithmetic, and deliberately shares no code with the product's copy
(``uapi.fixed_point``, which the device model and the compiler use): scalar ints with
explicit branches here, vectorised numpy there, so a mistake in one shows up as a
difference against the other.
"""

from __future__ import annotations


def wrap32(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def srdhm(a: int, b: int) -> int:
    if a == b == -(2**31):
        return 2**31 - 1
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    q = abs(ab + nudge) // (1 << 31)
    return q if ab + nudge >= 0 else -q


def rdbp(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def mbqm(x: int, multiplier: int, shift: int) -> int:
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    return rdbp(srdhm(wrap32(x * (1 << left)), multiplier), right)


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def conv2d(inp, filt, bias, izp, fzp, sh, sw, dh, dw, pt, pl, oh, ow, mults, shifts, ozp, amin, amax):
    n_, h, w, cin = len(inp), len(inp[0]), len(inp[0][0]), len(inp[0][0][0])
    cout, kh, kw = len(filt), len(filt[0]), len(filt[0][0])
    out = [[[[0] * cout for _ in range(ow)] for _ in range(oh)] for _ in range(n_)]
    for b in range(n_):
        for oy in range(oh):
            for ox in range(ow):
                for oc in range(cout):
                    acc = 0
                    for ky in range(kh):
                        for kx in range(kw):
                            iy = oy * sh - pt + dh * ky
                            ix = ox * sw - pl + dw * kx
                            if 0 <= iy < h and 0 <= ix < w:
                                for ic in range(cin):
                                    acc += (inp[b][iy][ix][ic] - izp) * (filt[oc][ky][kx][ic] - fzp)
                    if bias is not None:
                        acc += bias[oc]
                    v = mbqm(wrap32(acc), mults[oc], shifts[oc]) + ozp
                    out[b][oy][ox][oc] = clamp(v, amin, amax)
    return out


def depthwise(inp, filt, bias, izp, fzp, sh, sw, dh, dw, pt, pl, dm, oh, ow, mults, shifts, ozp, amin, amax):
    n_, h, w, cin = len(inp), len(inp[0]), len(inp[0][0]), len(inp[0][0][0])
    kh, kw = len(filt[0]), len(filt[0][0])
    out = [[[[0] * (cin * dm) for _ in range(ow)] for _ in range(oh)] for _ in range(n_)]
    for b in range(n_):
        for oy in range(oh):
            for ox in range(ow):
                for ic in range(cin):
                    for m in range(dm):
                        oc = m + ic * dm
                        acc = 0
                        for ky in range(kh):
                            for kx in range(kw):
                                iy = oy * sh - pt + dh * ky
                                ix = ox * sw - pl + dw * kx
                                if 0 <= iy < h and 0 <= ix < w:
                                    acc += (inp[b][iy][ix][ic] - izp) * (filt[0][ky][kx][oc] - fzp)
                        if bias is not None:
                            acc += bias[oc]
                        v = mbqm(wrap32(acc), mults[oc], shifts[oc]) + ozp
                        out[b][oy][ox][oc] = clamp(v, amin, amax)
    return out


def fully_connected(inp, filt, bias, izp, fzp, mults, shifts, ozp, amin, amax):
    out = []
    for row in inp:
        r = []
        for oc, frow in enumerate(filt):
            acc = sum((x - izp) * (f - fzp) for x, f in zip(row, frow, strict=True))
            if bias is not None:
                acc += bias[oc]
            r.append(clamp(mbqm(wrap32(acc), mults[oc], shifts[oc]) + ozp, amin, amax))
        out.append(r)
    return out


def add_one(x1, x2, zp1, zp2, ls, m1, s1, m2, s2, om, os_, ozp, amin, amax, subtract=False):
    a = mbqm(wrap32((x1 - zp1) * (1 << ls)), m1, s1)
    b = mbqm(wrap32((x2 - zp2) * (1 << ls)), m2, s2)
    raw = wrap32(a - b if subtract else a + b)
    return clamp(mbqm(raw, om, os_) + ozp, amin, amax)


def mul_one(x1, x2, zp1, zp2, om, os_, ozp, amin, amax):
    return clamp(mbqm(wrap32((x1 - zp1) * (x2 - zp2)), om, os_) + ozp, amin, amax)


def pool(inp, fh, fw, sh, sw, pt, pl, oh, ow, amin, amax, average):
    n_, h, w, c = len(inp), len(inp[0]), len(inp[0][0]), len(inp[0][0][0])
    out = [[[[0] * c for _ in range(ow)] for _ in range(oh)] for _ in range(n_)]
    for b in range(n_):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    vals = []
                    for fy in range(fh):
                        for fx in range(fw):
                            iy = oy * sh - pt + fy
                            ix = ox * sw - pl + fx
                            if 0 <= iy < h and 0 <= ix < w:
                                vals.append(inp[b][iy][ix][ch])
                    if average:
                        acc, cnt = sum(vals), len(vals)
                        v = (acc + cnt // 2) // cnt if acc > 0 else -((-acc + cnt // 2) // cnt)
                    else:
                        v = max(vals)
                    out[b][oy][ox][ch] = clamp(v, amin, amax)
    return out
