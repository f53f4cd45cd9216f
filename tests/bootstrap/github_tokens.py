"""GitHub Actions OIDC tokens of typical runs, and what the bootstrap lets each one do.

The claims are those GitHub documents for each kind of run (the `sub` in its default
format). `admitted` evaluates the provider's attribute condition on a token the way STS does
at the exchange; it understands the CEL the bootstrap writes (`assertion.<claim> == "..."`
joined by `&&`, `||` and parentheses) and raises on anything else, so a condition that grows
beyond it fails the tests instead of passing unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r'\s*(?:(?P<claim>assertion\.[a-z_]+)|(?P<op>==|&&|\|\||\(|\))|"(?P<text>[^"\\]*)")')


@dataclass(frozen=True)
class Run:
    """One workflow run's token: what GitHub puts in the claims the condition reads."""

    claims: Mapping[str, str]


def run(repository: str, *, ref: str, environment: str | None = None, event: str) -> Run:
    if environment is not None:
        subject = f"repo:{repository}:environment:{environment}"
    elif event == "pull_request":
        subject = f"repo:{repository}:pull_request"
    else:
        subject = f"repo:{repository}:ref:{ref}"
    claims = {"repository": repository, "ref": ref, "sub": subject, "event_name": event}
    if environment is not None:
        claims["environment"] = environment
    return Run(claims)


def admitted(condition: str, claims: Mapping[str, str]) -> bool:
    """The condition's value for `claims` (a claim it reads but the token lacks: refused)."""
    return _Evaluator(condition, claims).value()


class _Evaluator:
    """or := and ('||' and)* ; and := atom ('&&' atom)* ; atom := '(' or ')' | operand '==' operand"""

    def __init__(self, condition: str, claims: Mapping[str, str]) -> None:
        self.tokens: list[tuple[str, str | None]] = []
        position = 0
        while position < len(condition.rstrip()):
            match = _TOKEN.match(condition, position)
            if match is None:
                raise ValueError(f"unexpected CEL at {condition[position:]!r}")
            position = match.end()
            if match["claim"]:
                self.tokens.append(("value", claims.get(match["claim"].removeprefix("assertion."))))
            elif match["op"]:
                self.tokens.append((match["op"], None))
            else:
                self.tokens.append(("value", match["text"]))

    def value(self) -> bool:
        result = self._or()
        if self.tokens:
            raise ValueError(f"unparsed CEL: {self.tokens}")
        return result

    def _take(self, kind: str) -> str | None:
        found, value = self.tokens.pop(0)
        if found != kind:
            raise ValueError(f"expected {kind}, found {found}")
        return value

    def _or(self) -> bool:
        result = self._and()
        while self.tokens and self.tokens[0][0] == "||":
            self._take("||")
            result = self._and() or result
        return result

    def _and(self) -> bool:
        result = self._atom()
        while self.tokens and self.tokens[0][0] == "&&":
            self._take("&&")
            result = self._atom() and result
        return result

    def _atom(self) -> bool:
        if self.tokens[0][0] == "(":
            self._take("(")
            result = self._or()
            self._take(")")
            return result
        left = self._take("value")
        self._take("==")
        right = self._take("value")
        return left is not None and left == right
