"""Invoices: line items, discounts, tax and money formatting, all in Decimal."""

from ledger.discounts import FixedOff, PercentOff
from ledger.invoice import Invoice
from ledger.items import LineItem
from ledger.money import format_money, to_money

__all__ = ["FixedOff", "Invoice", "LineItem", "PercentOff", "format_money", "to_money"]
