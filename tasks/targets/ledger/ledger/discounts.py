"""Discounts: a percentage of the subtotal, or a fixed amount off."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ledger.money import to_money


@dataclass(frozen=True)
class PercentOff:
    percent: Decimal

    def __post_init__(self) -> None:
        object.__setattr__(self, "percent", Decimal(self.percent))
        if not 0 <= self.percent <= 100:
            raise ValueError(f"percent must be between 0 and 100, got {self.percent}")

    def amount_off(self, subtotal: Decimal) -> Decimal:
        return to_money(subtotal * self.percent / 100)


@dataclass(frozen=True)
class FixedOff:
    amount: Decimal

    def __post_init__(self) -> None:
        object.__setattr__(self, "amount", to_money(self.amount))
        if self.amount < 0:
            raise ValueError(f"a discount must not be negative, got {self.amount}")

    def amount_off(self, subtotal: Decimal) -> Decimal:
        return self.amount
