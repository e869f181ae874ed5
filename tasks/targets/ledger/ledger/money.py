"""Money amounts: Decimal, rounded half-up to cents, and formatted for display."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
ZERO = Decimal("0.00")


def to_money(value: int | str | Decimal) -> Decimal:
    """`value` rounded half-up to cents. Floats are refused: they cannot hold cents exactly."""
    if isinstance(value, float):
        raise TypeError("money must be an int, str or Decimal, not float")
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def format_money(amount: int | str | Decimal) -> str:
    """`amount` in US dollars with thousands separators, e.g. $1,234.50."""
    return f"${to_money(amount):,.2f}"
