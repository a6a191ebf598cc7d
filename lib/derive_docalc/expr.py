"""Estimand expression trees: P(A | C) factors, products, sums and fractions of the observational
distribution, with a deterministic canonical form and rendering to text, LaTeX and JSON.

Semantics: ``Prob(A, C)`` is P(A | C) of the observed joint (``Prob(A, C, do=Z)``: of the joint
P^(Z)(V) of a randomised experiment on Z, written ``P_do{Z}(A | C)``; conditioning on z there is doing z); ``Sum(S, e)`` sums ``e`` over the
values of S (S is bound inside: a summed x does not clash with a free x outside); ``Frac(n, d)`` is
n / d; ``ONE`` is the constant 1.

:func:`canonical` rewrites an expression into a normal form without changing its value on any
distribution: nested products and sums are flattened, factors and variable lists sorted by name,
constant factors dropped, factors that do not mention a summed variable pulled out of the sum,
Sum_S P(A|C) with S in A marginalised to P(A\\S|C), chain-rule pairs P(a|b,c) P(b|c) merged into
P(a,b|c), and P(N|C) / P(D|C) with D in N turned into P(N\\D | D, C). Two estimands with the same
canonical text are the same estimand; estimands that differ only by deeper algebra are caught by
:func:`icmlkit.lib.derive_docalc.estimate.fingerprint` (a numerical test on a random joint distribution).
"""
from __future__ import annotations

from icmlkit.lib.core.errors import InputError

from dataclasses import dataclass
from typing import Union


def _t(S) -> tuple:
    return tuple(sorted(set(S)))


@dataclass(frozen=True)
class Prob:
    vars: tuple
    cond: tuple = ()
    do: tuple = ()  # the experiment whose distribution this is; () = observational

    def __post_init__(self):
        object.__setattr__(self, "vars", _t(self.vars))
        object.__setattr__(self, "cond", _t(self.cond))
        object.__setattr__(self, "do", _t(self.do))


@dataclass(frozen=True)
class Prod:
    factors: tuple


@dataclass(frozen=True)
class Sum:
    over: tuple
    body: "Expr"

    def __post_init__(self):
        object.__setattr__(self, "over", _t(self.over))


@dataclass(frozen=True)
class Frac:
    num: "Expr"
    den: "Expr"


@dataclass(frozen=True)
class One:
    pass


ONE = One()
Expr = Union[Prob, Prod, Sum, Frac, One]


def free(e: Expr) -> frozenset:
    """The free (unsummed) variables of an expression."""
    if isinstance(e, Prob):
        return frozenset(e.vars) | frozenset(e.cond)
    if isinstance(e, Prod):
        out = frozenset()
        for f in e.factors:
            out |= free(f)
        return out
    if isinstance(e, Sum):
        return free(e.body) - frozenset(e.over)
    if isinstance(e, Frac):
        return free(e.num) | free(e.den)
    return frozenset()


def prod(*factors: Expr) -> Expr:
    return canonical(Prod(tuple(factors)))


def sum_over(over, body: Expr) -> Expr:
    return canonical(Sum(tuple(over), body))


# --------------------------------------------------------------------------- canonical form


def _merge_chain(fs: list[Expr]) -> list[Expr]:
    """P(A1 | A2, C) * P(A2 | C) -> P(A1, A2 | C), repeatedly."""
    changed = True
    while changed:
        changed = False
        probs = [f for f in fs if isinstance(f, Prob)]
        for f1 in probs:
            for f2 in probs:
                if f1 is f2:
                    continue
                c1, a2, c2 = set(f1.cond), set(f2.vars), set(f2.cond)
                if f1.do == f2.do and a2 and c1 == a2 | c2 and not (a2 & c2):
                    new = Prob(tuple(set(f1.vars) | a2), tuple(c2), f1.do)
                    fs = [f for f in fs if f is not f1 and f is not f2] + [new]
                    changed = True
                    break
            if changed:
                break
    return fs


def canonical(e: Expr) -> Expr:
    """The normal form of ``e`` (see the module docstring); idempotent and value-preserving."""
    if isinstance(e, One):
        return e
    if isinstance(e, Prob):
        return ONE if not e.vars else e
    if isinstance(e, Prod):
        fs: list[Expr] = []
        for f in e.factors:
            f = canonical(f)
            if isinstance(f, Prod):
                fs.extend(f.factors)
            elif not isinstance(f, One):
                fs.append(f)
        fs = _merge_chain(fs)
        if not fs:
            return ONE
        if len(fs) == 1:
            return fs[0]
        return Prod(tuple(sorted(fs, key=text)))
    if isinstance(e, Sum):
        body = canonical(e.body)
        over = set(e.over) & free(body)  # a variable the body does not mention was marginalised already
        if not over:
            return body
        if isinstance(body, Sum):
            inner = set(body.over)
            if not (over & inner):
                return canonical(Sum(tuple(over | inner), body.body))
        if isinstance(body, Prob):
            m = over & set(body.vars)
            if m:
                rest = over - m
                return canonical(Sum(tuple(rest), Prob(tuple(set(body.vars) - m), body.cond, body.do)))
            return Sum(tuple(over), body)
        if isinstance(body, Prod):
            inside = [f for f in body.factors if free(f) & over]
            outside = [f for f in body.factors if not (free(f) & over)]
            if outside:
                return canonical(Prod(tuple(outside) + (Sum(tuple(over), Prod(tuple(inside))),)))
            # a summed variable mentioned by exactly one factor is summed inside that factor
            own = {}
            for s in sorted(over):
                holders = [i for i, f in enumerate(body.factors) if s in free(f)]
                if len(holders) == 1:
                    own.setdefault(holders[0], []).append(s)
            if own:
                fs = [Sum(tuple(own[i]), f) if i in own else f for i, f in enumerate(body.factors)]
                rest = over - {s for v in own.values() for s in v}
                return canonical(Sum(tuple(rest), Prod(tuple(fs))))
            # a single factor holding all summed variables of its own block: marginalise it
            return Sum(tuple(over), body)
        return Sum(tuple(over), body)
    if isinstance(e, Frac):
        num, den = canonical(e.num), canonical(e.den)
        if isinstance(den, One):
            return num
        if num == den:
            return ONE
        if isinstance(num, Prob) and isinstance(den, Prob) and num.cond == den.cond and num.do == den.do and \
                set(den.vars) < set(num.vars):
            return Prob(tuple(set(num.vars) - set(den.vars)), tuple(set(den.vars) | set(num.cond)), num.do)
        if isinstance(num, Prod) and isinstance(den, Prod):  # cancel common factors
            common = [f for f in num.factors if f in den.factors]
            if common:
                n2 = [f for f in num.factors if f not in common]
                d2 = [f for f in den.factors if f not in common]
                return canonical(Frac(Prod(tuple(n2)), Prod(tuple(d2))))
        return Frac(num, den)
    raise TypeError(f"not an expression: {e!r}")


def size(e: Expr) -> dict:
    """The size of an estimand: ``summed`` = number of summation variables (over every sum, numerators
    and denominators included), ``max_arity`` = the most variables in one factor P(A | C) (|A| + |C|),
    ``factors`` = number of P(.) factors."""
    out = {"summed": 0, "max_arity": 0, "factors": 0}

    def go(x):
        if isinstance(x, Prob):
            out["factors"] += 1
            out["max_arity"] = max(out["max_arity"], len(x.vars) + len(x.cond))
        elif isinstance(x, Prod):
            for f in x.factors:
                go(f)
        elif isinstance(x, Sum):
            out["summed"] += len(x.over)
            go(x.body)
        elif isinstance(x, Frac):
            go(x.num)
            go(x.den)

    go(e)
    return out


def size_key(e: Expr) -> tuple:
    """Sort key, smaller = simpler: (largest factor arity, summed variables, factors, text)."""
    s = size(e)
    return (s["max_arity"], s["summed"], s["factors"], text(e))


# --------------------------------------------------------------------------- rendering


def _names(e: Expr) -> set:
    if isinstance(e, Prob):
        return set(e.vars) | set(e.cond)
    if isinstance(e, Prod):
        return set().union(*map(_names, e.factors)) if e.factors else set()
    if isinstance(e, Sum):
        return set(e.over) | _names(e.body)
    if isinstance(e, Frac):
        return _names(e.num) | _names(e.den)
    return set()


def rename_bound(e: Expr) -> Expr:
    """The same expression with every summed variable that shadows a free one (or one summed by an
    enclosing sum) renamed with primes: ``sum_M P(M|X) sum_X P(X) P(Y|M,X)`` becomes
    ``sum_M P(M|X) sum_{X'} P(X') P(Y|M,X')``. Values are unchanged (bound names are dummies); the
    renderers apply it so a printed estimand never reuses a free variable as a bound one."""
    used = _names(e)

    def go(e, sub, scope):
        if isinstance(e, Prob):
            return Prob(tuple(sub.get(v, v) for v in e.vars), tuple(sub.get(v, v) for v in e.cond), e.do)
        if isinstance(e, Prod):
            return Prod(tuple(go(f, sub, scope) for f in e.factors))
        if isinstance(e, Frac):
            return Frac(go(e.num, sub, scope), go(e.den, sub, scope))
        if isinstance(e, Sum):
            sub, scope, over = dict(sub), set(scope), []
            for v in e.over:
                new = v
                if v in scope:
                    while new in used:
                        new += "'"
                    used.add(new)
                sub[v] = new
                scope.add(new)
                over.append(new)
            return Sum(tuple(over), go(e.body, sub, scope))
        return e

    return go(e, {}, set(free(e)))


def text(e: Expr) -> str:
    """Plain-text rendering, e.g. ``sum_{Z} P(Z) P(Y | X, Z)``; deterministic; bound variables
    that shadow free ones are primed (:func:`rename_bound`)."""
    return _text(rename_bound(e))


def _text(e: Expr) -> str:
    if isinstance(e, One):
        return "1"
    if isinstance(e, Prob):
        s = ", ".join(e.vars)
        p = f"P_do{{{', '.join(e.do)}}}" if e.do else "P"
        return f"{p}({s} | {', '.join(e.cond)})" if e.cond else f"{p}({s})"
    if isinstance(e, Prod):
        return " ".join(f"[{_text(f)}]" if isinstance(f, Frac) else _text(f) for f in e.factors)
    if isinstance(e, Sum):
        b = _text(e.body)
        if isinstance(e.body, Prod):
            b = f"({b})"
        elif isinstance(e.body, Frac):
            b = f"[{b}]"
        return f"sum_{{{', '.join(e.over)}}} {b}"
    if isinstance(e, Frac):
        return f"[{_text(e.num)}] / [{_text(e.den)}]"
    raise TypeError(e)


def _lx(v: str) -> str:
    import re

    m = re.fullmatch(r"([A-Za-z]+)(\d+)", v)
    if m:
        return f"{m.group(1)}_{{{m.group(2)}}}"
    return v.replace("_", r"\_")


def latex(e: Expr) -> str:
    """LaTeX rendering: ``\\sum_{Z} P(Z) P(Y \\mid X, Z)``, fractions with ``\\frac``; bound
    variables that shadow free ones are primed (:func:`rename_bound`)."""
    return _latex(rename_bound(e))


def _latex(e: Expr) -> str:
    if isinstance(e, One):
        return "1"
    if isinstance(e, Prob):
        s = ", ".join(map(_lx, e.vars))
        p = f"P_{{do({', '.join(map(_lx, e.do))})}}" if e.do else "P"
        return f"{p}({s} \\mid {', '.join(map(_lx, e.cond))})" if e.cond else f"{p}({s})"
    if isinstance(e, Prod):
        return " ".join(_latex(f) for f in e.factors)
    if isinstance(e, Sum):
        b = _latex(e.body)
        if isinstance(e.body, (Prod, Sum)):
            b = f"\\left({b}\\right)"
        return f"\\sum_{{{', '.join(map(_lx, e.over))}}} {b}"
    if isinstance(e, Frac):
        return f"\\frac{{{_latex(e.num)}}}{{{_latex(e.den)}}}"
    raise TypeError(e)


def to_json(e: Expr) -> dict:
    if isinstance(e, One):
        return {"type": "one"}
    if isinstance(e, Prob):
        out = {"type": "prob", "vars": list(e.vars), "given": list(e.cond)}
        if e.do:
            out["do"] = list(e.do)
        return out
    if isinstance(e, Prod):
        return {"type": "product", "factors": [to_json(f) for f in e.factors]}
    if isinstance(e, Sum):
        return {"type": "sum", "over": list(e.over), "body": to_json(e.body)}
    if isinstance(e, Frac):
        return {"type": "fraction", "numerator": to_json(e.num), "denominator": to_json(e.den)}
    raise TypeError(e)


def from_json(d: dict) -> Expr:
    t = d.get("type")
    if t == "one":
        return ONE
    if t == "prob":
        return Prob(tuple(d["vars"]), tuple(d.get("given", ())), tuple(d.get("do", ())))
    if t == "product":
        return Prod(tuple(from_json(f) for f in d["factors"]))
    if t == "sum":
        return Sum(tuple(d["over"]), from_json(d["body"]))
    if t == "fraction":
        return Frac(from_json(d["numerator"]), from_json(d["denominator"]))
    raise InputError(f"unknown expression type {t!r}")
