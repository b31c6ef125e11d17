"""Personal data: per document, counts of e-mail addresses, phone numbers, IPv4 and IPv6
addresses and payment card numbers. Patterns are deliberately conservative (a count is
a signal to flag documents on, not a redaction):

- e-mail: ``local@domain.tld`` with a 2+ letter top-level domain;
- phone: an optional ``+country``, then 9 to 15 digits in groups separated by spaces,
  dots, dashes or a parenthesised area code (ISO dates are not phone numbers; plain long numbers do not
  match unless grouped like a phone number);
- IPv4: four dotted octets 0-255 (``ipaddress`` checks them); IPv6: colon-hex groups that
  ``ipaddress.IPv6Address`` accepts, ``::`` compression included;
- card: 13 to 19 digits, optionally in groups of 4 separated by spaces or dashes, that
  pass the Luhn check.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, ClassVar

import pyarrow as pa

from shardcore.annotate import Annotator

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
PHONE = re.compile(
    r"(?<![\w.+-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}(?![\w-])"
    r"|(?<![\w.+-])\+\d{9,14}(?![\w-])"
)
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
DATE = re.compile(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}")
CARD = re.compile(r"(?<![\d-])(?:\d{4}[ -]){3}\d{1,7}(?![\d-])|(?<![\d-])\d{13,19}(?![\d-])")


def luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = ord(ch) - 48
        if i % 2 == parity:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _ipv4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def _ipv6(s: str) -> bool:
    if s.count(":") < 2 or not any(c not in ":" for c in s):
        return False
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def counts(text: str) -> dict[str, int]:
    cards = [
        m for m in CARD.findall(text) if 13 <= len(d := re.sub(r"\D", "", m)) <= 19 and luhn_ok(d)
    ]
    card_digits = {re.sub(r"\D", "", c) for c in cards}
    phones = [
        m
        for m in PHONE.findall(text)
        if 9 <= len(d := re.sub(r"\D", "", m)) <= 15
        and d not in card_digits
        and not _ipv4(m)
        and not DATE.match(m)
    ]
    return {
        "emails": len(EMAIL.findall(text)),
        "phones": len(phones),
        "ipv4": sum(_ipv4(m) for m in IPV4.findall(text)),
        "ipv6": sum(_ipv6(m) for m in IPV6.findall(text)),
        "cards": len(cards),
    }


class PersonalData(Annotator):
    name: ClassVar[str] = "pii"
    version: ClassVar[str] = "1"
    defaults: ClassVar[dict[str, Any]] = {}

    def fields(self) -> list[pa.Field]:
        return [pa.field(n, pa.int32()) for n in ("emails", "phones", "ipv4", "ipv6", "cards")]

    def annotate(self, texts: list[str]) -> dict[str, Any]:
        rows = [counts(t) for t in texts]
        return {f.name: [r[f.name] for r in rows] for f in self.fields()}
